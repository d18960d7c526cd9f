"""One MCP server's client: connect (stdio or streamable HTTP), list, call, reconnect, close.

Built on the official ``mcp`` SDK (``ClientSession`` over ``stdio_client`` or
``streamable_http_client``), which is asyncio-based like the rollout. How it lives:

* **One connection per event loop, owned by a task of that loop.** The SDK's transports are
  anyio task groups that must be left by the task that entered them, so a connection is one
  owner task holding the transport and the session open until it is told to stop; calls from
  any task of the same loop share it (JSON-RPC multiplexes them). The rollout runs each step
  on its own loop (``asyncio.run``) and calls the tools' ``close()`` at its end, so a stdio
  server lives for one rollout: started lazily by the first call, stopped by ``close()``.
  A loop that ends without ``close()`` cancels the owner task, whose exit still stops the
  server (the SDK's shutdown is shielded and bounded).
* **Bounds.** Starting (spawn or HTTP connect, then ``initialize``) is bounded by
  ``connect_timeout_s``; every request by the caller's timeout (``ToolTimeout`` past it, the
  connection kept: the server may just be slow).
* **A dead server is a ``ToolError``, never a hang.** A server process that exits, a connection
  refused or lost: the call fails with ``ToolError`` naming the server, the connection is
  dropped, and the next call of that loop starts a new one, at most ``max_reconnects`` times
  per loop (per rollout); past that, calls fail at once until ``close()``.
* ``list_tools_blocking()`` lists the server's tools from synchronous code (the registry, the
  driver's check): it connects on a private loop in a thread of its own, lists every page, and
  stops the server again.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shlex
import sys
import threading
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import mcp_types
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from agentrl.tools.base import ToolError, ToolTimeout

T = TypeVar("T")

CLOSE_TIMEOUT_S = 10.0  # a connection's orderly close (the SDK's own stdio shutdown takes <= ~6 s)

__all__ = ["MCPClient", "MCPEndpoint"]


@dataclass(frozen=True)
class MCPEndpoint:
    """Where an MCP server is: a stdio ``command`` (argv) to launch, or a streamable HTTP ``url``."""

    command: tuple[str, ...] | None = None
    url: str | None = None
    env: dict[str, str] | None = None  # stdio: merged over the SDK's small safe default environment
    cwd: str | None = None

    @classmethod
    def of(
        cls,
        command: Sequence[str] | str | None,
        url: str | None,
        env: dict[str, str] | None = None,
        cwd: str | None = None,
    ) -> MCPEndpoint:
        """Checked: exactly one of ``command`` (a list, or a string split as a shell would) and ``url``."""
        if (command is None) == (url is None):
            raise ValueError(
                "an MCP server needs exactly one of 'command' (stdio) or 'url' (streamable HTTP)"
            )
        if command is not None:
            argv = tuple(shlex.split(command) if isinstance(command, str) else command)
            if not argv or not all(isinstance(a, str) and a for a in argv):
                raise ValueError(f"MCP server command must be a non-empty list of strings, got {command!r}")
            return cls(command=argv, env=dict(env) if env else None, cwd=cwd)
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise ValueError(f"MCP server url must be an http(s) URL, got {url!r}")
        if env or cwd:
            raise ValueError("MCP server options 'env' and 'cwd' apply to a stdio 'command', not a 'url'")
        return cls(url=url)

    def __str__(self) -> str:
        return f"MCP server {self.url}" if self.url else f"MCP server `{shlex.join(self.command or ())}`"

    def transport(self) -> contextlib.AbstractAsyncContextManager[Any]:
        """The SDK transport, yielding ``(read_stream, write_stream)``."""
        if self.url is not None:
            return streamable_http_client(self.url)
        argv = self.command or ()
        params = StdioServerParameters(command=argv[0], args=list(argv[1:]), env=self.env, cwd=self.cwd)
        return stdio_client(params, errlog=_server_stderr())


def _server_stderr() -> Any:
    """Where a stdio server's stderr goes: ours when it is a real file, else nowhere."""
    try:
        sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):
        return open(os.devnull, "w")  # noqa: SIM115 - handed to the subprocess
    return sys.stderr


def _reason(exc: BaseException) -> str:
    """A short text for ``exc``, an exception group flattened to its first leaf."""
    while isinstance(getattr(exc, "exceptions", None), (list, tuple)) and exc.exceptions:  # type: ignore[attr-defined]
        exc = exc.exceptions[0]  # type: ignore[attr-defined]
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


