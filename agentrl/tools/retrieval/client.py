"""HTTP client for the retriever service (``retriever.server`` or any Search-R1 retriever):
``/retrieve`` for the search tool, ``/open_page`` for the page reader.

Deliberately depends only on aiohttp, the standard library and the tools' HTTP layer
(``agentrl/tools/http.py``, aiohttp and the standard library too): the agent talks to the
retriever over HTTP and must not import the retriever package (its faiss/torch weight).

Reliability model: a two-day training run must survive a retriever restart.  Connection
errors, timeouts and 5xx answers are retried with exponential backoff and jitter (honouring
``Retry-After``, up to ``backoff_max_s``), all inside a total deadline (``http.with_retries``);
when the attempts run out, or the deadline does (or the next retry could not start before it),
the call raises :class:`RetrieverUnavailable` naming the URL, the attempts and the last error.
4xx answers are the caller's bug and raise :class:`RetrieverRequestError` at once.
"""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp

from agentrl.tools.http import GaveUp, LoopSession, Retryable, RetryPolicy, retry_after_s, with_retries

__all__ = [
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


class RetrieverClient:
    """Async client with one pooled session per event loop, retries and a total deadline.

    ``url`` is the service root (``http://host:port``) or one of its endpoints (``/retrieve``,
    ``/open_page``). ``timeout_s`` bounds one attempt; ``deadline_s`` bounds a whole call
    including retries; at most ``max_attempts`` attempts, with a jittered wait of up to
    ``backoff_base_s * 2**k`` (at most ``backoff_max_s``) between them: ``retry``, an
    ``http.RetryPolicy``. ``max_connections`` bounds the pooled connections of one event loop.
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
        self.retry = RetryPolicy(
            timeout_s=timeout_s,
            deadline_s=deadline_s,
            max_attempts=max_attempts,
            max_retry_after_s=backoff_max_s,  # the server's Retry-After, within our own longest wait
            backoff_base_s=backoff_base_s,
            backoff_max_s=backoff_max_s,
        )
        base = url.rstrip("/")
        for endpoint in ENDPOINTS:
            if base.endswith(endpoint):
                base = base[: -len(endpoint)]
                break
        self.base_url = base
        self._session = LoopSession(max_connections, keepalive_timeout=30)

    async def close(self) -> None:
        """Close the pooled session of the current loop (idempotent)."""
        await self._session.close()

    async def __aenter__(self) -> RetrieverClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _request(
        self, method: str, path: str, payload: Any = None, ok_statuses: tuple[int, ...] = (200,)
    ) -> Any:
        """The JSON body of an ``ok_statuses`` answer; 5xx and transport errors retried (module docstring)."""
        url = self.base_url + path

        async def attempt(timeout_s: float) -> Any:
            timeout = aiohttp.ClientTimeout(total=timeout_s)
            async with self._session.get().request(method, url, json=payload, timeout=timeout) as resp:
                if resp.status in ok_statuses:
                    return await resp.json(content_type=None)
                text = (await resp.text())[:500]
                if resp.status >= 500:
                    raise Retryable(
                        f"HTTP {resp.status}: {text}", retry_after_s(resp.headers.get("Retry-After"))
                    )
                raise RetrieverRequestError(url, resp.status, text)

        try:
            return await with_retries(attempt, self.retry)
        except GaveUp as exc:
            raise RetrieverUnavailable(url, exc.attempts, exc.last_error, exc.elapsed_s) from None

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
