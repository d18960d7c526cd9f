"""The CPU quickstart: watch a tiny policy learn to search, end to end, in minutes.

    python -m agentrl.quickstart [--out runs/quickstart] [--short] [--seed 0] [key=value ...]

Phases (each timed, each printed as it starts and ends):

1. **world**     an invented knowledge base (``agentrl.data.world``): corpus + 1-/2-hop questions
2. **index**     BM25 index over the corpus (``retriever.build_index``)
3. **retriever** the retriever server as a subprocess (``retriever.process.RetrieverProcess``)
4. **model**     a BPE tokenizer trained on the world's text and a random tiny Qwen2 LM
5. **sft data**  oracle solutions of some training questions, plus "shortcut" ones that
   answer at once with the name the question mentions, played through the *real* rollout
   (scripted turns, real retriever, real observation tokens)
6. **sft**       the warm start (``agentrl.trainer.sft``) in two stages: the oracle
   demonstrations teach the skill (search, read, copy the answer out of the passage), then
   a short pass over oracle + shortcuts teaches the habit of not searching, which PPO has
   to unlearn from reward alone
7. **eval**      greedy held-out EM after SFT, per hop, and searches per question
8. **ppo**       PPO (GAE, critic, KL in the reward) on Ray with the SFT model as actor,
   reference and critic initialisation (``agentrl.trainer.ppo_trainer``)
9. **eval**      the same evaluation after PPO
10. **report**   ``report.md`` with the before/after table, the reward and EM curves (PNG)
    and the wall time of every phase; ``report.json`` with the same numbers

Extra ``key=value`` arguments override the PPO config (same keys as
``python -m agentrl.trainer.main``), e.g. ``algorithm.adv_estimator=grpo actor.rollout.n=4``.
``--short`` is the same code path on a smaller world with a few steps (the test suite
runs it). The retriever is stopped and Ray shut down whatever happens.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import shutil
import signal
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from agentrl.data.qa import make_prompt, read_question_records, to_training_rows, write_rows
from agentrl.data.world import (
    Question,
    Turn,
    World,
    generate_world,
    guess_trajectory,
    oracle_trajectory,
    write_world,
)

__all__ = ["FULL", "SHORT", "Profile", "QuickstartResult", "evaluate_policy", "main", "run_quickstart"]

DATA_SOURCE = "synthetic_world_{hop}hop"  # one data_source per hop, so validation reports EM per hop


@dataclass(frozen=True)
class Profile:
    """Everything the quickstart's size and schedule depend on; ``FULL`` and ``SHORT`` below."""

    name: str
    world: dict[str, Any]  # generate_world keyword arguments (seed excluded)
    vocab_size: int
    hidden_size: int
    layers: int
    heads: int
    kv_heads: int
    intermediate_size: int
    sft_questions: dict[int, int]  # hop -> how many training questions get an oracle demonstration
    sft_skill_steps: int  # stage 1 of SFT: steps on the oracle demonstrations alone
    sft_batch_size: int
    sft_lr: float
    sft_min_lr_ratio: float  # the cosine schedule's floor; 0.1 left the model short of copying answers
    # Shortcut demonstrations (answer from "memory", no search) per oracle one: the warm start
    # then searches only some of the time, like a base model that does not trust its tool.
    sft_shortcuts_per_demo: float
    sft_habit_steps: int  # stage 2 of SFT: steps on oracle + shortcut demonstrations together
    eval_limit: int | None  # held-out questions in the before/after evaluation (None: all)
    ppo: dict[str, Any] = field(default_factory=dict)  # PPO config overrides (user overrides win)


_COMMON_PPO: dict[str, Any] = {
    "data.max_prompt_length": 192,
    "data.max_response_length": 320,
    "actor.rollout.max_turns": 2,
    "actor.rollout.max_tokens_per_turn": 40,
    "actor.rollout.max_obs_length": 72,
    "actor.rollout.schedule": "lockstep",
    "actor.optim.warmup_ratio": 0.0,
    "critic.optim.warmup_ratio": 0.0,
    "trainer.save_freq": 0,
    "trainer.logger": "[console,jsonl]",
    "trainer.resume_mode": "disable",
    "trainer.experiment_name": "quickstart",
}

