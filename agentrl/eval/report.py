"""Per-dataset metrics from per-question records, and their markdown tables.

The metric names are those of the Search-R1 line of papers (EM is the headline number;
F1 and cover-EM show how close wrong answers were), plus what explains them: how often
the model produced a parsable ``<answer>`` at all, how many searches and turns it used,
how many tokens it wrote, and how often a golden answer was among the retrieved text
(``retrieval_hit``: the ceiling a reader could reach with these documents), and whether
a golden answer appears anywhere in the model's own text, tags or not (``text_cover_em``:
a lenient diagnostic for models too small to follow the answer format, never a
replacement for EM). Under the ``tag-or-first-line`` answer rule (``agentrl.eval.extraction``)
``extracted`` is the share of predictions read from prose rather than from an ``<answer>``
tag; ``answer_rate`` always counts accepted tags only.

EM and F1 come with 95% percentile-bootstrap intervals over the questions (``em_lo``,
``em_hi``, ``f1_lo``, ``f1_hi``; ``agentrl.eval.stats.bootstrap_ci``), shown in the
markdown table as ``0.312 [0.271, 0.353]``. Records an LLM judge scored (``--judge``,
``agentrl.eval.judged``) add ``judged``, the judged accuracy, beside EM with its interval the
same way (``judged_lo``, ``judged_hi``); without them there is no such metric or column.

Each tool's calls per question are ``tool_calls/<name>`` (from the records' ``tool_calls``:
the calls the rollout sent each tool, by name, in every tool-call format; a tag tool's name
is its tag), beside ``searches`` (the ``search`` tool's, as it always was); they are in the
metrics and the trainer's ``val/*``, not in the markdown table, whose columns stay fixed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from agentrl.eval.stats import bootstrap_ci

__all__ = [
    "CI_LEVEL",
    "CI_METRICS",
    "METRICS",
    "aggregate",
    "flat_metrics",
    "markdown_table",
    "settings_lines",
]

# record field -> (summary name, column header, decimals)
METRICS: dict[str, tuple[str, str, int]] = {
    "em": ("em", "EM", 3),
    "judged": ("judged", "judged", 3),  # only in records an LLM judge scored (eval/judged.py)
    "f1": ("f1", "F1", 3),
    "cover_em": ("cover_em", "cover-EM", 3),
    "answered": ("answer_rate", "answered", 3),
    "extracted": ("extracted", "extracted", 3),
    "retrieval_hit": ("retrieval_hit", "gold in docs", 3),
    "text_cover_em": ("text_cover_em", "gold in text", 3),
    "num_searches": ("searches", "searches", 2),
    "num_turns": ("turns", "turns", 2),
    "response_tokens": ("response_tokens", "resp. tokens", 1),
    "truncated": ("truncated", "truncated", 3),
}
# summary metrics that get a bootstrap interval ``<name>_lo`` / ``<name>_hi`` at CI_LEVEL
CI_METRICS = ("em", "judged", "f1")
CI_LEVEL = 0.95
TOOL_CALLS = "tool_calls/"  # + a tool's name: its calls per question


def _tool_calls(record: Mapping[str, Any]) -> Mapping[str, Any]:
    return record.get("tool_calls") or {}


def aggregate(
    records: Iterable[Mapping[str, Any]], key: str = "dataset", ci: bool = True, tools: Iterable[str] = ()
) -> dict[str, dict[str, float]]:
    """Mean of every metric per value of ``key`` (``dataset``, ``data_source``, ...), with ``n``;
    with ``ci``, the :data:`CI_LEVEL` bootstrap interval of each of :data:`CI_METRICS` too
    (seeded: the same records give the same interval).

    ``tool_calls/<name>`` is reported in every group for each name of ``tools`` (the run's tools,
    so an unused one shows 0) and each tool any of ``records`` called (0 in a group that did not)."""
    records = list(records)
    tags = sorted({*tools, *(tag for r in records for tag in _tool_calls(r))})
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
                if ci and key in CI_METRICS:
                    _, summary[f"{key}_lo"], summary[f"{key}_hi"] = bootstrap_ci(values, level=CI_LEVEL)
        for tag in tags:
            summary[TOOL_CALLS + tag] = sum(float(_tool_calls(r).get(tag, 0)) for r in rows) / len(rows)
        out[name] = summary
    return out


def flat_metrics(
    records: Sequence[Mapping[str, Any]], prefix: str, key: str = "data_source", tools: Iterable[str] = ()
) -> dict[str, float]:
    """``{prefix}/all/<metric>`` over every record and ``{prefix}/<group>/<metric>`` per ``key``
    value: the logger's view of an evaluation (the trainer's ``val/*``; means only, no
    bootstrap intervals, so validation costs what it did). ``tools``: as in :func:`aggregate`."""
    tools = tuple(tools)
    groups = {
        "all": aggregate([{**r, "_all": "all"} for r in records], key="_all", ci=False, tools=tools)["all"]
    }
    groups |= aggregate(records, key=key, ci=False, tools=tools)
    return {
        f"{prefix}/{group}/{name}": value
        for group, summary in groups.items()
        for name, value in summary.items()
    }


def markdown_table(rows: Sequence[Mapping[str, Any]], label_columns: Sequence[str]) -> str:
    """A markdown table: ``label_columns`` (e.g. dataset, mode, retriever), ``n``, then metrics.

    Each row maps the label columns and the summary keys of :data:`METRICS`; a metric a
    row does not have (``gold in docs`` for direct answers) shows as ``–``. A metric of
    :data:`CI_METRICS` whose row has ``<key>_lo`` and ``<key>_hi`` shows its interval,
    ``0.312 [0.271, 0.353]``, and its header says so (``EM [95% CI]``).
    """
    metric_keys = [
        (key, header, digits) for key, header, digits in METRICS.values() if any(key in r for r in rows)
    ]

    def has_ci(r: Mapping[str, Any], key: str) -> bool:
        return key in CI_METRICS and f"{key}_lo" in r and f"{key}_hi" in r

    def cell(r: Mapping[str, Any], key: str, digits: int) -> str:
        if key not in r:
            return "–"
        text = f"{r[key]:.{digits}f}"
        if has_ci(r, key):
            text += f" [{r[f'{key}_lo']:.{digits}f}, {r[f'{key}_hi']:.{digits}f}]"
        return text

    ci_label = f" [{round(CI_LEVEL * 100)}% CI]"
    headers = [h + (ci_label if any(has_ci(r, key) for r in rows) else "") for key, h, _ in metric_keys]
    header = [*label_columns, "n", *headers]
    lines = [
        "| " + " | ".join(header) + " |",
        "|" + "|".join(["---"] * len(label_columns) + ["---:"] * (len(header) - len(label_columns))) + "|",
    ]
    for r in rows:
        cells = [str(r.get(c, "")) for c in label_columns] + [str(int(r.get("n", 0)))]
        cells += [cell(r, key, digits) for key, _, digits in metric_keys]
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
