"""Reliability against real server subprocesses: sustained load, restarts, a dead server, client errors."""

from __future__ import annotations

import asyncio
import signal
import time
from pathlib import Path

import pytest

from agentrl.tools.retrieval.client import RetrieverClient, RetrieverRequestError, RetrieverUnavailable


@pytest.mark.slow  # indexes or serves the shared 34k-passage corpus
def test_5000_requests_at_64_way_concurrency_without_errors(bm25_server) -> None:
    topk = 3
    n_requests, concurrency = 5000, 64

    async def run() -> tuple[int, list[str]]:
        client = RetrieverClient(bm25_server.url, timeout_s=30, deadline_s=60, max_attempts=1)
        counter = iter(range(n_requests))
        problems: list[str] = []
        done = 0

        async def worker() -> None:
            nonlocal done
            for i in counter:
                try:
                    res = await client.retrieve([f"question number {i % 997} about history"], topk)
                except Exception as exc:  # any error is a failure of this test
                    problems.append(repr(exc))
                    continue
                if len(res) != 1 or len(res[0]) != topk:
                    problems.append(f"request {i}: got {[len(r) for r in res]} results")
                done += 1

        await asyncio.gather(*(worker() for _ in range(concurrency)))
        await client.close()
        return done, problems

    done, problems = asyncio.run(run())
    assert problems == []
    assert done == n_requests


@pytest.mark.slow  # indexes or serves the shared 34k-passage corpus
def test_client_rides_out_a_server_restart(bm25_index: Path, make_server) -> None:
    server = make_server(bm25_index)

    async def run() -> list[int]:
        client = RetrieverClient(server.url, timeout_s=2, deadline_s=45, max_attempts=100, backoff_max_s=0.5)
        sizes: list[int] = []

        async def sender() -> None:
            for i in range(40):
                res = await client.retrieve([f"restart probe {i}"], 2)
                sizes.append(len(res[0]))
                await asyncio.sleep(0.05)

        task = asyncio.create_task(sender())
        await asyncio.sleep(0.5)
        server.stop(signal.SIGKILL)  # hard crash mid-stream
        await asyncio.sleep(1.5)  # requests now fail with connection refused and are retried
        await asyncio.to_thread(server.start)  # same port
        await asyncio.wait_for(task, 60)
        await client.close()
        return sizes

    sizes = asyncio.run(run())
    assert sizes == [2] * 40


@pytest.mark.slow  # indexes or serves the shared 34k-passage corpus
def test_server_gone_for_good_raises_clear_error_within_deadline(bm25_index: Path, make_server) -> None:
    server = make_server(bm25_index)
    server.stop(signal.SIGKILL)
    client = RetrieverClient(server.url, timeout_s=0.5, deadline_s=2.0, max_attempts=50, backoff_max_s=0.4)
    t0 = time.monotonic()
    with pytest.raises(RetrieverUnavailable) as info:
        client.retrieve_sync(["anyone there"], 3)
    elapsed = time.monotonic() - t0
    assert elapsed < 2.5
    msg = str(info.value)
    assert server.url in msg and "attempt" in msg and info.value.attempts >= 2
    assert "Connect" in info.value.last_error or "refused" in info.value.last_error.lower()


@pytest.mark.slow  # indexes or serves the shared 34k-passage corpus
def test_4xx_is_not_retried_and_names_the_problem(bm25_server) -> None:
    client = RetrieverClient(bm25_server.url, deadline_s=10)
    t0 = time.monotonic()
    with pytest.raises(RetrieverRequestError) as info:
        client.retrieve_sync(["q"], 0)
    assert time.monotonic() - t0 < 2
    assert info.value.status == 400 and "topk" in str(info.value)


@pytest.mark.slow  # indexes or serves the shared 34k-passage corpus
def test_client_api_shapes_and_health(bm25_server) -> None:
    async def run():
        async with RetrieverClient(bm25_server.url + "/retrieve") as client:  # endpoint URL also accepted
            health = await client.health()
            res = await client.retrieve(["who got the first nobel prize in physics", "mount everest"], 4)
            empty = await client.retrieve([], 4)
            return health, res, empty

    health, res, empty = asyncio.run(run())
    assert health["ready"] is True and health["backend"] == "bm25"
    assert empty == []
    assert [len(r) for r in res] == [4, 4]
    assert all(
        set(d) == {"id", "contents", "score"} and isinstance(d["score"], float) for r in res for d in r
    )
    assert any("Röntgen" in d["contents"] for d in res[0])
    with pytest.raises(TypeError, match="queries: expected a list"):
        asyncio.run(RetrieverClient(bm25_server.url).retrieve("not a list", 3))  # type: ignore[arg-type]


@pytest.mark.slow  # indexes or serves the shared 34k-passage corpus
def test_retries_on_5xx_then_succeeds(bm25_server) -> None:
    """A 503 (overload) from a proxy-like fake in front of the real server is retried (after Retry-After)."""
    from aiohttp import ClientSession, web

    calls = {"n": 0}

    async def handler(request: web.Request) -> web.StreamResponse:
        calls["n"] += 1
        if calls["n"] <= 2:  # inject two failures, then forward to the real server
            return web.json_response({"error": "busy"}, status=503, headers={"Retry-After": "0.1"})
        async with (
            ClientSession() as s,
            s.post(bm25_server.url + "/retrieve", json=await request.json()) as r,
        ):
            return web.json_response(await r.json(), status=r.status)

    async def run():
        from aiohttp.test_utils import TestServer

        app = web.Application()
        app.router.add_post("/retrieve", handler)
        server = TestServer(app)
        await server.start_server()
        try:
            client = RetrieverClient(str(server.make_url("")), deadline_s=10, backoff_base_s=0.01)
            res = await client.retrieve(["nobel prize"], 2)
            await client.close()
            return res
        finally:
            await server.close()

    res = asyncio.run(run())
    assert calls["n"] == 3 and len(res[0]) == 2


def _modules_imported_by(path: str) -> set[str]:
    import ast

    tree = ast.parse(Path(path).read_text())
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    return imported | {
        node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module
    }


def test_client_module_does_not_import_the_retriever_package() -> None:
    import agentrl.tools.http as http
    import agentrl.tools.retrieval.client as mod

    client, layer = _modules_imported_by(mod.__file__), _modules_imported_by(http.__file__)
    # Of the project, the client imports the tools' HTTP layer alone, and that layer nothing of it.
    assert {m for m in client | layer if m.split(".")[0] == "agentrl"} == {"agentrl.tools.http"}
    imported = {m.split(".")[0] for m in client | layer} - {"agentrl"}
    stdlib = {"__future__", "asyncio", "collections", "dataclasses", "email", "random", "time", "typing"}
    assert imported <= stdlib | {"aiohttp"}
