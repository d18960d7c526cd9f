"""The configured tools are checked on the driver before Ray starts, each error naming the element."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

from agentrl.config.schema import ToolConfig
from agentrl.tool_identity import HERMES, TAGS, ToolIdentity
from agentrl.tools.check import ToolConfigError, check_tools
from agentrl.trainer import main as trainer_main

SEARCH = "agentrl.tools.retrieval.SearchTool"
CALCULATOR = "agentrl.tools.calculator.CalculatorTool"


@pytest.fixture
def user_tools(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A user's tool module (``my_lookup``) importable as from the launch directory."""
    (tmp_path / "my_lookup.py").write_text(
        textwrap.dedent(
            """
            from agentrl.tools.base import ToolResult

            class LookupTool:
                name = "lookup"
                timeout_s = 5.0
                description = "Look a word up."

                def __init__(self, table_path: str = "", tag: str = "lookup"):
                    self.tag = tag

                async def execute(self, calls):
                    return [ToolResult(c) for c in calls]
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "my_lookup", raising=False)
    return "my_lookup.LookupTool"


def test_the_tools_are_built_once_and_their_identity_returned_tags_and_names_in_order(user_tools):
    assert check_tools([ToolConfig()]) == ToolIdentity(("search",), ("search",), TAGS)
    tools = [ToolConfig(SEARCH, {"topk": 2}), ToolConfig(user_tools), ToolConfig(CALCULATOR)]
    assert check_tools(tools, "hermes") == ToolIdentity(
        ("search", "lookup", "calculate"), ("search", "lookup", "calculate"), HERMES
    )
    with pytest.raises(
        ToolConfigError, match=r"actor.rollout.tool_format must be one of \['hermes', 'qwen3_coder', 'tags'\]"
    ):
        check_tools(tools, "xml")


def test_a_class_name_typo_names_the_element_and_the_class_the_module_has():
    with pytest.raises(
        ToolConfigError, match=r"tools\[1\].*has no attribute 'SerchTool'.*did you mean 'SearchTool'"
    ):
        check_tools([ToolConfig(), ToolConfig("agentrl.tools.retrieval.search.SerchTool")])


def test_a_module_that_does_not_import_says_where_modules_are_found():
    with pytest.raises(
        ToolConfigError, match=r"tools\[0\].*cannot import module 'no_such_tools'.*PYTHONPATH"
    ):
        check_tools([ToolConfig("no_such_tools.LookupTool")])


def test_an_unknown_option_gets_the_closest_one_the_constructor_takes(user_tools):
    with pytest.raises(ToolConfigError, match=r"tools\[0\].*no option 'urll' \(did you mean 'url'\?\)"):
        check_tools([ToolConfig(SEARCH, {"urll": "http://x", "topk": 2})])
    with pytest.raises(ToolConfigError, match=r"'table' \(did you mean 'table_path'\?\)"):
        check_tools([ToolConfig(user_tools, {"table": "t.tsv"})])


def test_a_reserved_tag_is_refused_by_name():
    with pytest.raises(ToolConfigError, match=r"tools\[0\].*tag 'answer' is reserved"):
        check_tools([ToolConfig(SEARCH, {"tag": "answer"})])


def test_two_tools_with_one_tag_are_refused_naming_the_first(user_tools):
    with pytest.raises(
        ToolConfigError, match=r"tools\[1\].*tag 'search' is already used by actor\.rollout\.tools\[0\]"
    ):
        check_tools([ToolConfig(), ToolConfig(user_tools, {"tag": "search"})])


def test_the_command_line_stops_on_a_bad_tool_before_the_trainer_is_imported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
):
    model, data = tmp_path / "model", tmp_path / "train.jsonl"
    model.mkdir()
    data.write_text("")
    monkeypatch.setitem(sys.modules, "agentrl.trainer.ppo_trainer", None)  # importing it would fail
    overrides = [
        f"actor.model_path={model}",
        f"data.train_files=[{data}]",
        "actor.rollout.tools[0].options.topk=0",
    ]
    assert trainer_main.main(overrides) == 2
    assert "actor.rollout.tools[0]" in capsys.readouterr().err
    overrides[-1] = "actor.rollout.tools[0].options.urll=http://x"
    assert trainer_main.main(overrides) == 2
    assert "did you mean 'url'?" in capsys.readouterr().err


def test_the_checked_tags_reach_the_reward_roles_format_check(user_tools):
    from agentrl.config.schema import ExperimentConfig, RewardConfig
    from agentrl.core.batch import Batch
    from agentrl.workers.base import RunContext
    from agentrl.workers.reward import RuleRewardWorker

    config = ExperimentConfig()
    config.actor.rollout.tools = [ToolConfig(SEARCH), ToolConfig(user_tools)]
    context = RunContext.from_config(config, check_tools(config.actor.rollout.tools))
    call = "<lookup>Zorvia</lookup><information>Quenby</information>"
    response = f"<think>t</think>{call}<think>t</think><answer>Quenby</answer>"
    batch = Batch.from_dict(
        meta={
            "response_text": [response],
            "ground_truth": [{"target": ["Quenby"]}],
            "data_source": ["nq"],
            "extra_info": [{}],
            "answer": ["Quenby"],
        }
    )
    worker = RuleRewardWorker(RewardConfig(format_score=True), context)
    scores, metrics = worker.compute_scores(batch)
    assert scores.tolist() == [1.0] and metrics["reward/well_formed"] == 1.0
    assert metrics["reward/tool_calls/lookup"] == 1.0 and metrics["reward/tool_calls/search"] == 0.0
    assert metrics["reward/num_searches"] == 0.0
    default = RuleRewardWorker(RewardConfig(format_score=True), RunContext.from_config(ExperimentConfig()))
    assert (
        default.compute_scores(batch)[1]["reward/well_formed"] == 0.0
    )  # <lookup> is no tool of the default run
