"""The quickstart's data: QA rows per hop, the tokenizer's texts, and the SFT demonstrations.

The demonstrations are oracle solutions of some training questions plus "shortcuts" that
answer at once with the name the question mentions, played through the *real* rollout
(scripted model turns, real retriever, real observation tokens) by
``agentrl.agent.demonstrations.record_scripted_trajectories`` and dumped as trajectories.
They are written in the profile's dialect (``dialects.py``: today's tags, or hermes with
search and calculate); the default is today's, unchanged.
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentrl.data.qa import INSTRUCTION_TEMPLATE, to_training_rows, write_rows
from agentrl.data.world import Question, Turn, World
from agentrl.quickstart.dialects import TAGS, Dialect

__all__ = [
    "DATA_SOURCE",
    "Demonstrations",
    "demonstration_rounds",
    "hop_label",
    "kind_source",
    "hop_rows",
    "pick_sft_questions",
    "record_demonstrations",
    "tokenizer_texts",
]

DATA_SOURCE = "synthetic_world_{hop}hop"  # one data_source per hop, so validation reports EM per hop
ARITHMETIC_SOURCE = "synthetic_world_arithmetic"  # the numbers world's questions that need calculate
_HOP_SOURCE = re.compile(re.escape(DATA_SOURCE).replace(re.escape("{hop}"), r"(\d+)"))


def kind_source(record: dict[str, Any]) -> str:
    """A question record's ``data_source``: its hop's, or the arithmetic questions' own."""
    return (
        ARITHMETIC_SOURCE if record.get("calculation") is not None else DATA_SOURCE.format(hop=record["hop"])
    )


def hop_rows(
    records: list[dict[str, Any]], split: str, instruction: str = INSTRUCTION_TEMPLATE
) -> list[dict[str, Any]]:
    """Training rows whose ``data_source`` names the question's kind (hop, or arithmetic) and whose
    ``extra_info`` carries the hop; ``instruction``: the prompt's (the dialect's)."""
    rows = to_training_rows(
        [r | {"dataset": kind_source(r)} for r in records], split, instruction=instruction
    )
    for row, record in zip(rows, records, strict=True):
        row["extra_info"] = row["extra_info"] | {"hop": int(record["hop"]), "id": str(record["id"])}
    return rows


def hop_label(data_source: str) -> str:
    """``hop1`` for ``synthetic_world_1hop``, ``arithmetic`` for the arithmetic questions (the key of
    a kind in the evaluation's summary)."""
    if data_source == ARITHMETIC_SOURCE:
        return "arithmetic"
    match = _HOP_SOURCE.fullmatch(data_source)
    return f"hop{int(match.group(1))}" if match else data_source


def pick_sft_questions(
    world: World, per_hop: dict[int, int], seed: int, arithmetic: int = 0
) -> list[Question]:
    """A seeded choice of ``per_hop[h]`` training questions of each hop, then ``arithmetic``
    arithmetic ones (fewer if there are fewer); the hops' pools hold no arithmetic question."""
    rng = random.Random(seed)
    chosen = []
    for hop, count in sorted(per_hop.items()):
        pool = [q for q in world.train_questions if q.hop == hop and q.calculation is None]
        chosen += rng.sample(pool, min(count, len(pool)))
    if arithmetic:
        pool = [q for q in world.train_questions if q.calculation is not None]
        chosen += rng.sample(pool, min(arithmetic, len(pool)))
    return chosen


def demonstration_rounds(
    questions: Sequence[Question],
    shortcuts_per_demo: float,
    seed: int,
    dialect: Dialect = TAGS,
    end_of_turn: str = "",
) -> list[list[tuple[Question, list[Turn]]]]:
    """The SFT scripts, in rounds of distinct questions (the scripted rollout takes each prompt once).

    Round 0 is the oracle solution of every question; the later rounds hold shortcut
    demonstrations (:func:`guess_trajectory`), about ``shortcuts_per_demo`` per question,
    that answer at once, without a search, with the name the question itself mentions (a
    lazy guess that is always wrong). The guess copies a name out of the context, as the
    oracle's queries and answers do; a guess made up from memory (a random entity) taught
    a 2-layer model to make names up after a search too, and it stopped copying them out
    of the passage. Shortcuts stop before the first search only, so RL's choice sits at
    one point of the response. The turns are written in ``dialect`` (``end_of_turn`` ends each
    hermes turn).
    """
    rng = random.Random(seed + 1)
    whole, part = int(shortcuts_per_demo), shortcuts_per_demo - int(shortcuts_per_demo)
    counts = [whole + (rng.random() < part) for _ in questions]
    rounds = [[(q, dialect.oracle(q, end_of_turn)) for q in questions]]
    for r in range(max(counts, default=0)):
        rounds.append(
            [
                (q, dialect.guess(q, q.subject, end_of_turn))
                for q, count in zip(questions, counts, strict=True)
                if count > r and q.subject not in q.golden_answers
            ]
        )
    return rounds


def tokenizer_texts(world: World, dialect: Dialect = TAGS) -> list[str]:
    """What the BPE learns merges from: passages, prompts, oracle turns of the training split
    (never the test split's questions), in ``dialect``."""
    return dialect.tokenizer_texts(world)


@dataclass(frozen=True)
class Demonstrations:
    """What the ``sft_data`` phase wrote: the dump (oracles with reward 1, shortcuts with 0) and counts."""

    path: Path
    oracle: int
    shortcut: int
    dropped: int  # scripts cut by a length limit


def _prompts_of(
    questions: Sequence[Question], tokenizer: Any, config: Any, out: Path, dialect: Dialect
) -> dict[str, Any]:
    """Each question's tokenized training prompt, by question id (every one must fit the prompt budget,
    counted as the rollout encodes it: in hermes, with the tools' schemas)."""
    from agentrl.agent.generation import prompt_encoder
    from agentrl.trainer.dataset import build_prompt_dataset

    records = [q.to_json() for q in questions]
    rows_file = write_rows(hop_rows(records, "sft", dialect.instruction), out / "sft_questions.jsonl")
    encode = prompt_encoder(config.actor.rollout, tokenizer) if dialect.format.prompt_from_messages else None
    limit = config.data.max_prompt_length
    prompts = build_prompt_dataset([str(rows_file)], tokenizer, limit, "sft", encode).prompts
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
    dialect: Dialect = TAGS,
) -> Demonstrations:
    """Play every round of :func:`demonstration_rounds` in ``dialect`` through the real rollout (the
    retriever of ``config``'s search tool must be up) into ``out/sft_data.jsonl``."""
    from agentrl.agent.demonstrations import record_scripted_trajectories
    from agentrl.agent.dump import dump_trajectories
    from agentrl.models.loading import load_tokenizer

    tokenizer = load_tokenizer(model_dir)
    prompt_of = _prompts_of(questions, tokenizer, config, out, dialect)
    sft_file = out / "sft_data.jsonl"
    sft_file.unlink(missing_ok=True)
    kept = {"oracle": 0, "shortcut": 0}
    dropped = 0
    rounds = demonstration_rounds(questions, shortcuts_per_demo, seed, dialect, tokenizer.eos_token)
    for number, scripts in enumerate(rounds):
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
