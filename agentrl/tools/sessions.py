"""Per-trajectory tool sessions: opened at a trajectory's first call, closed with the trajectory.

A stateful tool (``open_session()``, see ``typed.py``) keeps one ``ToolSession`` per
trajectory, so state such as an interpreter's variables persists between that trajectory's
calls and is never seen by another. ``SessionTable`` is the dispatcher's record of them:

* the first call of trajectory ``uid`` to a tool opens its session (within the tool's
  ``timeout_s``); calls of one trajectory to one session run one after another, in the
  order they were made, each within ``timeout_s``;
* a call that outlives its deadline may still be running, so its session's state is
  unknown: that session is closed, and the trajectory's next call opens a fresh one;
* ``close_trajectory(uid)`` closes every session of ``uid`` (the rollout calls it when the
  trajectory ends, fails or is cancelled) and ``close_all()`` whatever is left when the
  rollout ends; a trajectory once closed opens no session again. No session outlives its
  trajectory: a session that finishes opening after its trajectory closed is closed at once.

A session whose ``close`` fails or hangs is dropped all the same: the failure is logged
and counted in ``close_failures``, never raised over the rollout's own outcome.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import Any

from agentrl.tools.base import ToolError, ToolResult, ToolTimeout
from agentrl.tools.typed import ToolSession, TypedTool, invoke, within_deadline

logger = logging.getLogger(__name__)


@dataclass
class _Slot:
    """One trajectory's hold on one stateful tool."""

    tool: TypedTool
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    session: ToolSession | None = None
    closed: bool = False


class SessionTable:
    """The open sessions of one rollout, by trajectory uid and tool name (see the module docstring)."""

    def __init__(self) -> None:
        self._slots: dict[str, dict[str, _Slot]] = {}
        self._closed_uids: set[str] = set()
        self._late: set[asyncio.Future[None]] = set()  # closing sessions that opened past their deadline
        self.opened = 0
        self.closed = 0
        self.close_failures = 0

    @property
    def open_count(self) -> int:
        """Sessions open now, over every trajectory."""
        return sum(s.session is not None for slots in self._slots.values() for s in slots.values())

    async def call(self, tool: TypedTool, uid: str, arguments: dict[str, Any]) -> ToolResult:
        """One call through trajectory ``uid``'s session of ``tool`` (opened on first use)."""
        if uid in self._closed_uids:
            raise ToolError(f"{tool.label}: trajectory {uid!r} is closed; it opens no new session")
        slot = self._slots.setdefault(uid, {}).setdefault(tool.name, _Slot(tool))
        async with slot.lock:  # FIFO: one trajectory's calls to one session keep their order
            if slot.closed:
                raise ToolError(f"{tool.label}: the session of trajectory {uid!r} was closed")
            if slot.session is None:
                session = await self._open(tool)
                if slot.closed:  # the trajectory closed while the session was opening
                    await self._close(tool, session)
                    raise ToolError(f"{tool.label}: the session of trajectory {uid!r} was closed")
                slot.session = session
            try:
                (result,) = await within_deadline(tool.call([arguments], session=slot.session), tool)
            except ToolTimeout as exc:
                session, slot.session = slot.session, None
                if session is not None:
                    await self._close(tool, session)
                raise ToolTimeout(f"{exc}; its session was closed, the next call opens a new one") from None
            return result

    async def close_trajectory(self, uid: str) -> None:
        """Close every session of trajectory ``uid``; later calls of ``uid`` fail by name."""
        self._closed_uids.add(uid)
        slots = self._slots.pop(uid, {})
        closing = []
        for slot in slots.values():
            slot.closed = True
            session, slot.session = slot.session, None
            if session is not None:
                closing.append(self._close(slot.tool, session))
        await asyncio.gather(*closing)

    async def close_all(self) -> None:
        """Close the sessions of every trajectory (the rollout's end)."""
        await asyncio.gather(*(self.close_trajectory(uid) for uid in list(self._slots)))
        await asyncio.gather(*self._late)

    async def _open(self, tool: TypedTool) -> ToolSession:
        opening = asyncio.ensure_future(tool.open_session())
        try:
            session = await within_deadline(asyncio.shield(opening), tool, "open a session")
        except BaseException:
            # Past the deadline (or cancelled) the opening goes on; a session it still
            # opens belongs to nobody, so it is closed as soon as it exists.
            opening.add_done_callback(lambda done: self._close_late(tool, done))
            raise
        self.opened += 1
        return session

    def _close_late(self, tool: TypedTool, opening: asyncio.Future[ToolSession]) -> None:
        if opening.cancelled() or opening.exception() is not None:
            return
        self.opened += 1
        closing = asyncio.ensure_future(self._close(tool, opening.result()))
        self._late.add(closing)
        closing.add_done_callback(self._late.discard)

    async def _close(self, tool: TypedTool, session: ToolSession) -> None:
        self.closed += 1
        try:
            await within_deadline(invoke(session.close), tool, "close a session")
        except Exception as exc:  # the session is dropped either way; the rollout's outcome stands
            self.close_failures += 1
            logger.warning("%s: closing a session failed: %s: %s", tool.label, type(exc).__name__, exc)
