"""The quickstart's two-tool profile (hermes, search + calculate) and the default it must leave as it was.

Fast tests only: the dialects, the profile, the demonstrations recorded through the real rollout
(real retriever server, real calculator), the summary and the report's tables. Whether the
profile learns is measured by running it (docs/quickstart.md), not here.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import pytest

from agentrl.config import load_config
from agentrl.data.qa import make_prompt, read_question_records, to_training_rows
from agentrl.data.world import generate_world, oracle_trajectory, write_world
from agentrl.models.loading import load_tokenizer
from agentrl.quickstart import FULL, SHORT, TWO_TOOL, summarize
from agentrl.quickstart.cli import chosen_profile, parse_args
from agentrl.quickstart.demonstrations import hop_label, hop_rows, tokenizer_texts
from agentrl.quickstart.dialects import TAGS, dialect_of
from agentrl.quickstart.evaluation import paired_gains, summary_line
from agentrl.quickstart.phases import (
    WorldFiles,
    build_index,
    build_model,
    make_world,
    ppo_overrides,
    record_sft_data,
)
from agentrl.quickstart.profiles import LATER_FIELDS, TWO_TOOL_SHORT, profile_record
from agentrl.quickstart.report import QuickstartResult, _tables

SHORT_SIZES = {"num_countries": 6, "num_people": 12, "num_companies": 6, "num_distractors": 6}
FILES = WorldFiles(Path("c.jsonl"), Path("train.jsonl"), Path("test.jsonl"))
URL = "http://127.0.0.1:9/retrieve"


# --- the default stays as it was ------------------------------------------------------------------


def _overrides_before_dialects(profile, out, model_dir, files, url, user, seed) -> list[str]:
    """``ppo_overrides`` as it was written before dialects existed (commit 53a730d)."""
    tools = "[{class_path: agentrl.tools.retrieval.SearchTool, options: {url: '" + url + "', topk: 1}}]"
    base = profile.ppo | {
        "seed": seed,
        "data.seed": seed,
        "actor.model_path": str(model_dir),
        "data.train_files": f"[{files.train}]",
        "data.val_files": f"[{files.test}]",
        "actor.rollout.tools": tools,
        "trainer.run_dir": str(out / "ppo"),
        "trainer.val_before_train": True,
    }
    return [f"{k}={v}" for k, v in base.items()] + list(user)


def test_the_default_profiles_get_the_overrides_texts_rows_and_report_fields_they_had(tmp_path):
    for profile in (FULL, SHORT):
        args = (profile, tmp_path, tmp_path / "model", FILES, URL, ["x=1"], 3)
        assert ppo_overrides(*args) == _overrides_before_dialects(*args)
        assert dialect_of(profile.tool_format, profile.calculator) == TAGS
        assert profile_record(profile) == {k: v for k, v in asdict(profile).items() if k not in LATER_FIELDS}
    world = generate_world(seed=0, **SHORT_SIZES)
    before = [p["contents"] for p in world.passages]
    for q in world.train_questions:
        before += [make_prompt(q.question)] + [t.text for t in oracle_trajectory(q)]
    assert tokenizer_texts(world) == before
    records = read_question_records(write_world(world, tmp_path / "world")["test"])
    sources = [f"synthetic_world_{r['hop']}hop" for r in records]
    old = to_training_rows([r | {"dataset": s} for r, s in zip(records, sources, strict=True)], "test")
    for row, record in zip(old, records, strict=True):  # hop_rows as it was before arithmetic questions
        row["extra_info"] = row["extra_info"] | {"hop": int(record["hop"]), "id": str(record["id"])}
    assert hop_rows(records, "test") == old


def test_a_profile_offers_the_calculator_only_in_hermes():
    with pytest.raises(ValueError, match="calculator needs tool_format: hermes"):
        dialect_of("tags", True)
    with pytest.raises(ValueError, match=r"tool_format must be one of \['hermes', 'tags'\], got 'json'"):
        dialect_of("json", False)


# --- the two-tool profile ---------------------------------------------------------------------------


def test_the_two_tool_profile_trains_in_hermes_with_search_and_calculate(tmp_path):
    assert TWO_TOOL.world["numbers"] is True and TWO_TOOL_SHORT.world["numbers"] is True
    dialect = dialect_of(TWO_TOOL.tool_format, TWO_TOOL.calculator)
    assert dialect.tool_call_tokens and "<tool_call>" not in dialect.instruction
    files = WorldFiles(tmp_path / "corpus.jsonl", tmp_path / "train.jsonl", tmp_path / "test.jsonl")
    files.train.touch(), files.test.touch(), (tmp_path / "model").mkdir()  # the config checks they exist
    overrides = ppo_overrides(TWO_TOOL, tmp_path, tmp_path / "model", files, URL, [], 0, dialect)
    rollout = load_config("ppo", overrides).actor.rollout
    assert (rollout.tool_format, rollout.chat_template) == ("hermes", "hermes")
    assert [t.class_path.rsplit(".", 1)[1] for t in rollout.tools] == ["SearchTool", "CalculatorTool"]
    assert rollout.tools[0].options == {"url": URL, "topk": 1}
    assert profile_record(TWO_TOOL)["tool_format"] == "hermes"
    assert chosen_profile(parse_args(["--profile", "two_tool"])) is TWO_TOOL
    assert chosen_profile(parse_args(["--short"])) is SHORT and chosen_profile(parse_args([])) is FULL
    with pytest.raises(SystemExit):
        parse_args(["--short", "--profile", "two_tool"])


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """The two-tool short profile's sft_data phase, run for real against a retriever server."""
    from retriever.process import RetrieverProcess

    out = tmp_path_factory.mktemp("two_tool")
    profile = TWO_TOOL_SHORT
    dialect = dialect_of(profile.tool_format, profile.calculator)
    world, files = make_world(out, profile, 0, dialect)
    model_dir = build_model(world, profile, out, 0, dialect)
    server = RetrieverProcess(build_index(files.corpus, out), log_path=out / "retriever.log")
    config = load_config(
        "ppo", ppo_overrides(profile, out, model_dir, files, server.retrieve_url, [], 0, dialect)
    )
    with server:
        demos = record_sft_data(world, model_dir, config, profile, out, 0, dialect)
    rows = [json.loads(line) for line in demos.path.read_text().splitlines()]
    return world, demos, rows, load_tokenizer(model_dir)


