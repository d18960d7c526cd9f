"""Batch scoring: the one entry point the trainer calls.

The trainer decodes each response (without the prompt), calls :func:`score_batch` with the
answers the rollout accepted and puts ``scores[i]`` on the last model token of sample ``i``;
tensors never enter here.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

from agentrl.rewards.registry import DEFAULT_METRIC, resolve_scorer
from agentrl.rewards.scorers import FormatValues, ScoreInput, Scorer
from agentrl.rewards.structure import RolloutCalls
from agentrl.tool_identity import SEARCH_ONLY, ToolIdentity, as_identity

__all__ = ["RewardSettings", "score_batch"]


@dataclass(frozen=True)
class RewardSettings:
    """The reward options :func:`score_batch` understands.

    The format fields use Search-R1's names: ``structure_format_score`` is what a
    well-formed but wrong response earns (and what a correct but ill-formed one loses),
    ``final_format_score`` what an ill-formed wrong answer earns, ``retrieval_score`` the
    bonus when a golden answer was retrieved. ``reward_model_path`` belongs to the
    learned-reward path and is ignored here.
    """

    scorer: str | None = None
    metric: str = DEFAULT_METRIC
    by_data_source: Mapping[str, str] = field(default_factory=dict)
    format_score: bool = False
    structure_format_score: float = 0.2
    final_format_score: float = 0.1
    retrieval_score: float = 0.0
    reward_model_path: str | None = None

    @property
    def format_values(self) -> FormatValues:
        s = self.structure_format_score
        return FormatValues(
            correct_well_formed=1.0,
            correct_ill_formed=1.0 - s,
            wrong_well_formed=s,
            wrong_ill_formed=self.final_format_score,
            no_answer=0.0,
            retrieval_bonus=self.retrieval_score,
        )

    @classmethod
    def from_config(cls, config: Any) -> RewardSettings:
        """Read settings from None, a RewardSettings, a mapping (strict keys) or any object
        with these attribute names (e.g. the trainer's config dataclass or an OmegaConf node)."""
        if config is None:
            return cls()
        if isinstance(config, cls):
            return config
        names = [f.name for f in fields(cls)]
        if isinstance(config, Mapping):
            unknown = sorted(set(config) - set(names))
            if unknown:
                raise ValueError(f"unknown reward config key(s) {unknown}; expected some of {names}")
            values = dict(config)
        else:
            values = {n: getattr(config, n) for n in names if hasattr(config, n)}
        return cls(**values)


def _target_check(gt: Any, i: int) -> Mapping[str, Any]:
    if not isinstance(gt, Mapping):
        raise TypeError(
            f"ground_truths[{i}] must be a mapping like {{'target': [...]}}, got {type(gt).__name__}"
        )
    return gt


def score_batch(
    responses: Sequence[str],
    ground_truths: Sequence[Mapping[str, Any]],
    data_sources: Sequence[str],
    extra_infos: Sequence[Mapping[str, Any] | None] | None = None,
    config: Any = None,
    *,
    answers: Sequence[str | None],
    tools: ToolIdentity | Sequence[str] = SEARCH_ONLY,
    rollout_calls: Sequence[RolloutCalls] | None = None,
) -> tuple[list[float], dict[str, list[float]]]:
    """Score every response; return the scores and per-sample metric lists.

    ``answers[i]`` is the answer the rollout accepted for response i, or None
    (``ScoreInput.answer``; the batch field ``answer``). ``tools`` is the run's tool identity
    (``RunContext.tools``): the tags the format check accepts as calls, the names that key
    ``tool_calls/<name>``, and the call format the check reads in (``agentrl.rewards.structure``);
    ``rollout_calls[i]`` is the rollout's record of response i's calls, which a format whose calls
    are not in the text (``hermes``) is checked on (None in ``tags``, which reads the text).

    ``metrics[name]`` has one value per sample; a sample whose scorer did not report
    ``name`` (mixed custom scorers) gets NaN there, so averages can use ``nanmean``.
    """
    columns = {
        "ground_truths": ground_truths,
        "data_sources": data_sources,
        "answers": answers,
        "extra_infos": extra_infos,
        "rollout_calls": rollout_calls,
    }
    _check_lengths(len(responses), columns)
    tools = as_identity(tools)  # tags alone: tag tools
    scorer_of = _scorers_by_source(RewardSettings.from_config(config))
    scores: list[float] = []
    per_sample: list[dict[str, float]] = []
    for i in range(len(responses)):
        source = data_sources[i]
        scorer = scorer_of(source)  # outside the try: a source without a scorer is the config's error
        inp = ScoreInput(
            response_text=responses[i],
            ground_truth=_target_check(ground_truths[i], i),
            data_source=source,
            extra_info=(extra_infos[i] or {}) if extra_infos is not None else {},
            answer=answers[i],
            tools=tools,
            rollout_calls=rollout_calls[i] if rollout_calls is not None else None,
        )
        try:
            out = scorer(inp)
        except (TypeError, ValueError) as exc:
            raise type(exc)(f"sample {i} (data_source={source!r}): {exc}") from exc
        scores.append(float(out.score))
        per_sample.append(out.metrics)
    keys = sorted({k for m in per_sample for k in m})
    metrics = {k: [float(m.get(k, math.nan)) for m in per_sample] for k in keys}
    return scores, metrics


def _check_lengths(n: int, columns: Mapping[str, Sequence[Any] | None]) -> None:
    """Every column given (not None) has one item per response."""
    for name, column in columns.items():
        if column is not None and len(column) != n:
            raise ValueError(f"score_batch: {name} has {len(column)} items but responses has {n}")


def _scorers_by_source(settings: RewardSettings) -> Callable[[str], Scorer]:
    """The scorer of a ``data_source`` under ``settings``, resolved once per source."""
    values = settings.format_values
    cache: dict[str, Scorer] = {}

    def scorer_of(source: str) -> Scorer:
        if source not in cache:
            cache[source] = resolve_scorer(
                source,
                override=settings.scorer,
                per_source=settings.by_data_source,
                fallback_metric=settings.metric,
                use_format=settings.format_score,
                values=values,
            )
        return cache[source]

    return scorer_of
