"""The tools' one HTTP layer: a pooled session per event loop, and a request retried within a deadline.

The retriever's client (``retrieval/client.py``) and the web-search client (``web/client.py``)
share it; each decides what its service's answers mean and words its own errors.

* ``LoopSession``: one pooled ``aiohttp.ClientSession`` per event loop, made on first use there.
* ``RetryPolicy``: how one call is retried: a timeout per attempt, a deadline over every attempt
  and wait, at most ``max_attempts`` attempts, exponential backoff with jitter between them, and
  how long a ``Retry-After`` may make it wait.
* ``with_retries(send, policy)``: ``send(timeout_s)`` until it returns. It is sent again when it
  raises ``Retryable`` (the client's verdict on an answer: a 5xx, a 429) or a transport error
  (``TRANSPORT_ERRORS``: a refused connection, a timeout); anything else it raises is raised at
  once (a 4xx is the caller's bug). Between attempts it waits the backoff, or longer where the
  answer's ``Retry-After`` asks (``retry_after_s``). It gives up with ``GaveUp`` (the attempts
  made, the time spent, the last error and, where the deadline ended it, why) after the last
  attempt, or as soon as the next one could not start before the deadline: it never waits for a
  retry it could not make.
"""

from __future__ import annotations

import asyncio
import email.utils
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

import aiohttp

__all__ = [
    "TRANSPORT_ERRORS",
    "GaveUp",
    "LoopSession",
    "RetryPolicy",
    "Retryable",
    "error_text",
    "retry_after_s",
    "with_retries",
]

T = TypeVar("T")

TRANSPORT_ERRORS = (aiohttp.ClientError, asyncio.TimeoutError, OSError)


class LoopSession:
    """One pooled ``aiohttp.ClientSession`` per event loop, made on first use in that loop.

    A session is bound to the loop that created it; a new loop (e.g. a new ``asyncio.run``)
    gets its own. A session left on a finished loop cannot be closed from here.
    ``keepalive_timeout``: the connector's (None: aiohttp's default).
    """

    def __init__(self, limit: int, keepalive_timeout: float | None = None) -> None:
        self.limit = limit
        self.keepalive_timeout = keepalive_timeout
        self._session: aiohttp.ClientSession | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def get(self) -> aiohttp.ClientSession:
        """The current loop's session."""
        loop = asyncio.get_running_loop()
        if self._session is None or self._session.closed or self._loop is not loop:
            keepalive = (
                {} if self.keepalive_timeout is None else {"keepalive_timeout": self.keepalive_timeout}
            )
            connector = aiohttp.TCPConnector(limit=self.limit, **keepalive)
            self._session = aiohttp.ClientSession(connector=connector)
            self._loop = loop
        return self._session

    async def close(self) -> None:
        """Close the current loop's session (idempotent)."""
        if (
            self._session is not None
            and not self._session.closed
            and self._loop is asyncio.get_running_loop()
        ):
            await self._session.close()
        self._session, self._loop = None, None


@dataclass(frozen=True)
class RetryPolicy:
    """How one call is retried (module docstring); raises ValueError naming a field out of range.

    No defaults: each client states its own (the retriever's and the web search's differ).

    ``timeout_s`` bounds one attempt (and is cut to what is left of the deadline);
    ``deadline_s`` bounds the whole call, of at most ``max_attempts`` attempts;
    ``backoff_base_s`` and ``backoff_max_s`` shape the backoff; ``max_retry_after_s`` is the
    longest a ``Retry-After`` may make a wait (None: as long as it asks, within the deadline).
    """

    timeout_s: float
    deadline_s: float
    max_attempts: int
    backoff_base_s: float
    backoff_max_s: float
    max_retry_after_s: float | None = None

    def __post_init__(self) -> None:
        for name in ("timeout_s", "deadline_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name}: expected > 0, got {getattr(self, name)}")
        if self.max_attempts < 1:
            raise ValueError(f"max_attempts: expected >= 1, got {self.max_attempts}")
        for name in ("backoff_base_s", "backoff_max_s"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name}: expected >= 0, got {getattr(self, name)}")

    def backoff(self, failed: int) -> float:
        """The wait after the ``failed``-th failed attempt (0-based): uniform in [cap/2, cap],
        cap = min(backoff_max_s, backoff_base_s * 2**failed).

        The jitter spreads the retries of many rollout workers, so a restarted server is not hit
        by all of them in the same millisecond.
        """
        cap = min(self.backoff_max_s, self.backoff_base_s * (2**failed))
        return random.uniform(cap / 2, cap)

    def wait(self, failed: int, retry_after: float | None) -> float:
        """The wait before the next attempt: the backoff, or the ``Retry-After`` where it asks more."""
        delay = self.backoff(failed)
        if retry_after is None:
            return delay
        asked = retry_after if self.max_retry_after_s is None else min(retry_after, self.max_retry_after_s)
        return max(delay, asked)


class Retryable(Exception):
    """An answer worth asking again (the client's verdict), with the wait its ``Retry-After`` asks."""

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class GaveUp(Exception):
    """``with_retries`` stopped without an answer; the client raises its own error from this."""

    def __init__(self, attempts: int, elapsed_s: float, last_error: str, why: str = "") -> None:
        said = f"; {why}" if why else ""
        super().__init__(f"{attempts} attempt(s) in {elapsed_s:.1f}s{said}; last error: {last_error}")
        self.attempts = attempts
        self.elapsed_s = elapsed_s
        self.last_error = last_error
        self.why = why


def retry_after_s(header: str | None) -> float | None:
    """A ``Retry-After`` header in seconds: delta-seconds or an HTTP date; None if absent or unreadable."""
    if not header:
        return None
    try:
        return max(0.0, float(header))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(header)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def error_text(exc: BaseException) -> str:
    """A transport error as the last error of a ``GaveUp``: its type, and its message if it has one."""
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


async def with_retries(
    send: Callable[[float], Awaitable[T]],
    policy: RetryPolicy,
    before: Callable[[int], Awaitable[None]] | None = None,
) -> T:
    """``await send(timeout_s)`` under ``policy`` (module docstring); ``GaveUp`` when it ends unanswered.

    ``before(attempt)`` (1-based), when given, runs before each attempt, inside the deadline
    (the web client waits there for its rate limit and counts its retries).
    """
    start = time.monotonic()
    last_error = "no attempt made"
    for attempt in range(1, policy.max_attempts + 1):
        if before is not None:
            await before(attempt)
        remaining = policy.deadline_s - (time.monotonic() - start)
        if remaining <= 0:
            raise GaveUp(attempt - 1, time.monotonic() - start, last_error, "deadline passed")
        retry_after: float | None = None
        try:
            return await send(min(policy.timeout_s, remaining))
        except Retryable as exc:
            last_error, retry_after = str(exc), exc.retry_after
        except TRANSPORT_ERRORS as exc:
            last_error = error_text(exc)
        if attempt == policy.max_attempts:
            break
        delay = policy.wait(attempt - 1, retry_after)
        elapsed = time.monotonic() - start
        if elapsed + delay >= policy.deadline_s:
            why = f"the next retry (in {delay:.1f}s) would pass the deadline of {policy.deadline_s}s"
            raise GaveUp(attempt, elapsed, last_error, why)
        await asyncio.sleep(delay)
    raise GaveUp(policy.max_attempts, time.monotonic() - start, last_error)
