"""The tools' HTTP layer (``agentrl.tools.http``) against a real aiohttp server on 127.0.0.1.

The server answers from a script (a status, a ``Retry-After``, a wait) and records when each
request arrived, so what is asserted is what reached the socket: how many attempts, how far apart,
and when the call gave up. Every test sends a handful of requests to loopback and takes well
under two seconds.
"""

from __future__ import annotations

import asyncio
import email.utils
import socket
import time
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from agentrl.tools.http import (
    GaveUp,
    LoopSession,
    Retryable,
    RetryPolicy,
    retry_after_s,
    with_retries,
)

pytestmark = pytest.mark.timeout(30)


def policy(**fields: Any) -> RetryPolicy:
    """A policy with millisecond backoff unless a test says otherwise."""
    given = {
        "timeout_s": 2.0,
        "deadline_s": 5.0,
        "max_attempts": 4,
        "backoff_base_s": 0.01,
        "backoff_max_s": 0.02,
    }
    return RetryPolicy(**{**given, **fields})


async def scripted(script: list[tuple[int, dict[str, str], float]], arrivals: list[float]) -> TestServer:
    """A server whose k-th answer is ``script[k]`` (status, headers, wait first), then 200s."""

    async def answer(request: web.Request) -> web.Response:
        arrivals.append(time.monotonic())
        status, headers, wait = script.pop(0) if script else (200, {}, 0.0)
        await asyncio.sleep(wait)
        return web.json_response({"n": len(arrivals)}, status=status, headers=headers)

    app = web.Application()
    app.router.add_get("/", answer)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    return server


def sender(session: LoopSession, url: str) -> Callable[[float], Awaitable[Any]]:
    """One attempt as a client sends it: a 5xx is ``Retryable`` with its ``Retry-After``."""

    async def send(timeout_s: float) -> Any:
        timeout = aiohttp.ClientTimeout(total=timeout_s)
        async with session.get().get(url, timeout=timeout) as resp:
            if resp.status >= 500:
                raise Retryable(f"HTTP {resp.status}", retry_after_s(resp.headers.get("Retry-After")))
            return await resp.json()

    return send


def call(
    script: list[tuple[int, dict[str, str], float]], retry: RetryPolicy
) -> tuple[Any, list[float], float]:
    """What ``with_retries`` returned (or the ``GaveUp`` it raised), the arrivals, the seconds it took."""
    arrivals: list[float] = []

    async def run() -> tuple[Any, float]:
        server = await scripted(script, arrivals)
        session = LoopSession(limit=4)
        start = time.monotonic()
        try:
            return await with_retries(
                sender(session, str(server.make_url("/"))), retry
            ), time.monotonic() - start
        except GaveUp as exc:
            return exc, time.monotonic() - start
        finally:
            await session.close()
            await server.close()

    outcome, took = asyncio.run(run())
    return outcome, arrivals, took


def test_a_5xx_is_retried_after_the_wait_its_retry_after_asks_rather_than_the_backoff():
    body, arrivals, _ = call([(503, {"Retry-After": "0.4"}, 0.0)], policy())
    assert body == {"n": 2}
    assert arrivals[1] - arrivals[0] >= 0.35  # the backoff alone would wait <= 0.02 s


def test_a_retry_after_longer_than_max_retry_after_s_is_cut_to_it():
    body, arrivals, _ = call([(503, {"Retry-After": "30"}, 0.0)], policy(max_retry_after_s=0.1))
    assert body == {"n": 2}
    assert 0.09 <= arrivals[1] - arrivals[0] < 2.0


def test_a_retry_after_that_would_pass_the_deadline_gives_up_at_once_saying_why():
    gave_up, arrivals, took = call([(503, {"Retry-After": "30"}, 0.0)], policy(deadline_s=1.0))
    assert isinstance(gave_up, GaveUp) and len(arrivals) == 1
    assert took < 0.5  # not a wait for a retry it could not make
    assert (gave_up.attempts, gave_up.last_error) == (1, "HTTP 503")
    assert gave_up.why == "the next retry (in 30.0s) would pass the deadline of 1.0s"


