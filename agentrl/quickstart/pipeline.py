"""The quickstart's run: ``run_quickstart``, the synthetic-world recipe's phases one after the other.

``run_quickstart`` is the list of phases (``PHASES``, in that order; each phase's function is in
``phases.py``), each run and timed by the recipes' ``PhaseRunner`` (``agentrl.recipes.phases``,
without markers: a quickstart starts afresh every time), followed by the report, written once at
the end. The retriever is stopped and Ray shut down whatever happens. The profile's tools and
their call format are decided once, as its :class:`~agentrl.quickstart.dialects.Dialect`, and
handed to the phases that depend on it.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentrl.data.world import World
from agentrl.quickstart.demonstrations import Demonstrations
from agentrl.quickstart.dialects import Dialect, dialect_of
from agentrl.quickstart.evaluation import paired_gains
from agentrl.quickstart.phases import (
    HeldoutEvaluation,
    SFTOutcome,
    WorldFiles,
    build_index,
    build_model,
    evaluate_heldout,
    make_world,
    ppo_overrides,
    record_sft_data,
    start_retriever,
    train_ppo,
    train_sft,
)
from agentrl.quickstart.profiles import FULL, Profile
from agentrl.quickstart.report import QuickstartResult, write_report
from agentrl.recipes.curves import read_jsonl
from agentrl.recipes.phases import PhaseRunner

__all__ = ["PHASES", "prepare", "run_quickstart"]

PHASES = ("world", "index", "model", "retriever", "sft_data", "sft", "eval_sft", "ppo", "eval_ppo")
STALE = ("ppo", "sft_skill", "sft_model", "model", "index")  # a previous run's, never resumed or mixed in


def prepare(out_dir: str | Path) -> Path:
    """The output folder, emptied of a previous run's models and index; offline, CPU-wide settings."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    # Ray workers run one role at a time (the controller is sequential), so each may use every core.
    os.environ.setdefault("AGENTRL_TORCH_THREADS", str(os.cpu_count() or 1))
    out = Path(out_dir)
    for stale in STALE:
        shutil.rmtree(out / stale, ignore_errors=True)
    out.mkdir(parents=True, exist_ok=True)
    return out


def run_quickstart(
    out_dir: str | Path = "runs/quickstart",
    profile: Profile = FULL,
    seed: int = 0,
    overrides: Sequence[str] = (),
    preset: str = "ppo",
) -> QuickstartResult:
    """Run every phase (the package docstring), then write ``report.md`` once; returns the numbers."""
    import ray

    from agentrl.config import load_config
    from retriever.process import RetrieverProcess

    dialect = dialect_of(
        profile.tool_format, profile.calculator, profile.sft_parallel_searches, profile.sft_restate_ages
    )
    run = _Run(prepare(out_dir), profile, seed, dialect, PhaseRunner(PHASES))
    built = _build(run)
    server = RetrieverProcess(built.index_dir, log_path=run.out / "retriever.log")
    # Checked in full before the server starts or anything trains: a bad override fails here, by name.
    overrides = ppo_overrides(
        profile, run.out, built.model_dir, built.files, server.retrieve_url, overrides, seed, dialect
    )
    config = load_config(preset, overrides)
    try:
        trained = _train_and_evaluate(run, built, server, config)
    finally:
        server.stop()
        if ray.is_initialized():
            ray.shutdown()
    return _report(run, trained, config)


@dataclass(frozen=True)
class _Run:
    """What every phase of one quickstart reads: its folder, profile, seed and dialect, and the
    runner that times the phases."""

    out: Path
    profile: Profile
    seed: int
    dialect: Dialect
    clock: PhaseRunner

    @property
    def tools(self) -> tuple[str, ...]:
        """The tools the report counts calls of, one by one (none with search alone)."""
        return ("search", "calculate") if self.dialect.calculator else ()


@dataclass(frozen=True)
class _Built:
    """What the phases before the retriever give: the world and its files, the index, the tiny LM."""

    world: World
    files: WorldFiles
    index_dir: Path
    model_dir: Path


@dataclass(frozen=True)
class _Trained:
    """What the phases with the retriever up give: demonstrations, the warm start, both evaluations."""

    demos: Demonstrations
    sft: SFTOutcome
    before: HeldoutEvaluation
    after: HeldoutEvaluation


def _build(run: _Run) -> _Built:
    """Phases ``world``, ``index`` and ``model``: nothing runs beside them yet."""
    out, profile, seed, dialect, clock = run.out, run.profile, run.seed, run.dialect, run.clock
    world, files = clock.run(
        "world", "generating the invented world", make_world, out, profile, seed, dialect
    )
    index_dir = clock.run("index", "building the BM25 index", build_index, files.corpus, out)
    model_dir = clock.run(
        "model",
        "training the tokenizer and building a random tiny LM",
        lambda: build_model(world, profile, out, seed, dialect),
    )
    return _Built(world, files, index_dir, model_dir)


def _train_and_evaluate(run: _Run, built: _Built, server: Any, config: Any) -> _Trained:
    """Phases ``retriever`` to ``eval_ppo``: the server started, then each phase that asks it."""
    out, profile, seed, dialect, clock = run.out, run.profile, run.seed, run.dialect, run.clock
    world, files, model_dir, limit = built.world, built.files, built.model_dir, profile.eval_limit
    clock.run("retriever", "starting the retriever server", start_retriever, server)
    demos = clock.run(
        "sft_data",
        "playing oracle solutions through the real rollout",
        lambda: record_sft_data(world, model_dir, config, profile, out, seed, dialect),
    )
    sft = clock.run(
        "sft",
        "supervised warm start: the skill, then the shortcut habit",
        lambda: train_sft(model_dir, demos, profile, out, seed),
    )
    before = clock.run(
        "eval_sft",
        "held-out evaluation after SFT",
        lambda: evaluate_heldout(sft.model_dir, files.test, config, limit, seed, run.tools),
    )
    ppo_dir = clock.run(
        "ppo",
        f"{config.algorithm.adv_estimator} on Ray from the SFT model",
        lambda: train_ppo(config, sft.model_dir),
    )
    after = clock.run(
        "eval_ppo",
        "held-out evaluation after PPO",
        lambda: evaluate_heldout(ppo_dir, files.test, config, limit, seed, run.tools),
    )
    return _Trained(demos, sft, before, after)


def _report(run: _Run, trained: _Trained, config: Any) -> QuickstartResult:
    """The run's numbers, and ``report.md`` written from them once."""
    out, clock = run.out, run.clock
    result = QuickstartResult(
        out,
        out / "report.md",
        trained.before.summary,
        trained.after.summary,
        dict(clock.seconds),
        clock.total,
        trained.sft.examples,
        trained.sft.loss,
        read_jsonl(out / "ppo" / "metrics.jsonl"),
        trained.demos.shortcut,
        paired_gains(trained.before.em, trained.after.em),
    )
    write_report(result, run.profile, config)
    print(f"\nreport: {result.report}  (total {result.total_seconds / 60:.1f} min)")
    return result
