"""What one rollout produces: the prompt, the interleaved response, and its bookkeeping.

A trajectory's response is a sequence of *segments*: runs of tokens the policy sampled
(``Segment.MODEL``) alternating with runs of tokens the environment inserted
(``Segment.OBSERVATION``: retrieved documents, tool output, the invalid-action hint).
Every response token carries its segment label, so the loss mask is a lookup
(``segment == MODEL``) and never a guess from token values. ``Trajectory.calls`` logs every
tool call a turn made (``CallRecord``: its arguments, what came of it, the tool message the
policy read), for dumps and the viewer.

A trajectory is one sample unless its next turn cannot be sampled from the tokens before
it plus an observation: a chat template that rewrites earlier turns (Qwen3 drops an earlier
turn's empty ``<think>`` block), or a context policy that compacted old observations. Then
it continues as a new *step* (``Step``): the prompt is the conversation as it is now, the
response what the model samples from there. ``Trajectory.steps`` holds the closed steps;
the live fields (``response_ids``, ``segments``, …) are the current step's, its prompt
``step_prompt_ids`` (None: the prompt's own). Every sampled token is in exactly one step.
"""

from __future__ import annotations

from collections.abc import Mapping
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
    that travels untouched to the reward and the logs.

    ``messages``: the chat messages ``prompt_ids`` were encoded from. When given, the rollout
    encodes them again through its tool-call format (``formats/``), which for ``hermes``
    renders the tools' schemas into the prompt; the ``tags`` format's encoding is the data's
    own (``prompts.encode_messages``), so its ids are unchanged. ``hermes`` needs them.
    """

    prompt_ids: list[int]
    data_source: str = "unknown"
    ground_truth: Any = None
    index: Any = None  # the dataset row id; for logs only, never used as a group id
    extra_info: dict[str, Any] = field(default_factory=dict)
    messages: list[dict[str, Any]] | None = None

    def __post_init__(self) -> None:
        if not self.prompt_ids:
            raise ValueError("PromptSpec.prompt_ids must not be empty")
        if not all(isinstance(t, int) and t >= 0 for t in self.prompt_ids):
            raise ValueError("PromptSpec.prompt_ids must be non-negative ints")
        if self.messages is not None and not (
            self.messages and all(isinstance(m, Mapping) and "content" in m for m in self.messages)
        ):
            raise ValueError("PromptSpec.messages must be a non-empty list of {'role', 'content'} dicts")


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


@dataclass(frozen=True)
class CallRecord:
    """One tool call of a turn as the policy made it, and what it read back.

    ``status``: ``ok`` (the tool answered), ``failed`` (it raised or timed out),
    ``invalid/<reason>`` (malformed, never run: ``formats.MalformedReason``) or
    ``over_budget`` (past ``max_calls_per_turn`` / ``max_calls_per_trajectory``, never run).
    ``message``: the tool message's content the policy read for it, before the
    observation's cut to ``max_obs_length``.
    """

    turn: int  # the model turn that made it, from 0
    name: str | None  # the tool's name; None when the call named none
    arguments: dict[str, Any] | None  # None when they could not be read
    status: str
    message: str


StepReason = str  # why a step began: "start" | "history_rewritten" | "context_compacted"


@dataclass
class Step:
    """One sample of a trajectory: a prompt and the response sampled from it (see the module
    docstring). ``turns``: the model turns whose sampled tokens it holds, in order;
    ``turn_ends``: the position in ``response_ids`` of each of those turns' last token."""

    prompt_ids: list[int]
    response_ids: list[int]
    segments: list[int]
    log_probs: list[float]
    segment_spans: list[tuple[int, int, int]]
    turns: list[int]
    turn_ends: list[int]
    reason: StepReason = "start"
    # the observation that answered the step's last turn, read by the policy in the next step's
    # prompt: not in this step's row (never trained), kept for the trajectory's text
    tail_ids: list[int] = field(default_factory=list)

    @property
    def num_model_tokens(self) -> int:
        return sum(1 for s in self.segments if s == Segment.MODEL)


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
    tool_calls: dict[str, int] = field(default_factory=dict)  # tool calls executed, per tool name
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
    # (tool name, text) of every tool result that became an observation, before wrapping and
    # truncation: what the tools returned, told apart from hints and error notes
    tool_outputs: list[tuple[str, str]] = field(default_factory=list)
    # malformed calls (and turns that neither call nor answer) by reason: formats.MalformedReason
    tool_calls_invalid: dict[str, int] = field(default_factory=dict)
    calls_over_budget: int = 0  # calls not run: past the per-turn or per-trajectory call budget
    calls: list[CallRecord] = field(default_factory=list)  # every call of every turn, in order
    # per model turn: the rewards its tools returned with their results (ToolResult.reward), summed
    turn_rewards: list[float] = field(default_factory=list)
    context_compactions: int = 0  # times the context policy compacted the conversation (context.py)
    # per model turn: the version of the weights that sampled it (engines/version.py); a trajectory
    # continued across a weight update (a partial rollout) holds both
    turn_versions: list[int] = field(default_factory=list)
    # the score an agent harness gave the trajectory (endpoint/agents.py), used instead of the
    # reward's rule; None: the rule scores it
    outcome_reward: float | None = None
    steps: list[Step] = field(default_factory=list)  # the closed steps, in order (module docstring)
    step_prompt_ids: list[int] | None = None  # the current step's prompt; None: the prompt's own
    step_reason: StepReason = "start"  # why the current step began
    step_turns: list[int] = field(default_factory=list)  # the current step's model turns
    step_turn_ends: list[int] = field(default_factory=list)  # their last tokens' positions

    @property
    def prompt_ids(self) -> list[int]:
        """The prompt the current step was sampled from (the prompt's own in the first step)."""
        return self.prompt.prompt_ids if self.step_prompt_ids is None else self.step_prompt_ids

    @property
    def current_step(self) -> Step:
        return Step(
            list(self.prompt_ids),
            list(self.response_ids),
            list(self.segments),
            list(self.log_probs),
            list(self.segment_spans),
            list(self.step_turns),
            list(self.step_turn_ends),
            self.step_reason,
        )

    @property
    def all_steps(self) -> list[Step]:
        """Every step, the current one last: one for an append-only trajectory."""
        return [*self.steps, self.current_step]

    @property
    def num_steps(self) -> int:
        return len(self.steps) + 1

    def begin_step(self, prompt_ids: list[int], reason: StepReason) -> None:
        """Close the current step (its trailing observation dropped: the next step's prompt
        holds the conversation as it is now) and begin another from ``prompt_ids``."""
        last_model = max((end for seg, _, end in self.segment_spans if seg == Segment.MODEL), default=0)
        closed = self.current_step
        closed.tail_ids = closed.response_ids[last_model:]
        closed.response_ids = closed.response_ids[:last_model]
        closed.segments = closed.segments[:last_model]
        closed.log_probs = closed.log_probs[:last_model]
        closed.segment_spans = [span for span in closed.segment_spans if span[2] <= last_model]
        self.steps.append(closed)
        self.step_prompt_ids = list(prompt_ids)
        self.step_reason = reason
        self.response_ids, self.segments, self.log_probs, self.segment_spans = [], [], [], []
        self.step_turns, self.step_turn_ends = [], []

    def response_ids_of_all_steps(self) -> list[int]:
        """Every step's response and the observation after it, in order: everything the policy
        sampled and read after the prompt, for the reward's text and the evaluation."""
        return [t for step in self.all_steps for t in (*step.response_ids, *step.tail_ids)]

    @property
    def loss_mask(self) -> list[int]:
        return [int(s == Segment.MODEL) for s in self.segments]

    @property
    def num_tool_calls(self) -> int:
        """Tool calls executed, all tools together."""
        return sum(self.tool_calls.values())

    @property
    def num_invalid_calls(self) -> int:
        """Malformed calls and invalid turns, all reasons together (what ``format_penalty`` reads)."""
        return sum(self.tool_calls_invalid.values())

    @property
    def num_model_tokens(self) -> int:
        """Sampled tokens in every step."""
        return sum(step.num_model_tokens for step in self.steps) + sum(
            1 for s in self.segments if s == Segment.MODEL
        )

    def add_turn(self, ids: list[int], log_probs: list[float], finish_reason: str, version: int = 0) -> int:
        """Record one sampled model turn: its tokens in the current step, its place among the
        step's turns (where it ends), a zero turn reward for the tools to add to, why it ended, and
        the version of the weights that sampled it. Returns the turn's number (from 0)."""
        self.append(ids, Segment.MODEL, log_probs)
        turn = self.num_turns
        self.num_turns += 1
        self.turn_rewards.append(0.0)
        self.turn_versions.append(version)
        if ids:
            self.step_turns.append(turn)
            self.step_turn_ends.append(len(self.response_ids) - 1)
        self.finish_reasons.append(finish_reason)
        return turn

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
