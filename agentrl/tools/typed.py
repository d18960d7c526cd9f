"""One face for every tool: ``as_typed`` turns a tag tool or a schema tool into a ``TypedTool``.

Two kinds of tool plug in:

* a **tag tool** (``base.Tool``: ``name``, ``tag``, ``timeout_s``, ``execute(list[str])``) is a
  tool with one required string parameter: its ``ToolSpec`` is derived, the parameter named by
  the optional attribute ``argument`` (default ``"query"``), described by the optional
  attribute ``description``, and the tool's name is its tag (unique by construction);
* a **schema tool** declares ``spec: ToolSpec`` and ``timeout_s`` and implements
  ``call(arguments: list[dict]) -> list[ToolResult]`` (one result per call, in order), or
  ``open_session() -> ToolSession`` when it keeps per-trajectory state (``sessions.py``); an
  optional ``tag`` names it in the tags format (default: ``spec.name``).

``TypedTool.call`` runs either kind. A synchronous ``execute``/``call``/``open_session`` (not
a coroutine function) runs on a daemon thread of its own, so its caller's deadline
(``within_deadline``) fires on time; a thread cannot be killed, so one that outlives its
deadline finishes in the background and its result is dropped. A tool that returns the
wrong number of results, or something that is not a ``ToolResult``, raises
``ToolContractError`` naming the tool.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import threading
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Protocol, TypeVar, runtime_checkable

from agentrl.tools.base import ToolContractError, ToolResult, ToolTimeout, validate_tool
from agentrl.tools.rules import check_tag, check_timeout
from agentrl.tools.spec import ToolSpec

DEFAULT_ARGUMENT = "query"

T = TypeVar("T")


@runtime_checkable
class ToolSession(Protocol):
    """One trajectory's state in a stateful tool (e.g. an interpreter whose variables persist)."""

    async def call(self, arguments: dict[str, Any]) -> ToolResult:
        """One call's result; the session's state carries over to the next call."""
        ...

    async def close(self) -> None:
        """Release the state; called once, when the trajectory ends, fails or is cancelled."""
        ...


@runtime_checkable
class SchemaTool(Protocol):
    """A tool declared by its schema; arguments reach ``call`` already checked against it."""

    spec: ToolSpec
    timeout_s: float

    async def call(self, arguments: list[dict[str, Any]]) -> list[ToolResult]:
        """One result per call, in order."""
        ...


async def in_thread(fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)`` on a daemon thread of its own, awaited without blocking the event loop.

    Not ``asyncio.to_thread``: its pool is shared and bounded, and ``asyncio.run`` waits for
    its threads at exit, so one hung tool would stall every later call and the rollout's end.
    """
    loop = asyncio.get_running_loop()
    future: asyncio.Future[T] = loop.create_future()

    def settle(value: Any, error: BaseException | None) -> None:
        if future.done():  # the caller's deadline passed: the late answer is dropped
            return
        if error is None:
            future.set_result(value)
        else:
            future.set_exception(error)

    def work() -> None:
        try:
            value, error = fn(*args), None
        except BaseException as exc:  # handed to the awaiting coroutine, re-raised there
            value, error = None, exc
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits any more
            loop.call_soon_threadsafe(settle, value, error)

    threading.Thread(target=work, name=f"tool-{getattr(fn, '__qualname__', 'call')}", daemon=True).start()
    return await future


async def invoke(fn: Callable[..., Any], *args: Any) -> Any:
    """Await ``fn(*args)``: a coroutine function on the loop, anything else on its own thread."""
    if inspect.iscoroutinefunction(fn):
        return await fn(*args)
    result = await in_thread(fn, *args)
    if inspect.isawaitable(result):  # a plain function that returned a coroutine
        result = await result
    return result


async def within_deadline(awaitable: Awaitable[T], tool: TypedTool, doing: str = "answer") -> T:
    """``awaitable`` bounded by the tool's ``timeout_s``; past it, ``ToolTimeout`` names the tool."""
    try:
        return await asyncio.wait_for(awaitable, timeout=tool.timeout_s)
    except ToolTimeout:  # the tool's own, finer deadline (a subclass of TimeoutError): its message stands
        raise
    except asyncio.TimeoutError:
        raise ToolTimeout(f"{tool.label} did not {doing} within {tool.timeout_s} s") from None


