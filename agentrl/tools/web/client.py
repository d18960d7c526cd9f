"""One web search over HTTP against Serper's Google search API: rate-limited, retried, counted.

The API (https://serper.dev; its request and response schema as published, e.g.
https://schemas.apis.io/schemas/serper/serper-search-request/ and
.../serper-search-response/): ``POST {base_url}/search`` with the key in the ``X-API-KEY``
header and a JSON body ``{"q": query, "num": n}`` (optionally ``gl``, country, and ``hl``,
language); a 200 answer is a JSON object whose ``organic`` list holds the results,
``{"title", "link", "snippet", "position", ...}``, best first; an error is a status with
``{"message": ..., "statusCode": ...}``.

Reliability and cost:

* every HTTP request waits for a token of a ``TokenBucket`` (``requests_per_s``, per
  process), retries included;
* 429, 5xx, timeouts and connection errors are retried up to ``max_retries`` times with
  exponential backoff and jitter, waiting at least what a ``Retry-After`` header asks, all
  inside ``deadline_s`` (the tools' HTTP layer, ``agentrl/tools/http.py``); past them, or when
  the next retry could not start before the deadline, ``WebSearchUnavailable`` names the URL,
  the attempts and the last error;
* any other 4xx (a bad key, no credits left, a bad request) is not retried:
  ``WebSearchRejected`` names the status and the API's own message;
* ``Attempts`` counts what one search cost: requests sent, retries, billed answers (200s).

The key is read from the environment variable ``api_key_env`` at each request; it is never
logged and is scrubbed from any error text the API echoes.
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time
from dataclasses import dataclass
from typing import Any

import aiohttp

from agentrl.tools.base import ToolError
from agentrl.tools.http import GaveUp, LoopSession, Retryable, RetryPolicy, retry_after_s, with_retries

__all__ = [
    "SERPER_URL",
    "Attempts",
    "SerperClient",
    "TokenBucket",
    "WebSearchError",
    "WebSearchRejected",
    "WebSearchUnavailable",
]

SERPER_URL = "https://google.serper.dev"
SEARCH_PATH = "/search"


class WebSearchError(ToolError):
    """The web-search API did not produce results (not the policy's fault)."""


class WebSearchRejected(WebSearchError):
    """The API refused the request with a 4xx other than 429; retrying would not help."""

    def __init__(self, url: str, status: int, message: str) -> None:
        super().__init__(f"web search at {url} rejected the request (HTTP {status}): {message}")
        self.status = status


class WebSearchUnavailable(WebSearchError):
    """Retries or the deadline ran out on 429/5xx/timeouts/connection errors."""

    def __init__(self, url: str, attempts: int, elapsed_s: float, last_error: str, why: str = "") -> None:
        super().__init__(
            f"web search at {url} failed after {attempts} attempt(s) in {elapsed_s:.1f}s"
            f"{'; ' + why if why else ''}; last error: {last_error}"
        )
        self.attempts = attempts


@dataclass
class Attempts:
    """What one search cost: HTTP requests sent, of them retries, and billed (200) answers."""

    requests: int = 0
    retries: int = 0
    billed: int = 0


class TokenBucket:
    """Requests per second with a burst: ``await acquire()`` waits for the next free slot.

    A caller reserves its slot at once (the balance may go negative: the queue of callers
    already waiting), so callers are served in arrival order and no lock is held while
    waiting. A caller cancelled while waiting gives its token back.
    """

    def __init__(self, rate: float, burst: float = 1.0) -> None:
        if rate <= 0:
            raise ValueError(f"requests_per_s must be > 0, got {rate}")
        if burst < 1:
            raise ValueError(f"rate-limit burst must be >= 1, got {burst}")
        self.rate = rate
        self.burst = float(burst)
        self._tokens = float(burst)
        self._stamp = time.monotonic()
        self._lock = threading.Lock()  # a tool may serve event loops on several threads

    def reserve(self) -> float:
        """Take a token; the seconds to wait before using it."""
        with self._lock:
            now = time.monotonic()
            self._tokens = min(self.burst, self._tokens + (now - self._stamp) * self.rate)
            self._stamp = now
            self._tokens -= 1.0
            return 0.0 if self._tokens >= 0 else -self._tokens / self.rate

    def refund(self) -> None:
        with self._lock:
            self._tokens = min(self.burst, self._tokens + 1.0)

    async def acquire(self) -> None:
        delay = self.reserve()
        if delay > 0:
            try:
                await asyncio.sleep(delay)
            except asyncio.CancelledError:
                self.refund()
                raise


class SerperClient:
    """Serper's search endpoint with one pooled HTTP session per event loop (module docstring).

    ``retry``: one search's timeout per request, deadline, attempts (``max_retries + 1``) and
    backoff; ``limiter``: the rate limit every request waits for; ``params``: extra body fields
    (``gl``, ``hl``), part of every cache key.
    """

    api = "serper"

    def __init__(
        self,
        base_url: str = SERPER_URL,
        api_key_env: str = "SERPER_API_KEY",
        *,
        retry: RetryPolicy,
        limiter: TokenBucket | None = None,
        params: dict[str, Any] | None = None,
    ) -> None:
        self.url = base_url.rstrip("/") + SEARCH_PATH
        self.api_key_env = api_key_env
        self.retry = retry
        self.limiter = limiter
        self.params = dict(params or {})
        self._session = LoopSession(limit=64)

    async def close(self) -> None:
        """Close the current loop's HTTP session (idempotent)."""
        await self._session.close()

    def _key(self) -> str:
        key = os.environ.get(self.api_key_env, "").strip()
        if not key:
            raise WebSearchError(
                f"the web-search API key is not set: export it in the environment variable {self.api_key_env}"
            )
        return key

    async def search(self, query: str, num: int, attempts: Attempts) -> list[dict[str, Any]]:
        """The organic results of ``query``, best first, each ``{"title", "link", "snippet", "position"}``;
        ``attempts`` counts the requests, retries and billed answers it cost."""
        key = self._key()
        payload = {"q": query, "num": num, **self.params}

        async def before(attempt: int) -> None:
            if attempt > 1:
                attempts.retries += 1
            if self.limiter is not None:  # inside the deadline: a long queue for the rate limit counts
                await self.limiter.acquire()

        async def send(timeout_s: float) -> Any:
            attempts.requests += 1
            body = await self._post(key, payload, timeout_s)
            attempts.billed += 1
            return body

        try:
            body = await with_retries(send, self.retry, before)
        except GaveUp as exc:
            raise WebSearchUnavailable(
                self.url, exc.attempts, exc.elapsed_s, exc.last_error, exc.why
            ) from None
        return self._organic(body)

    async def _post(self, key: str, payload: dict[str, Any], timeout_s: float) -> Any:
        headers = {"X-API-KEY": key, "Content-Type": "application/json"}
        timeout = aiohttp.ClientTimeout(total=timeout_s)
        async with self._session.get().post(self.url, json=payload, headers=headers, timeout=timeout) as resp:
            if resp.status == 200:
                try:
                    return await resp.json(content_type=None)
                except ValueError:
                    text = _scrub(await resp.text(), key)[:300]
                    raise WebSearchRejected(self.url, 200, f"the answer is not JSON: {text!r}") from None
            message = _scrub(_api_message(await resp.text()), key)
            if resp.status == 429 or resp.status >= 500:
                raise Retryable(
                    f"HTTP {resp.status}: {message}", retry_after_s(resp.headers.get("Retry-After"))
                )
            raise WebSearchRejected(self.url, resp.status, message)

    def _organic(self, body: Any) -> list[dict[str, Any]]:
        if not isinstance(body, dict):
            raise WebSearchRejected(self.url, 200, f"expected a JSON object, got {type(body).__name__}")
        organic = body.get("organic", [])  # a query with no results may omit the list
        if not isinstance(organic, list):
            raise WebSearchRejected(self.url, 200, f"'organic' is {type(organic).__name__}, not a list")
        return [
            {
                "title": str(item.get("title", "")),
                "link": str(item.get("link", "")),
                "snippet": str(item.get("snippet", "")),
                "position": item.get("position", i + 1),
            }
            for i, item in enumerate(organic)
            if isinstance(item, dict)
        ]


def _api_message(text: str) -> str:
    """The API's own error text: the ``message`` of a JSON error body, else the body's start."""
    try:
        body = json.loads(text)
    except ValueError:
        return text.strip()[:300] or "(empty body)"
    if isinstance(body, dict) and isinstance(body.get("message"), str):
        return body["message"]
    return text.strip()[:300]


def _scrub(text: str, key: str) -> str:
    return text.replace(key, "***") if key else text
