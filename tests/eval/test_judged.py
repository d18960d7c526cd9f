"""``python -m agentrl.eval --judge URL``: every prediction judged by an LLM judge too, against
``support.judge_stub.JudgeStub`` on 127.0.0.1 (lenient: an answer that holds a gold answer is
correct, where exact match is not), with a scripted policy in place of the model."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.eval_toy import QUESTIONS
from support.judge_stub import JudgeStub
from support.scripted_engine import ScriptedEngine

from agentrl.eval import EvalModel, SettingsMismatch
from agentrl.eval import cli as eval_cli
from agentrl.eval.report import aggregate, markdown_table
from agentrl.eval.stats import bootstrap_ci

GOLD = {text: golds[0] for _, text, golds in QUESTIONS}


def wordy_policy(context: str) -> str:
    """Answers in a sentence, so exact match scores nothing; wrong on q6 (the Seine)."""
    question = re.search(r"Question: (.*?)\?", context).group(1)
    answer = "Paris" if GOLD[question] == "Seine" else GOLD[question]
    return f"<answer> It is {answer} </answer>"


@pytest.fixture
def stub() -> Iterator[JudgeStub]:
    with JudgeStub() as server:
        yield server


@pytest.fixture
def scripted(monkeypatch, tokenizer) -> None:
    """The command line's model, whatever ``--model`` names: the wordy scripted policy."""
    monkeypatch.setattr(
        eval_cli,
        "EvalModel",
        lambda *args, **kwargs: EvalModel(ScriptedEngine(tokenizer, wordy_policy), tokenizer, name="wordy"),
    )


def run_cli(questions_file: Path, out: Path, *flags: str) -> int:
    argv = ["--model", "wordy", "--data", f"toy={questions_file}", "--mode", "direct", "--out", str(out)]
    return eval_cli.main([*argv, "--max-tokens-per-turn", "32", "--no-progress", *flags])


def read_predictions(out: Path) -> tuple[dict, list[dict]]:
    head, *rest = (out / "direct" / "predictions.jsonl").read_text().splitlines()
    return json.loads(head), [json.loads(line) for line in rest]


def test_with_judge_every_record_is_judged_and_the_table_has_its_column_with_an_interval(
    scripted, stub, questions_file, tmp_path, capsys
):
    out = tmp_path / "judged"
    assert run_cli(questions_file, out, "--judge", stub.url, "--judge-model", "grader") == 0
    header, records = read_predictions(out)
    assert header["settings"]["judge"] == {"url": stub.url, "model": "grader", "mode": "pointwise"}
    assert all(isinstance(r["judged"], float) and r["em"] == 0.0 for r in records)
    assert [r["judged"] for r in records] == [0.0 if r["id"] == "q6" else 1.0 for r in records]
    assert stub.requests == len(QUESTIONS) and stub.bodies[0]["model"] == "grader"
    toy = json.loads((out / "direct" / "metrics.json").read_text())["metrics"]["toy"]
    _, lo, hi = bootstrap_ci([r["judged"] for r in records], level=0.95)  # as EM's interval is made
    assert toy["judged"] == pytest.approx(5 / 6) and (toy["judged_lo"], toy["judged_hi"]) == (lo, hi)
    summary = (out / "summary.md").read_text()
    assert "| EM [95% CI] | judged [95% CI] | F1 [95% CI] |" in summary
    assert f"| 0.000 [0.000, 0.000] | 0.833 [{lo:.3f}, {hi:.3f}] |" in summary
    assert '"judge/requests": 6' in capsys.readouterr().err

    # a resumed evaluation keeps the judged values and asks the judge nothing again
    assert run_cli(questions_file, out, "--judge", stub.url, "--judge-model", "grader") == 0
    assert read_predictions(out)[1] == records and stub.requests == len(QUESTIONS)


def test_without_judge_no_record_has_the_field_and_the_table_no_column(
    scripted, stub, questions_file, tmp_path
):
    out = tmp_path / "plain"
    assert run_cli(questions_file, out) == 0
    header, records = read_predictions(out)
    assert "judge" not in header["settings"] and not any("judged" in r for r in records)
    assert "judged" not in (out / "summary.md").read_text() and stub.requests == 0
    assert not any(k.startswith("judged") for k in aggregate(records)["toy"])
    # judged and unjudged records never share a results file
    with pytest.raises(SettingsMismatch, match="judge: None -> "):
        run_cli(questions_file, out, "--judge", stub.url)


def test_a_judge_url_that_is_not_http_is_refused_naming_the_flag(scripted, questions_file, tmp_path, capsys):
    assert run_cli(questions_file, tmp_path / "x", "--judge", "localhost:8000") == 2
    assert "--judge must be the judge's http(s) base URL" in capsys.readouterr().err


def test_the_judged_column_shows_only_for_rows_that_have_it():
    judged = aggregate(
        [{"dataset": "a", "em": 0.0, "judged": 1.0}, {"dataset": "a", "em": 1.0, "judged": 1.0}]
    )
    plain = aggregate([{"dataset": "b", "em": 1.0}])
    table = markdown_table([{"dataset": "a", **judged["a"]}, {"dataset": "b", **plain["b"]}], ["dataset"])
    assert "judged [95% CI]" in table and "| b | 1 | 1.000 [1.000, 1.000] | – |" in table
    assert "judged" not in markdown_table([{"dataset": "b", **plain["b"]}], ["dataset"])
