"""Evaluation questions: which file, which rows, which seeded sample.

An evaluation names each dataset (``nq``, ``hotpotqa``) and points at a file in either
QA layout (``agentrl.data.qa``): raw question records (jsonl) or prepared training rows
(parquet/jsonl). Rows can be restricted to those where some fields are truthy (e.g.
HotpotQA's ``all_supporting_in_corpus``: questions the local corpus can answer) and then
subsampled with a seed, so that "500 seeded questions" means the same 500 every time.

The filter runs on the *raw* records, before they become training rows, because the
conversion keeps only the fields the trainer needs.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentrl.data.qa import (
    QADataError,
    load_qa_rows,
    read_question_records,
    sample_records,
    to_training_rows,
)

__all__ = ["DatasetSpec", "EvalQuestion", "load_questions", "parse_dataset_arg"]


@dataclass(frozen=True)
class DatasetSpec:
    """One dataset of an evaluation.

    ``require``: field names that must be truthy for a question to be kept (looked up
    on the record, then in ``extra_info``). ``limit``/``seed``: a seeded sample of that
    many questions after filtering (file order is kept); ``None`` keeps them all.
    """

    name: str
    path: str
    require: tuple[str, ...] = ()
    limit: int | None = None
    seed: int = 0

    def __post_init__(self) -> None:
        if not self.name or not self.name.replace("_", "").replace("-", "").isalnum():
            raise ValueError(f"dataset name must be alphanumeric (with - or _), got {self.name!r}")
        if self.limit is not None and self.limit < 1:
            raise ValueError(f"dataset {self.name!r}: limit must be >= 1, got {self.limit}")

    def describe(self) -> dict[str, Any]:
        """The identity of the question set, recorded beside the numbers (and compared on resume)."""
        return {"path": str(self.path), "require": list(self.require), "limit": self.limit, "seed": self.seed}


@dataclass(frozen=True)
class EvalQuestion:
    """One question as every mode needs it: the raw question (direct/rag prompts), the
    prepared chat messages (agent prompt, identical to training), and the golds."""

    dataset: str
    id: str
    question: str
    golden_answers: tuple[str, ...]
    data_source: str
    messages: tuple[Mapping[str, str], ...] = field(default_factory=tuple)


def parse_dataset_arg(text: str) -> tuple[str, str]:
    """``NAME=PATH`` (or a bare ``PATH``, named after the file's parent directory)."""
    name, sep, path = text.partition("=")
    if not sep:
        path = text
        name = Path(text).parent.name or Path(text).stem
    if not path:
        raise ValueError(f"--data {text!r}: expected NAME=PATH")
    return name, path


def _first_object(path: Path) -> Any:
    with path.open(encoding="utf-8") as f:
        for line in f:
            if line.strip():
                try:
                    return json.loads(line)
                except json.JSONDecodeError as exc:
                    raise QADataError(f"{path}: first line is not JSON ({exc.msg})") from None
    raise QADataError(f"{path}: file is empty")


def _lookup(row: Mapping[str, Any], name: str) -> Any:
    if name in row:
        return row[name]
    extra = row.get("extra_info") or {}
    return extra.get(name) if isinstance(extra, Mapping) else None


def _filter(rows: list[dict[str, Any]], spec: DatasetSpec) -> list[dict[str, Any]]:
    for name in spec.require:
        if not any(_lookup(r, name) is not None for r in rows):
            raise QADataError(f"{spec.path}: dataset {spec.name!r} requires field {name!r}, which no row has")
    return [r for r in rows if all(bool(_lookup(r, name)) for name in spec.require)]


def _question_text(row: Mapping[str, Any], where: str) -> str:
    text = row.get("question") or (row.get("extra_info") or {}).get("question")
    if not isinstance(text, str) or not text.strip():
        raise QADataError(f"{where}: no 'question' field (direct and rag prompts need the raw question)")
    return text


def load_questions(spec: DatasetSpec) -> list[EvalQuestion]:
    """Read, filter and sample one dataset (errors name the file, row and field)."""
    path = Path(spec.path)
    if not path.is_file():
        raise FileNotFoundError(f"dataset {spec.name!r}: file not found: {path}")
    if path.suffix in (".jsonl", ".json") and "prompt" not in (_first_object(path) or {}):
        records = sample_records(_filter(read_question_records(path), spec), spec.limit, spec.seed)
        # Records name their own source ("dataset"); records without one take the dataset's name.
        source = None if all(r.get("dataset") for r in records) else spec.name
        rows = to_training_rows(records, "test", data_source=source)
    else:
        rows = sample_records(_filter(load_qa_rows(path), spec), spec.limit, spec.seed)
    if not rows:
        raise QADataError(
            f"{path}: dataset {spec.name!r} has no questions left after filtering by {list(spec.require)}"
        )
    questions, seen = [], set()
    for i, row in enumerate(rows):
        where = f"{path}: row {i + 1}"
        qid = row.get("id", (row.get("extra_info") or {}).get("index"))
        if qid is None:
            raise QADataError(f"{where}: no 'id' field and no extra_info.index (resume needs a question id)")
        qid = str(qid)
        if qid in seen:
            raise QADataError(f"{where}: duplicate id {qid!r} (resume needs unique question ids)")
        seen.add(qid)
        golds = row["reward_model"]["ground_truth"]["target"]
        questions.append(
            EvalQuestion(
                dataset=spec.name,
                id=qid,
                question=_question_text(row, where),
                golden_answers=tuple(str(g) for g in golds),
                data_source=str(row["data_source"]),
                messages=tuple(dict(m) for m in row["prompt"]),
            )
        )
    return questions


def load_all(specs: Sequence[DatasetSpec]) -> dict[str, list[EvalQuestion]]:
    """Every dataset by name; two datasets may not share a name."""
    out: dict[str, list[EvalQuestion]] = {}
    for spec in specs:
        if spec.name in out:
            raise ValueError(f"two datasets are named {spec.name!r}; give them distinct names (NAME=PATH)")
        out[spec.name] = load_questions(spec)
    return out
