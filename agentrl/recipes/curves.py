"""A run's metric logs as curves: the records of a JSONL file and one metric's (step, value) series.

Both recipes' reports draw their curves from these (the quickstart's ``reward.png`` and
``em.png``, the search-QA recipe's learning curves), out of the trainers' ``metrics.jsonl``
and the SFT log.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = ["metric_series", "minutes_series", "read_jsonl"]


def read_jsonl(path: str | Path) -> list[dict[str, Any]]:
    """The records of a JSONL file, gzipped when its name ends in ``.gz``; none if it is absent."""
    path = Path(path)
    if not path.is_file():
        return []
    opener = gzip.open if path.suffix == ".gz" else open
    # line by line, not splitlines(): a passage may hold U+2028 inside a JSON string
    with opener(path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def metric_series(metrics: Sequence[Mapping[str, Any]], key: str) -> tuple[list[float], list[float]]:
    """``(steps, values)`` of metric ``key`` over the records that logged it as a number."""
    rows = [(m["step"], m[key]) for m in metrics if key in m and isinstance(m[key], (int, float))]
    return [float(s) for s, _ in rows], [float(v) for _, v in rows]


def minutes_series(metrics: Sequence[Mapping[str, Any]], key: str) -> tuple[list[float], list[float]]:
    """``(training minutes, values)`` of metric ``key``: each value placed at the sum of the
    ``timing_s/step`` logged up to its record (validation time excluded), so runs whose steps
    differ in length compare at equal training time."""
    minutes, xs, ys = 0.0, [], []
    for row in metrics:
        minutes += row.get("timing_s/step", 0.0) / 60
        if key in row:
            xs.append(minutes)
            ys.append(row[key])
    return xs, ys
