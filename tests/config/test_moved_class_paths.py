"""Configs and code written before the tools moved still work: an old class path is replaced, with a
warning naming the key and the new path, and the tools it names run a rollout; an old import gives
the module it moved to."""

from __future__ import annotations

import importlib
import json
import sys
import warnings
from pathlib import Path

import pytest
from support.prompts import question_prompt
from support.scripted_engine import ScriptedEngine, assert_rollout_invariants, response_part

from agentrl.agent import LLMGenerationManager
from agentrl.config import load_config, to_yaml
from agentrl.config.loader import load_rollout
from agentrl.config.moved import MOVED_MODULES, current_class_path
from agentrl.config.schema import ToolConfig
from agentrl.importing import import_object
from agentrl.tools.calculator import CalculatorTool
from agentrl.tools.check import check_tools
from agentrl.tools.registry import build_tool
from agentrl.tools.retrieval import PageReaderTool, SearchTool

SAVED = Path(__file__).parent / "saved" / "config_before_tools_moved.yaml"
NEW_PATHS = [
    "agentrl.tools.retrieval.search.SearchTool",
    "agentrl.tools.calculator:CalculatorTool",  # the saved form (with a colon) is kept
    "agentrl.tools.retrieval.page_reader.PageReaderTool",
]


def search_calculate_answer(context: str) -> str:
    """Search, then calculate, then answer: one call of each tag tool the saved config names."""
    seen = response_part(context).count("<information>")
    if seen == 0:
        return "<think>look it up</think><search> capital of France </search>"
    if seen == 1:
        return "<think>and compute</think><calculate> 6 * 7 </calculate>"
    return "<answer> Paris </answer>"


def test_a_config_saved_before_the_tools_moved_loads_with_a_warning_per_tool_and_runs_a_rollout(
    tiny_model_dir, tokenizer, retriever_url, tmp_path
):
    train = tmp_path / "train.jsonl"
    row = {"data_source": "nq", "prompt": [{"role": "user", "content": "q"}], "reward_model": {}}
    train.write_text(json.dumps(row) + "\n")
    overrides = [
        f"actor.model_path={tiny_model_dir}",
        f"data.train_files=[{train}]",
        f"trainer.run_dir={tmp_path / 'run'}",
        f"actor.rollout.tools[0].options.url={retriever_url}",
        f"actor.rollout.tools[2].options.url={retriever_url.replace('/retrieve', '/open_page')}",
    ]
    with pytest.warns(FutureWarning) as warned:
        config = load_config(SAVED, overrides)
    assert [tool.class_path for tool in config.actor.rollout.tools] == NEW_PATHS
    messages = [str(w.message) for w in warned if issubclass(w.category, FutureWarning)]
    assert len(messages) == 3, messages
    assert "actor.rollout.tools[0].class_path 'agentrl.agent.tools.search.SearchTool'" in messages[0]
    assert "it is now 'agentrl.tools.retrieval.search.SearchTool'" in messages[0]
    assert "actor.rollout.tools[2].class_path" in messages[2] and NEW_PATHS[2] in messages[2]
    # the run's own config.yaml is written with the new paths: it loads without a warning
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        again = load_config(_saved(tmp_path, to_yaml(config)))
    assert [tool.class_path for tool in again.actor.rollout.tools] == NEW_PATHS

    engine = ScriptedEngine(tokenizer, search_calculate_answer)
    manager = LLMGenerationManager(
        engine, tokenizer, config.actor.rollout, max_prompt_length=512, max_response_length=512
    )
    assert isinstance(manager.tools["search"], SearchTool)
    assert isinstance(manager.tools["calculate"], CalculatorTool)
    prompt = question_prompt(tokenizer, "What is the capital of France?", "nq", {"target": ["Paris"]}, 0)
    (trajectory,) = manager.run([prompt]).trajectories
    assert_rollout_invariants([trajectory], engine, tokenizer)
    assert trajectory.finished and trajectory.tool_calls == {"search": 1, "calculate": 1}
    text = tokenizer.decode(trajectory.response_ids)
    assert "Paris is the capital" in text and "</calculate>\n\n<information>42" in text


def _saved(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(text)
    return path


def test_the_rollout_section_of_a_saved_config_is_read_with_the_new_paths_too():
    with pytest.warns(FutureWarning) as warned:
        rollout = load_rollout(SAVED)
    assert len(warned) == 3 and NEW_PATHS[2] in str(warned[2].message)
    assert [tool.class_path for tool in rollout.tools] == NEW_PATHS


def test_a_tool_config_built_in_code_with_an_old_path_builds_the_tool_and_says_where_it_is_now():
    with pytest.warns(FutureWarning, match="it is now 'agentrl.tools.calculator.CalculatorTool'"):
        tool = build_tool(ToolConfig("agentrl.agent.tools.calculator.CalculatorTool", {"max_exponent": 5}))
    assert isinstance(tool, CalculatorTool)
    with pytest.warns(FutureWarning):
        assert isinstance(
            build_tool(ToolConfig("agentrl.agent.tools.page_reader.PageReaderTool")), PageReaderTool
        )


def test_a_path_that_did_not_move_is_returned_as_it_is_without_a_warning():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for path in (
            "my_tools.define:DefineTool",
            "agentrl.tools.retrieval.SearchTool",
            "agentrl.agent.tools",
        ):
            assert current_class_path(path) == path


@pytest.mark.parametrize("old", sorted(MOVED_MODULES))
def test_every_moved_module_names_a_module_that_imports(old):
    import_object(f"{MOVED_MODULES[old]}:__name__", "moved module")


def test_the_drivers_tool_check_reads_an_old_path_as_the_new_one():
    with pytest.warns(FutureWarning, match=r"actor.rollout.tools\[1\].class_path"):
        tools = check_tools([ToolConfig(), ToolConfig("agentrl.agent.tools.calculator.CalculatorTool")])
    assert tools.tags == ("search", "calculate")


def test_a_users_tool_module_importing_the_old_modules_gets_the_new_ones_with_a_warning(monkeypatch):
    import agentrl.tools.retrieval.search as search_module
    from agentrl.tools.base import ToolResult

    for old_module in ("agentrl.agent.tools", "agentrl.agent.tools.search"):  # imported afresh
        monkeypatch.delitem(sys.modules, old_module, raising=False)
    with pytest.warns(FutureWarning) as warned:
        old = importlib.import_module("agentrl.agent.tools.search")
    said = [str(w.message) for w in warned]
    assert any("import of 'agentrl.agent.tools' " in s and "it is now 'agentrl.tools'" in s for s in said)
    assert any("'agentrl.agent.tools.search'" in s and "'agentrl.tools.retrieval.search'" in s for s in said)
    assert old is search_module and old.format_documents is search_module.format_documents
    package = sys.modules["agentrl.agent.tools"]
    assert package.ToolResult is ToolResult and package.ToolSpec is not None
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("agentrl.agent.tools.no_such_module")