class _Connection:
    """One session with the server, held open by an owner task on the loop that started it."""

    def __init__(self, endpoint: MCPEndpoint, connect_timeout_s: float) -> None:
        self.endpoint = endpoint
        self.connect_timeout_s = connect_timeout_s
        self.session: ClientSession | None = None
        self.reason = ""  # why the connection ended, once it has
        loop = asyncio.get_running_loop()
        self._ready: asyncio.Future[None] = loop.create_future()
        self.ended: asyncio.Future[None] = loop.create_future()
        self._stop = asyncio.Event()
        self._task = loop.create_task(self._own())
        self._timer = loop.call_later(connect_timeout_s, self._start_timed_out)

    async def wait_ready(self) -> None:
        """Returns once the session is initialized; raises ``ToolError`` if the start failed."""
        await asyncio.shield(self._ready)

    async def _own(self) -> None:
        try:
            async with contextlib.AsyncExitStack() as stack:
                read, write = await stack.enter_async_context(self.endpoint.transport())
                session = await stack.enter_async_context(ClientSession(read, write))
                await session.initialize()
                self._timer.cancel()
                self.session = session
                self._ready.set_result(None)
                await self._stop.wait()
        except BaseException as exc:  # recorded for the callers; the owner task just ends
            self.reason = self.reason or _reason(exc)
            if not isinstance(exc, (Exception, asyncio.CancelledError)):
                raise
        finally:
            self._timer.cancel()
            self.reason = self.reason or "the connection was closed"
            if not self._ready.done():
                self._ready.set_exception(ToolError(f"{self.endpoint} did not start: {self.reason}"))
            if not self.ended.done():
                self.ended.set_result(None)

    def _start_timed_out(self) -> None:
        if not self._ready.done():
            self.reason = f"no answer to 'initialize' within {self.connect_timeout_s} s"
            self._ready.set_exception(ToolError(f"{self.endpoint} did not start: {self.reason}"))
            self._task.cancel()

    @property
    def alive(self) -> bool:
        """Started and not ended."""
        return self._ready.done() and self._ready.exception() is None and not self.ended.done()

    @property
    def failed(self) -> bool:
        """Ended, or its start failed (a connection still starting has not failed)."""
        return self.ended.done() or (self._ready.done() and self._ready.exception() is not None)

    async def request(self, make: Callable[[ClientSession], Awaitable[T]], timeout_s: float, what: str) -> T:
        """``make(session)`` bounded by ``timeout_s`` and raced against the connection's end."""
        assert self.session is not None
        task = asyncio.ensure_future(make(self.session))
        done, _ = await asyncio.wait(
            {task, self.ended}, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED
        )
        if task in done:
            return task.result()  # the SDK's own errors (MCPError, ...) are sorted out by the caller
        task.cancel()
        with contextlib.suppress(BaseException):
            await task
        if self.ended in done:
            raise ToolError(f"{self.endpoint}: the connection ended during {what}: {self.reason}")
        raise ToolTimeout(f"{self.endpoint} did not answer {what} within {timeout_s} s")

    async def close(self) -> None:
        """Stop the owner task, and with it a stdio server: let it leave its session (the SDK's
        shutdown: stdin closed, then SIGTERM, then SIGKILL), cancelled past ``CLOSE_TIMEOUT_S``."""
        self._stop.set()
        if not self._ready.done():
            self._task.cancel()
        done, _ = await asyncio.wait({self._task}, timeout=CLOSE_TIMEOUT_S)
        if not done:  # e.g. an HTTP server that does not answer the session's DELETE
            self._task.cancel()
            await asyncio.wait({self._task}, timeout=CLOSE_TIMEOUT_S)


@dataclass
class _LoopState:
    """The client's hold on one event loop: its live connection and the starts it has used."""

    connection: _Connection | None = None
    starts: int = 0
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    closing: set[asyncio.Future[None]] = field(default_factory=set)  # dropped connections closing


