"""The quickstart's data: QA rows per hop, the tokenizer's texts, and the SFT demonstrations.

The demonstrations are oracle solutions of some training questions plus "shortcuts" that
answer at once with the name the question mentions, played through the *real* rollout
(scripted model turns, real retriever, real observation tokens) by
``agentrl.agent.demonstrations.record_scripted_trajectories`` and dumped as trajectories.
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentrl.data.qa import make_prompt, to_training_rows, write_rows
from agentrl.data.world import Question, Turn, World, guess_trajectory, oracle_trajectory

__all__ = [
    "DATA_SOURCE",
    "Demonstrations",
    "demonstration_rounds",
    "hop_label",
    "hop_rows",
    "pick_sft_questions",
    "record_demonstrations",
    "tokenizer_texts",
]

DATA_SOURCE = "synthetic_world_{hop}hop"  # one data_source per hop, so validation reports EM per hop
_HOP_SOURCE = re.compile(re.escape(DATA_SOURCE).replace(re.escape("{hop}"), r"(\d+)"))


def hop_rows(records: list[dict[str, Any]], split: str) -> list[dict[str, Any]]:
    """Training rows whose ``data_source`` names the hop and whose ``extra_info`` carries it."""
    rows = to_training_rows([r | {"dataset": DATA_SOURCE.format(hop=r["hop"])} for r in records], split)
    for row, record in zip(rows, records, strict=True):
        row["extra_info"] = row["extra_info"] | {"hop": int(record["hop"]), "id": str(record["id"])}
    return rows


def hop_label(data_source: str) -> str:
    """``hop1`` for ``synthetic_world_1hop`` (the key of a hop in the evaluation's summary)."""
    match = _HOP_SOURCE.fullmatch(data_source)
    return f"hop{int(match.group(1))}" if match else data_source


def pick_sft_questions(world: World, per_hop: dict[int, int], seed: int) -> list[Question]:
    """A seeded choice of ``per_hop[h]`` training questions of each hop (fewer if there are fewer)."""
    rng = random.Random(seed)
    chosen = []
    for hop, count in sorted(per_hop.items()):
        pool = [q for q in world.train_questions if q.hop == hop]
        chosen += rng.sample(pool, min(count, len(pool)))
    return chosen


def demonstration_rounds(
    questions: Sequence[Question], shortcuts_per_demo: float, seed: int
) -> list[list[tuple[Question, list[Turn]]]]:
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
        rounds.append(
            [
                (q, guess_trajectory(q, q.subject, searches=0))
                for q, count in zip(questions, counts, strict=True)
                if count > r and q.subject not in q.golden_answers
            ]
        )
    return rounds


def tokenizer_texts(world: World) -> list[str]:
    """What the BPE learns merges from: passages, prompts, oracle turns of the training split
    (never the test split's questions)."""
    texts = [p["contents"] for p in world.passages]
    for q in world.train_questions:
        texts.append(make_prompt(q.question))
        texts += [t.text for t in oracle_trajectory(q)]
    return texts


@dataclass(frozen=True)
class Demonstrations:
    """What the ``sft_data`` phase wrote: the dump (oracles with reward 1, shortcuts with 0) and counts."""

    path: Path
    oracle: int
    shortcut: int
    dropped: int  # scripts cut by a length limit


def _prompts_of(questions: Sequence[Question], tokenizer: Any, config: Any, out: Path) -> dict[str, Any]:
    """Each question's tokenized training prompt, by question id (every one must fit the prompt budget)."""
    from agentrl.trainer.dataset import build_prompt_dataset

    rows_file = write_rows(hop_rows([q.to_json() for q in questions], "sft"), out / "sft_questions.jsonl")
    prompts = build_prompt_dataset([str(rows_file)], tokenizer, config.data.max_prompt_length, "sft").prompts
    if len(prompts) != len(questions):
        raise ValueError(f"{len(questions) - len(prompts)} SFT prompts exceed data.max_prompt_length")
    return {q.id: p for q, p in zip(questions, prompts, strict=True)}


def record_demonstrations(
    questions: Sequence[Question],
    shortcuts_per_demo: float,
    model_dir: Path,
    config: Any,
    out: Path,
    seed: int,
) -> Demonstrations:
    """Play every round of :func:`demonstration_rounds` through the real rollout (the retriever of
    ``config``'s search tool must be up) into ``out/sft_data.jsonl``."""
    from agentrl.agent.demonstrations import record_scripted_trajectories
    from agentrl.agent.dump import dump_trajectories
    from agentrl.models.loading import load_tokenizer

    tokenizer = load_tokenizer(model_dir)
    prompt_of = _prompts_of(questions, tokenizer, config, out)
    sft_file = out / "sft_data.jsonl"
    sft_file.unlink(missing_ok=True)
    kept = {"oracle": 0, "shortcut": 0}
    dropped = 0
    for number, scripts in enumerate(demonstration_rounds(questions, shortcuts_per_demo, seed)):
        complete, incomplete = record_scripted_trajectories(
            [prompt_of[q.id] for q, _ in scripts],
            [[t.text for t in turns] for _, turns in scripts],
            tokenizer,
            config.actor.rollout,
            max_prompt_length=config.data.max_prompt_length,
            max_response_length=config.data.max_response_length,
        )
        dump_trajectories(complete, sft_file, tokenizer, rewards=[float(number == 0)] * len(complete))
        kept["oracle" if number == 0 else "shortcut"] += len(complete)
        dropped += len(incomplete)
    print(
        f"  {kept['oracle']} oracle + {kept['shortcut']} shortcut demonstrations "
        f"({dropped} dropped: cut by a length limit)"
    )
    if not kept["oracle"]:
        raise RuntimeError("no complete oracle demonstration: raise max_tokens_per_turn / max_obs_length")
    return Demonstrations(sft_file, kept["oracle"], kept["shortcut"], dropped)
