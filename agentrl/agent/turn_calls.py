"""One turn's tool calls: which run, which are answered at once, and the tool message each one gets.

A turn may make several calls (``formats.TurnParse.calls``, in call order). ``plan_turn``
decides, call by call, before anything runs:

* a malformed call (``ParsedCall.error``) is not run; the policy reads the format's
  ``call_error_message`` for it, counted under its reason;
* a call past a budget is not run; its message says which budget was reached.
  ``max_calls_per_turn`` counts every call of the turn in order, malformed or not;
  ``max_calls_per_trajectory`` (None: no limit) counts the calls sent to the tools, over
  all the trajectory's turns;
* the other calls are sent to the tools, all of them concurrently (``TurnCalls.runs``).

``settle`` pairs the calls that ran with their ``ToolOutcome``s and gives every call of the
turn, in call order, its status and tool message: the tool's text, the error of a tool that
failed, or the format's error message for arguments the dispatcher refused (the schema).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from agentrl.agent.formats.base import ParsedCall, ToolCallFormat, ToolMessage
from agentrl.agent.tool_dispatch import ToolOutcome
from agentrl.tools.base import ToolResult

OK, FAILED, OVER_BUDGET, INVALID = "ok", "failed", "over_budget", "invalid/"


@dataclass(frozen=True)
class CallBudget:
    """How many calls one turn, and one trajectory, may make."""

    per_turn: int
    per_trajectory: int | None = None

    def turn_message(self) -> str:
        return (
            f"Error: this turn made more than {self.per_turn} tool calls, the budget of one turn; "
            "this call was not run."
        )

    def trajectory_message(self) -> str:
        return (
            f"Error: the budget of {self.per_trajectory} tool calls for the whole task is used up; "
            "this call was not run."
        )


@dataclass
class PlannedCall:
    """One call of a turn: run it (``message`` None) or answer it at once with ``message``."""

    call: ParsedCall
    status: str = OK  # until settled: the status of a call that is not run
    message: ToolMessage | None = None


@dataclass
class TurnCalls:
    """The calls of one turn, in call order, and how the turn ended (for the observation)."""

    turn: int  # the model turn that made them, from 0
    turn_closed: bool  # the sampled turn ended with the template's end-of-turn token
    calls: list[PlannedCall] = field(default_factory=list)
    sent: int = 0  # calls sent to the tools (what the trajectory's budget counts)

    @property
    def runs(self) -> list[tuple[str, dict[str, Any]]]:
        """The calls to run, ``(name, arguments)`` in call order."""
        return [(p.call.name, p.call.arguments) for p in self.calls if p.message is None]  # type: ignore[misc]


@dataclass(frozen=True)
class SettledCall:
    """One call of a turn once it is over: its status, its message, the tool's result if any."""

    call: ParsedCall
    status: str  # ok | failed | invalid/<reason> | over_budget
    message: ToolMessage
    result: ToolResult | None = None


def plan_turn(
    calls: Sequence[ParsedCall],
    fmt: ToolCallFormat,
    budget: CallBudget,
    *,
    turn: int,
    turn_closed: bool,
    sent_before: int,
) -> TurnCalls:
    """Which of a turn's calls run (module docstring); ``sent_before``: calls the trajectory's
    earlier turns sent to the tools."""
    planned = TurnCalls(turn, turn_closed)
    for k, call in enumerate(calls):
        name = call.name or ""
        if k >= budget.per_turn:
            planned.calls.append(PlannedCall(call, OVER_BUDGET, ToolMessage(name, budget.turn_message())))
        elif call.error is not None:
            message = fmt.call_error_message(call)
            planned.calls.append(PlannedCall(call, INVALID + call.error, message))
        elif budget.per_trajectory is not None and sent_before + planned.sent >= budget.per_trajectory:
            message = ToolMessage(name, budget.trajectory_message())
            planned.calls.append(PlannedCall(call, OVER_BUDGET, message))
        else:
            planned.calls.append(PlannedCall(call))
            planned.sent += 1
    return planned


def failure_text(error: str | None) -> str:
    """What the policy reads when a tool raised or timed out."""
    return f"Error: the tool call failed ({error})."


def settle(planned: TurnCalls, outcomes: Sequence[ToolOutcome], fmt: ToolCallFormat) -> list[SettledCall]:
    """Every call of the turn with its status and message; ``outcomes``: one per run, in order."""
    if len(outcomes) != len(planned.runs):
        raise ValueError(f"{len(outcomes)} outcomes for the turn's {len(planned.runs)} calls that ran")
    pending = iter(outcomes)
    settled = []
    for p in planned.calls:
        if p.message is not None:
            settled.append(SettledCall(p.call, p.status, p.message))
            continue
        outcome, name = next(pending), p.call.name or ""
        if outcome.result is not None:
            settled.append(SettledCall(p.call, OK, ToolMessage(name, outcome.result.text), outcome.result))
        elif outcome.invalid is not None:
            refused = ParsedCall(p.call.name, p.call.arguments, outcome.invalid, outcome.error or "")  # type: ignore[arg-type]
            settled.append(SettledCall(refused, INVALID + outcome.invalid, fmt.call_error_message(refused)))
        else:
            settled.append(SettledCall(p.call, FAILED, ToolMessage(name, failure_text(outcome.error))))
    return settled
