"""The quickstart's before/after evaluation, through ``agentrl.eval``: greedy agent rollouts on held-out rows.

The settings are read from the PPO config (:func:`eval_settings`), so the evaluation rolls
out exactly what PPO trains and validates: the same turn budgets, observation length,
schedule, prompt/response budgets, retriever and top-k. The records of
``agentrl.eval.evaluate`` are summarised overall and per hop (:func:`summarize`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from agentrl.quickstart.demonstrations import hop_label

__all__ = ["SEARCH_TOOL", "eval_settings", "evaluate_policy", "search_options", "summarize", "summary_line"]

SEARCH_TOOL = "agentrl.agent.tools.search.SearchTool"
DATASET = "heldout"  # the evaluation's name for the rows file (records are grouped by data_source)


def search_options(config: Any) -> dict[str, Any]:
    """The options (url, topk, ...) of the search tool in the PPO config's rollout."""
    for tool in config.actor.rollout.tools:
        if tool.class_path == SEARCH_TOOL:
            return dict(tool.options)
    raise ValueError(f"the PPO config's actor.rollout.tools has no {SEARCH_TOOL}: the evaluation needs one")


def eval_settings(config: Any, seed: int = 0) -> Any:
    """``EvalSettings`` of a greedy evaluation with the PPO config's rollout, budgets and top-k."""
    from agentrl.eval import EvalSettings

    rollout, search = config.actor.rollout, search_options(config)
    timeout = {"retriever_timeout_s": float(search["timeout_s"])} if "timeout_s" in search else {}
    return EvalSettings(
        topk=int(search.get("topk", EvalSettings.topk)),
        max_turns=rollout.max_turns,
        greedy=True,
        temperature=rollout.temperature,
        top_p=rollout.top_p,
        top_k=rollout.top_k,
        seed=seed,
        max_tokens_per_turn=rollout.max_tokens_per_turn,
        max_prompt_length=config.data.max_prompt_length,
        max_response_length=config.data.max_response_length,
        max_obs_length=rollout.max_obs_length,
        schedule=rollout.schedule,
        batch_size=config.data.val_batch_size,
        **timeout,
    )


def summarize(records: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, float]]:
    """``{"all": ..., "hop1": ..., "hop2": ...}``, each ``{"em", "searches", "finished", "n"}`` (means)."""
    from agentrl.eval.report import aggregate

    groups = aggregate([{**r, "_all": "all"} for r in records], key="_all")
    per_source = sorted(aggregate(records, key="data_source").items())
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
        for group, summary in groups.items()
    }


def evaluate_policy(
    model_dir: str | Path, rows_file: str | Path, config: Any, limit: int | None = None, seed: int = 0
) -> dict[str, dict[str, float]]:
    """Greedy agent rollouts of the policy in ``model_dir`` on the QA rows of ``rows_file``, summarised.

    Runs ``agentrl.eval.evaluate`` in agent mode against the retriever of the PPO config's
    search tool, with :func:`eval_settings`; ``limit`` takes a seeded subset of the rows.
    Tool errors stop it: a dead retriever must not quietly lower EM.
    """
    from agentrl.eval import DatasetSpec, evaluate

    results = evaluate(
        model_dir,
        None,
        [DatasetSpec(DATASET, str(rows_file), limit=limit, seed=seed)],
        "agent",
        search_options(config)["url"],
        settings=eval_settings(config, seed),
        engine="hf",
        engine_kwargs={"max_batch_size": config.actor.rollout.max_batch_size, "dtype": "float32"},
        progress=False,
    )
    return summarize(results.records)


def summary_line(result: Mapping[str, Any]) -> str:
    """``EM 0.646, hop1 EM 0.618, hop2 EM 0.674, searches/question 1.49``."""
    hops = [k for k in result if k.startswith("hop")]
    parts = [f"EM {result['all']['em']:.3f}"] + [f"{h} EM {result[h]['em']:.3f}" for h in hops]
    return ", ".join(parts) + f", searches/question {result['all']['searches']:.2f}"
