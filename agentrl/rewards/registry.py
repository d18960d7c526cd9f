"""Which scorer applies to which ``data_source``, and loading user scorers by import path.

Rows of every QA dataset carry a ``data_source`` string; the registry maps it to a scorer
so one training run can mix datasets with different rules. A user scorer is named as
``"pkg.module:function"`` in the config, so new tasks need no change to agentrl.
"""

from __future__ import annotations

import numbers
from collections.abc import Callable, Mapping
from typing import Any

from agentrl.importing import import_object
from agentrl.rewards.scorers import (
    MATCH_METRICS,
    FormatScorer,
    FormatValues,
    MatchScorer,
    ScoreInput,
    ScoreOutput,
    Scorer,
)

__all__ = [
    "DEFAULT_METRIC",
    "load_scorer",
    "register_scorer",
    "registered_data_sources",
    "resolve_scorer",
]

DEFAULT_METRIC = "em"
ScorerSpec = str | Callable[[ScoreInput], Any]

# Search-R1 scores all of its datasets by exact match on the final answer.
_REGISTRY: dict[str, ScorerSpec] = {
    source: "em"
    for source in (
        "nq",
        "triviaqa",
        "popqa",
        "hotpotqa",
        "2wikimultihopqa",
        "musique",
        "bamboogle",
        "synthetic_world",
    )
}


def register_scorer(data_source: str, scorer: ScorerSpec, *, overwrite: bool = False) -> None:
    """Register a metric name (``em``/``f1``/``cover_em``), an import path or a callable.

    Re-registering an existing source needs ``overwrite=True`` so two plugins cannot
    silently fight over one dataset.
    """
    if not isinstance(data_source, str) or not data_source:
        raise ValueError(f"data_source must be a non-empty string, got {data_source!r}")
    if data_source in _REGISTRY and not overwrite:
        raise ValueError(
            f"a scorer is already registered for data_source {data_source!r}; pass overwrite=True"
        )
    if isinstance(scorer, str):
        _check_spec_string(scorer)
    elif not callable(scorer):
        raise TypeError(f"scorer for {data_source!r} must be a metric name, an import path or a callable")
    _REGISTRY[data_source] = scorer


def registered_data_sources() -> dict[str, ScorerSpec]:
    """A copy of the registry (data_source -> scorer spec)."""
    return dict(_REGISTRY)


def _check_spec_string(spec: str) -> None:
    if spec not in MATCH_METRICS and ":" not in spec:
        raise ValueError(
            f"scorer {spec!r} is neither a built-in metric {sorted(MATCH_METRICS)} "
            "nor an import path of the form 'pkg.module:function'"
        )


def load_scorer(path: str) -> Scorer:
    """Import ``"pkg.module:function"`` (the attribute may be dotted, e.g. ``mod:Class.method``).

    The callable receives a :class:`ScoreInput` and may return a :class:`ScoreOutput`, a
    number, or a ``(number, metrics_dict)`` pair; the returned wrapper normalises that to
    a ScoreOutput. Every failure names the path that was asked for.
    """
    # The colon form only: the registry tells an import path from a metric name by its colon.
    if not isinstance(path, str) or path.count(":") != 1 or not all(path.split(":")):
        raise ValueError(f"scorer path {path!r} must look like 'pkg.module:function'")
    obj = import_object(path, "scorer")
    if not callable(obj):
        raise TypeError(f"scorer {path!r} is not callable (it is a {type(obj).__name__})")
    return _NormalisedScorer(obj, path)


class _NormalisedScorer:
    """Wraps a user callable so its result is always a ScoreOutput with float values."""

    def __init__(self, fn: Callable[[ScoreInput], Any], name: str) -> None:
        self.fn = fn
        self.name = name

    def __call__(self, inp: ScoreInput) -> ScoreOutput:
        result = self.fn(inp)
        if isinstance(result, ScoreOutput):
            score, metrics = result.score, result.metrics
        elif isinstance(result, numbers.Real):
            score, metrics = result, {}
        elif isinstance(result, tuple) and len(result) == 2 and isinstance(result[1], Mapping):
            score, metrics = result
        else:
            raise TypeError(
                f"scorer {self.name!r} returned {type(result).__name__}; expected a ScoreOutput, "
                "a number, or a (number, dict) pair"
            )
        if not isinstance(score, numbers.Real):
            raise TypeError(f"scorer {self.name!r} returned a non-numeric score: {score!r}")
        return ScoreOutput(float(score), {str(k): float(v) for k, v in metrics.items()})

    def __repr__(self) -> str:
        return f"<scorer {self.name}>"


def _build(spec: ScorerSpec, use_format: bool, values: FormatValues) -> Scorer:
    if callable(spec):
        return _NormalisedScorer(spec, getattr(spec, "__qualname__", repr(spec)))
    if spec in MATCH_METRICS:
        return FormatScorer(spec, values) if use_format else MatchScorer(spec)
    return load_scorer(spec)


def resolve_scorer(
    data_source: str,
    *,
    override: str | None = None,
    per_source: Mapping[str, str] | None = None,
    fallback_metric: str = DEFAULT_METRIC,
    use_format: bool = False,
    values: FormatValues | None = None,
) -> Scorer:
    """The scorer for one data source.

    Precedence: ``override`` (one scorer for everything) > ``per_source[data_source]`` >
    the registry > ``fallback_metric``. Built-in metrics are wrapped in the format-aware
    score when ``use_format`` is set; user scorers are used as they are.
    """
    values = values or FormatValues()
    if override:
        spec: ScorerSpec = override
    elif per_source and data_source in per_source:
        spec = per_source[data_source]
    else:
        spec = _REGISTRY.get(data_source, fallback_metric)
    if isinstance(spec, str):
        _check_spec_string(spec)
    return _build(spec, use_format, values)
