"""End-to-end tests of the evaluation harness: a tiny real model (and, where a policy must
search, a scripted one) against a real BM25 retriever server on loopback."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from support.eval_toy import QUESTIONS, searching_policy
from support.scripted_engine import ScriptedEngine

from agentrl.data.qa import QADataError
from agentrl.engines.hf import HFEngine
from agentrl.eval import DatasetSpec, EvalModel, EvalSettings, SettingsMismatch, evaluate, load_questions
from agentrl.eval.cli import CLI_DEFAULTS
from agentrl.eval.cli import main as cli_main
from agentrl.eval.datasets import EvalQuestion
from agentrl.eval.prompts import build_prompt


def eval_settings(**fields) -> EvalSettings:
    """The command line's settings (its long prompt budget: a rag prompt holds documents) with ``fields``."""
    return EvalSettings().with_overrides(**(CLI_DEFAULTS | fields))


SETTINGS = eval_settings(max_tokens_per_turn=8, max_response_length=96, max_obs_length=96, batch_size=2)
RECORD_FIELDS = {
    "dataset",
    "data_source",
    "id",
    "question",
    "golden_answers",
    "prediction",
    "em",
    "f1",
    "cover_em",
    "answered",
    "extracted",
    "retrieval_hit",
    "num_searches",
    "tool_calls",
    "num_turns",
    "response_tokens",
    "observation_tokens",
    "prompt_tokens",
    "finished",
    "truncated",
    "tool_failures",
    "retrieved_ids",
    "response",
    "text_cover_em",
}


def read_predictions(out: Path) -> tuple[dict, list[dict]]:
    lines = (out / "predictions.jsonl").read_text().splitlines()
    return json.loads(lines[0]), [json.loads(x) for x in lines[1:]]


def toy(questions_file: Path, **kw) -> DatasetSpec:
    return DatasetSpec("toy", str(questions_file), **kw)


@pytest.mark.parametrize("mode", ["direct", "rag", "agent"])
def test_each_mode_writes_schema_and_metrics_in_range(
    mode, tiny_model_dir, questions_file, retriever_url, tmp_path
):
    out = tmp_path / mode
    res = evaluate(
        tiny_model_dir,
        [toy(questions_file)],
        mode,
        retriever_url,
        settings=SETTINGS,
        out_dir=out,
        corpus="toy-passages",
        progress=False,
    )
    header, records = read_predictions(out)
    assert header["format"] == "agentrl.eval/predictions-v1"
    s = header["settings"]
    assert s["mode"] == mode and s["model"] == str(tiny_model_dir) and s["decoding"]["greedy"] is True
    assert s["datasets"]["toy"]["questions"] == len(QUESTIONS) and s["answer_rule"] == "tag"
    assert sorted(r["id"] for r in records) == sorted(q[0] for q in QUESTIONS)
    for r in records:
        assert set(r) == RECORD_FIELDS
        for key in ("em", "f1", "cover_em"):
            assert 0.0 <= r[key] <= 1.0
        assert r["em"] <= r["cover_em"] <= r["text_cover_em"] and r["em"] <= r["f1"]
        assert r["answered"] == (r["prediction"] is not None) and r["extracted"] is False
        assert 1 <= r["response_tokens"] <= SETTINGS.max_tokens_per_turn * (SETTINGS.max_turns + 1)
    metrics = json.loads((out / "metrics.json").read_text())
    toy_m = metrics["metrics"]["toy"]
    assert toy_m == res.metrics["toy"] and toy_m["n"] == len(QUESTIONS)
    for key in ("em", "f1", "cover_em", "answer_rate"):
        assert 0.0 <= toy_m[key] <= 1.0
    assert "| toy | " + mode in (out / "metrics.md").read_text()

    if mode == "direct":
        assert s["retriever"] is None and s["topk"] is None
        assert all(
            r["num_searches"] == 0 and r["num_turns"] == 1 and r["retrieval_hit"] is None for r in records
        )
        assert all(r["observation_tokens"] == 0 and r["retrieved_ids"] is None for r in records)
    elif mode == "rag":
        assert s["retriever"]["backend"] == "bm25" and s["retriever"]["corpus_size"] == 6 and s["topk"] == 3
        assert all(r["num_searches"] == 0 and r["num_turns"] == 1 for r in records)
        assert all(len(r["retrieved_ids"]) == 3 and r["observation_tokens"] == 0 for r in records)
        hits = {r["id"]: r["retrieval_hit"] for r in records}
        assert hits["q1"] == 1.0 and hits["q2"] == 1.0  # BM25 finds the passage naming the answer
    else:
        assert (
            s["max_turns"] == SETTINGS.max_turns and s["budgets"]["max_obs_length"] == SETTINGS.max_obs_length
        )
        assert all(r["num_turns"] == r["num_searches"] + 1 or not r["finished"] for r in records)


