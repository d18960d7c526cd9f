"""What one rollout produces: the prompt, the interleaved response, and its bookkeeping.

A trajectory's response is a sequence of *segments*: runs of tokens the policy sampled
(``Segment.MODEL``) alternating with runs of tokens the environment inserted
(``Segment.OBSERVATION``: retrieved documents, tool output, the invalid-action hint).
Every response token carries its segment label, so the loss mask is a lookup
(``segment == MODEL``) and never a guess from token values.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any


class Segment(IntEnum):
    """Per-token label of a response token. The values are what the trainer sees in
    ``response_segments``; 0 is padding so that a zero-initialised tensor is all padding."""

    PADDING = 0
    MODEL = 1
    OBSERVATION = 2


@dataclass(frozen=True)
class PromptSpec:
    """One question as the rollout receives it: already-tokenized prompt plus metadata
    that travels untouched to the reward and the logs."""

    prompt_ids: list[int]
    data_source: str = "unknown"
    ground_truth: Any = None
    index: Any = None  # the dataset row id; for logs only, never used as a group id
    extra_info: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.prompt_ids:
            raise ValueError("PromptSpec.prompt_ids must not be empty")
        if not all(isinstance(t, int) and t >= 0 for t in self.prompt_ids):
            raise ValueError("PromptSpec.prompt_ids must be non-negative ints")


@dataclass
class Truncation:
    """Every way a trajectory can be cut short. Counted, never silent.

    ``observation_tokens_cut``: tokens dropped from observations to fit ``max_obs_length``
    (``observations_cut`` counts the observations affected); ``context``: the trajectory
    ended because prompt + response would exceed ``max_prompt_length + max_response_length``;
    ``response_budget``: it ended because the response reached ``max_response_length``;
    ``turn_budget_hits``: turns that stopped at ``max_tokens_per_turn`` without a tag.
    """

    observations_cut: int = 0
    observation_tokens_cut: int = 0
    context: bool = False
    response_budget: bool = False
    turn_budget_hits: int = 0

    @property
    def any(self) -> bool:
        return bool(self.observations_cut or self.context or self.response_budget or self.turn_budget_hits)


@dataclass
class Trajectory:
    """One rollout of one prompt.

    ``response_ids``, ``segments`` and ``log_probs`` are aligned; ``log_probs`` holds the
    engine's log-prob of each MODEL token as sampled and 0.0 for observation tokens.
    ``segment_spans`` lists ``(segment, start, end)`` runs over the response, in order.
    """

    prompt: PromptSpec
    group_id: str
    uid: str
    response_ids: list[int] = field(default_factory=list)
    segments: list[int] = field(default_factory=list)
    log_probs: list[float] = field(default_factory=list)
    segment_spans: list[tuple[int, int, int]] = field(default_factory=list)
    num_turns: int = 0
    tool_calls: dict[str, int] = field(default_factory=dict)  # tool calls executed, per tool tag
    num_valid_actions: int = 0
    num_invalid_actions: int = 0
    finished: bool = False  # ended with a complete <answer>…</answer>
    # the body of that <answer>, written within one model turn; what the reward scores
    answer: str | None = None
    truncation: Truncation = field(default_factory=Truncation)
    tool_failures: int = 0  # tool calls that raised or timed out
    tool_metrics: dict[str, float] = field(default_factory=dict)  # summed ToolResult.metrics
    token_drift: int | None = None  # set when RolloutConfig.check_token_drift is on
    finish_reasons: list[str] = field(default_factory=list)  # engine finish reason per turn
    # (tool tag, text) of every tool result that became an observation, before wrapping and
    # truncation: what the tools returned, told apart from hints and error notes
    tool_outputs: list[tuple[str, str]] = field(default_factory=list)

    @property
    def prompt_ids(self) -> list[int]:
        return self.prompt.prompt_ids

    @property
    def loss_mask(self) -> list[int]:
        return [int(s == Segment.MODEL) for s in self.segments]

    @property
    def num_tool_calls(self) -> int:
        """Tool calls executed, all tools together."""
        return sum(self.tool_calls.values())

    @property
    def num_model_tokens(self) -> int:
        return sum(1 for s in self.segments if s == Segment.MODEL)

    def append(self, ids: list[int], segment: Segment, log_probs: list[float] | None = None) -> None:
        """Append one segment run; observation tokens get log-prob 0."""
        if not ids:
            return
        if log_probs is None:
            log_probs = [0.0] * len(ids)
        if len(log_probs) != len(ids):
            raise ValueError(f"{len(ids)} ids but {len(log_probs)} log-probs")
        start = len(self.response_ids)
        self.response_ids.extend(ids)
        self.segments.extend([int(segment)] * len(ids))
        self.log_probs.extend(float(x) for x in log_probs)
        self.segment_spans.append((int(segment), start, start + len(ids)))
