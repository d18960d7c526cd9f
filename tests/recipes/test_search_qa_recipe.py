"""The real-data recipe end to end at test size (``--profile tiny``): the same code path as the
``docs/results.md`` run (split, demonstrations through the real retriever, SFT, GRPO full, LoRA
and with dynamic sampling, held-out evaluation of every model), on a nano model, then a resumed
rerun. The RL phases' roles run in the test's process (``support.in_process``): what is tested
here is the recipe (its phases, files, resume and report); Ray's wiring is the trainer tests'."""

from __future__ import annotations

import gzip
import json
import shutil

import pytest
from support.in_process import start_in_process

from agentrl.recipes import search_qa_report
from agentrl.recipes.search_qa import TINY, main, run_phases
from agentrl.recipes.search_qa_report import (
    BEGIN,
    END,
    archive_run,
    paired_gains,
    plot_curves,
    render_results,
    results_rows,
    write_results,
)
from agentrl.recipes.split import check_disjoint
from agentrl.trainer.ppo_trainer import PPOTrainer

pytestmark = pytest.mark.slow  # three short RL runs and five evaluation cells on real data


@pytest.fixture(scope="module", autouse=True)
def in_process_rl():
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(PPOTrainer, "init_workers", start_in_process)
        yield


def records(path):
    with path.open(encoding="utf-8") as f:  # not splitlines(): passages hold U+2028 inside strings
        return [json.loads(line) for line in f if line.strip()]


