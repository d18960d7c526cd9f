"""HTTP client for the retriever service (``retriever.server`` or any Search-R1 retriever):
``/retrieve`` for the search tool, ``/open_page`` for the page reader.

Deliberately depends only on aiohttp and the standard library: the agent talks to the
retriever over HTTP and must not import the retriever package (its faiss/torch weight).

Reliability model: a two-day training run must survive a retriever restart.  Connection
errors, timeouts and 5xx answers are retried with exponential backoff and jitter (honouring
``Retry-After`` on 503), all inside a total deadline; when it is exhausted the call raises
:class:`RetrieverUnavailable` naming the URL, the attempts and the last error.  4xx answers
are the caller's bug and raise :class:`RetrieverRequestError` at once.
"""

from __future__ import annotations

import asyncio
import random
import time
from typing import Any

import aiohttp

__all__ = [
    "LoopSession",
    "RetrieverClient",
    "RetrieverError",
    "RetrieverRequestError",
    "RetrieverUnavailable",
]

ENDPOINTS = ("/retrieve", "/open_page")  # a URL ending in one names the service root before it


class RetrieverError(RuntimeError):
    """Base class of retriever client errors."""


class RetrieverUnavailable(RetrieverError):
    """The service could not be reached (or kept failing) within the deadline."""

    def __init__(self, url: str, attempts: int, last_error: str, elapsed_s: float) -> None:
        super().__init__(
            f"retriever at {url} unavailable after {attempts} attempt(s) in {elapsed_s:.1f}s; "
            f"last error: {last_error}"
        )
        self.url = url
        self.attempts = attempts
        self.last_error = last_error


class RetrieverRequestError(RetrieverError):
    """The service rejected the request (4xx) or answered something that is not the protocol."""

    def __init__(self, url: str, status: int, message: str) -> None:
        super().__init__(f"retriever at {url} rejected the request (HTTP {status}): {message}")
        self.url = url
        self.status = status


class _Retryable(Exception):
    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


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


