"""The real-data recipe's phases: a pretrained model learns to search on NQ / HotpotQA questions.

    python -m agentrl.recipes.search_qa --data-dir DATA --out runs/search_qa [--profile full|tiny]

Phases, in order (each one's function in ``search_qa_phases``), run by the recipes'
``PhaseRunner`` (``agentrl.recipes.phases``); each writes
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
rl_turn    rl_dyn with rewards per turn (the profile's ``turn_overrides``: each search that finds
           a gold answer); not in a profile without them
dense_idx  the dense index (``dense_index``: for the RAG-dense baseline only)
eval       every model on the held-out sets, one phase per cell (``search_qa_eval``); ``eval-<cell>``
           names one cell alone (``--only eval-rl_full``)
=========  ================================================================================
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentrl.config.errors import StartupError, report_error
from agentrl.config.loader import ConfigError
from agentrl.recipes.phases import PhaseRunner
from agentrl.recipes.search_qa_eval import CELLS, evaluate_cells
from agentrl.recipes.search_qa_phases import (
    phase_demos,
    phase_index,
    phase_model,
    phase_rl,
    phase_rl_data,
    phase_rl_pool,
    phase_sft,
    phase_split,
    rl_config,
)
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
    "rl_turn",
    "dense_index",
    "eval",
)
# one held-out evaluation cell alone (``--only eval-rl_full``); ``eval`` runs every cell
EVAL_CELL_PHASES = tuple(f"eval-{cell}" for cell in CELLS)
RUN_ORDER = (*PHASES[:-1], *EVAL_CELL_PHASES)  # the phases as the runner runs them: ``eval`` is its cells

Done = dict[str, dict[str, Any] | None]  # each phase's recorded outputs (None: not run now)


def run_phases(
    data_dir: str | Path,
    out_dir: str | Path,
    profile: RecipeProfile = FULL,
    *,
    model: str | None = None,
    only: Sequence[str] | None = None,
    seed: int = 0,
) -> Done:
    """Run (or resume) the recipe's phases; ``only`` limits which phases may run now."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    data, out = Path(data_dir), Path(out_dir)
    phases = PhaseRunner(RUN_ORDER, markers=out / "phases", only=only, groups={"eval": EVAL_CELL_PHASES})
    run = _Run(data, out, profile, seed, phases)
    done: Done = {}
    done["split"] = phases.run(
        "split", "held-out vs training questions", lambda: phase_split(data, out, profile, seed)
    )
    done["model"] = phases.run("model", "the starting model", lambda: phase_model(out, model))
    done["index"] = phases.run("index", "the BM25 index", lambda: phase_index(run.corpus, out, "bm25"))
    if done["index"] is None or done["model"] is None:
        return done
    config = _with_retriever(run, done)
    if profile.dense:
        done["dense_index"] = phases.run(
            "dense_index", "the dense index", lambda: phase_index(run.corpus, out, "dense")
        )
    run_eval_cells(run, done, config)
    return done


@dataclass(frozen=True)
class _Run:
    """What the phases of one run read: the data and output folders, the profile, the seed, and
    the runner that times and records the phases."""

    data: Path
    out: Path
    profile: RecipeProfile
    seed: int
    phases: PhaseRunner

    @property
    def corpus(self) -> Path:
        return self.data / "corpus" / "wiki_mini.jsonl"


def _with_retriever(run: _Run, done: Done) -> Any:
    """The phases that ask the BM25 retriever, up for them alone: the demonstrations, the warm
    start, the RL questions and pool, the RL runs. Returns the config the evaluation rolls out with."""
    from retriever.process import RetrieverProcess

    data, out, profile, seed, phases = run.data, run.out, run.profile, run.seed, run.phases
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
        run_rl_phases(run, done, server.retrieve_url)
    finally:
        server.stop()
    return config


def run_rl_phases(run: _Run, done: Done, url: str) -> None:
    """The GRPO phases from the SFT model: ``rl_full`` and ``rl_lora`` on the pool, ``rl_dyn`` on
    every ``rl_data`` question (dynamic sampling finds the ones the policy sometimes solves)."""
    sources = {"rl_full": "rl_pool", "rl_lora": "rl_pool", "rl_dyn": "rl_data", "rl_turn": "rl_data"}
    for name, source in sources.items():
        if done.get("sft") is None or done.get(source) is None:
            continue
        if name == "rl_turn" and run.profile.turn_overrides is None:
            continue
        cfg = rl_config(run.profile, run.out, name, Path(done["sft"]["model"]), done[source], url)
        done[name] = run.phases.run(name, f"GRPO from the SFT model ({name})", lambda cfg=cfg: phase_rl(cfg))


def run_eval_cells(run: _Run, done: Done, config: Any) -> None:
    """Phase ``eval``: each cell of ``search_qa_eval.CELLS`` whose model and index exist is its
    own phase (``eval-<cell>``), so a finished cell is never re-run. The cells roll out as the RL
    ``config`` does, but for the held-out protocol (``search_qa_eval.eval_settings``)."""

    models = {name: result["model"] for name, result in done.items() if result and "model" in result}
    for cell, (phase, _, backend) in CELLS.items():
        if phase not in models or (backend == "dense" and not done.get("dense_index")):
            continue

        def one(cell: str = cell) -> dict[str, str]:
            index = done["index"]["index"]
            dirs = evaluate_cells(run.out, models, index, [cell], config=config, **run.profile.eval_options)
            return {"dir": str(dirs[cell])}

        run.phases.run(f"eval-{cell}", f"held-out evaluation: {cell}", one)


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
