"""A local server on 127.0.0.1 that speaks Serper's search JSON, for the web-search tool's tests.

``POST /search`` with ``X-API-KEY`` and ``{"q", "num", ...}`` answers ``{"searchParameters",
"organic": [{"title", "link", "snippet", "position"}, ...]}`` with ``num`` made-up results
for ``q``; a wrong key gets Serper's 403 (``{"message": "Unauthorized.", "statusCode": 403}``).
``inject(Fault(...), ...)`` makes the next requests answer a status (429, 500, ...) with
optional headers (``Retry-After``) and/or wait first (a slow answer). Every request is
recorded with its arrival time (``time.monotonic()``), headers and body.

It runs on a thread with its own event loop, so a test's ``asyncio.run`` and forked
processes can all reach it.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web


@dataclass(frozen=True)
class Fault:
    """What the next request gets instead of an answer: a wait, then (if ``status``) an error."""

    status: int | None = None
    message: str = "injected"
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0


@dataclass(frozen=True)
class Seen:
    at: float
    headers: dict[str, str]
    body: dict[str, Any]


def results_for(query: str, num: int) -> list[dict[str, Any]]:
    """The stub's organic results for ``query``: recognisable, ``num`` of them."""
    slug = "-".join(query.lower().split())
    return [
        {
            "title": f"{query} result {i}",
            "link": f"https://example.org/{slug}/{i}",
            "snippet": f"Snippet {i} about {query}.",
            "position": i,
        }
        for i in range(1, num + 1)
    ]


class SerperStub:
    """See the module docstring; use as a context manager."""

    def __init__(self, key: str) -> None:
        self.key = key
        self.seen: list[Seen] = []
        self._faults: deque[Fault] = deque()
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._runner: web.AppRunner | None = None
        self._thread = threading.Thread(target=self._loop.run_forever, name="serper-stub", daemon=True)
        self.url = ""

    def inject(self, *faults: Fault) -> None:
        with self._lock:
            self._faults.extend(faults)

    @property
    def count(self) -> int:
        with self._lock:
            return len(self.seen)

    def queries(self) -> list[str]:
        with self._lock:
            return [s.body.get("q") for s in self.seen]

    async def _search(self, request: web.Request) -> web.Response:
        body = await request.json()
        with self._lock:
            self.seen.append(Seen(time.monotonic(), dict(request.headers), body))
            fault = self._faults.popleft() if self._faults else None
        if fault is not None:
            await asyncio.sleep(fault.delay_s)
            if fault.status is not None:
                payload = {"message": fault.message, "statusCode": fault.status}
                return web.json_response(payload, status=fault.status, headers=fault.headers)
        if request.headers.get("X-API-KEY") != self.key:
            return web.json_response({"message": "Unauthorized.", "statusCode": 403}, status=403)
        query, num = str(body["q"]), int(body.get("num", 10))
        parameters = {"q": query, "type": "search", "num": num, "engine": "google"}
        return web.json_response({"searchParameters": parameters, "organic": results_for(query, num)})

    async def _start(self) -> None:
        app = web.Application()
        app.router.add_post("/search", self._search)
        self._runner = web.AppRunner(app, shutdown_timeout=0.1)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        host, port = self._runner.addresses[0][:2]
        self.url = f"http://{host}:{port}"

    def __enter__(self) -> SerperStub:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(timeout=10)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._runner is not None:
            asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()