FULL = Profile(
    name="full",
    world={"num_countries": 24, "num_people": 120, "num_companies": 40, "num_distractors": 80},
    vocab_size=2048,
    hidden_size=128,
    layers=2,
    heads=4,
    kv_heads=2,
    intermediate_size=256,
    sft_questions={1: 300, 2: 250},  # 550 of the 726 training questions
    sft_skill_steps=560,  # copying out of the passage emerges after ~250 steps (docs/quickstart.md)
    sft_batch_size=16,
    sft_lr=3e-3,
    sft_min_lr_ratio=0.5,
    sft_shortcuts_per_demo=1.5,  # the warm start searches ~40% of the time
    sft_habit_steps=150,
    eval_limit=None,
    ppo=_COMMON_PPO
    | {
        "data.train_batch_size": 16,
        "data.val_batch_size": 96,
        "data.val_limit": 96,
        "actor.rollout.n": 4,
        "actor.rollout.temperature": 1.0,
        "actor.rollout.max_obs_length": 100,
        "actor.update.mini_batch_size": 64,
        "actor.update.micro_batch_size": 32,
        "critic.update.mini_batch_size": 64,
        "critic.update.micro_batch_size": 32,
        "actor.optim.lr": 2e-4,
        "critic.optim.lr": 1e-3,
        "actor.entropy_coeff": 0.0,
        "algorithm.kl_ctrl.kl_coef": 0.02,
        "trainer.total_steps": 40,
        "trainer.test_freq": 5,
    },
)

SHORT = Profile(
    name="short",
    world={"num_countries": 6, "num_people": 12, "num_companies": 6, "num_distractors": 6},
    vocab_size=2048,  # an upper bound: the small world's text yields fewer merges
    hidden_size=64,
    layers=2,
    heads=2,
    kv_heads=1,
    intermediate_size=128,
    sft_questions={1: 12, 2: 4},
    sft_skill_steps=2,
    sft_batch_size=8,
    sft_lr=1e-3,
    sft_min_lr_ratio=0.5,
    sft_shortcuts_per_demo=1.5,
    sft_habit_steps=2,
    eval_limit=8,
    ppo=_COMMON_PPO
    | {
        "data.train_batch_size": 4,
        "data.val_batch_size": 8,
        "data.val_limit": 4,
        "data.max_response_length": 200,
        "actor.rollout.n": 2,
        "actor.update.mini_batch_size": 8,
        "actor.update.micro_batch_size": 8,
        "critic.update.mini_batch_size": 8,
        "critic.update.micro_batch_size": 8,
        "actor.optim.lr": 1e-4,
        "trainer.total_steps": 2,
        "trainer.test_freq": 1,
    },
)

PROFILES = {p.name: p for p in (FULL, SHORT)}


# --- progress and timing ------------------------------------------------------------------


class PhaseClock:
    """Prints ``[k/N] phase ...`` as each phase starts and its wall time when it ends."""

    def __init__(self, phases: Sequence[str], stream: Any = None) -> None:
        self.phases = list(phases)
        self.seconds: dict[str, float] = {}
        self.stream = stream or sys.stdout
        self._start = time.perf_counter()

    @contextmanager
    def phase(self, name: str, what: str) -> Iterator[None]:
        if name not in self.phases:
            raise KeyError(f"unknown phase {name!r}; phases are {self.phases}")
        k = self.phases.index(name) + 1
        print(f"\n[{k}/{len(self.phases)}] {name}: {what} ...", file=self.stream, flush=True)
        start = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - start
            print(f"[{k}/{len(self.phases)}] {name}: {self.seconds[name]:.1f} s", file=self.stream, flush=True)

    @property
    def total(self) -> float:
        return time.perf_counter() - self._start


PHASES = ("world", "index", "model", "retriever", "sft_data", "sft", "eval_sft", "ppo", "eval_ppo", "report")


# --- data ---------------------------------------------------------------------------------


def _hop_rows(records: list[dict[str, Any]], split: str) -> list[dict[str, Any]]:
    """Training rows whose ``data_source`` names the hop and whose ``extra_info`` carries it."""
    rows = to_training_rows([r | {"dataset": DATA_SOURCE.format(hop=r["hop"])} for r in records], split)
    for row, record in zip(rows, records, strict=True):
        row["extra_info"] = row["extra_info"] | {"hop": int(record["hop"]), "id": str(record["id"])}
    return rows