class RetrieverClient:
    """Async client with one pooled session per event loop, retries and a total deadline.

    ``url`` is the service root (``http://host:port``) or one of its endpoints (``/retrieve``,
    ``/open_page``).
    ``timeout_s`` bounds one attempt; ``deadline_s`` bounds a whole call including retries.
    """

    def __init__(
        self,
        url: str,
        timeout_s: float = 10.0,
        deadline_s: float = 60.0,
        max_attempts: int = 8,
        backoff_base_s: float = 0.1,
        backoff_max_s: float = 5.0,
        max_connections: int = 64,
    ) -> None:
        if timeout_s <= 0 or deadline_s <= 0:
            raise ValueError(f"timeout_s/deadline_s: expected > 0, got {timeout_s}/{deadline_s}")
        if max_attempts < 1:
            raise ValueError(f"max_attempts: expected >= 1, got {max_attempts}")
        base = url.rstrip("/")
        for endpoint in ENDPOINTS:
            if base.endswith(endpoint):
                base = base[: -len(endpoint)]
                break
        self.base_url = base
        self.timeout_s = timeout_s
        self.deadline_s = deadline_s
        self.max_attempts = max_attempts
        self.backoff_base_s = backoff_base_s
        self.backoff_max_s = backoff_max_s
        self.max_connections = max_connections
        self._session = LoopSession(max_connections, keepalive_timeout=30)

    # --- session ---------------------------------------------------------------------
    def _get_session(self) -> aiohttp.ClientSession:
        return self._session.get()

    async def close(self) -> None:
        """Close the pooled session of the current loop (idempotent)."""
        await self._session.close()

    async def __aenter__(self) -> RetrieverClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # --- core request with retries ---------------------------------------------------
    def _backoff(self, attempt: int) -> float:
        """Exponential backoff with jitter: uniform(cap/2, cap), cap = min(max, base * 2**attempt).

        Jitter spreads the retries of many rollout workers so a restarted server is not hit
        by all of them in the same millisecond.
        """
        cap = min(self.backoff_max_s, self.backoff_base_s * (2**attempt))
        return random.uniform(cap / 2, cap)

    async def _attempt(
        self, method: str, path: str, payload: Any, timeout_s: float, ok_statuses: tuple[int, ...]
    ) -> Any:
        session = self._get_session()
        url = self.base_url + path
        timeout = aiohttp.ClientTimeout(total=timeout_s)
        async with session.request(method, url, json=payload, timeout=timeout) as resp:
            if resp.status in ok_statuses:
                return await resp.json(content_type=None)
            text = (await resp.text())[:500]
            if resp.status >= 500:
                retry_after = None
                header = resp.headers.get("Retry-After")
                if header:
                    try:
                        retry_after = float(header)
                    except ValueError:
                        retry_after = None
                raise _Retryable(f"HTTP {resp.status}: {text}", retry_after)
            raise RetrieverRequestError(url, resp.status, text)

    async def _request(
        self, method: str, path: str, payload: Any = None, ok_statuses: tuple[int, ...] = (200,)
    ) -> Any:
        start = time.monotonic()
        deadline = start + self.deadline_s
        last_error = "no attempt made"
        attempts = 0
        while attempts < self.max_attempts:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            attempts += 1
            retry_after: float | None = None
            try:
                return await self._attempt(method, path, payload, min(self.timeout_s, remaining), ok_statuses)
            except _Retryable as exc:
                last_error, retry_after = str(exc), exc.retry_after
            except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
                last_error = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            if attempts >= self.max_attempts:
                break
            delay = self._backoff(attempts - 1)
            if retry_after is not None:
                delay = max(delay, min(retry_after, self.backoff_max_s))
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            await asyncio.sleep(min(delay, remaining))
        raise RetrieverUnavailable(self.base_url + path, attempts, last_error, time.monotonic() - start)

    # --- public API ------------------------------------------------------------------
    async def retrieve(self, queries: list[str], topk: int) -> list[list[dict]]:
        """Top-``topk`` passages per query, each ``{"id", "contents", "score"}``, best first."""
        if isinstance(queries, str) or not isinstance(queries, list):
            raise TypeError(f"queries: expected a list of strings, got {type(queries).__name__}")
        if not queries:
            return []
        body = await self._request(
            "POST", "/retrieve", {"queries": queries, "topk": topk, "return_scores": True}
        )
        url = self.base_url + "/retrieve"
        result = body.get("result") if isinstance(body, dict) else None
        if not isinstance(result, list) or len(result) != len(queries):
            raise RetrieverRequestError(
                url, 200, f"expected 'result' with {len(queries)} lists, got {str(body)[:200]}"
            )
        out: list[list[dict]] = []
        for items in result:
            docs = []
            for item in items:
                doc = item.get("document", item)  # tolerate servers that ignore return_scores
                docs.append(
                    {
                        "id": str(doc.get("id", "")),
                        "contents": doc["contents"],
                        "score": float(item.get("score", 0.0)),
                    }
                )
            out.append(docs)
        return out

    async def open_pages(self, pages: list[dict]) -> list[dict]:
        """One window per item (``{"id" or "title", "offset", "length"}``), in order: each
        ``{"found": true, "title", "text", "offset", "words", "total_words", "next_offset",
        "chunk_ids", "id_offset", "title_pages"}`` or ``{"found": false, "error"}``."""
        if not isinstance(pages, list):
            raise TypeError(f"pages: expected a list of objects, got {type(pages).__name__}")
        if not pages:
            return []
        body = await self._request("POST", "/open_page", {"pages": pages})
        result = body.get("result") if isinstance(body, dict) else None
        if (
            not isinstance(result, list)
            or len(result) != len(pages)
            or not all(isinstance(item, dict) and isinstance(item.get("found"), bool) for item in result)
        ):
            raise RetrieverRequestError(
                self.base_url + "/open_page",
                200,
                f"expected 'result' with {len(pages)} windows, got {str(body)[:200]}",
            )
        return result

    async def health(self) -> dict:
        """The service's /health body (``ready`` is false while the index loads)."""
        return await self._request("GET", "/health", ok_statuses=(200, 503))

    def retrieve_sync(self, queries: list[str], topk: int) -> list[list[dict]]:
        """Blocking convenience wrapper for scripts; not for use inside a running event loop."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            pass
        else:
            raise RuntimeError("retrieve_sync: called inside a running event loop; await retrieve() instead")

        async def once() -> list[list[dict]]:
            try:
                return await self.retrieve(queries, topk)
            finally:
                await self.close()

        return asyncio.run(once())
