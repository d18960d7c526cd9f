"""The web-search tool: ``web_search(query, num?)`` → the top Google results through Serper's API.

A schema tool (``typed.py``) for both tool-call formats. In ``hermes`` the policy writes
``{"name": "web_search", "arguments": {"query": "...", "num": 3}}``; in ``tags`` it writes
``<web_search> {"query": "..."} </web_search>``, or, with ``num_argument=False`` (the
schema then has ``query`` alone), ``<web_search> capital of France </web_search>``.

The API is Serper's Google search (``client.py``: request and response fields, the
documentation it follows, rate limit, retries); the user brings the key, read from the
environment variable named by ``api_key_env`` (never from config text, never logged);
``base_url`` points the tool at a self-hosted proxy or, in the tests, at a local server
speaking the same JSON (the real API is not reachable from the project's machines). Answers
are kept in a persistent SQLite cache (``cache.py``) shared by every process that names
the same file; a cache hit, or an identical request already in flight in this process,
never reaches the network. The options are the fields of one frozen ``WebSearchOptions``
(``options.py``), given flat as keyword arguments and checked when the tool is built.

What the policy reads, cut to ``max_chars`` (and the cut said)::

    [1] Paris - Wikipedia
    Paris is the capital and largest city of France.
    https://en.wikipedia.org/wiki/Paris

Each call's ``ToolResult.metrics``, summed per trajectory and logged as
``rollout/tool/<name>/<key>``: ``requests`` (HTTP requests sent, retries included),
``retries``, ``cache_hits`` (calls answered without a request of their own) and
``cost_usd`` (billed answers × ``price_per_1k_usd`` / 1000: an estimate; set your plan's
price). A call that fails raises (an error observation under ``tool_error_policy=observe``)
and so reports no metrics; ``totals`` keeps this process's counts of every call.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import sqlite3
from typing import Any

from agentrl.tools.base import ToolResult
from agentrl.tools.rules import check_options, check_tag
from agentrl.tools.spec import ToolSpec
from agentrl.tools.web.cache import SearchCache, cache_key
from agentrl.tools.web.client import Attempts, SerperClient, TokenBucket, WebSearchError
from agentrl.tools.web.options import DEFAULT_CACHE, WHERE, WebSearchOptions

__all__ = ["DEFAULT_CACHE", "WebSearchOptions", "WebSearchTool", "format_results"]

logger = logging.getLogger(__name__)

_SPACES = re.compile(r"\s+")


def _line(text: str) -> str:
    return _SPACES.sub(" ", text).strip()


def format_results(query: str, results: list[dict[str, Any]], max_chars: int) -> str:
    """The results as the policy reads them (module docstring), cut to ``max_chars`` with a note."""
    if not results:
        return f"No results for {query!r}."
    blocks = []
    for rank, item in enumerate(results, 1):
        lines = [f"[{rank}] {_line(item.get('title', '')) or '(no title)'}"]
        lines += [value for value in (_line(item.get("snippet", "")), _line(item.get("link", ""))) if value]
        blocks.append("\n".join(lines))
    text = "\n\n".join(blocks)
    if len(text) <= max_chars:
        return text
    note = f"\n[cut: {max_chars} of {len(text)} characters shown]"
    return text[:max_chars].rstrip() + note


class WebSearchTool:
    """Web search through Serper's API with a shared cache, a rate limit and retries (module docstring)."""

    options_class = WebSearchOptions  # the options it takes (rules.check_options reads them)

    def __init__(self, **options: Any) -> None:
        check_options(type(self), options, WHERE)
        self.options = opts = WebSearchOptions(**options)
        if not os.environ.get(opts.api_key_env, "").strip():
            raise ValueError(
                f"the web-search API key is not set: export it in the environment variable {opts.api_key_env}"
            )
        self.spec = ToolSpec(
            opts.name,
            "Search the web (Google) and return the top results: title, snippet, link.",
            self._parameters(opts.num, opts.max_num, opts.num_argument),
        )
        self.name = opts.name
        self.tag = check_tag(opts.tag if opts.tag is not None else opts.name, f"tool {opts.name!r}")
        limiter = TokenBucket(opts.requests_per_s, opts.burst) if opts.requests_per_s is not None else None
        self.client = SerperClient(
            opts.base_url, opts.api_key_env, retry=opts.retry, limiter=limiter, params=opts.params
        )
        self.cache = SearchCache(opts.cache_path, opts.cache_ttl_s) if opts.cache_path is not None else None
        self.timeout_s = opts.deadline_s + 5.0  # the rollout's bound: the client's deadline surfaces first
        self.totals = {key: 0.0 for key in ("requests", "retries", "cache_hits", "cost_usd")}
        self._inflight: dict[str, asyncio.Future[list[dict[str, Any]]]] = {}

    @staticmethod
    def _parameters(num: int, max_num: int, num_argument: bool) -> dict[str, Any]:
        properties: dict[str, Any] = {
            "query": {"type": "string", "minLength": 1, "description": "what to search the web for"}
        }
        if num_argument:
            properties["num"] = {
                "type": "integer",
                "minimum": 1,
                "maximum": max_num,
                "description": f"how many results to return (default {num})",
            }
        return {
            "type": "object",
            "properties": properties,
            "required": ["query"],
            "additionalProperties": False,
        }

    def __repr__(self) -> str:
        return f"WebSearchTool(name={self.name!r}, url={self.client.url!r}, cache={self.cache!r})"

    async def call(self, arguments: list[dict[str, Any]]) -> list[ToolResult]:
        """One result per call; the calls of a batch run at once (sharing the rate limit)."""
        outcomes = await asyncio.gather(*(self._one(a) for a in arguments), return_exceptions=True)
        for outcome in outcomes:  # every call finished (and was cached) before one error is raised
            if isinstance(outcome, BaseException):
                raise outcome
        return list(outcomes)  # type: ignore[arg-type]

    async def _one(self, arguments: dict[str, Any]) -> ToolResult:
        query = str(arguments.get("query", "")).strip()
        num = min(max(int(arguments.get("num", self.options.num)), 1), self.options.max_num)
        if not query:
            return ToolResult("Error: the query is empty.", self._metrics(Attempts(), hit=False))
        results, attempts, hit = await self._search(query, num)
        return ToolResult(
            format_results(query, results[:num], self.options.max_chars), self._metrics(attempts, hit)
        )

    async def _search(self, query: str, num: int) -> tuple[list[dict[str, Any]], Attempts, bool]:
        key = cache_key(self.client.api, self.client.url, query, num=num, **self.client.params)
        cached = await self._cache_get(key)
        if cached is not None:
            self._count(Attempts(), hit=True)
            return cached, Attempts(), True
        loop = asyncio.get_running_loop()
        pending = self._inflight.get(key)
        if pending is not None and pending.get_loop() is loop:  # the same search is on its way: share it
            results = await asyncio.shield(pending)
            self._count(Attempts(), hit=True)
            return results, Attempts(), True
        future: asyncio.Future[list[dict[str, Any]]] = loop.create_future()
        future.add_done_callback(lambda f: f.cancelled() or f.exception())  # retrieved even with no sharer
        self._inflight[key] = future
        attempts = Attempts()
        try:
            results = await self.client.search(query, num, attempts)
            await self._cache_put(key, query, results)  # before sharers are released: no gap to miss in
        except asyncio.CancelledError:
            future.set_exception(WebSearchError("the identical search these callers shared was cancelled"))
            raise
        except BaseException as exc:
            future.set_exception(exc)
            raise
        else:
            future.set_result(results)
        finally:
            if self._inflight.get(key) is future:
                del self._inflight[key]
            self._count(attempts, hit=False)
        return results, attempts, False

    async def _cache_get(self, key: str) -> list[dict[str, Any]] | None:
        if self.cache is None:
            return None
        try:
            return await self.cache.aget(key)
        except (sqlite3.Error, OSError, ValueError) as exc:  # a broken cache costs requests, not the run
            logger.warning("web-search cache %s unreadable, asking the API: %s", self.cache.path, exc)
            return None

    async def _cache_put(self, key: str, query: str, results: list[dict[str, Any]]) -> None:
        if self.cache is None:
            return
        try:
            await self.cache.aput(key, query, results)
        except (sqlite3.Error, OSError) as exc:
            logger.warning("web-search cache %s not written: %s", self.cache.path, exc)

    def _count(self, attempts: Attempts, hit: bool) -> None:
        for key, value in self._figures(attempts, hit).items():
            self.totals[key] += value

    def _figures(self, attempts: Attempts, hit: bool) -> dict[str, float]:
        return {
            "requests": float(attempts.requests),
            "retries": float(attempts.retries),
            "cache_hits": float(hit),
            "cost_usd": attempts.billed * self.options.price_per_1k_usd / 1000.0,
        }

    def _metrics(self, attempts: Attempts, hit: bool) -> dict[str, float]:
        return {f"{self.name}/{key}": value for key, value in self._figures(attempts, hit).items()}

    async def close(self) -> None:
        """Close the HTTP session of the current event loop (the rollout calls this at its end)."""
        await self.client.close()
