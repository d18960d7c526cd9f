"""The search-agent workload the rollout benchmarks play: questions, a policy, and its shape.

Real search-agent trajectories are ragged: some answer at once, some search three times, and a
turn's thinking runs from a few tokens to the whole turn budget. A lock-step rollout waits for
the slowest row of every turn, so a workload of identical trajectories would hide exactly the
cost that scheduling is about. Two policies give such a workload:

* a **trained search agent** (``--model DIR``, e.g. the recipe's SFT checkpoint
  ``runs/search_qa/sft/model``) on the Search-R1 prompt: the trajectories are whatever that
  policy really does;
* a **tiny model shaped by demonstrations** (the default, built in seconds): it is fine-tuned on
  demonstrations whose number of searches follows ``search_mix`` and whose thinking is 2 to
  ``max_think_words`` words, so at temperature 1 it samples a mix of turn counts and lengths.
"""

from __future__ import annotations

import argparse
import random
import shutil
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from statistics import median
from typing import Any

from agentrl.data.qa import make_prompt, read_question_records
from benchmarks.common.paths import SHARED_DATA

FALLBACK_QA = [
    ("what is the capital of france", "Paris"),
    ("who wrote pride and prejudice", "Jane Austen"),
    ("when did apollo 11 land on the moon", "1969"),
    ("what is the largest planet in the solar system", "Jupiter"),
]
DATASET_FILES = {"nq": "nq/test.jsonl", "hotpotqa": "hotpotqa/dev.jsonl", "triviaqa": "triviaqa/test.jsonl"}
# Searches per demonstration: mean 1.5, close to what the trained agents here do (1.2-1.5)
DEFAULT_SEARCH_MIX = "0:0.1,1:0.45,2:0.3,3:0.15"
FILLER_TEXT = (
    "i need to find out more about this first and then check the answer against what "
    "the documents say since the question may refer to something else entirely"
)


def parse_search_mix(text: str) -> dict[int, float]:
    """``"0:0.1,1:0.45"`` → ``{0: 0.1, 1: 0.45}``; the weights need not sum to one."""
    mix: dict[int, float] = {}
    for part in text.split(","):
        try:
            k, w = part.split(":")
            mix[int(k)] = float(w)
        except ValueError:
            raise SystemExit(f"--search-mix: expected 'searches:weight,...', got {part!r}") from None
    if not mix or min(mix) < 0 or min(mix.values()) < 0 or sum(mix.values()) <= 0:
        raise SystemExit(f"--search-mix: searches and weights must be >= 0, some weight > 0; got {text!r}")
    return mix


