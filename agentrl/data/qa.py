"""QA questions -> Search-R1 training rows, and validating readers for both.

Two layouts, as in Search-R1:

- *question records* (jsonl): ``{"id", "question", "golden_answers": [str, ...], "dataset"?, ...}``
- *training rows* (parquet or jsonl)::

      {"id", "question", "golden_answers",            # kept from the record, as Search-R1 does
       "data_source": "nq",
       "prompt": [{"role": "user", "content": <instruction + question>}],
       "ability": "fact-reasoning",
       "reward_model": {"style": "rule", "ground_truth": {"target": [...]}},
       "extra_info": {"split": "train", "index": 0}}

The instruction is generated from the tools the policy is given (``instruction.py``); the
default, ``INSTRUCTION_TEMPLATE``, is the one of the default tool set, one ``SearchTool``.
Every validation error names the file, the line (jsonl) or row (parquet) and the field, so
a bad row among thousands is found at once.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from agentrl.data.instruction import instruction_template
from agentrl.rewards.match import normalize_answer

__all__ = [
    "ABILITY",
    "INSTRUCTION_TEMPLATE",
    "QADataError",
    "load_qa_rows",
    "make_prompt",
    "read_question_records",
    "row_schema",
    "sample_records",
    "split_train_test",
    "to_training_rows",
    "validate_question_record",
    "validate_training_row",
    "write_rows",
]

ABILITY = "fact-reasoning"

# Same structure as the Search-R1 instruction (reason in <think> after every new piece of
# information, <search> for the engine, results in <information>, search freely, answer in
# <answer> without elaboration, the Beijing example), worded for this project: the instruction
# of the default tool set, which the quickstart and the published results were trained on.
INSTRUCTION_TEMPLATE = instruction_template()


class QADataError(ValueError):
    """A question record or training row does not match the schema (message says where)."""


def make_prompt(question: str, instruction: str = INSTRUCTION_TEMPLATE) -> str:
    """The user message for one question; a trailing '?' is added when missing, as in Search-R1.

    ``instruction``: a template with a ``{question}`` field (``instruction.instruction_template``
    of the run's tools); the default tool set's by default."""
    q = question.strip()
    if not q.endswith("?"):
        q += "?"
    return instruction.format(question=q)


def _is_str_list(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(v, str) for v in value)


def validate_question_record(record: Any, where: str) -> dict[str, Any]:
    """Check one question record; return it with ``id`` as a string."""
    if not isinstance(record, dict):
        raise QADataError(f"{where}: expected a JSON object, got {type(record).__name__}")
    for name in ("id", "question", "golden_answers"):
        if name not in record:
            raise QADataError(f"{where}: missing field '{name}'")
    if isinstance(record["id"], bool) or not isinstance(record["id"], (str, int)):
        raise QADataError(f"{where}: field 'id' must be a string or integer, got {record['id']!r}")
    if not isinstance(record["question"], str) or not record["question"].strip():
        raise QADataError(f"{where}: field 'question' must be a non-empty string, got {record['question']!r}")
    if not _is_str_list(record["golden_answers"]):
        raise QADataError(
            f"{where}: field 'golden_answers' must be a non-empty list of strings, "
            f"got {record['golden_answers']!r}"
        )
    return {**record, "id": str(record["id"])}


def _iter_jsonl(path: Path) -> Iterable[tuple[int, Any]]:
    with path.open(encoding="utf-8") as f:
        for lineno, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                yield lineno, json.loads(line)
            except json.JSONDecodeError as exc:
                raise QADataError(
                    f"{path}:{lineno}: invalid JSON ({exc.msg} at column {exc.colno})"
                ) from None


def read_question_records(path: str | Path) -> list[dict[str, Any]]:
    """Read and validate a question jsonl file (blank lines are skipped)."""
    p = Path(path)
    return [validate_question_record(obj, f"{p}:{lineno}") for lineno, obj in _iter_jsonl(p)]


def sample_records(
    records: Sequence[dict[str, Any]], limit: int | None, seed: int = 0
) -> list[dict[str, Any]]:
    """A seeded sample of ``limit`` records, kept in file order (all records when ``limit`` is None)."""
    if limit is None or limit >= len(records):
        return list(records)
    if limit < 0:
        raise ValueError(f"limit must be >= 0, got {limit}")
    keep = sorted(random.Random(seed).sample(range(len(records)), limit))
    return [records[i] for i in keep]


def to_training_rows(
    records: Sequence[Mapping[str, Any]],
    split: str,
    data_source: str | None = None,
    instruction: str = INSTRUCTION_TEMPLATE,
) -> list[dict[str, Any]]:
    """Turn validated question records into training rows; ``index`` is the position in ``records``.

    ``data_source`` overrides the records' own ``dataset`` field; one of them must exist.
    ``instruction``: the prompt's template (:func:`make_prompt`).
    """
    rows = []
    for index, rec in enumerate(records):
        source = data_source or rec.get("dataset")
        if not isinstance(source, str) or not source:
            raise QADataError(
                f"record {index} (id {rec.get('id')!r}): no data source; "
                "pass one or give the record a 'dataset' field"
            )
        rows.append(
            {
                "id": str(rec["id"]),
                "question": rec["question"],
                "golden_answers": list(rec["golden_answers"]),
                "data_source": source,
                "prompt": [{"role": "user", "content": make_prompt(rec["question"], instruction)}],
                "ability": ABILITY,
                "reward_model": {"style": "rule", "ground_truth": {"target": list(rec["golden_answers"])}},
                "extra_info": {"split": split, "index": index},
            }
        )
    return rows


def validate_training_row(row: Any, where: str) -> dict[str, Any]:
    """Check the fields the trainer and the reward read; extra columns are allowed."""
    if not isinstance(row, dict):
        raise QADataError(f"{where}: expected an object, got {type(row).__name__}")
    for name in ("data_source", "prompt", "reward_model"):
        if name not in row:
            raise QADataError(f"{where}: missing field '{name}'")
    if not isinstance(row["data_source"], str) or not row["data_source"]:
        raise QADataError(
            f"{where}: field 'data_source' must be a non-empty string, got {row['data_source']!r}"
        )
    prompt = row["prompt"]
    if not isinstance(prompt, list) or not prompt:
        raise QADataError(f"{where}: field 'prompt' must be a non-empty list of messages, got {prompt!r}")
    for i, msg in enumerate(prompt):
        if not (
            isinstance(msg, dict) and isinstance(msg.get("role"), str) and isinstance(msg.get("content"), str)
        ):
            raise QADataError(
                f"{where}: field 'prompt[{i}]' must be {{'role': str, 'content': str}}, got {msg!r}"
            )
    rm = row["reward_model"]
    gt = rm.get("ground_truth") if isinstance(rm, dict) else None
    if not isinstance(gt, dict) or not _is_str_list(gt.get("target")):
        raise QADataError(
            f"{where}: field 'reward_model.ground_truth.target' must be a non-empty list of strings, "
            f"got {rm!r}"
        )
    if "extra_info" in row and row["extra_info"] is not None and not isinstance(row["extra_info"], dict):
        raise QADataError(f"{where}: field 'extra_info' must be an object, got {row['extra_info']!r}")
    return row


def load_qa_rows(
    path: str | Path, split: str = "test", data_source: str | None = None
) -> list[dict[str, Any]]:
    """Training rows from a parquet file, a jsonl of training rows, or a jsonl of question records.

    Question records are converted with :func:`to_training_rows` (``split`` and
    ``data_source`` are used only then), so evaluation can point at raw dataset files.
    """
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"QA data file not found: {p}")
    if p.suffix == ".parquet":
        import pyarrow.parquet as pq

        return [
            validate_training_row(r, f"{p}: row {i}") for i, r in enumerate(pq.read_table(p).to_pylist(), 1)
        ]
    if p.suffix not in (".jsonl", ".json"):
        raise QADataError(f"{p}: unsupported file type {p.suffix!r}; expected .parquet or .jsonl")
    rows: list[dict[str, Any]] = []
    records: list[tuple[str, dict[str, Any]]] = []
    for lineno, obj in _iter_jsonl(p):
        where = f"{p}:{lineno}"
        if isinstance(obj, dict) and "prompt" in obj:
            rows.append(validate_training_row(obj, where))
        else:
            records.append((where, validate_question_record(obj, where)))
    if rows and records:
        raise QADataError(f"{records[0][0]}: question record in a file of training rows (mixed layouts)")
    if records:
        for where, rec in records:
            if not data_source and not (isinstance(rec.get("dataset"), str) and rec["dataset"]):
                raise QADataError(f"{where}: no 'dataset' field and no data_source given")
        return to_training_rows([r for _, r in records], split, data_source)
    return rows


def row_schema() -> Any:
    """The arrow schema of training rows (Search-R1's column names and nesting)."""
    import pyarrow as pa

    return pa.schema(
        [
            ("id", pa.string()),
            ("question", pa.string()),
            ("golden_answers", pa.list_(pa.string())),
            ("data_source", pa.string()),
            ("prompt", pa.list_(pa.struct([("role", pa.string()), ("content", pa.string())]))),
            ("ability", pa.string()),
            (
                "reward_model",
                pa.struct(
                    [("style", pa.string()), ("ground_truth", pa.struct([("target", pa.list_(pa.string()))]))]
                ),
            ),
            ("extra_info", pa.struct([("split", pa.string()), ("index", pa.int64())])),
        ]
    )


def write_rows(rows: Sequence[Mapping[str, Any]], path: str | Path) -> Path:
    """Write training rows to ``.parquet`` (fixed Search-R1 schema) or ``.jsonl``."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    if p.suffix == ".parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.Table.from_pylist(list(rows), schema=row_schema()), p)
    elif p.suffix == ".jsonl":
        with p.open("w", encoding="utf-8") as f:
            for row in rows:
                f.write(json.dumps(row, ensure_ascii=False) + "\n")
    else:
        raise QADataError(f"{p}: unsupported output type {p.suffix!r}; expected .parquet or .jsonl")
    return p


def split_train_test(
    records: Sequence[dict[str, Any]], test_fraction: float, seed: int = 0
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Seeded split that never puts the same question (after normalisation) on both sides.

    Records are grouped by normalised question text (datasets contain near-duplicates,
    and one question can occur in two datasets); whole groups go to one side. Both outputs
    keep the input order.
    """
    if not 0.0 < test_fraction < 1.0:
        raise ValueError(f"test_fraction must be in (0, 1), got {test_fraction!r}")
    keys = [normalize_answer(r["question"]) for r in records]
    groups = sorted(set(keys))
    random.Random(seed).shuffle(groups)
    test_keys = set(groups[: round(len(groups) * test_fraction)])
    train = [r for r, k in zip(records, keys, strict=True) if k not in test_keys]
    test = [r for r, k in zip(records, keys, strict=True) if k in test_keys]
    return train, test