def test_prompts_differ_by_mode(tokenizer):
    q = EvalQuestion(
        "toy",
        "q1",
        "What is the capital of France",
        ("Paris",),
        "toy",
        ({"role": "user", "content": "TRAINING PROMPT: What is the capital of France?"},),
    )
    docs = [{"id": "d0", "contents": '"Paris"\nParis is the capital of France.'}]
    direct = tokenizer.decode(build_prompt(tokenizer, "direct", q).prompt_ids)
    rag = tokenizer.decode(build_prompt(tokenizer, "rag", q, docs).prompt_ids)
    agent = tokenizer.decode(build_prompt(tokenizer, "agent", q).prompt_ids)
    assert 'Doc 1(Title: "Paris") Paris is the capital of France.' in rag
    assert "Doc 1" not in direct and "<search>" not in direct
    assert "TRAINING PROMPT" in agent and "TRAINING PROMPT" not in direct + rag
    with pytest.raises(ValueError, match="rag mode needs the retrieved documents"):
        build_prompt(tokenizer, "rag", q)


def test_agent_mode_searches_through_the_manager(tokenizer, questions_file, retriever_url, tmp_path):
    engine = ScriptedEngine(tokenizer, searching_policy)
    settings = eval_settings(
        max_tokens_per_turn=64, max_response_length=512, max_obs_length=256, batch_size=3
    )
    res = evaluate(
        EvalModel(engine, tokenizer, name="scripted"),
        [toy(questions_file)],
        "agent",
        retriever_url,
        settings=settings,
        out_dir=tmp_path / "agent",
        progress=False,
    )
    by_id = {r["id"]: r for r in res.records}
    for r in res.records:
        assert r["num_searches"] == 1 and r["num_turns"] == 2 and r["finished"]
        assert "<information>" in r["response"] and r["observation_tokens"] > 0
    assert by_id["q1"]["prediction"] == "Paris" and by_id["q1"]["em"] == 1.0
    assert by_id["q6"]["em"] == 0.0 and by_id["q6"]["retrieval_hit"] == 1.0  # "Seine" is in the Paris doc
    # the model's own text excludes the documents: "Seine" was retrieved, never written
    assert by_id["q6"]["text_cover_em"] == 0.0 and by_id["q1"]["text_cover_em"] == 1.0
    m = res.metrics["toy"]
    assert m["searches"] == 1.0 and m["turns"] == 2.0 and m["answer_rate"] == 1.0
    assert m["em"] == pytest.approx(sum(r["em"] for r in res.records) / len(QUESTIONS))
    # the engine saw the documents only in the second turn of each question, never in the prompt
    assert sum(1 for c in engine.calls if "Doc 1(Title:" in tokenizer.decode(c.prompt_ids)) == len(QUESTIONS)


class CrashingEngine:
    """A real HF engine that fails on its ``crash_at``-th batch, like a process dying mid-run."""

    def __init__(self, engine: HFEngine, crash_at: int) -> None:
        self.engine, self.crash_at, self.calls = engine, crash_at, 0

    async def generate(self, prompt_ids, params):  # pragma: no cover - lockstep uses generate_batch
        return await self.engine.generate(prompt_ids, params)

    async def generate_batch(self, prompts, params, seeds=None):
        self.calls += 1
        if self.calls == self.crash_at:
            raise RuntimeError("simulated crash")
        return await self.engine.generate_batch(prompts, params, seeds)

    def shutdown(self) -> None:
        self.engine.shutdown()