def load_qa(datasets: Sequence[str], limit: int, seed: int) -> list[tuple[str, str, str]]:
    """``limit`` (dataset, question, answer) triples, alternating over ``datasets`` (seeded)."""
    per: list[list[tuple[str, str, str]]] = []
    for name in datasets:
        if name not in DATASET_FILES:
            raise SystemExit(f"--datasets: unknown {name!r}; choose from {sorted(DATASET_FILES)}")
        path = SHARED_DATA / DATASET_FILES[name]
        if not path.is_file():
            continue
        rows = read_question_records(path)
        random.Random(seed).shuffle(rows)
        per.append([(name, r["question"], r["golden_answers"][0]) for r in rows[:limit]])
    if not per:  # no shared data on this machine
        return [("nq", q, a) for q, a in (FALLBACK_QA * (limit // len(FALLBACK_QA) + 1))[:limit]]
    mixed = [row for group in zip(*per, strict=False) for row in group]
    return mixed[:limit]


def _thought(rng: random.Random, question: str, max_words: int) -> str:
    words = question.lower().split() + FILLER_TEXT.split()
    return " ".join(rng.choice(words) for _ in range(rng.randint(2, max_words)))


def demonstration(
    question: str, answer: str, rng: random.Random, mix: dict[int, float], max_think_words: int
) -> str:
    """One trajectory: ``k`` searches (``k`` drawn from ``mix``), thinking of random length."""
    searches = rng.choices(list(mix), weights=list(mix.values()))[0]
    text = ""
    for i in range(searches):
        query = question if i == 0 else f"{answer if rng.random() < 0.5 else question} {i + 1}"
        text += (
            f"<think> {_thought(rng, question, max_think_words)} </think><search> {query} </search>\n\n"
            f'<information>Doc 1(Title: "{answer}") {answer}.</information>\n\n'
        )
    return text + f"<think> {_thought(rng, question, max_think_words)} </think><answer> {answer} </answer>"


def shape_tiny_model(
    model_dir: Path,
    prompts: Sequence[list[int]],
    qa: Sequence[tuple[str, str, str]],
    *,
    steps: int,
    mix: dict[int, float],
    max_think_words: int,
    seed: int,
) -> None:
    """Fine-tune the tiny model at ``model_dir`` on shaped demonstrations with the project's
    ``SFTTrainer`` (loss on the whole demonstration, as if the policy had written all of it)."""
    from agentrl.agent.trajectory import Segment
    from agentrl.config.schema import OptimConfig
    from agentrl.trainer.sft import SFTConfig, SFTExample, SFTTrainer

    config = SFTConfig(
        epochs=steps,
        max_steps=steps,
        batch_size=16,
        micro_batch_size=16,
        seed=seed,
        optim=OptimConfig(lr=3e-3),
    )
    trainer = SFTTrainer(model_dir, config)
    tok = trainer.tokenizer
    rng = random.Random(seed)
    examples = []  # four shapes a question, so the mix is learned rather than the question
    for prompt, (_, q, a) in zip(prompts, qa, strict=True):
        for _ in range(4):
            demo = demonstration(q, a, rng, mix, max_think_words)
            response = tok.encode(demo, add_special_tokens=False) + [tok.eos_token_id]
            examples.append(SFTExample(list(prompt), response, [Segment.MODEL] * len(response)))
    history = trainer.fit(examples)
    print(f"  shaping loss {history[0]['loss']:.3f} -> {history[-1]['loss']:.3f}", flush=True)
    trainer.save(model_dir)


def turn_lengths(traj: Any) -> list[int]:
    """Model tokens of each turn: the runs of policy-sampled tokens in the response."""
    from agentrl.agent.trajectory import Segment

    runs: list[int] = []
    previous = None
    for s in traj.segments:
        if s == Segment.MODEL:
            if previous == Segment.MODEL:
                runs[-1] += 1
            else:
                runs.append(1)
        previous = s
    return runs


def describe(trajectories: Sequence[Any]) -> str:
    """The workload's shape in one line: searches per trajectory and model tokens per turn."""
    searches = Counter(t.num_tool_calls for t in trajectories)
    lengths = sorted(n for t in trajectories for n in turn_lengths(t))
    if not lengths:
        return "no model tokens"

    def q(p: float) -> int:
        return lengths[min(len(lengths) - 1, int(p * len(lengths)))]

    hist = ", ".join(f"{k}: {searches[k]}" for k in sorted(searches))
    return (
        f"searches per trajectory {{{hist}}}; model tokens per turn p10 {q(0.1)}, "
        f"median {median(lengths):.0f}, p90 {q(0.9)}, max {lengths[-1]}"
    )


def policy_dir(args: argparse.Namespace, tmp: Path, qa: list) -> Path:
    """The trained agent given with ``--model``, or the tiny model shaped to a ragged workload (from
    the benchmark's ``--size``, ``--search-mix``, ``--max-think-words``, ``--sft-steps``, ``--seed``),
    kept in ``--model-cache`` once shaped and reused from there."""
    if args.model:
        return Path(args.model)
    from transformers import AutoTokenizer

    from agentrl.models.tiny import DEFAULT_TEXTS, make_tiny_model_dir

    cached = Path(args.model_cache) if args.model_cache else None
    if cached is not None and (cached / "config.json").is_file():
        print(f"reusing the shaped tiny model in {cached}")
        return cached
    model_dir = tmp / "model"  # shaped here, and cached only once shaping is done
    mix = parse_search_mix(args.search_mix)
    rng = random.Random(args.seed)
    texts = list(DEFAULT_TEXTS) + [make_prompt(q) for _, q, _ in qa]
    texts += [demonstration(q, a, rng, mix, args.max_think_words) for _, q, a in qa]
    make_tiny_model_dir(model_dir, texts=texts, size=args.size, seed=args.seed)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    prompts = [prompt_ids(tokenizer, q) for _, q, _ in qa]
    t0 = time.perf_counter()
    shape_tiny_model(
        model_dir,
        prompts,
        qa,
        steps=args.sft_steps,
        mix=mix,
        max_think_words=args.max_think_words,
        seed=args.seed,
    )
    print(f"shaping: {args.sft_steps} steps in {time.perf_counter() - t0:.1f} s")
    if cached is None:
        return model_dir
    shutil.copytree(model_dir, cached, dirs_exist_ok=True)
    return cached


def prompt_ids(tokenizer: Any, question: str) -> list[int]:
    """The Search-R1 prompt of ``question`` as the rollout encodes it."""
    from agentrl.agent.prompts import encode_messages

    return encode_messages(tokenizer, [{"role": "user", "content": make_prompt(question)}])
