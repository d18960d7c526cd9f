"""Scorer interface and the built-in rule-based scorers.

A scorer turns one finished response into a scalar reward plus named metrics. The
trainer only needs the float (it places it on the last model token); the metrics are
for logging, so every built-in scorer reports the same keys.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from agentrl.rewards.match import as_gold_list, cover_exact_match, exact_match, f1_score, normalize_answer
from agentrl.rewards.structure import RolloutCalls, check_format
from agentrl.rewards.tags import extract_answer
from agentrl.tool_identity import SEARCH_ONLY, ToolIdentity, as_identity

__all__ = [
    "MATCH_METRICS",
    "FormatValues",
    "FormatScorer",
    "MatchScorer",
    "ScoreInput",
    "ScoreOutput",
    "Scorer",
    "answer_metrics",
    "format_score",
    "golds_from_ground_truth",
    "metrics_of",
]

MATCH_METRICS: dict[str, Callable[[str, Sequence[str]], float]] = {
    "em": exact_match,
    "f1": f1_score,
    "cover_em": cover_exact_match,
}


@dataclass(frozen=True)
class ScoreInput:
    """What a scorer sees for one sample.

    ``ground_truth`` is the parquet row's ``reward_model.ground_truth``: ``{"target": [...]}``.
    ``response_text`` is the decoded response only (model tokens and inserted observations),
    never the prompt. ``answer`` is the final answer *as the rollout accepted it*: the body of
    the ``<answer>…</answer>`` that one model turn wrote and that ended the trajectory
    (``Trajectory.answer``), or None when the rollout accepted no answer. Scorers score
    this, never an answer pieced together from the text: an ``<answer>`` opened in one turn
    and closed in the next, with an observation in between, was rejected by the rollout
    and earns nothing. (Search-R1 instead takes the last ``<answer>…</answer>`` match in the
    decoded sequence, which accepts such an answer.) For text that did not come from a
    rollout, ``from_text`` applies that last-match rule explicitly. ``tools`` is the run's
    tool identity (``RunContext.tools``): the tags the tag grammar accepts as calls, the tools'
    names, which key every per-tool count, and the call format, whose traits say what the
    format check reads (``agentrl.rewards.structure``): the text under the tag grammar when the
    calls are in the text (``tags``), else the rollout's record of the calls
    (``rollout_calls``, ``hermes``). ``tool_tags``, ``tool_names`` and ``tool_format`` read it.
    """

    response_text: str
    ground_truth: Mapping[str, Any]
    data_source: str = ""
    extra_info: Mapping[str, Any] = field(default_factory=dict)
    answer: str | None = field(kw_only=True)
    tools: ToolIdentity = field(default=SEARCH_ONLY, kw_only=True)
    rollout_calls: RolloutCalls | None = field(default=None, kw_only=True)

    def __post_init__(self) -> None:
        object.__setattr__(self, "tools", as_identity(self.tools))  # tags alone: tag tools

    @property
    def tool_tags(self) -> tuple[str, ...]:
        return self.tools.tags

    @property
    def tool_names(self) -> tuple[str, ...]:
        return self.tools.names

    @property
    def tool_format(self) -> str:
        return self.tools.format.name

    @classmethod
    def from_text(
        cls,
        response_text: str,
        ground_truth: Mapping[str, Any],
        data_source: str = "",
        extra_info: Mapping[str, Any] | None = None,
        tools: ToolIdentity | Sequence[str] = SEARCH_ONLY,
    ) -> ScoreInput:
        """A response that did not come from a rollout: its answer is the last complete
        ``<answer>…</answer>`` outside retrieved documents (``extract_answer``), its format
        checked as ``tools``' format reads it (a ``hermes`` check needs the rollout's record)."""
        return cls(
            response_text,
            ground_truth,
            data_source,
            dict(extra_info or {}),
            answer=extract_answer(response_text),
            tools=tools,
        )


@dataclass(frozen=True)
class ScoreOutput:
    score: float
    metrics: dict[str, float] = field(default_factory=dict)


@runtime_checkable
class Scorer(Protocol):
    def __call__(self, inp: ScoreInput) -> ScoreOutput: ...


def golds_from_ground_truth(ground_truth: Any) -> list[str]:
    """The golden answers of a ``ground_truth`` mapping, validated.

    Raises with the field name (``ground_truth['target']``) so a broken data file is
    recognisable from the message alone.
    """
    if not isinstance(ground_truth, Mapping):
        raise TypeError(
            f"ground_truth must be a mapping with key 'target', got {type(ground_truth).__name__}"
        )
    if "target" not in ground_truth:
        raise ValueError(f"ground_truth has no 'target' key (keys: {sorted(ground_truth)})")
    return as_gold_list(ground_truth["target"], field="ground_truth['target']")


def _retrieval_hit(information: Sequence[str], golds: Sequence[str]) -> bool:
    norm_golds = [g for g in (normalize_answer(x) for x in golds) if g]
    return any(g in normalize_answer(text) for text in information for g in norm_golds)


def answer_metrics(
    response_text: str,
    answer: str | None,
    golds: Sequence[str],
    tools: ToolIdentity | Sequence[str] = SEARCH_ONLY,
    *,
    rollout_calls: RolloutCalls | None = None,
) -> dict[str, float]:
    """All per-response metrics the built-in scorers log (floats, so they average).

    Match metrics score ``answer`` (the rollout's accepted answer, see ``ScoreInput``); the
    structure metrics are the format check in ``tools``' format (``structure.check_format``:
    the text under the grammar of ``tools.tags`` in ``tags``, ``rollout_calls`` in ``hermes``):
    ``well_formed``, ``retrieval_hit`` (a golden answer in what the tools returned),
    ``tool_calls/<name>`` for each tool of the run (used or not, by ``tools.names``), and
    ``num_searches`` the ``search`` tool's calls, as it always has.
    """
    check = check_format(response_text, answer, tools, rollout_calls)
    metrics = {name: (fn(answer, golds) if answer is not None else 0.0) for name, fn in MATCH_METRICS.items()}
    metrics.update(
        has_answer=float(answer is not None),
        well_formed=float(check.well_formed),
        retrieval_hit=float(_retrieval_hit(check.information, golds)),
        num_searches=float(check.calls.get("search", 0)),
    )
    metrics.update({f"tool_calls/{name}": float(count) for name, count in check.calls.items()})
    return metrics


def metrics_of(inp: ScoreInput) -> dict[str, float]:
    """:func:`answer_metrics` of one scorer input, in the run's tool-call format."""
    return answer_metrics(
        inp.response_text,
        inp.answer,
        golds_from_ground_truth(inp.ground_truth),
        inp.tools,
        rollout_calls=inp.rollout_calls,
    )


