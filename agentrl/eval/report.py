"""Per-dataset metrics from per-question records, and their markdown tables.

The metric names are those of the Search-R1 line of papers (EM is the headline number;
F1 and cover-EM show how close wrong answers were), plus what explains them: how often
the model produced a parsable ``<answer>`` at all, how many searches and turns it used,
how many tokens it wrote, and how often a golden answer was among the retrieved text
(``retrieval_hit``: the ceiling a reader could reach with these documents), and whether
a golden answer appears anywhere in the model's own text, tags or not (``text_cover_em``:
a lenient diagnostic for models too small to follow the answer format, never a
replacement for EM).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

__all__ = ["METRICS", "aggregate", "flat_metrics", "markdown_table", "settings_lines"]

# record field -> (summary name, column header, decimals)
METRICS: dict[str, tuple[str, str, int]] = {
    "em": ("em", "EM", 3),
    "f1": ("f1", "F1", 3),
    "cover_em": ("cover_em", "cover-EM", 3),
    "answered": ("answer_rate", "answered", 3),
    "retrieval_hit": ("retrieval_hit", "gold in docs", 3),
    "text_cover_em": ("text_cover_em", "gold in text", 3),
    "num_searches": ("searches", "searches", 2),
    "num_turns": ("turns", "turns", 2),
    "response_tokens": ("response_tokens", "resp. tokens", 1),
    "truncated": ("truncated", "truncated", 3),
}


def aggregate(records: Iterable[Mapping[str, Any]], key: str = "dataset") -> dict[str, dict[str, float]]:
    """Mean of every metric per value of ``key`` (``dataset``, ``data_source``, ...), with ``n``."""
    by_dataset: dict[str, list[Mapping[str, Any]]] = {}
    for r in records:
        by_dataset.setdefault(str(r[key]), []).append(r)
    out: dict[str, dict[str, float]] = {}
    for name, rows in by_dataset.items():
        summary: dict[str, float] = {"n": float(len(rows))}
        for field, (key, _, _) in METRICS.items():
            values = [float(r[field]) for r in rows if r.get(field) is not None]
            if values:
                summary[key] = sum(values) / len(values)
        out[name] = summary
    return out


def flat_metrics(
    records: Sequence[Mapping[str, Any]], prefix: str, key: str = "data_source"
) -> dict[str, float]:
    """``{prefix}/all/<metric>`` over every record and ``{prefix}/<group>/<metric>`` per ``key``
    value: the logger's view of an evaluation (the trainer's ``val/*``)."""
    groups = {"all": aggregate([{**r, "_all": "all"} for r in records], key="_all")["all"]}
    groups |= aggregate(records, key=key)
    return {
        f"{prefix}/{group}/{name}": value
        for group, summary in groups.items()
        for name, value in summary.items()
    }


def markdown_table(rows: Sequence[Mapping[str, Any]], label_columns: Sequence[str]) -> str:
    """A markdown table: ``label_columns`` (e.g. dataset, mode, retriever), ``n``, then metrics.

    Each row maps the label columns and the summary keys of :data:`METRICS`; a metric a
    row does not have (``gold in docs`` for direct answers) shows as ``–``.
    """
    metric_keys = [
        (key, header, digits) for key, header, digits in METRICS.values() if any(key in r for r in rows)
    ]
    header = [*label_columns, "n", *(h for _, h, _ in metric_keys)]
    lines = [
        "| " + " | ".join(header) + " |",
        "|" + "|".join(["---"] * len(label_columns) + ["---:"] * (len(header) - len(label_columns))) + "|",
    ]
    for r in rows:
        cells = [str(r.get(c, "")) for c in label_columns] + [str(int(r.get("n", 0)))]
        cells += [f"{r[key]:.{digits}f}" if key in r else "–" for key, _, digits in metric_keys]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def settings_lines(settings: Mapping[str, Any]) -> list[str]:
    """Settings as markdown bullet lines, nested mappings flattened with dots."""

    def flat(prefix: str, value: Any) -> Iterable[tuple[str, Any]]:
        if isinstance(value, Mapping):
            for k, v in value.items():
                yield from flat(f"{prefix}.{k}" if prefix else str(k), v)
        else:
            yield prefix, value

    return [f"- `{k}`: {v}" for k, v in flat("", settings)]
