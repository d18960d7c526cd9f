"""The quickstart's phases, one function each: what a phase needs in, what it returns out.

Each is a function of what earlier phases returned (``WorldFiles``, a model directory,
``Demonstrations``, ``SFTOutcome``, ...) and of the run's profile, seed and
:class:`~agentrl.quickstart.dialects.Dialect`; ``pipeline.run_quickstart`` runs them in order
(``pipeline.PHASES``) and the benchmarks call them one by one. ``ppo_overrides`` is the config
the ``ppo`` phase trains with and both evaluations roll out with.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from agentrl.data.qa import read_question_records, write_rows
from agentrl.data.world import World, generate_world, write_world
from agentrl.quickstart.demonstrations import (
    Demonstrations,
    hop_rows,
    pick_sft_questions,
    record_demonstrations,
    tokenizer_texts,
)
from agentrl.quickstart.dialects import TAGS, Dialect
from agentrl.quickstart.evaluation import em_by_question, evaluate_records, summarize, summary_line
from agentrl.quickstart.profiles import Profile

__all__ = [
    "HeldoutEvaluation",
    "SFTOutcome",
    "WorldFiles",
    "build_index",
    "build_model",
    "evaluate_heldout",
    "make_world",
    "ppo_overrides",
    "record_sft_data",
    "start_retriever",
    "train_ppo",
    "train_sft",
]


@dataclass(frozen=True)
class WorldFiles:
    """The world's corpus (for the index) and its QA rows with one data_source per hop."""

    corpus: Path
    train: Path
    test: Path


def make_world(out: Path, profile: Profile, seed: int, dialect: Dialect = TAGS) -> tuple[World, WorldFiles]:
    """Phase ``world``: the invented knowledge base, its corpus and its train/test rows."""
    world = generate_world(seed=seed, **profile.world)
    paths = write_world(world, out / "world")
    train_rows = hop_rows(read_question_records(paths["train"]), "train", dialect.instruction)
    test_rows = hop_rows(read_question_records(paths["test"]), "test", dialect.instruction)
    train_file, test_file = (
        write_rows(train_rows, out / "train.jsonl"),
        write_rows(test_rows, out / "test.jsonl"),
    )
    files = WorldFiles(paths["corpus"], train_file, test_file)
    print(f"  {len(world.passages)} passages, {len(train_rows)} train / {len(test_rows)} test questions")
    return world, files


def build_index(corpus: Path, out: Path) -> Path:
    """Phase ``index``: the BM25 index over the corpus."""
    from retriever.build_index import main as build_index_main

    index_dir = out / "index"
    if build_index_main(["--corpus", str(corpus), "--backend", "bm25", "--out", str(index_dir), "--quiet"]):
        raise RuntimeError("building the BM25 index failed (see the message above)")
    return index_dir


def build_model(world: World, profile: Profile, out: Path, seed: int, dialect: Dialect = TAGS) -> Path:
    """Phase ``model``: a BPE tokenizer trained on the world's text and a random tiny LM."""
    from agentrl.models.tiny import build_tiny_causal_lm, train_tokenizer

    texts = tokenizer_texts(world, dialect)
    tokenizer = train_tokenizer(texts, profile.vocab_size, tool_call_tokens=dialect.tool_call_tokens)
    return build_tiny_causal_lm(
        tokenizer,
        out / "model",
        hidden_size=profile.hidden_size,
        layers=profile.layers,
        heads=profile.heads,
        kv_heads=profile.kv_heads,
        intermediate_size=profile.intermediate_size,
        max_position_embeddings=1024,
        seed=seed,
    )


def start_retriever(server: Any) -> str:
    """Phase ``retriever``: the retriever server, up and ready; returns its ``/retrieve`` URL."""
    server.start()
    print(f"  serving {server.retrieve_url}")
    return server.retrieve_url


def record_sft_data(
    world: World,
    model_dir: Path,
    config: Any,
    profile: Profile,
    out: Path,
    seed: int,
    dialect: Dialect = TAGS,
) -> Demonstrations:
    """Phase ``sft_data``: oracle and shortcut demonstrations of the picked training questions."""
    questions = pick_sft_questions(world, profile.sft_questions, seed, profile.sft_arithmetic)
    shortcuts = profile.sft_shortcuts_per_demo
    return record_demonstrations(questions, shortcuts, model_dir, config, out, seed, dialect)