@pytest.fixture(scope="module")
def run(shared_data, tiny_model_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("search_qa")
    done = run_phases(shared_data, out, TINY, model=str(tiny_model_dir))
    return out, done


def test_the_held_out_questions_are_disjoint_from_everything_trained_on(run):
    out, done = run
    data = out / "data"
    held = [
        r for name in ("nq", "hotpotqa", "triviaqa", "popqa") for r in records(data / f"heldout_{name}.jsonl")
    ]
    assert len(held) == 4 * TINY.heldout_limit
    check_disjoint(records(data / "train.jsonl") + records(data / "val.jsonl"), held)
    demos = records(out / "sft" / "demos.jsonl")
    held_ids = {r["id"] for r in held}
    trained_ids = {d["extra_info"]["id"] for d in demos}
    assert trained_ids and not trained_ids & held_ids


def test_demonstrations_search_once_or_twice_and_answer_from_the_documents(run):
    out, done = run
    report = done["demos"]
    assert report["one_hop"] > 0 and report["two_hop"] > 0
    dropped = ("no_gold_in_docs", "prompt_too_long", "cut", "gold_lost")
    assert report["kept"] + sum(report[k] for k in dropped) == report["candidates"]  # each counted once
    for demo in records(out / "sft" / "demos.jsonl"):
        assert demo["reward"] == 1.0 and demo["finished"]
        assert demo["tool_calls"]["search"] in (1, 2)
        assert demo["num_turns"] == demo["tool_calls"]["search"] + 1


def test_rl_trains_on_the_pool_the_warm_start_was_sampled_on(run):
    out, done = run
    pool = done["rl_pool"]
    assert pool["candidates"] == TINY.pool_candidates and 0 <= pool["solved"] <= pool["candidates"]
    sampled = records(out / "rl_pool" / "predictions.jsonl")[1:]  # after the settings header
    assert len(sampled) == TINY.pool_candidates
    for name in ("rl_full", "rl_lora"):
        assert "rl_train_pool.parquet" in (out / name / "config.yaml").read_text(), name


def test_rl_dyn_trains_on_every_answerable_question_with_dynamic_sampling(run):
    out, done = run
    config = (out / "rl_dyn" / "config.yaml").read_text()
    assert "rl_train_answerable.parquet" in config and "rl_train_pool.parquet" not in config
    # the profile's sample of the RL questions was checked for a search answer, not all of them
    assert done["rl_data"]["of"] == TINY.rl_data_limit and 0 < done["rl_data"]["kept"] <= TINY.rl_data_limit
    steps = [m for m in records(out / "rl_dyn" / "metrics.jsonl") if "timing_s/step" in m]
    assert len(steps) == 2
    for m in steps:  # each step drew its rounds and kept exactly the configured number of groups
        assert (
            1
            <= m["dynamic_sampling/rounds"]
            <= TINY.dynamic_overrides["algorithm.dynamic_sampling.max_rounds"]
        )
        kept = m["dynamic_sampling/informative_groups"] + m["dynamic_sampling/padded_groups"]
        assert kept == TINY.rl_overrides["data.train_batch_size"]


def test_sft_then_full_and_lora_rl_each_leave_a_model(run):
    out, done = run
    assert done["sft"]["examples"] > 0 and all(loss == loss for loss in done["sft"]["loss"])
    for name in ("rl_full", "rl_lora"):
        metrics = records(out / name / "metrics.jsonl")
        assert len([m for m in metrics if "timing_s/step" in m]) == 2, name
        # the phase's model is the checkpoint with the best validation F1 (the later one on a tie)
        f1 = {m["step"]: m["val/all/f1"] for m in metrics if "val/all/f1" in m}
        best = max(f1, key=lambda step: (f1[step], step))
        assert (out / done[name]["model"]).parent.name == f"step_{best}", (name, f1)
    assert "lora" not in json.dumps(done["rl_full"])
    lora_actor = out / done["rl_lora"]["model"]
    assert (lora_actor / "adapter" / "adapter_model.safetensors").is_file()
    assert (lora_actor / "model.safetensors").is_file(), "the merged policy, for evaluation"


def test_every_cell_is_scored_on_the_held_out_questions_with_one_answer_rule(run):
    out, done = run
    rows = results_rows(out)
    systems = {r["system"] for r in rows}
    assert systems == {"direct", "rag-bm25", "sft", "rl_full", "rl_lora", "rl_dyn"}  # no dense index here
    assert all(r["n"] == TINY.heldout_limit for r in rows)
    for cell in systems:
        settings = json.loads((out / "eval" / cell / "metrics.json").read_text())["settings"]
        assert settings["answer_rule"] == "tag-or-first-line"
    gains = paired_gains(out, "rl_full", "sft")
    assert set(gains) == {"nq", "hotpotqa", "triviaqa", "popqa"}
    assert all(lo <= diff <= hi and n == TINY.heldout_limit for diff, lo, hi, n in gains.values())


def test_a_rerun_resumes_every_phase_without_redoing_it(run, shared_data, tiny_model_dir):
    out, done = run
    markers = {p.name: p.stat().st_mtime_ns for p in (out / "phases").iterdir()}
    again = run_phases(shared_data, out, TINY, model=str(tiny_model_dir))
    assert {p.name: p.stat().st_mtime_ns for p in (out / "phases").iterdir()} == markers
    assert again["rl_lora"] == done["rl_lora"]


def test_the_results_block_and_curves_are_written_from_the_run(run, tmp_path):
    out, _ = run
    doc = tmp_path / "results.md"
    doc.write_text(f"# Results\n\nintro\n\n{BEGIN}\nSTALE BLOCK\n{END}\n\nafter\n")
    block = write_results(out, doc)
    text = doc.read_text()
    assert "STALE BLOCK" not in text and text.startswith("# Results\n\nintro") and text.endswith("after\n")
    assert "| rl_lora |" in block and "EM of `rl_full` − `sft`" in block
    assert plot_curves(out, tmp_path / "curves.png").stat().st_size > 1000


def test_the_archive_renders_the_same_block_without_trajectories_and_merges_across_runs(run, tmp_path):
    out, _ = run
    archive = tmp_path / "archive"
    archive_run(out, archive)
    assert render_results(archive) == render_results(out)
    assert paired_gains(archive, "rl_lora", "sft") == paired_gains(out, "rl_lora", "sft")
    with gzip.open(archive / "eval" / "sft" / "scores.jsonl.gz", "rt", encoding="utf-8") as f:
        lines = [json.loads(line) for line in f]
    assert "settings" in lines[0] and all("response" not in r and "question" not in r for r in lines[1:])
    log = ("rl_full", "metrics.jsonl")
    assert archive.joinpath(*log).read_bytes() == out.joinpath(*log).read_bytes()
    # a later run that has only some cells replaces those and keeps the rest
    later = tmp_path / "later"
    shutil.copytree(out / "eval" / "direct", later / "eval" / "direct")
    before = {p: p.read_bytes() for p in archive.rglob("*") if p.is_file()}
    written = archive_run(later, archive)
    direct = archive / "eval" / "direct"
    assert written == [direct / "metrics.json", direct / "scores.jsonl.gz"]
    assert {p: p.read_bytes() for p in archive.rglob("*") if p.is_file()} == before  # same scores, same bytes
    doc = tmp_path / "results.md"
    assert search_qa_report.main([str(later), "--archive", str(archive), "--doc", str(doc)]) == 0
    assert "| rl_lora |" in doc.read_text()


def test_the_command_line_can_rerun_one_evaluation_cell_alone(run, shared_data, tiny_model_dir):
    out, _ = run
    (out / "phases" / "eval-rl_lora.json").unlink()
    shutil.rmtree(out / "eval" / "rl_lora")
    others = {p.name: p.stat().st_mtime_ns for p in (out / "phases").iterdir()}
    argv = ["--data-dir", str(shared_data), "--out", str(out), "--profile", "tiny"]
    assert main([*argv, "--model", str(tiny_model_dir), "--only", "eval-rl_lora"]) == 0
    after = {p.name: p.stat().st_mtime_ns for p in (out / "phases").iterdir()}
    assert after.pop("eval-rl_lora.json") and after == others
    rows = [r for r in results_rows(out) if r["system"] == "rl_lora"]
    assert len(rows) == 4 and all(r["n"] == TINY.heldout_limit for r in rows)