def pick_sft_questions(world: World, per_hop: dict[int, int], seed: int) -> list[Any]:
    """A seeded choice of ``per_hop[h]`` training questions of each hop (fewer if there are fewer)."""
    rng = random.Random(seed)
    chosen = []
    for hop, count in sorted(per_hop.items()):
        pool = [q for q in world.train_questions if q.hop == hop]
        chosen += rng.sample(pool, min(count, len(pool)))
    return chosen


def demonstration_rounds(questions: Sequence[Question], shortcuts_per_demo: float,
                         seed: int) -> list[list[tuple[Question, list[Turn]]]]:  # fmt: skip
    """The SFT scripts, in rounds of distinct questions (the scripted rollout takes each prompt once).

    Round 0 is the oracle solution of every question; the later rounds hold shortcut
    demonstrations (:func:`guess_trajectory`), about ``shortcuts_per_demo`` per question,
    that answer at once, without a search, with the name the question itself mentions (a
    lazy guess that is always wrong). The guess copies a name out of the context, as the
    oracle's queries and answers do; a guess made up from memory (a random entity) taught
    a 2-layer model to make names up after a search too, and it stopped copying them out
    of the passage. Shortcuts stop before the first search only, so RL's choice sits at
    one point of the response.
    """
    rng = random.Random(seed + 1)
    whole, part = int(shortcuts_per_demo), shortcuts_per_demo - int(shortcuts_per_demo)
    counts = [whole + (rng.random() < part) for _ in questions]
    rounds = [[(q, oracle_trajectory(q)) for q in questions]]
    for r in range(max(counts, default=0)):
        rounds.append([(q, guess_trajectory(q, q.subject, searches=0))
                       for q, count in zip(questions, counts, strict=True)
                       if count > r and q.subject not in q.golden_answers])  # fmt: skip
    return rounds


def tokenizer_texts(world: World) -> list[str]:
    """What the BPE learns merges from: passages, prompts, oracle turns of the training split
    (never the test split's questions)."""
    texts = [p["contents"] for p in world.passages]
    for q in world.train_questions:
        texts.append(make_prompt(q.question))
        texts += [t.text for t in oracle_trajectory(q)]
    return texts


# --- evaluation -----------------------------------------------------------------------------


def evaluate_policy(model_dir: str | Path, rows_file: str | Path, config: Any, limit: int | None = None,
                    seed: int = 0) -> dict[str, Any]:  # fmt: skip
    """Greedy rollouts of the policy in ``model_dir`` on the QA rows of ``rows_file``.

    Uses the PPO config's rollout settings and tools (so it evaluates exactly what PPO
    trains and validates) and reports EM, answer rate and searches per question, overall
    and per hop (``extra_info.hop``). ``limit`` takes a seeded subset.
    """
    import numpy as np
    import torch

    from agentrl.agent.generation import LLMGenerationManager
    from agentrl.engines import build_engine
    from agentrl.engines.base import SamplingParams
    from agentrl.models.loading import load_causal_lm, load_tokenizer
    from agentrl.rewards.scorers import answer_metrics, golds_from_ground_truth
    from agentrl.trainer.dataset import build_prompt_dataset

    tokenizer = load_tokenizer(model_dir)
    model = load_causal_lm(model_dir).eval()
    prompts = build_prompt_dataset([str(rows_file)], tokenizer, config.data.max_prompt_length, "evaluation").prompts
    if limit is not None and limit < len(prompts):
        picked = sorted(np.random.default_rng(seed).choice(len(prompts), limit, replace=False))
        prompts = [prompts[i] for i in picked]
    # A failing search must stop the evaluation, not turn into error observations that
    # quietly lower EM (an evaluation needs the retriever that training had).
    rollout = replace(config.actor.rollout, tool_error_policy="raise")
    engine = build_engine("hf", model=model, tokenizer=tokenizer, max_batch_size=rollout.max_batch_size)
    manager = LLMGenerationManager(engine, tokenizer, rollout, max_prompt_length=config.data.max_prompt_length,
                                   max_response_length=config.data.max_response_length)  # fmt: skip
    params = SamplingParams(max_new_tokens=rollout.max_tokens_per_turn, greedy=True, seed=seed)
    per_hop: dict[int, dict[str, list[float]]] = {}
    size = config.data.val_batch_size
    with torch.no_grad():
        for start in range(0, len(prompts), size):
            for traj in manager.run(prompts[start : start + size], params).trajectories:
                text = tokenizer.decode(traj.response_ids, skip_special_tokens=False)
                em = answer_metrics(text, traj.answer, golds_from_ground_truth(traj.prompt.ground_truth))["em"]
                hop = int(traj.prompt.extra_info.get("hop", 0))
                bucket = per_hop.setdefault(hop, {"em": [], "searches": [], "finished": []})
                bucket["em"].append(float(em))
                bucket["searches"].append(float(traj.tool_calls.get("search", 0)))
                bucket["finished"].append(float(traj.finished))
    engine.shutdown()

    def summary(values: dict[str, list[float]]) -> dict[str, float]:
        return {"em": float(np.mean(values["em"])), "searches": float(np.mean(values["searches"])),
                "finished": float(np.mean(values["finished"])), "n": float(len(values["em"]))}  # fmt: skip

    everything = {k: [v for b in per_hop.values() for v in b[k]] for k in ("em", "searches", "finished")}
    return {"all": summary(everything), **{f"hop{h}": summary(b) for h, b in sorted(per_hop.items())}}