def test_interrupted_evaluation_resumes_without_duplicates(
    tiny_model_dir, tokenizer, questions_file, tmp_path
):
    spec = [toy(questions_file)]
    fresh = evaluate(
        tiny_model_dir, spec, "direct", settings=SETTINGS, out_dir=tmp_path / "fresh", progress=False
    )

    out = tmp_path / "resumed"
    crashing = CrashingEngine(HFEngine.from_pretrained(tiny_model_dir), crash_at=2)
    with pytest.raises(RuntimeError, match="simulated crash"):
        evaluate(
            EvalModel(crashing, tokenizer, name=str(tiny_model_dir)),
            spec,
            "direct",
            settings=SETTINGS,
            out_dir=out,
            progress=False,
        )
    crashing.shutdown()
    _, partial = read_predictions(out)
    assert len(partial) == SETTINGS.batch_size  # the first batch was flushed before the crash
    with (out / "predictions.jsonl").open("a") as f:
        f.write('{"dataset": "toy", "id": "q3", "em"')  # a kill in the middle of a write

    resumed = evaluate(tiny_model_dir, spec, "direct", settings=SETTINGS, out_dir=out, progress=False)
    assert resumed.resumed == SETTINGS.batch_size
    _, records = read_predictions(out)
    ids = [r["id"] for r in records]
    assert len(ids) == len(set(ids)) == len(QUESTIONS)
    assert resumed.metrics == fresh.metrics
    assert [r["response"] for r in resumed.records] == [r["response"] for r in fresh.records]

    again = evaluate(tiny_model_dir, spec, "direct", settings=SETTINGS, out_dir=out, progress=False)
    assert again.resumed == len(QUESTIONS) and again.metrics == fresh.metrics  # nothing left to run

    with pytest.raises(
        SettingsMismatch, match=r"decoding: .*max_tokens_per_turn': 8.*max_tokens_per_turn': 9"
    ):
        evaluate(
            tiny_model_dir,
            spec,
            "direct",
            settings=eval_settings(max_tokens_per_turn=9, batch_size=2),
            out_dir=out,
            progress=False,
        )
    with pytest.raises(SettingsMismatch, match="datasets"):
        evaluate(
            tiny_model_dir,
            [toy(questions_file, limit=3)],
            "direct",
            settings=SETTINGS,
            out_dir=out,
            progress=False,
        )


def test_subsampling_filters_and_errors(questions_file, tmp_path, tiny_model_dir):
    kept = load_questions(toy(questions_file, require=("in_corpus",)))
    assert [q.id for q in kept] == ["q1", "q2", "q3", "q4", "q5"]
    a = load_questions(toy(questions_file, limit=3, seed=1))
    assert len(a) == 3 and [q.id for q in a] == [
        q.id for q in load_questions(toy(questions_file, limit=3, seed=1))
    ]
    assert {tuple(q.id for q in load_questions(toy(questions_file, limit=3, seed=s))) for s in range(6)} != {
        tuple(q.id for q in a)
    }
    with pytest.raises(QADataError, match="requires field 'nope'"):
        load_questions(toy(questions_file, require=("nope",)))
    with pytest.raises(FileNotFoundError, match="missing.jsonl"):
        load_questions(DatasetSpec("x", str(tmp_path / "missing.jsonl")))
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": 1, "question": "q?", "golden_answers": []}\n')
    with pytest.raises(QADataError, match="golden_answers"):
        load_questions(DatasetSpec("bad", str(bad)))
    with pytest.raises(ValueError, match="needs retriever_url"):
        evaluate(tiny_model_dir, [toy(questions_file)], "rag", None, progress=False)
    with pytest.raises(ValueError, match="mode must be one of"):
        evaluate(tiny_model_dir, [toy(questions_file)], "oracle", None, progress=False)
    with pytest.raises(FileNotFoundError, match="actor/"):
        evaluate(tmp_path, [toy(questions_file)], "direct", progress=False)


def test_checkpoint_dir_and_cli(tiny_model_dir, questions_file, retriever_url, tmp_path):
    step = tmp_path / "run" / "checkpoints" / "step_3"
    (step).mkdir(parents=True)
    (step / "actor").symlink_to(tiny_model_dir, target_is_directory=True)
    out = tmp_path / "cli"
    argv = [
        "--model",
        str(step),
        "--data",
        f"toy={questions_file}",
        "--require",
        "toy=in_corpus",
        "--limit",
        "4",
        "--mode",
        "direct",
        "rag",
        "--retriever-url",
        retriever_url,
        "--out",
        str(out),
        "--max-tokens-per-turn",
        "8",
        "--batch-size",
        "4",
        "--answer-rule",
        "tag-or-first-line",
        "--no-progress",
    ]
    assert cli_main(argv) == 0
    summary = (out / "summary.md").read_text()
    assert "| toy | direct | – | 4 |" in summary and "| toy | rag | bm25 | 4 |" in summary
    assert "answer rule: `tag-or-first-line`" in summary
    header, records = read_predictions(out / "rag")
    assert header["settings"]["model"] == str(step / "actor") and len(records) == 4
    assert header["settings"]["answer_rule"] == "tag-or-first-line"
    with pytest.raises(SystemExit):
        cli_main([*argv[:-3], "--answer-rule", "lenient", "--no-progress"])
    assert header["settings"]["datasets"]["toy"]["require"] == ["in_corpus"]


