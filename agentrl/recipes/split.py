"""Training questions that are disjoint from the held-out evaluation questions.

The evaluation sets (e.g. 500 seeded NQ test and 500 HotpotQA dev questions) are named by
the same :class:`~agentrl.eval.datasets.DatasetSpec` the evaluation uses, so "held out" means
exactly the questions the results table scores. Training questions come from the other rows
of the shared QA files. Two rules keep them apart:

* **by id**: a row of a held-out file whose id is held out never trains;
* **by text**: no training question may equal a held-out question after SQuAD normalisation
  (lower case, no punctuation, articles or extra spaces), whatever file it comes from
  (NQ and TriviaQA share questions; files carry near-duplicates).

:func:`check_disjoint` re-checks any pair of files and names the first overlap, so the check
also guards files written by hand. A validation split for learning curves is drawn from the
training pool (never from the held-out sets): tune on it, not on the table's questions.

CLI::

    python -m agentrl.recipes.split --data-dir DATA_DIR --out runs/smollm2/data
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentrl.config.errors import report_error
from agentrl.data.qa import read_question_records, write_rows
from agentrl.eval.datasets import DatasetSpec, load_questions
from agentrl.rewards.match import normalize_answer

__all__ = [
    "SourceSpec",
    "SplitReport",
    "build_split",
    "check_disjoint",
    "default_heldout",
    "default_sources",
]


@dataclass(frozen=True)
class SourceSpec:
    """A QA file that feeds the training pool: at most ``limit`` seeded rows (after exclusion),
    kept only where every field in ``require`` is truthy."""

    name: str
    path: str
    limit: int | None = None
    require: tuple[str, ...] = ()


def default_heldout(data_dir: str | Path, limit: int = 500, seed: int = 0) -> list[DatasetSpec]:
    """The evaluation sets of ``docs/results.md``: NQ test, HotpotQA dev (supporting passages in
    the corpus), TriviaQA test and PopQA, ``limit`` seeded questions each."""
    d = Path(data_dir)
    return [
        DatasetSpec("nq", str(d / "nq" / "test.jsonl"), limit=limit, seed=seed),
        DatasetSpec(
            "hotpotqa",
            str(d / "hotpotqa" / "dev.jsonl"),
            require=("all_supporting_in_corpus",),
            limit=limit,
            seed=seed,
        ),
        DatasetSpec("triviaqa", str(d / "triviaqa" / "test.jsonl"), limit=limit, seed=seed),
        DatasetSpec("popqa", str(d / "popqa" / "test_sample1000.jsonl"), limit=limit, seed=seed),
    ]


def default_sources(data_dir: str | Path) -> list[SourceSpec]:
    """NQ (test rest + EfficientQA dev), HotpotQA dev (rest) and a TriviaQA sample."""
    d = Path(data_dir)
    return [
        SourceSpec("nq", str(d / "nq" / "test.jsonl")),
        SourceSpec("nq", str(d / "nq" / "dev_efficientqa.jsonl")),
        SourceSpec("hotpotqa", str(d / "hotpotqa" / "dev.jsonl")),
        SourceSpec("triviaqa", str(d / "triviaqa" / "test.jsonl"), limit=3000),
    ]


@dataclass(frozen=True)
class SplitReport:
    """What :func:`build_split` wrote and how much each rule removed."""

    train: int
    val: int
    heldout: dict[str, int]
    excluded_by_id: int
    excluded_by_text: int
    duplicates: int
    per_source: dict[str, int]

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


def _question_key(text: str) -> str:
    return normalize_answer(text)


def check_disjoint(train: Iterable[Mapping[str, Any]], heldout: Iterable[Mapping[str, Any]]) -> None:
    """Raise ``ValueError`` naming the first training question whose id (within one dataset) or
    normalised text is held out. Rows need ``question`` and ``id``; ``dataset`` or
    ``data_source`` scopes the id."""
    held_text: dict[str, str] = {}
    held_ids: set[tuple[str, str]] = set()
    for row in heldout:
        held_text[_question_key(row["question"])] = str(row["id"])
        held_ids.add((_scope(row), str(row["id"])))
    for row in train:
        key = _question_key(row["question"])
        if key in held_text:
            raise ValueError(
                f"training question {row['id']!r} ({row['question']!r}) is the held-out question "
                f"{held_text[key]!r} after normalisation"
            )
        if (_scope(row), str(row["id"])) in held_ids:
            raise ValueError(f"training question id {row['id']!r} of {_scope(row)!r} is held out")


def _scope(row: Mapping[str, Any]) -> str:
    return str(row.get("dataset") or row.get("data_source") or "")


def _heldout_rows(specs: Sequence[DatasetSpec]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for spec in specs:
        out[spec.name] = [
            {
                "id": q.id,
                "question": q.question,
                "golden_answers": list(q.golden_answers),
                "dataset": spec.name,
            }
            for q in load_questions(spec)
        ]
    return out


def build_split(
    heldout: Sequence[DatasetSpec],
    sources: Sequence[SourceSpec],
    out_dir: str | Path,
    *,
    val_per_dataset: int = 100,
    seed: int = 0,
) -> SplitReport:
    """Write ``heldout_<name>.jsonl``, ``train.jsonl``, ``val.jsonl`` (question records) and
    ``split.json`` (this report) under ``out_dir``.

    A source row is dropped when its (dataset, id) or its normalised text is held out, or when
    its text repeats a row already taken. ``val_per_dataset`` seeded rows of each dataset go to
    ``val.jsonl``; the rest, shuffled with ``seed``, to ``train.jsonl``.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    held = _heldout_rows(heldout)
    held_text = {_question_key(r["question"]) for rows in held.values() for r in rows}
    held_ids = {(name, r["id"]) for name, rows in held.items() for r in rows}
    seen: set[str] = set()
    by_id = by_text = dups = 0
    pool: dict[str, list[dict[str, Any]]] = {}
    for number, source in enumerate(sources):
        rows = [r for r in read_question_records(source.path) if all(r.get(f) for f in source.require)]
        kept = []
        for r in rows:
            key = _question_key(r["question"])
            if (source.name, r["id"]) in held_ids:
                by_id += 1
            elif key in held_text:
                by_text += 1
            elif key in seen:
                dups += 1
            else:
                seen.add(key)
                kept.append({**r, "dataset": source.name})
        if source.limit is not None and len(kept) > source.limit:
            kept = random.Random(seed + number).sample(kept, source.limit)
        pool.setdefault(source.name, []).extend(kept)
    train, val = [], []
    rng = random.Random(seed)
    for name in sorted(pool):
        rows = pool[name]
        rng.shuffle(rows)
        val += rows[:val_per_dataset]
        train += rows[val_per_dataset:]
    rng.shuffle(train)
    everything_held = [r for rows in held.values() for r in rows]
    check_disjoint(train + val, everything_held)
    for name, rows in held.items():
        write_rows(rows, out / f"heldout_{name}.jsonl")
    write_rows(train, out / "train.jsonl")
    write_rows(val, out / "val.jsonl")
    report = SplitReport(
        train=len(train),
        val=len(val),
        heldout={name: len(rows) for name, rows in held.items()},
        excluded_by_id=by_id,
        excluded_by_text=by_text,
        duplicates=dups,
        per_source={name: sum(r["dataset"] == name for r in train) for name in sorted(pool)},
    )
    (out / "split.json").write_text(json.dumps(report.to_json(), indent=2) + "\n")
    return report


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m agentrl.recipes.split", description=__doc__.split("\n\n")[0])
    p.add_argument("--data-dir", required=True, help="directory with nq/, hotpotqa/, triviaqa/, popqa/")
    p.add_argument("--out", required=True)
    p.add_argument("--heldout-limit", type=int, default=500, help="held-out questions per evaluation set")
    p.add_argument("--val-per-dataset", type=int, default=100)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    try:
        report = build_split(
            default_heldout(args.data_dir, args.heldout_limit, args.seed),
            default_sources(args.data_dir),
            args.out,
            val_per_dataset=args.val_per_dataset,
            seed=args.seed,
        )
    except (ValueError, FileNotFoundError) as error:
        return report_error(error, 2)
    print(json.dumps(report.to_json()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