# --- the run --------------------------------------------------------------------------------


@dataclass
class QuickstartResult:
    out_dir: Path
    report: Path
    before: dict[str, Any]
    after: dict[str, Any]
    seconds: dict[str, float]
    total_seconds: float
    sft_examples: int
    sft_loss: list[float]
    metrics: list[dict[str, Any]]
    sft_shortcut_examples: int = 0  # of sft_examples, those that answer without finishing the search


def _ppo_overrides(profile: Profile, out: Path, model_dir: Path, train: Path, val: Path, url: str,
                   user: Sequence[str], seed: int) -> list[str]:  # fmt: skip
    tools = "[{class_path: agentrl.agent.tools.search.SearchTool, options: {url: '" + url + "', topk: 1}}]"
    base = profile.ppo | {
        "seed": seed,
        "data.seed": seed,
        "actor.model_path": str(model_dir),
        "data.train_files": f"[{train}]",
        "data.val_files": f"[{val}]",
        "actor.rollout.tools": tools,
        "trainer.run_dir": str(out / "ppo"),
        "trainer.val_before_train": True,
    }
    return [f"{k}={v}" for k, v in base.items()] + list(user)


def run_quickstart(out_dir: str | Path = "runs/quickstart", profile: Profile = FULL, seed: int = 0,
                   overrides: Sequence[str] = (), preset: str = "ppo") -> QuickstartResult:  # fmt: skip
    """Run every phase (module docstring) and write ``report.md``; returns the numbers."""
    import ray

    from agentrl.agent.dump import dump_trajectories
    from agentrl.config import load_config
    from agentrl.models.loading import load_tokenizer
    from agentrl.models.tiny import build_tiny_causal_lm, train_tokenizer
    from agentrl.trainer.dataset import build_prompt_dataset
    from agentrl.trainer.ppo_trainer import PPOTrainer
    from agentrl.trainer.sft import (
        SFTConfig,
        SFTExample,
        SFTTrainer,
        load_sft_examples,
        record_scripted_trajectories,
    )
    from retriever.build_index import main as build_index
    from retriever.process import RetrieverProcess

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    # Ray workers run one role at a time (the controller is sequential), so each may use every core.
    os.environ.setdefault("AGENTRL_TORCH_THREADS", str(os.cpu_count() or 1))
    out = Path(out_dir)
    for stale in ("ppo", "sft_skill", "sft_model", "model", "index"):  # a previous run must not be resumed or mixed in
        shutil.rmtree(out / stale, ignore_errors=True)
    out.mkdir(parents=True, exist_ok=True)
    clock = PhaseClock(PHASES)
    with clock.phase("world", "generating the invented world"):
        world = generate_world(seed=seed, **profile.world)
        paths = write_world(world, out / "world")
        train_rows = _hop_rows(read_question_records(paths["train"]), "train")
        test_rows = _hop_rows(read_question_records(paths["test"]), "test")
        train_file, test_file = write_rows(train_rows, out / "train.jsonl"), write_rows(test_rows, out / "test.jsonl")
        print(f"  {len(world.passages)} passages, {len(train_rows)} train / {len(test_rows)} test questions")

    with clock.phase("index", "building the BM25 index"):
        if build_index(["--corpus", str(paths["corpus"]), "--backend", "bm25", "--out", str(out / "index"), "--quiet"]):
            raise RuntimeError("building the BM25 index failed (see the message above)")

    with clock.phase("model", "training the tokenizer and building a random tiny LM"):
        tokenizer = train_tokenizer(tokenizer_texts(world), profile.vocab_size)
        model_dir = build_tiny_causal_lm(
            tokenizer, out / "model", hidden_size=profile.hidden_size, layers=profile.layers, heads=profile.heads,
            kv_heads=profile.kv_heads, intermediate_size=profile.intermediate_size,
            max_position_embeddings=1024, seed=seed,
        )  # fmt: skip

    server = RetrieverProcess(out / "index", log_path=out / "retriever.log")
    # Checked in full before the server starts or anything trains: a bad override fails here, by name.
    config = load_config(preset, _ppo_overrides(profile, out, model_dir, train_file, test_file, server.retrieve_url,
                                                overrides, seed))  # fmt: skip
    try:
        with clock.phase("retriever", "starting the retriever server"):
            server.start()
            print(f"  serving {server.retrieve_url}")

        with clock.phase("sft_data", "playing oracle solutions through the real rollout"):
            tokenizer = load_tokenizer(model_dir)
            questions = pick_sft_questions(world, profile.sft_questions, seed)
            sft_rows_file = write_rows(_hop_rows([q.to_json() for q in questions], "sft"), out / "sft_questions.jsonl")
            prompts = build_prompt_dataset([str(sft_rows_file)], tokenizer, config.data.max_prompt_length, "sft").prompts
            if len(prompts) != len(questions):
                raise ValueError(f"{len(questions) - len(prompts)} SFT prompts exceed data.max_prompt_length")
            prompt_of = {q.id: p for q, p in zip(questions, prompts, strict=True)}
            sft_file = out / "sft_data.jsonl"
            sft_file.unlink(missing_ok=True)
            kept = {"oracle": 0, "shortcut": 0}
            dropped = 0
            for number, scripts in enumerate(demonstration_rounds(questions, profile.sft_shortcuts_per_demo, seed)):
                complete, incomplete = record_scripted_trajectories(
                    [prompt_of[q.id] for q, _ in scripts], [[t.text for t in turns] for _, turns in scripts],
                    tokenizer, config.actor.rollout, max_prompt_length=config.data.max_prompt_length,
                    max_response_length=config.data.max_response_length,
                )  # fmt: skip
                kind = "oracle" if number == 0 else "shortcut"
                dump_trajectories(complete, sft_file, tokenizer, rewards=[float(number == 0)] * len(complete))
                kept[kind] += len(complete)
                dropped += len(incomplete)
            print(f"  {kept['oracle']} oracle + {kept['shortcut']} shortcut demonstrations "
                  f"({dropped} dropped: cut by a length limit)")  # fmt: skip
            if not kept["oracle"]:
                raise RuntimeError("no complete oracle demonstration: raise max_tokens_per_turn / max_obs_length")

        with clock.phase("sft", "supervised warm start: the skill, then the shortcut habit"):
            examples: list[SFTExample] = load_sft_examples(sft_file)
            oracle_examples = load_sft_examples(sft_file, min_reward=1.0)  # shortcuts are dumped with reward 0
            # Stage 1 on the oracle demonstrations alone: copying names out of a passage
            # emerges late in a 2-layer model and the shortcuts' answers would compete with it.
            sft_history = []
            stages = [(oracle_examples, profile.sft_skill_steps, out / "sft_skill")]
            if kept["shortcut"] and profile.sft_habit_steps:
                stages.append((examples, profile.sft_habit_steps, out / "sft_model"))
            start_dir = model_dir
            for stage_examples, steps, stage_dir in stages:
                epochs = math.ceil(steps * profile.sft_batch_size / len(stage_examples))
                sft = SFTTrainer(start_dir, SFTConfig(epochs=epochs, max_steps=steps,
                                                      batch_size=profile.sft_batch_size, seed=seed,
                                                      optim=_sft_optim(profile.sft_lr, profile.sft_min_lr_ratio)))  # fmt: skip
                sft_history += sft.fit(stage_examples)
                start_dir = sft.save(stage_dir)
                del sft
            sft_dir = start_dir

        with clock.phase("eval_sft", "held-out evaluation after SFT"):
            before = evaluate_policy(sft_dir, test_file, config, profile.eval_limit, seed)
            print("  " + _summary_line(before))

        with clock.phase("ppo", f"{config.algorithm.adv_estimator} on Ray from the SFT model"):
            config.actor.model_path = str(sft_dir)
            trainer = PPOTrainer(config)
            try:
                trainer.fit()
                final = trainer.checkpoints.latest()
            finally:
                trainer.shutdown()
                if ray.is_initialized():
                    ray.shutdown()
            if final is None:
                raise RuntimeError("PPO finished without a checkpoint to evaluate")
            ppo_dir = final / "actor"

        with clock.phase("eval_ppo", "held-out evaluation after PPO"):
            after = evaluate_policy(ppo_dir, test_file, config, profile.eval_limit, seed)
            print("  " + _summary_line(after))
    finally:
        server.stop()

    with clock.phase("report", "writing report.md and plots"):
        metrics = [json.loads(line) for line in (out / "ppo" / "metrics.jsonl").read_text().splitlines() if line]
        result = QuickstartResult(out, out / "report.md", before, after, clock.seconds, 0.0, len(examples),
                                  [m["loss"] for m in sft_history], metrics, kept["shortcut"])  # fmt: skip
        result.total_seconds = clock.total
        write_report(result, profile, config)
    result.seconds = dict(clock.seconds)
    result.total_seconds = clock.total
    write_report(result, profile, config)  # again, so the report phase's own time is in it
    print(f"\nreport: {result.report}  (total {result.total_seconds / 60:.1f} min)")
    return result