def test_real_hotpotqa_sample_is_seeded_and_filtered(shared_data):
    spec = DatasetSpec(
        "hotpotqa", str(shared_data / "hotpotqa" / "dev.jsonl"), ("all_supporting_in_corpus",), 50, 0
    )
    qs = load_questions(spec)
    assert len(qs) == 50 and len({q.id for q in qs}) == 50
    assert [q.id for q in qs] == [q.id for q in load_questions(spec)]
    raw = {
        json.loads(x)["id"]: json.loads(x)
        for x in (shared_data / "hotpotqa" / "dev.jsonl").read_text().splitlines()
    }
    assert all(raw[q.id]["all_supporting_in_corpus"] for q in qs)


GOLD = {q: g[0] for q, _, g in QUESTIONS}


def prose_policy(context: str) -> str:
    """A small instruct model: answers in prose, never writes the <answer> tag (wrong on q6)."""
    question = re.search(r"Question: (.*?)\?", context).group(1)
    qid = next(q for q, text, _ in QUESTIONS if text == question)
    answer = "Paris" if qid == "q6" else GOLD[qid]
    return f"<think> I know this one. </think>\n{answer}. I am quite sure about that."


def test_fair_baseline_rule_scores_prose_answers_and_is_recorded(tokenizer, questions_file, tmp_path):
    spec = [toy(questions_file)]
    settings = eval_settings(max_tokens_per_turn=64, max_response_length=128, batch_size=4)
    fair_settings = eval_settings(
        max_tokens_per_turn=64, max_response_length=128, batch_size=4, answer_rule="tag-or-first-line"
    )

    def run(settings: EvalSettings, out: Path):
        engine = ScriptedEngine(tokenizer, prose_policy)
        return evaluate(
            EvalModel(engine, tokenizer, name="prose"),
            spec,
            "direct",
            settings=settings,
            out_dir=out,
            progress=False,
        )

    strict = run(settings, tmp_path / "tag")
    fair = run(fair_settings, tmp_path / "fair")
    assert all(r["prediction"] is None and r["em"] == 0.0 for r in strict.records)
    by_id = {r["id"]: r for r in fair.records}
    assert by_id["q2"]["prediction"] == "Jane Austen." and by_id["q2"]["em"] == 1.0
    assert by_id["q6"]["prediction"] == "Paris." and by_id["q6"]["em"] == 0.0
    assert all(r["extracted"] and not r["answered"] for r in fair.records)
    m = fair.metrics["toy"]
    assert m["em"] == pytest.approx(5 / 6) and m["extracted"] == 1.0 and m["answer_rate"] == 0.0
    assert m["em_lo"] < m["em"] <= m["em_hi"] and strict.metrics["toy"]["extracted"] == 0.0
    # the rollouts are the same; only what the records score differs
    assert [r["response"] for r in fair.records] == [r["response"] for r in strict.records]
    header, _ = read_predictions(tmp_path / "fair")
    assert header["settings"]["answer_rule"] == "tag-or-first-line"
    assert "`answer_rule`: tag-or-first-line" in (tmp_path / "fair" / "metrics.md").read_text()

    # records scored under one rule never continue under another
    with pytest.raises(SettingsMismatch, match="answer_rule: 'tag-or-first-line' -> 'tag'"):
        run(settings, tmp_path / "fair")
    with pytest.raises(SettingsMismatch, match="answer_rule: 'tag' -> 'tag-or-first-line'"):
        run(fair_settings, tmp_path / "tag")

    # a results file from before the rule existed was scored by tags: it resumes under tag only
    path = tmp_path / "tag" / "predictions.jsonl"
    head, *rest = path.read_text().splitlines(keepends=True)
    legacy = json.loads(head)
    del legacy["settings"]["answer_rule"]
    old_records = [{k: v for k, v in json.loads(x).items() if k != "extracted"} for x in rest]
    path.write_text("".join(json.dumps(x) + "\n" for x in [legacy, *old_records]))
    with pytest.raises(SettingsMismatch, match="answer_rule: 'tag' -> 'tag-or-first-line'"):
        run(fair_settings, tmp_path / "tag")
    resumed = run(settings, tmp_path / "tag")
    assert resumed.resumed == len(QUESTIONS) and resumed.metrics == strict.metrics


def test_an_unknown_answer_rule_is_refused_by_the_settings():
    with pytest.raises(
        ValueError, match=r"EvalSettings.answer_rule must be one of \('tag', 'tag-or-first-line'\)"
    ):
        EvalSettings(answer_rule="first-line")