class MCPClient:
    """A lazily connected client of one MCP server (see the module docstring)."""

    def __init__(self, endpoint: MCPEndpoint, connect_timeout_s: float, max_reconnects: int) -> None:
        if connect_timeout_s <= 0:
            raise ValueError(f"connect_timeout_s must be > 0, got {connect_timeout_s}")
        if max_reconnects < 0:
            raise ValueError(f"max_reconnects must be >= 0, got {max_reconnects}")
        self.endpoint = endpoint
        self.connect_timeout_s = connect_timeout_s
        self.max_reconnects = max_reconnects
        self._loops: dict[asyncio.AbstractEventLoop, _LoopState] = {}

    # --- calls -----------------------------------------------------------------------

    async def call_tool(
        self, name: str, arguments: dict[str, Any], timeout_s: float
    ) -> mcp_types.CallToolResult:
        """One ``tools/call``: the result (``isError`` included), or ``ToolError``/``ToolTimeout``."""
        connection = await self._connection()
        what = f"a call of {name!r}"
        try:
            return await connection.request(lambda s: s.call_tool(name, arguments), timeout_s, what)
        except (ToolError, ToolTimeout):
            if not connection.alive:
                await self._drop(connection)
            raise
        except MCPError as exc:
            if exc.code == mcp_types.REQUEST_TIMEOUT:
                raise ToolTimeout(f"{self.endpoint} did not answer {what} within {timeout_s} s") from None
            if exc.code == mcp_types.CONNECTION_CLOSED or not connection.alive:
                await self._drop(connection)
                raise ToolError(f"{self.endpoint}: the connection ended during {what}: {exc}") from None
            raise ToolError(f"{self.endpoint} refused {what}: error {exc.code}: {exc}") from None
        except Exception as exc:  # a transport failure: the connection is not trusted again
            await self._drop(connection)
            raise ToolError(f"{self.endpoint}: {what} failed: {_reason(exc)}") from None

    async def list_tools(self, timeout_s: float) -> list[mcp_types.Tool]:
        """Every tool the server lists (all pages), each page bounded by ``timeout_s``."""
        connection = await self._connection()
        tools: list[mcp_types.Tool] = []
        cursor: str | None = None
        while True:
            params = None if cursor is None else mcp_types.PaginatedRequestParams(cursor=cursor)
            try:
                page = await connection.request(
                    lambda s, p=params: s.list_tools(params=p), timeout_s, "tools/list"
                )
            except (ToolError, ToolTimeout):
                raise
            except Exception as exc:
                raise ToolError(f"{self.endpoint}: tools/list failed: {_reason(exc)}") from None
            tools.extend(page.tools)
            cursor = page.next_cursor
            if not cursor:
                return tools

    def list_tools_blocking(self, timeout_s: float) -> list[mcp_types.Tool]:
        """``list_tools`` from synchronous code: on a private loop in its own thread, server stopped after."""

        async def once() -> list[mcp_types.Tool]:
            try:
                return await self.list_tools(timeout_s)
            finally:
                await self.close()

        return _run_on_own_loop(once, self.connect_timeout_s + timeout_s + 15.0, f"listing {self.endpoint}")

    # --- connections -----------------------------------------------------------------

    async def _connection(self) -> _Connection:
        """This loop's connection, started (or restarted, within the bound) if need be; calls made
        while it starts share the start."""
        state = self._state()
        async with state.lock:
            connection = state.connection
            if connection is not None and connection.failed:
                await self._drop(connection)
                connection = None
            if connection is None:
                if state.starts > self.max_reconnects:
                    raise ToolError(
                        f"{self.endpoint} was started {state.starts} times on this event loop (this "
                        f"rollout) and is gone again; it is not restarted (max_reconnects="
                        f"{self.max_reconnects}) until the tools are closed"
                    )
                state.starts += 1
                connection = state.connection = _Connection(self.endpoint, self.connect_timeout_s)
        try:
            await connection.wait_ready()
        except ToolError:
            await self._drop(connection)
            raise
        return connection

    def _state(self) -> _LoopState:
        loop = asyncio.get_running_loop()
        for old in [other for other in self._loops if other.is_closed()]:
            del self._loops[old]  # its loop ended, and its owner task with it
        return self._loops.setdefault(loop, _LoopState())

    async def _drop(self, connection: _Connection) -> None:
        """Forget a connection and close it in the background: the failed call answers at once,
        and ``close()`` still waits for it."""
        state = self._state()
        if state.connection is connection:
            state.connection = None
        closing = asyncio.ensure_future(connection.close())
        state.closing.add(closing)
        closing.add_done_callback(state.closing.discard)

    async def close(self) -> None:
        """Close this loop's connections (a stdio server stops); the next call starts afresh."""
        state = self._loops.pop(asyncio.get_running_loop(), None)
        if state is None:
            return
        current = [state.connection.close()] if state.connection is not None else []
        await asyncio.gather(*current, *state.closing)


def _run_on_own_loop(make: Callable[[], Awaitable[T]], timeout_s: float, what: str) -> T:
    """``asyncio.run(make())`` on a thread of its own (the caller may be inside a running loop)."""
    box: dict[str, Any] = {}

    def work() -> None:
        try:
            box["value"] = asyncio.run(_awaited(make))
        except BaseException as exc:  # handed to the caller below
            box["error"] = exc

    thread = threading.Thread(target=work, name="mcp-list-tools", daemon=True)
    thread.start()
    thread.join(timeout_s)
    if thread.is_alive():
        raise ToolError(f"{what} did not finish within {timeout_s} s")
    if "error" in box:
        raise box["error"]
    return box["value"]


async def _awaited(make: Callable[[], Awaitable[T]]) -> T:
    return await make()