def _sft_optim(lr: float, min_lr_ratio: float) -> Any:
    from agentrl.config.schema import OptimConfig

    return OptimConfig(lr=lr, warmup_ratio=0.05, lr_schedule="cosine", min_lr_ratio=min_lr_ratio)


def _summary_line(result: dict[str, Any]) -> str:
    hops = [k for k in result if k.startswith("hop")]
    parts = [f"EM {result['all']['em']:.3f}"] + [f"{h} EM {result[h]['em']:.3f}" for h in hops]
    return ", ".join(parts) + f", searches/question {result['all']['searches']:.2f}"


# --- report ---------------------------------------------------------------------------------


def _plot(path: Path, series: dict[str, tuple[list[float], list[float]]], title: str, ylabel: str) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5), dpi=100)
    for label, (xs, ys) in series.items():
        if xs:
            ax.plot(xs, ys, marker="o", markersize=3, label=label)
    ax.set_xlabel("PPO step")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def _series(metrics: list[dict[str, Any]], key: str) -> tuple[list[float], list[float]]:
    rows = [(m["step"], m[key]) for m in metrics if key in m and isinstance(m[key], (int, float))]
    return [float(s) for s, _ in rows], [float(v) for _, v in rows]


def _load() -> str:
    """The 1/5/15-minute load averages, so a reader can judge the wall times."""
    try:
        return "/".join(f"{x:.1f}" for x in os.getloadavg())
    except OSError:
        return "n/a"


