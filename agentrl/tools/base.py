"""The ``Tool`` protocol: what the rollout needs from anything the policy can call.

A tool is called by a tag pair in the policy's output: the search tool by
``<search> query </search>``, the calculator by ``<calculate> 3 * 4 </calculate>``. The
rollout manager stops a turn at the closing tag, hands the text between the tags to the
tool, and appends what the tool returns as an observation segment (masked from the loss).

Tools take a *batch* of calls because real back ends (a retriever, a sandbox pool) are
much faster batched; the manager coalesces calls that arrive together. A tool reports
per-call problems the policy caused (a malformed expression) in its ``ToolResult`` text;
it raises only when the tool itself failed (server down), and the manager turns that
into an error observation or a rollout failure per ``tool_error_policy``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from agentrl.tools.rules import check_tag, check_timeout


@dataclass
class ToolResult:
    """What one call returns: the observation text (without the ``<information>`` wrapper,
    which the manager adds), numeric metrics summed per trajectory (e.g. ``docs``), and
    optionally a reward for the turn that made the call."""

    text: str
    metrics: dict[str, float] = field(default_factory=dict)
    # this call's reward, placed on the last token of the turn that made it (summed over the
    # turn's calls); None: the tool gives none
    reward: float | None = None


class ToolError(RuntimeError):
    """A tool failed to produce results (not the policy's fault)."""


class ToolTimeout(TimeoutError):
    """A tool call exceeded its ``timeout_s``."""


class ToolContractError(RuntimeError):
    """A tool broke its contract (e.g. returned the wrong number of results): a bug in the tool,
    raised whatever ``tool_error_policy`` says, never retried or turned into an observation."""


@runtime_checkable
class Tool(Protocol):
    """A callable environment action.

    ``name`` is for logs and errors; ``tag`` is the tag that calls it (``"search"`` for
    ``<search>…</search>``); ``timeout_s`` bounds one ``execute`` call (the manager
    enforces it, so a hung back end can never hang the rollout).
    """

    name: str
    tag: str
    timeout_s: float

    # Optional: ``argument`` (default "query") and ``description`` give the tool's derived
    # ``ToolSpec`` (one required string parameter), which the ``hermes`` format shows the model.

    async def execute(self, calls: list[str]) -> list[ToolResult]:
        """One result per call, in order. ``calls`` are the stripped texts between the tags."""
        ...


def validate_tool(tool: object, where: str) -> Tool:
    """Check that a tag tool fits the protocol, with an error that says what is missing
    (a schema tool, one with a ``spec``, is checked by ``agentrl.tools.typed.as_typed``); its tag
    and timeout by the rules of ``agentrl.tools.rules``."""
    for attr in ("name", "tag", "timeout_s", "execute"):
        if not hasattr(tool, attr):
            raise TypeError(
                f"{where}: tool {type(tool).__name__} has no '{attr}' (see agentrl.tools.base.Tool)"
            )
    check_tag(tool.tag, where)  # type: ignore[attr-defined]
    check_timeout(tool.timeout_s, where)  # type: ignore[attr-defined]
    return tool  # type: ignore[return-value]