@dataclass(frozen=True)
class FormatValues:
    """Reward table of the format-aware score.

    The defaults give a small reward for following the protocol even when wrong, and
    shave a little off correct answers in a broken format, so format is learned without
    ever paying more than a correct answer. ``no_answer`` applies when there is no complete
    ``<answer>`` (such a response is never well-formed). ``retrieval_bonus`` is added to
    answers that are given but not fully correct when a golden answer appeared in a retrieved
    document: it rewards finding the evidence, and is never added to a correct answer so
    the maximum stays ``correct_well_formed``.
    """

    correct_well_formed: float = 1.0
    correct_ill_formed: float = 0.8
    wrong_well_formed: float = 0.1
    wrong_ill_formed: float = 0.0
    no_answer: float = 0.0
    retrieval_bonus: float = 0.0


def format_score(metrics: Mapping[str, float], value: float, values: FormatValues) -> float:
    """Combine a match value in [0, 1] with well-formedness according to ``values``.

    ``value`` is the answer's match score (EM is 0/1; F1 interpolates between the wrong and
    correct rows).
    """
    if not metrics["has_answer"]:
        return values.no_answer
    if metrics["well_formed"]:
        lo, hi = values.wrong_well_formed, values.correct_well_formed
    else:
        lo, hi = values.wrong_ill_formed, values.correct_ill_formed
    score = lo + value * (hi - lo)
    if value < 1.0 and metrics["retrieval_hit"]:
        score += values.retrieval_bonus
    return score


@dataclass(frozen=True)
class MatchScorer:
    """Reward = the chosen match metric (``em``, ``f1`` or ``cover_em``) of the final answer."""

    metric: str = "em"

    def __post_init__(self) -> None:
        if self.metric not in MATCH_METRICS:
            raise ValueError(f"unknown match metric {self.metric!r}; expected one of {sorted(MATCH_METRICS)}")

    def __call__(self, inp: ScoreInput) -> ScoreOutput:
        metrics = metrics_of(inp)
        return ScoreOutput(metrics[self.metric], metrics)


@dataclass(frozen=True)
class FormatScorer:
    """Reward = :func:`format_score` of the chosen match metric and the response structure."""

    metric: str = "em"
    values: FormatValues = field(default_factory=FormatValues)

    def __post_init__(self) -> None:
        if self.metric not in MATCH_METRICS:
            raise ValueError(f"unknown match metric {self.metric!r}; expected one of {sorted(MATCH_METRICS)}")

    def __call__(self, inp: ScoreInput) -> ScoreOutput:
        metrics = metrics_of(inp)
        return ScoreOutput(format_score(metrics, metrics[self.metric], self.values), metrics)