def write_report(result: QuickstartResult, profile: Profile, config: Any) -> Path:
    """``report.md`` (table, plots, timings), ``report.json``, ``reward.png``, ``em.png``."""
    out = result.out_dir
    reward_png = _plot(out / "reward.png", {"mean reward (training rollouts)": _series(result.metrics, "reward/score/mean")},
                       "Reward during PPO", "reward")  # fmt: skip
    em_series = {"held-out EM (all)": _series(result.metrics, "val/all/em")}
    for hop in (1, 2):
        em_series[f"{hop}-hop"] = _series(result.metrics, f"val/{DATA_SOURCE.format(hop=hop)}/em")
    val_n = config.data.val_limit or "all"
    em_png = _plot(out / "em.png", em_series, f"Greedy held-out EM during PPO ({val_n} questions)", "EM")

    def row(label: str, key: str) -> str:
        b, a = result.before.get(key), result.after.get(key)
        if b is None or a is None:
            return ""
        return (f"| {label} | {int(b['n'])} | {b['em']:.3f} | {a['em']:.3f} | {a['em'] - b['em']:+.3f} "
                f"| {b['searches']:.2f} | {a['searches']:.2f} |")  # fmt: skip

    table = "\n".join(filter(None, [
        "| questions | n | EM after SFT | EM after PPO | Δ EM | searches/q after SFT | searches/q after PPO |",
        "|---|---:|---:|---:|---:|---:|---:|",
        row("all held-out", "all"), row("single-hop", "hop1"), row("two-hop", "hop2"),
    ]))  # fmt: skip
    timing = "\n".join(["| phase | wall time (s) |", "|---|---:|"]
                       + [f"| {name} | {sec:.1f} |" for name, sec in result.seconds.items()]
                       + [f"| **total** | **{result.total_seconds:.1f}** |"])  # fmt: skip
    steps = int(result.metrics[-1]["step"]) if result.metrics else 0
    text = f"""# agentrl quickstart report

Profile `{profile.name}`, seed {config.seed}, estimator `{config.algorithm.adv_estimator}`,
{steps} PPO steps of {config.data.train_batch_size} questions × n={config.actor.rollout.n}, on
{os.cpu_count()} CPU core(s), load average {_load()} when the report was written (other jobs share the
cores: wall times grow with the load). Greedy decoding on held-out questions the policy never trained on.

{table}

SFT warm start: {profile.sft_skill_steps} steps on the {result.sft_examples - result.sft_shortcut_examples} oracle
demonstrations (the skill: search, read, copy the answer), then {profile.sft_habit_steps} steps on those plus
{result.sft_shortcut_examples} shortcuts that answer at once with the name the question mentions (the habit
PPO has to unlearn: the SFT model searches only some of the time, and greedy decoding not at all);
{len(result.sft_loss)} steps in all, loss {result.sft_loss[0]:.3f} → {result.sft_loss[-1]:.3f}.

![reward](reward.png)

![EM](em.png)

## Wall time per phase

{timing}

Files: `ppo/metrics.jsonl` (every PPO metric per step), `sft_data.jsonl` (the demonstrations,
viewable with `python -m agentrl.agent.viewer`), `sft_model/` and `ppo/checkpoints/` (HF dirs).
"""
    result.report.write_text(text)
    payload = {"profile": asdict(profile), "before": result.before, "after": result.after,
               "seconds": result.seconds, "total_seconds": result.total_seconds,
               "sft_examples": result.sft_examples, "sft_loss": result.sft_loss,
               "plots": [str(reward_png), str(em_png)]}  # fmt: skip
    (out / "report.json").write_text(json.dumps(payload, indent=1, default=str) + "\n")
    return result.report


# --- CLI --------------------------------------------------------------------------------------


def _raise_keyboard_interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m agentrl.quickstart", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    parser.add_argument("--out", default="runs/quickstart", help="output folder (report.md lands here)")
    parser.add_argument("--short", action="store_true", help="tiny world, a few steps: the same code path in ~2 min")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--preset", default="ppo", help="PPO config preset (ppo | grpo | a YAML file)")
    parser.add_argument("overrides", nargs="*", help="PPO config overrides, key=value")
    args = parser.parse_args(argv)
    from agentrl.config.loader import ConfigError

    # A SIGTERM (e.g. from a job runner) unwinds like Ctrl-C, so the finally blocks stop the
    # retriever. Once Ray is up its own SIGTERM handler ends the process instead; the Ray
    # workers go with their driver and the retriever with its parent (PDEATHSIG).
    signal.signal(signal.SIGTERM, _raise_keyboard_interrupt)

    try:
        result = run_quickstart(args.out, SHORT if args.short else FULL, args.seed, args.overrides, args.preset)
    except ConfigError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    finite = all(math.isfinite(v) for r in (result.before, result.after) for h in r.values() for v in h.values())
    return 0 if finite else 1


if __name__ == "__main__":
    sys.exit(main())
