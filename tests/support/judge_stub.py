"""A local server on 127.0.0.1 that speaks OpenAI's chat-completions JSON, for the LLM judge.

``POST /v1/chat/completions`` with ``{"model", "messages", ...}`` answers ``{"id", "object":
"chat.completion", "created", "model", "choices": [{"index": 0, "message": {"role": "assistant",
"content": ...}, "finish_reason": "stop"}], "usage": {"prompt_tokens", "completion_tokens",
"total_tokens"}}``, after ``latency_s``. The content is ``reply(body)``: by default
``lenient_judge``, which reads the judge's prompt and calls an answer correct when it contains a
gold answer (more lenient than EM, so a test can tell the judge's score from the EM fallback).
``inject(Fault(...), ...)`` makes the next requests answer an HTTP status and/or wait first (a
hang past the client's timeout). It counts requests, records each body and its headers, and
keeps the most requests it ever had in flight at once.

It runs on a thread with its own event loop, so the code under test may run its own loops
(``asyncio.run``) and block on them.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from agentrl.ports import free_port

Reply = Callable[[dict[str, Any]], str]


@dataclass(frozen=True)
class Fault:
    """What the next request gets instead of an answer: a wait, then (if ``status``) an error."""

    status: int | None = None
    delay_s: float = 0.0


def _field(text: str, label: str) -> str:
    for line in text.splitlines():
        if line.startswith(label):
            return line[len(label) :].strip()
    raise ValueError(f"no line starting {label!r} in the judge prompt")


def _correct(answer: str, golds: list[str]) -> bool:
    return any(gold.lower() in answer.lower() for gold in golds)


def lenient_judge(body: dict[str, Any]) -> str:
    """A stand-in judge: an answer that contains a gold answer (any case) is correct.

    Pointwise prompts get some reasoning and a ``VERDICT:`` line; group prompts get
    ``{"scores": [...]}`` of 1 and 0.
    """
    text = body["messages"][-1]["content"]
    golds = json.loads(_field(text, "Gold answers (JSON list):"))
    if "Predicted answer:" in text:
        verdict = "CORRECT" if _correct(_field(text, "Predicted answer:"), golds) else "INCORRECT"
        return f"The answer is compared with the gold answers.\nVERDICT: {verdict}"
    answers = json.loads(text.rsplit("(JSON list, in order): ", 1)[1])
    return json.dumps({"scores": [1.0 if _correct(a, golds) else 0.0 for a in answers]})


class JudgeStub:
    """See the module docstring; use as a context manager. ``usage``: the (prompt, completion)
    token counts every reply reports."""

    def __init__(
        self, reply: Reply = lenient_judge, latency_s: float = 0.0, usage: tuple[int, int] = (100, 5)
    ) -> None:
        self.reply = reply
        self.latency_s = latency_s
        self.usage = usage
        self.bodies: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self._faults: deque[Fault] = deque()
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._runner: web.AppRunner | None = None
        self._thread = threading.Thread(target=self._loop.run_forever, name="judge-stub", daemon=True)
        self.url = ""

    def inject(self, *faults: Fault) -> None:
        with self._lock:
            self._faults.extend(faults)

    @property
    def requests(self) -> int:
        with self._lock:
            return len(self.bodies)

    async def _complete(self, request: web.Request) -> web.Response:
        body = await request.json()
        with self._lock:
            self.bodies.append(body)
            self.headers.append(dict(request.headers))
            fault = self._faults.popleft() if self._faults else None
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            await asyncio.sleep(self.latency_s + (fault.delay_s if fault else 0.0))
            if fault is not None and fault.status is not None:
                error = {"message": "injected", "type": "server_error", "code": fault.status}
                return web.json_response({"error": error}, status=fault.status)
            return web.json_response(self._completion(body, self.reply(body)))
        finally:
            with self._lock:
                self.in_flight -= 1

    def _completion(self, body: dict[str, Any], content: str) -> dict[str, Any]:
        prompt, completion = self.usage
        return {
            "id": f"chatcmpl-stub-{len(self.bodies)}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model", ""),
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": content},
                    "finish_reason": "stop",
                }
            ],
            "usage": {
                "prompt_tokens": prompt,
                "completion_tokens": completion,
                "total_tokens": prompt + completion,
            },
        }

    async def _start(self) -> None:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._complete)
        self._runner = web.AppRunner(app, shutdown_timeout=0.1)
        await self._runner.setup()
        port = free_port("127.0.0.1")
        await web.TCPSite(self._runner, "127.0.0.1", port).start()
        self.url = f"http://127.0.0.1:{port}"

    def __enter__(self) -> JudgeStub:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(timeout=10)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._runner is not None:
            asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()
