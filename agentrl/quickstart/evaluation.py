"""The quickstart's before/after evaluation, through ``agentrl.eval``: greedy agent rollouts on held-out rows.

The settings are the PPO config's (:func:`eval_settings`: ``EvalSettings.from_experiment``
with no override), so the evaluation rolls out exactly what PPO trains and validates: its
rollout section whole (turns, tokens a turn, observation length, schedule), its
prompt/response budgets, validation batch size and greedy decoding, and its search tool's
top-k, against its retriever. The records of ``agentrl.eval.evaluate`` are summarised
overall and per kind of question (hop, arithmetic) (:func:`summarize`), with each named tool's
calls per question when asked for (the two-tool profile).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from agentrl.quickstart.demonstrations import hop_label

__all__ = [
    "SEARCH_TOOL",
    "em_by_question",
    "eval_settings",
    "evaluate_policy",
    "evaluate_records",
    "paired_gains",
    "search_options",
    "summarize",
    "summary_line",
]

SEARCH_TOOL = "agentrl.tools.retrieval.SearchTool"  # the tool whose retriever the evaluation asks
DATASET = "heldout"  # the evaluation's name for the rows file (records are grouped by data_source)


def search_options(config: Any) -> dict[str, Any]:
    """The options (url, topk, ...) of the search tool in the PPO config's rollout."""
    from agentrl.eval.settings import search_tool_options

    options = search_tool_options(config.actor.rollout)
    if options is None:
        raise ValueError(
            f"the PPO config's actor.rollout.tools has no {SEARCH_TOOL}: the evaluation needs one"
        )
    return options


def eval_settings(config: Any, seed: int = 0) -> Any:
    """``EvalSettings`` of the PPO config (``from_experiment``), with ``seed`` (only sampling reads it)."""
    from agentrl.eval import EvalSettings

    search_options(config)  # refused here, before any model loads, when there is no retriever to ask
    return EvalSettings.from_experiment(config, seed=seed)


def summarize(records: Sequence[Mapping[str, Any]], tools: Sequence[str] = ()) -> dict[str, dict[str, float]]:
    """``{"all": ..., "hop1": ..., "hop2": ...}`` (and ``"arithmetic"`` when there are such questions),
    each ``{"em", "searches", "finished", "n"}`` (means), plus ``calls/<tool>`` per question for each
    of ``tools`` (none by default, so the quickstart's summary is as it always was)."""
    from agentrl.eval.report import TOOL_CALLS, aggregate

    groups = aggregate([{**r, "_all": "all"} for r in records], key="_all", tools=tools)
    per_source = sorted(aggregate(records, key="data_source", tools=tools).items())
    groups |= {hop_label(source): summary for source, summary in per_source}
    finished: dict[str, list[float]] = {}
    for r in records:
        for group in ("all", hop_label(str(r["data_source"]))):
            finished.setdefault(group, []).append(float(r["finished"]))
    return {
        group: {
            "em": float(summary["em"]),
            "searches": float(summary["searches"]),
            "finished": sum(finished[group]) / len(finished[group]),
            "n": float(summary["n"]),
        }
        | {f"calls/{tool}": float(summary[TOOL_CALLS + tool]) for tool in tools}
        for group, summary in groups.items()
    }


def evaluate_records(
    model_dir: str | Path,
    rows_file: str | Path,
    config: Any,
    limit: int | None = None,
    seed: int = 0,
) -> list[dict[str, Any]]:
    """Greedy agent rollouts of the policy in ``model_dir`` on the QA rows of ``rows_file``: one
    record per question (``agentrl.eval``'s: ``id``, ``data_source``, ``em``, tool calls, ...).

    Runs ``agentrl.eval.evaluate`` in agent mode against the retriever of the PPO config's
    search tool, with :func:`eval_settings`; ``limit`` takes a seeded subset of the rows.
    Tool errors stop it: a dead retriever must not quietly lower EM.
    """
    from agentrl.eval import DatasetSpec, EvalModel, evaluate

    engine_kwargs = {"max_batch_size": config.actor.rollout.max_batch_size, "dtype": "float32"}
    results = evaluate(
        EvalModel(model_dir, engine="hf", engine_kwargs=engine_kwargs),
        [DatasetSpec(DATASET, str(rows_file), limit=limit, seed=seed)],
        "agent",
        search_options(config)["url"],
        settings=eval_settings(config, seed),
        progress=False,
    )
    return list(results.records)


def evaluate_policy(
    model_dir: str | Path,
    rows_file: str | Path,
    config: Any,
    limit: int | None = None,
    seed: int = 0,
    tools: Sequence[str] = (),
) -> dict[str, dict[str, float]]:
    """:func:`evaluate_records`, summarised (:func:`summarize`; ``tools`` as there)."""
    return summarize(evaluate_records(model_dir, rows_file, config, limit, seed), tools)


def em_by_question(records: Sequence[Mapping[str, Any]]) -> dict[str, tuple[str, float]]:
    """``{question id: (kind, EM)}`` of evaluation records (kind: ``hop1``, ``hop2``, ``arithmetic``)."""
    return {str(r["id"]): (hop_label(str(r["data_source"])), float(r["em"])) for r in records}


def paired_gains(
    before: Mapping[str, tuple[str, float]], after: Mapping[str, tuple[str, float]]
) -> dict[str, dict[str, float]]:
    """EM after minus EM before on the same questions, overall and per kind, each with its paired
    bootstrap 95% interval (``agentrl.eval.stats.paired_bootstrap``): ``{"delta", "lo", "hi", "n"}``.

    Both evaluations must have scored the same question ids (a ValueError names the difference)."""
    from agentrl.eval.stats import paired_bootstrap

    if set(before) != set(after):
        only = sorted(set(before) ^ set(after))
        raise ValueError(f"paired_gains needs the same questions before and after; differ: {only[:5]}")
    ids = sorted(before)
    groups: dict[str, list[str]] = {"all": ids}
    for i in ids:
        groups.setdefault(before[i][0], []).append(i)
    gains = {}
    for group, members in groups.items():
        delta, lo, hi = paired_bootstrap([after[i][1] for i in members], [before[i][1] for i in members])
        gains[group] = {"delta": delta, "lo": lo, "hi": hi, "n": float(len(members))}
    return gains


def summary_line(result: Mapping[str, Any]) -> str:
    """``EM 0.646, hop1 EM 0.618, hop2 EM 0.674, searches/question 1.49`` (with arithmetic EM and
    each tool's calls/question when the summary has them)."""
    kinds = [k for k in result if k.startswith("hop") or k == "arithmetic"]
    parts = [f"EM {result['all']['em']:.3f}"] + [f"{h} EM {result[h]['em']:.3f}" for h in kinds]
    calls = [k for k in result["all"] if k.startswith("calls/")]
    per_tool = [f"{k.removeprefix('calls/')} calls/question {result['all'][k]:.2f}" for k in calls]
    return ", ".join(
        parts + ([f"searches/question {result['all']['searches']:.2f}"] if not calls else per_tool)
    )
