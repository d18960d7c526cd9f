"""The prompt's instruction is generated from the tools; the default tool set's is pinned word for word."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentrl.config.schema import ToolConfig
from agentrl.data.instruction import DEFAULT_TOOLS, ToolPrompt, instruction_template, tool_prompt
from agentrl.data.qa import INSTRUCTION_TEMPLATE, load_qa_rows, make_prompt
from agentrl.tools import as_typed, build_tool
from agentrl.tools.calculator import CalculatorTool
from agentrl.tools.retrieval.search import SearchTool

# The quickstart and the published results were trained on this text: it must never change.
SEARCH_R1_INSTRUCTION = (
    "Answer the question below. Every time you receive new information, first reason about it "
    "inside <think> and </think>. If you find you are missing some knowledge, you can call a search "
    "engine by writing <search> query </search>, and its top results will be returned between "
    "<information> and </information>. You may search as many times as you like. Once you need no "
    "further information, give the answer inside <answer> and </answer>, without detailed "
    "explanation. For example, <answer> Beijing </answer>. Question: {question}\n"
)
REPO = Path(__file__).resolve().parents[2]


def test_the_default_tool_sets_instruction_is_the_one_the_quickstart_was_trained_on():
    assert INSTRUCTION_TEMPLATE == SEARCH_R1_INSTRUCTION
    assert instruction_template() == SEARCH_R1_INSTRUCTION
    # the default tool set read from the built SearchTool itself, as data preparation reads it
    assert tool_prompt(as_typed(build_tool(ToolConfig()))) == DEFAULT_TOOLS[0]
    assert make_prompt("who wrote hamlet") == SEARCH_R1_INSTRUCTION.format(question="who wrote hamlet?")


def test_every_tool_is_named_by_its_tag_and_its_schemas_description():
    tools = [tool_prompt(as_typed(SearchTool())), tool_prompt(as_typed(CalculatorTool()))]
    text = instruction_template(tools)
    calculate = tools[1]
    assert calculate.tag == "calculate" and calculate.argument == "expression" and not calculate.search_r1
    assert "<search> query </search>" in text and "<calculate> expression </calculate>" in text
    assert calculate.description in text
    assert text.index("<search>") < text.index("<calculate>")  # the config's order
    renamed = tool_prompt(as_typed(SearchTool(tag="find")))
    assert "writing <find> query </find>" in instruction_template([renamed])


def test_a_description_with_braces_keeps_the_instruction_a_format_string():
    text = instruction_template([ToolPrompt("lookup", 'Look up {"word": ...} in a table.', "word")])
    assert text.format(question="Q?").endswith("Question: Q?\n")
    assert 'Look up {"word": ...} in a table.' in text.format(question="Q?")


def test_the_hermes_instruction_leaves_the_tools_to_the_chat_template():
    text = instruction_template(DEFAULT_TOOLS, "hermes")
    assert "<search>" not in text and "call the tools you are given" in text
    assert text.endswith(SEARCH_R1_INSTRUCTION[SEARCH_R1_INSTRUCTION.index("Once") :])
    with pytest.raises(ValueError, match="tool_format"):
        instruction_template(DEFAULT_TOOLS, "xml")


def _questions(tmp_path: Path) -> Path:
    path = tmp_path / "q.jsonl"
    records = [
        {"id": f"q{i}", "question": f"What is {i} plus {i}", "golden_answers": [str(2 * i)]} for i in range(3)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def prepare_qa(tmp_path: Path, out: str, *options: str) -> int:
    """``data/prepare_qa.py`` on three questions (``_questions``) with ``options``, its rows
    written to ``tmp_path / out``; its exit status."""
    from data.prepare_qa import main

    questions = _questions(tmp_path)
    return main(
        ["--input", str(questions), "--source", "w", "--split", "t", "--out", str(tmp_path / out), *options]
    )


def first_prompt(path: Path) -> str:
    """The prompt text of the first row ``prepare_qa`` wrote to ``path``."""
    (row, *_) = load_qa_rows(path)
    return row["prompt"][0]["content"]


def test_prepare_qa_writes_the_instruction_of_the_tools_it_is_given(tmp_path, capsys):
    assert prepare_qa(tmp_path, "default.jsonl") == 0
    assert first_prompt(tmp_path / "default.jsonl") == make_prompt("What is 0 plus 0")  # unchanged by default
    search, calculator = (
        "agentrl.tools.retrieval.SearchTool",
        "agentrl.tools.calculator.CalculatorTool",
    )
    assert prepare_qa(tmp_path, "two.jsonl", "--tool", search, "--tool", calculator) == 0
    prompt = first_prompt(tmp_path / "two.jsonl")
    assert "<search> query </search>" in prompt and "<calculate> expression </calculate>" in prompt
    assert prepare_qa(tmp_path, "bad.jsonl", "--tool", "agentrl.tools.retrieval.search.Serch") == 1
    assert "has no attribute 'Serch'" in capsys.readouterr().err


def test_prepare_qa_reads_the_tools_of_a_training_config(tmp_path):
    from agentrl.config.loader import to_yaml
    from agentrl.config.schema import ExperimentConfig

    cfg = ExperimentConfig()
    cfg.actor.rollout.tools = [ToolConfig("agentrl.tools.calculator.CalculatorTool", {"tag": "calc"})]
    (tmp_path / "run.yaml").write_text(to_yaml(cfg))
    assert prepare_qa(tmp_path, "r.jsonl", "--config", str(tmp_path / "run.yaml")) == 0
    prompt = first_prompt(tmp_path / "r.jsonl")
    assert "<calc> expression </calc>" in prompt and "<search>" not in prompt


def test_prepare_qa_reports_prompts_longer_than_the_budget(tmp_path, capsys):
    from agentrl.models.tiny import make_tiny_model_dir

    model = make_tiny_model_dir(tmp_path / "model", texts=[SEARCH_R1_INSTRUCTION], size="nano")
    assert prepare_qa(tmp_path, "r.jsonl", "--tokenizer", str(model), "--max-prompt-length", "8") == 0
    err = capsys.readouterr().err
    assert "warning: 3 of 3 prompts are longer than 8 tokens (first ids: q0, q1, q2)" in err
    assert prepare_qa(tmp_path, "r.jsonl", "--tokenizer", str(model), "--max-prompt-length", "100000") == 0
    assert "warning" not in capsys.readouterr().err
