"""The HTTP server: protocol, validation, caching, micro-batching, back-pressure, errors, SIGTERM."""

from __future__ import annotations

import asyncio
import json
import signal
import threading
import urllib.error
import urllib.request
from pathlib import Path

import aiohttp
import pytest
from aiohttp.test_utils import TestServer

from retriever.base import Hit
from retriever.config import ServerConfig
from retriever.index import open_backend
from retriever.process import RetrieverProcess
from retriever.server import RetrieverService, create_app

pytestmark = pytest.mark.slow  # indexes or serves the shared 34k-passage corpus


def _post(url: str, body: bytes | dict, timeout: float = 10) -> tuple[int, dict]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    req = urllib.request.Request(url + "/retrieve", data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def _get(url: str) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(url + "/health", timeout=10) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_health_reports_backend_size_and_readiness(bm25_server: RetrieverProcess) -> None:
    status, body = _get(bm25_server.url)
    assert status == 200
    assert body["ready"] is True and body["status"] == "ready"
    assert body["backend"] == "bm25" and body["corpus_size"] == 34624


def test_retrieve_with_and_without_scores(bm25_server: RetrieverProcess) -> None:
    qs = ["who got the first nobel prize in physics", "capital of australia"]
    status, body = _post(bm25_server.url, {"queries": qs, "topk": 4, "return_scores": True})
    assert status == 200 and len(body["result"]) == 2
    for items in body["result"]:
        assert len(items) == 4
        assert all(
            set(it) == {"document", "score"} and set(it["document"]) == {"id", "contents"} for it in items
        )
        assert [it["score"] for it in items] == sorted((it["score"] for it in items), reverse=True)
    status, plain = _post(bm25_server.url, {"queries": qs, "topk": 4, "return_scores": False})
    assert status == 200
    assert plain["result"] == [[it["document"] for it in items] for items in body["result"]]
    status, default = _post(bm25_server.url, {"queries": qs[:1]})  # topk defaults to 3, scores off
    assert status == 200 and len(default["result"][0]) == 3 and "id" in default["result"][0][0]


BAD_INPUTS = [
    (b"{not json", "body"),
    (b'["queries"]', "body"),
    ({"topk": 3}, "queries"),
    ({"queries": "one string", "topk": 3}, "queries"),
    ({"queries": [], "topk": 3}, "queries"),
    ({"queries": ["ok", 5], "topk": 3}, "queries[1]"),
    ({"queries": ["ok", "   "], "topk": 3}, "queries[1]"),
    ({"queries": ["x" * 501], "topk": 3}, "queries[0]"),
    ({"queries": ["q"] * 33, "topk": 3}, "queries"),
    ({"queries": ["q"], "topk": 0}, "topk"),
    ({"queries": ["q"], "topk": 51}, "topk"),
    ({"queries": ["q"], "topk": "3"}, "topk"),
    ({"queries": ["q"], "topk": True}, "topk"),
    ({"queries": ["q"], "topk": 3, "return_scores": "yes"}, "return_scores"),
    ({"queries": ["q"], "topk": 3, "top_k": 3}, "top_k"),
]


@pytest.mark.parametrize(("body", "field"), BAD_INPUTS)
def test_bad_input_gets_4xx_naming_the_field_then_server_still_serves(
    bm25_server: RetrieverProcess, body, field: str
) -> None:
    status, err = _post(bm25_server.url, body)
    assert 400 <= status < 500, err
    assert err["field"] == field and err["error"]
    status, ok = _post(bm25_server.url, {"queries": ["nobel prize physics"], "topk": 2})
    assert status == 200 and len(ok["result"][0]) == 2


def test_unknown_path_and_method_are_json_4xx(bm25_server: RetrieverProcess) -> None:
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(bm25_server.url + "/nope", timeout=5)
    assert info.value.code == 404 and json.loads(info.value.read())["field"] == "path"


def test_repeated_query_is_served_from_cache(bm25_server: RetrieverProcess) -> None:
    q = {"queries": ["a query only this test sends"], "topk": 5}
    before = _get(bm25_server.url)[1]["cache"]["hits"]
    first, second = _post(bm25_server.url, q)[1], _post(bm25_server.url, q)[1]
    assert first == second
    assert _get(bm25_server.url)[1]["cache"]["hits"] == before + 1


def test_access_log_is_json_lines(bm25_server: RetrieverProcess) -> None:
    _post(bm25_server.url, {"queries": ["access log probe"], "topk": 1})
    lines = bm25_server.log_path.with_suffix(".access.jsonl").read_text().splitlines()
    records = [json.loads(ln) for ln in lines]
    assert any(r["path"] == "/retrieve" and r["status"] == 200 and r["queries"] == 1 for r in records)
    assert any(r["status"] == 400 for r in records)
    assert all({"ts", "method", "path", "status", "ms"} <= set(r) for r in records)


def test_sigterm_shuts_down_cleanly(bm25_index: Path, make_server) -> None:
    server = make_server(bm25_index)
    assert _post(server.url, {"queries": ["x"], "topk": 1})[0] == 200
    assert server.stop(signal.SIGTERM, timeout=15) == 0
    log = server.log_path.read_text()
    assert '"event": "shutdown"' in log and "Traceback" not in log


# --- in-process: batching, back-pressure and backend failures, with a gate to inject slowness ---


class GatedBackend:
    """Wraps a real backend; blocks searches until ``gate`` is set; fails on the query 'boom'."""

    def __init__(self, inner) -> None:
        self.inner, self.name = inner, inner.name
        self.gate = threading.Event()
        self.entered = threading.Event()
        self.batch_sizes: list[int] = []

    def __len__(self) -> int:
        return len(self.inner)

    def search(self, queries: list[str], k: int) -> list[list[Hit]]:
        self.entered.set()
        self.gate.wait(30)
        self.batch_sizes.append(len(queries))
        if "boom" in queries:
            raise RuntimeError("injected backend failure")
        return self.inner.search(queries, k)


async def _with_app(backend: GatedBackend, config: ServerConfig, body):
    service = RetrieverService(config, lambda: backend)
    server = TestServer(create_app(service))
    await server.start_server()
    try:
        for _ in range(100):
            if service.status == "ready":
                break
            await asyncio.sleep(0.02)
        async with aiohttp.ClientSession() as session:
            return await body(server, session, service)
    finally:
        backend.gate.set()
        await server.close()


def test_concurrent_requests_are_coalesced_into_one_batch(bm25_index: Path) -> None:
    backend = GatedBackend(open_backend(bm25_index, "bm25"))

    async def body(server, session, service):
        url = str(server.make_url("/retrieve"))
        first = asyncio.create_task(session.post(url, json={"queries": ["first"], "topk": 2}))
        await asyncio.to_thread(backend.entered.wait, 10)  # first batch is now in the worker thread
        rest = [
            asyncio.create_task(session.post(url, json={"queries": [f"question {i}"], "topk": 2}))
            for i in range(20)
        ]
        await asyncio.sleep(0.3)  # all 20 are queued behind the running batch
        backend.gate.set()
        responses = [await t for t in [first, *rest]]
        bodies = [await r.json() for r in responses]
        assert all(r.status == 200 for r in responses)
        assert all(len(b["result"]) == 1 and len(b["result"][0]) == 2 for b in bodies)
        return service.batcher.stats.as_dict()

    stats = asyncio.run(_with_app(backend, ServerConfig(cache_size=0, access_log=None), body))
    assert backend.batch_sizes == [1, 20]  # 21 requests, 2 backend calls
    assert stats["max_size"] == 20


def test_full_queue_answers_503_with_retry_after(bm25_index: Path) -> None:
    backend = GatedBackend(open_backend(bm25_index, "bm25"))

    async def body(server, session, service):
        url = str(server.make_url("/retrieve"))
        tasks = [
            asyncio.create_task(session.post(url, json={"queries": [f"q{i}"], "topk": 1})) for i in range(3)
        ]
        await asyncio.sleep(0.3)  # 3 queries pending (1 running, 2 queued) = max_pending
        over = await session.post(url, json={"queries": ["one too many"], "topk": 1})
        assert over.status == 503 and over.headers["Retry-After"] == "2"
        assert "overloaded" in (await over.json())["error"]
        backend.gate.set()
        assert [(await t).status for t in tasks] == [200, 200, 200]
        again = await session.post(url, json={"queries": ["after the burst"], "topk": 1})
        assert again.status == 200

    asyncio.run(
        _with_app(backend, ServerConfig(max_pending=3, retry_after_s=2, cache_size=0, access_log=None), body)
    )


def test_backend_failure_is_a_500_for_that_batch_only(bm25_index: Path) -> None:
    backend = GatedBackend(open_backend(bm25_index, "bm25"))
    backend.gate.set()

    async def body(server, session, service):
        url = str(server.make_url("/retrieve"))
        bad = await session.post(url, json={"queries": ["boom"], "topk": 1})
        assert bad.status == 500 and "injected backend failure" in (await bad.json())["error"]
        good = await session.post(url, json={"queries": ["still fine"], "topk": 1})
        assert good.status == 200

    asyncio.run(_with_app(backend, ServerConfig(access_log=None), body))


def test_load_failure_reports_error_and_exits_nonzero(tmp_path: Path, make_server) -> None:
    index = tmp_path / "broken"
    index.mkdir()
    (index / "manifest.json").write_text(json.dumps({"backends": {"bm25": {}}}))  # no docstore
    server = make_server(index, wait=False)
    assert server.proc.wait(30) == 1
    assert "load_failed" in server.log_path.read_text()