def test_hermes_demonstrations_of_every_kind_play_through_the_real_rollout_and_tools(recorded):
    world, demos, rows, tokenizer = recorded
    assert demos.dropped == 0 and demos.oracle == sum(TWO_TOOL_SHORT.sft_questions.values()) + 6
    oracles = [r for r in rows if r["reward"] == 1.0]
    calls = {"synthetic_world_1hop": {"search": 1}, "synthetic_world_2hop": {"search": 2}}
    calls["synthetic_world_arithmetic"] = {"search": 2, "calculate": 1}
    assert {r["data_source"] for r in oracles} == set(calls)
    for r in oracles:
        assert r["tool_calls"] == calls[r["data_source"]] and r["finished"]
        assert r["tool_calls_invalid"] == {} and r["tool_failures"] == 0
        question = world.question(r["extra_info"]["id"])
        model = [s["text"] for s in r["spans"] if s["segment"] == "model"]
        assert model == [t.text for t in TWO_TOOL_DIALECT.oracle(question, tokenizer.eos_token)]
        assert all(s["loss_mask"] == (s["segment"] == "model") for s in r["spans"])
        if question.calculation is not None:
            calculate = next(c for c in r["calls"] if c["name"] == "calculate")
            assert calculate["arguments"] == {"expression": question.calculation}
            assert calculate["message"] == question.golden_answers[0]
            first_turn = [c["turn"] for c in r["calls"] if c["name"] == "search"]
            assert first_turn == [0, 0], "both searches of an arithmetic question in one turn"
    shortcuts = [r for r in rows if r["reward"] == 0.0]
    assert shortcuts and all(r["tool_calls"] == {} and r["num_turns"] == 1 for r in shortcuts)


TWO_TOOL_DIALECT = dialect_of("hermes", True)


def test_the_prompts_carry_both_tools_schemas_through_the_hermes_template(recorded):
    _, _, rows, _ = recorded
    prompt = rows[0]["prompt_text"]
    assert '"name": "search"' in prompt and '"name": "calculate"' in prompt and "<tools>" in prompt
    assert "<search>" not in prompt, "the hermes instruction gives no tag syntax"


# --- what the report shows -----------------------------------------------------------------------


def _record(source: str, em: float, calls: dict[str, int]) -> dict:
    return {
        "data_source": source,
        "em": em,
        "num_searches": calls.get("search", 0),
        "tool_calls": calls,
        "finished": True,
    }


