"""The RL questions the warm start solves sometimes: a pool where GRPO groups carry a signal.

GRPO learns only from a group whose samples differ in reward. On questions the policy never
solves, every group is all zeros: the step costs a full rollout and update and changes nothing.
From a 135M warm start that solves about one training question in six, four questions a step
almost always give four zero groups. This module samples the warm start once per candidate
question (temperature 1, the RL budgets, the RL reward's rule: exact match inside
``<answer>``) and keeps the questions it solved. Under the same sampling, a question solved
once is neither hopeless nor, mostly, certain, so its group usually holds both outcomes.

Only training questions are sampled; the held-out and validation questions never are.
The samples are an ordinary evaluation (``agentrl.eval.evaluate``) under ``out_dir``, so an
interrupted pass resumes.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = ["POOL_NAME", "solved_once"]

POOL_NAME = "rl_pool"  # the dataset name of the sampling pass's records


def _key(row: Mapping[str, Any]) -> str:
    """A question's id in the sampling pass: ids repeat across sources (NQ's and TriviaQA's
    ``test_12``), and the evaluation needs them unique."""
    return f"{row['data_source']}:{row['id']}"


def _write_questions(rows: Sequence[Mapping[str, Any]], path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as f:
        for row in rows:
            record = {
                "id": _key(row),
                "question": row["question"],
                "golden_answers": list(row["golden_answers"]),
                "dataset": row["data_source"],
            }
            f.write(json.dumps(record, ensure_ascii=False) + "\n")
    return path


def solved_once(
    model: Any,
    rows: Sequence[Mapping[str, Any]],
    retriever_url: str,
    out_dir: Path,
    *,
    limit: int,
    seed: int,
    config: Any,
    tokenizer: Any = None,
    engine: str = "vllm",
    settings_overrides: Mapping[str, Any] | None = None,
) -> tuple[list[Mapping[str, Any]], dict[str, Any]]:
    """Sample ``model`` (a model directory, or an ``Engine`` with its ``tokenizer``) once on a
    seeded ``limit`` of the training ``rows``, as the RL ``config``'s rollout samples; return the
    rows it answered exactly (in ``<answer>``) and a summary (candidates, solved, the solve rate)."""
    from agentrl.data.qa import sample_records
    from agentrl.eval import DatasetSpec, EvalModel, evaluate
    from agentrl.recipes.search_qa_eval import eval_settings

    candidates = sample_records(rows, limit, seed)
    if not candidates:
        raise ValueError("solved_once: no candidate rows to sample")
    questions = _write_questions(candidates, out_dir / "candidates.jsonl")
    settings = eval_settings(
        config, greedy=False, temperature=1.0, seed=seed, answer_rule="tag", **(settings_overrides or {})
    )
    sampled = EvalModel(
        model,
        tokenizer,
        engine,
        {"max_batch_size": 128},
        name=f"{POOL_NAME}:{getattr(model, 'name', type(model).__name__)}",
    )
    results = evaluate(
        sampled,
        [DatasetSpec(POOL_NAME, str(questions))],
        "agent",
        retriever_url,
        settings=settings,
        out_dir=out_dir,
    )
    solved = {str(r["id"]) for r in results.records if r["em"]}  # resumed records included
    kept = [r for r in candidates if _key(r) in solved]
    summary = {"candidates": len(candidates), "solved": len(kept), "solve_rate": len(kept) / len(candidates)}
    return kept, summary