@dataclass(frozen=True)
class SFTOutcome:
    """What the ``sft`` phase returns: the warm-started policy, its loss per step, examples trained on."""

    model_dir: Path
    loss: list[float]
    examples: int  # oracle + shortcut demonstrations


def train_sft(model_dir: Path, demos: Demonstrations, profile: Profile, out: Path, seed: int) -> SFTOutcome:
    """Phase ``sft``: stage 1 on the oracle demonstrations alone (the skill), then stage 2 on
    oracle + shortcuts (the habit), each from where the previous one ended."""
    from agentrl.config.schema import OptimConfig
    from agentrl.trainer.sft import SFTConfig, SFTTrainer, load_sft_examples

    examples = load_sft_examples(demos.path)
    # Stage 1 on the oracle demonstrations alone (shortcuts are dumped with reward 0): copying names
    # out of a passage emerges late in a 2-layer model and the shortcuts' answers would compete with it.
    stages = [(load_sft_examples(demos.path, min_reward=1.0), profile.sft_skill_steps, out / "sft_skill")]
    if demos.shortcut and profile.sft_habit_steps:
        stages.append((examples, profile.sft_habit_steps, out / "sft_model"))
    optim = OptimConfig(
        lr=profile.sft_lr, warmup_ratio=0.05, lr_schedule="cosine", min_lr_ratio=profile.sft_min_lr_ratio
    )
    history: list[dict[str, float]] = []
    start_dir = model_dir
    for stage_examples, steps, stage_dir in stages:
        epochs = math.ceil(steps * profile.sft_batch_size / len(stage_examples))
        sft = SFTTrainer(
            start_dir,
            SFTConfig(
                epochs=epochs, max_steps=steps, batch_size=profile.sft_batch_size, seed=seed, optim=optim
            ),
        )
        history += sft.fit(stage_examples)
        start_dir = sft.save(stage_dir)
        del sft
    return SFTOutcome(start_dir, [m["loss"] for m in history], len(examples))


@dataclass(frozen=True)
class HeldoutEvaluation:
    """What ``eval_sft`` and ``eval_ppo`` return: the summary per kind, each question's EM (to pair)."""

    summary: dict[str, dict[str, float]]
    em: dict[str, tuple[str, float]]  # question id -> (kind, EM)


def evaluate_heldout(
    model_dir: Path, test: Path, config: Any, limit: int | None, seed: int, tools: Sequence[str] = ()
) -> HeldoutEvaluation:
    """Phases ``eval_sft`` and ``eval_ppo``: greedy held-out EM and searches, overall and per kind
    (hop, arithmetic); with ``tools``, each one's calls per question too."""
    records = evaluate_records(model_dir, test, config, limit, seed)
    result = HeldoutEvaluation(summarize(records, tools), em_by_question(records))
    print("  " + summary_line(result.summary))
    return result


def train_ppo(config: Any, sft_dir: Path) -> Path:
    """Phase ``ppo``: the PPO run on Ray with the SFT model as actor, reference and critic
    initialisation; returns the last checkpoint's policy. Ray is shut down when it ends."""
    from agentrl.trainer.supervisor import train_to_policy

    return train_to_policy(replace(config, actor=replace(config.actor, model_path=str(sft_dir))))


def ppo_overrides(
    profile: Profile,
    out: Path,
    model_dir: Path,
    files: WorldFiles,
    url: str,
    user: Sequence[str],
    seed: int,
    dialect: Dialect = TAGS,
) -> list[str]:
    """The PPO config overrides: the profile's, the run's paths, retriever and tools (the dialect's),
    then the user's (which win)."""
    base = profile.ppo | {
        "seed": seed,
        "data.seed": seed,
        "actor.model_path": str(model_dir),
        "data.train_files": f"[{files.train}]",
        "data.val_files": f"[{files.test}]",
        **dialect.rollout_overrides(url),
        "trainer.run_dir": str(out / "ppo"),
        "trainer.val_before_train": True,
    }
    return [f"{k}={v}" for k, v in base.items()] + list(user)