def test_the_summary_and_the_report_show_arithmetic_em_and_each_tools_calls():
    records = [
        _record("synthetic_world_1hop", 1.0, {"search": 1}),
        _record("synthetic_world_arithmetic", 1.0, {"search": 2, "calculate": 1}),
        _record("synthetic_world_arithmetic", 0.0, {"search": 2}),
    ]
    assert hop_label("synthetic_world_arithmetic") == "arithmetic"
    summary = summarize(records, ("search", "calculate"))
    assert list(summary) == ["all", "hop1", "arithmetic"]
    assert summary["arithmetic"] == {
        "em": 0.5,
        "searches": 2.0,
        "finished": 1.0,
        "n": 2.0,
        "calls/search": 2.0,
        "calls/calculate": 0.5,
    }
    assert "calls/search" not in summarize(records)["all"], "without tools, the summary of before"
    line = summary_line(summary)
    assert "arithmetic EM 0.500" in line and "calculate calls/question 0.33" in line
    result = QuickstartResult(Path("."), Path("r.md"), summary, summary, {}, 1.0, 1, [1.0], [])
    table, _ = _tables(result)
    assert "| arithmetic | 2 | 0.500 | 0.500 | +0.000 | n/a | 2.00 | 2.00 |" in table
    assert "| arithmetic | 2.00 | 2.00 | 0.50 | 0.50 |" in table
    default, _ = _tables(
        QuickstartResult(Path("."), Path("r.md"), *[summarize(records)] * 2, {}, 1.0, 1, [1.0], [])
    )
    assert "calls/q" not in default


def test_the_gain_is_paired_per_question_and_per_kind_with_its_bootstrap_interval():
    before = {
        "a": ("arithmetic", 0.0),
        "b": ("arithmetic", 0.0),
        "c": ("hop1", 1.0),
        "d": ("arithmetic", 1.0),
    }
    after = {"a": ("arithmetic", 1.0), "b": ("arithmetic", 1.0), "c": ("hop1", 0.0), "d": ("arithmetic", 1.0)}
    gains = paired_gains(before, after)
    assert set(gains) == {"all", "arithmetic", "hop1"}
    assert gains["arithmetic"]["delta"] == pytest.approx(2 / 3) and gains["arithmetic"]["n"] == 3.0
    assert gains["all"]["delta"] == pytest.approx(1 / 4)
    # every arithmetic pair gains or ties, so no resample can go below 0; the hop1 one only loses
    assert (
        0.0 <= gains["arithmetic"]["lo"] <= gains["arithmetic"]["delta"] <= gains["arithmetic"]["hi"] <= 1.0
    )
    assert gains["hop1"]["lo"] == gains["hop1"]["hi"] == -1.0
    summary = summarize([_record("synthetic_world_arithmetic", 1.0, {"search": 2})])
    result = QuickstartResult(Path("."), Path("r.md"), summary, summary, {}, 1.0, 1, [1.0], [], 0, gains)
    table, _ = _tables(result)
    lo, hi = gains["arithmetic"]["lo"], gains["arithmetic"]["hi"]
    assert f"| +0.000 | [{lo:+.3f}, {hi:+.3f}] | 2.00 | 2.00 |" in table
    with pytest.raises(ValueError, match="same questions"):
        paired_gains(before, {"a": ("arithmetic", 1.0)})


@pytest.mark.slow  # every phase of the quickstart: world, index, SFT, two evaluations, PPO
def test_the_two_tool_short_profile_runs_end_to_end(tmp_path, monkeypatch):
    """The smoke run: every phase, hermes with both tools, the per-kind report. Its PPO runs its
    roles in this process (``support.in_process``): the quickstart's own run on Ray is
    ``test_quickstart.py``'s, and hermes tools in Ray workers ``trainer/test_tools_end_to_end.py``'s."""
    from support.in_process import start_in_process

    from agentrl.quickstart import PHASES, run_quickstart
    from agentrl.trainer.ppo_trainer import PPOTrainer

    monkeypatch.setattr(PPOTrainer, "init_workers", start_in_process)
    out = tmp_path / "qs"
    result = run_quickstart(out, TWO_TOOL_SHORT, seed=0)
    assert list(result.seconds) == list(PHASES)
    for evaluation in (result.before, result.after):
        assert {"all", "calls/search", "calls/calculate"} <= set(evaluation) | set(evaluation["all"])
    config = (out / "ppo" / "config.yaml").read_text()
    assert "tool_format: hermes" in config and "CalculatorTool" in config
    assert any("rollout/tool_calls/calculate" in m for m in result.metrics)
    report = (out / "report.md").read_text()
    assert "calculate calls/q after PPO" in report and "Wall time per phase" in report