def test_an_attempt_is_cut_to_what_is_left_of_the_deadline():
    gave_up, arrivals, took = call([(200, {}, 3.0)], policy(timeout_s=10.0, deadline_s=0.5))
    assert isinstance(gave_up, GaveUp) and len(arrivals) == 1
    assert 0.45 <= took < 1.5  # the slow answer's 3 s and the attempt's 10 s were never waited
    assert gave_up.last_error == "TimeoutError"


def test_it_gives_up_after_max_attempts_naming_the_attempts_and_the_last_error():
    gave_up, arrivals, _ = call([(500, {}, 0.0)] * 5, policy(max_attempts=3))
    assert isinstance(gave_up, GaveUp) and len(arrivals) == 3
    assert (gave_up.attempts, gave_up.last_error, gave_up.why) == (3, "HTTP 500", "")
    assert str(gave_up).startswith("3 attempt(s) in ") and str(gave_up).endswith("last error: HTTP 500")


def test_a_refused_connection_is_retried_and_named_in_the_last_error():
    with socket.socket() as probe:  # a loopback port nobody listens on once it is closed
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]

    async def run() -> GaveUp:
        session = LoopSession(limit=1)
        try:
            await with_retries(sender(session, f"http://127.0.0.1:{port}/"), policy(max_attempts=3))
        except GaveUp as exc:
            return exc
        finally:
            await session.close()
        raise AssertionError("a closed port answered")

    gave_up = asyncio.run(run())
    assert gave_up.attempts == 3 and "Connect" in gave_up.last_error


def test_an_error_that_is_not_retryable_is_raised_at_once_and_before_runs_before_each_attempt():
    seen: list[int] = []

    async def before(attempt: int) -> None:
        seen.append(attempt)

    async def send(timeout_s: float) -> None:
        if len(seen) < 2:
            raise Retryable("HTTP 502")
        raise LookupError("HTTP 404: the caller's bug")

    with pytest.raises(LookupError, match="the caller's bug"):
        asyncio.run(with_retries(send, policy(), before))
    assert seen == [1, 2]


def test_the_backoff_doubles_up_to_its_cap_with_jitter_below_it():
    retry = policy(backoff_base_s=0.1, backoff_max_s=0.5)
    for failed, cap in ((0, 0.1), (1, 0.2), (2, 0.4), (3, 0.5), (10, 0.5)):
        waits = [retry.backoff(failed) for _ in range(50)]
        assert all(cap / 2 <= w <= cap for w in waits) and len(set(waits)) > 1


def test_retry_after_reads_seconds_or_an_http_date_and_nothing_else():
    assert retry_after_s("2.5") == 2.5 and retry_after_s("-3") == 0.0
    in_ten = email.utils.formatdate(time.time() + 10, usegmt=True)
    assert 8.0 <= retry_after_s(in_ten) <= 10.5
    assert retry_after_s(None) is None and retry_after_s("") is None and retry_after_s("soon") is None


def test_a_policy_out_of_range_is_refused_naming_the_field():
    with pytest.raises(ValueError, match="deadline_s: expected > 0, got 0"):
        policy(deadline_s=0)
    with pytest.raises(ValueError, match="max_attempts: expected >= 1, got 0"):
        policy(max_attempts=0)
    with pytest.raises(ValueError, match="backoff_base_s: expected >= 0, got -1"):
        policy(backoff_base_s=-1)


def test_each_event_loop_gets_its_own_session_and_one_loop_keeps_its_one():
    pooled = LoopSession(limit=2)

    async def twice() -> tuple[aiohttp.ClientSession, aiohttp.ClientSession]:
        first, again = pooled.get(), pooled.get()
        await pooled.close()
        return first, again

    one, same = asyncio.run(twice())
    other, _ = asyncio.run(twice())
    assert one is same and other is not one and one.closed and other.closed