class TypedTool:
    """The uniform object the rollout uses for every tool (build it with ``as_typed``)."""

    def __init__(self, raw: Any, spec: ToolSpec, tag: str, timeout_s: float, argument: str | None) -> None:
        self.raw = raw
        self.spec = spec
        self.name = spec.name
        self.tag = tag
        self.timeout_s = timeout_s
        self.argument = argument  # the one string parameter of a tag tool; None for a schema tool
        self.stateful = callable(getattr(raw, "open_session", None))
        self.label = f"tool {getattr(raw, 'name', spec.name)!r} <{tag}>"  # for errors and logs

    def __repr__(self) -> str:
        return f"TypedTool({self.label}, stateful={self.stateful})"

    async def call(
        self, arguments: Sequence[Mapping[str, Any]], session: ToolSession | None = None
    ) -> list[ToolResult]:
        """One result per call, in order; through ``session`` (one call after another) when given."""
        if session is not None:
            results = [await invoke(session.call, dict(a)) for a in arguments]
        elif self.stateful and not callable(getattr(self.raw, "call", None)):
            raise ToolContractError(f"{self.label} keeps sessions: call it through a session")
        elif self.argument is not None:
            results = await invoke(self.raw.execute, [str(a[self.argument]).strip() for a in arguments])
        else:
            results = await invoke(self.raw.call, [dict(a) for a in arguments])
        return self._checked(results, len(arguments))

    async def open_session(self) -> ToolSession:
        """A new session of a stateful tool."""
        session = await invoke(self.raw.open_session)
        for method in ("call", "close"):
            if not callable(getattr(session, method, None)):
                raise ToolContractError(
                    f"{self.label}: open_session returned {type(session).__name__}, which has no '{method}'"
                )
        return session

    async def close(self) -> None:
        """The tool's optional ``close`` (per-event-loop resources), run on the loop that owns them."""
        close = getattr(self.raw, "close", None)
        if close is not None:
            result = close()
            if inspect.isawaitable(result):
                await result

    def _checked(self, results: Any, expected: int) -> list[ToolResult]:
        if not isinstance(results, (list, tuple)):
            raise ToolContractError(
                f"{self.label} returned {type(results).__name__}, expected a list of {expected} ToolResult"
            )
        if len(results) != expected:
            raise ToolContractError(f"{self.label} returned {len(results)} results for {expected} calls")
        for i, result in enumerate(results):
            if not isinstance(result, ToolResult):
                raise ToolContractError(
                    f"{self.label} returned {type(result).__name__} for call {i}, expected a ToolResult"
                )
        return list(results)


def tag_tool_spec(tool: Any) -> ToolSpec:
    """The spec of a tag tool: its tag as name, one required string parameter."""
    argument = getattr(tool, "argument", DEFAULT_ARGUMENT)
    description = getattr(tool, "description", None) or f"Call {tool.tag} with one string."
    parameters = {
        "type": "object",
        "properties": {argument: {"type": "string"}},
        "required": [argument],
        "additionalProperties": False,
    }
    return ToolSpec(tool.tag, description, parameters)


def as_typed(tool: Any, where: str = "tool") -> TypedTool:
    """``tool`` checked (errors say what is missing, prefixed by ``where``) and wrapped."""
    if isinstance(tool, TypedTool):
        return tool
    if not hasattr(tool, "spec"):
        validate_tool(tool, where)
        argument = getattr(tool, "argument", DEFAULT_ARGUMENT)
        if not isinstance(argument, str) or not argument.isidentifier():
            raise ValueError(f"{where}: tool argument must be an identifier like 'query', got {argument!r}")
        return TypedTool(tool, tag_tool_spec(tool), tool.tag, tool.timeout_s, argument)
    kind = type(tool).__name__
    if not isinstance(tool.spec, ToolSpec):
        raise TypeError(f"{where}: tool {kind}.spec must be a ToolSpec, got {type(tool.spec).__name__}")
    if not (callable(getattr(tool, "call", None)) or callable(getattr(tool, "open_session", None))):
        raise TypeError(
            f"{where}: tool {kind} has a spec but neither 'call' nor 'open_session' (see agentrl.tools.typed)"
        )
    if not hasattr(tool, "timeout_s"):
        raise TypeError(f"{where}: tool {kind} has no 'timeout_s' (see agentrl.tools.typed)")
    check_timeout(tool.timeout_s, where)
    tag = check_tag(getattr(tool, "tag", tool.spec.name), where)
    return TypedTool(tool, tool.spec, tag, tool.timeout_s, argument=None)
