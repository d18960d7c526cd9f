"""The retrieval HTTP service (Search-R1 compatible API) on aiohttp.

    python -m retriever.server --index DIR --host 127.0.0.1 --port 8000 \
        [--backend auto|dense|bm25|hybrid|pyserini] [--workers N]

    POST /retrieve {"queries": [str], "topk": int, "return_scores": bool}
        -> {"result": [[{"document": {"id", "contents"}, "score": float}, ...], ...]}
           (with return_scores false each item is the document itself)
    POST /open_page {"pages": [{"id": str} or {"title": str}, "offset": int, "length": int}, ...]}
        -> {"result": [{"found": true, "title", "text", "offset", "words", "total_words",
                        "next_offset", "chunk_ids", "id_offset", "title_pages"}
                       or {"found": false, "error"}, ...]}   (windows in words: retriever.pages)
    GET  /health -> {"ready", "status", "backend", "corpus_size", "pages", ...}; 503 until loaded

Why it looks like this: RL rollouts fire many single-query requests at once.  Encoding and
index search are far cheaper per query in batches, so requests are coalesced: each handler
puts its queries on a queue, one batcher task drains the queue into a micro-batch and runs
one batched search in a worker thread (the event loop never blocks), then resolves every
waiting handler.  The queue is bounded (503 + Retry-After beyond it) and repeated queries
are answered from an LRU cache without touching the backend.  A page window costs tens of
microseconds (an O(1) lookup and the chunks it covers, memory-mapped), so /open_page is
answered on the event loop, with no queue.

Before it loads anything the server sets its own thread policy (``retriever.threads``: OpenMP
pools that sleep between requests, so one client does not pay for spinning threads), and with
``--workers N`` it forks N such processes on one port, each with its share of the cores
(``retriever.workers``; the default, ``auto``, is one per available core).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import signal
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from aiohttp import web

try:  # ~7x faster than json.dumps on a /retrieve answer (3 passages: 2 µs against 15)
    from orjson import dumps as _dumps
except ImportError:  # pragma: no cover - orjson is a dependency; stay correct without it

    def _dumps(obj: Any) -> bytes:
        return json.dumps(obj, ensure_ascii=False).encode()


from retriever import server_args
from retriever.base import Hit, SearchBackend
from retriever.batching import LRUCache, MicroBatcher, QueueFullError
from retriever.config import ServerConfig
from retriever.event_loop import run_event_loop
from retriever.middleware import (
    CACHE_HITS_KEY,
    N_QUERIES_KEY,
    access_log_middleware,
    configure_logging,
    error_response,
    json_errors_middleware,
)
from retriever.pages import PageIndex
from retriever.request_body import RequestError, parse_open_page_request, parse_retrieve_request
from retriever.threads import apply_thread_policy, available_cores
from retriever.workers import WorkerSlot, run_workers

log = logging.getLogger("retriever.server")


class RetrieverService:
    """Owns the backend, batcher, cache and the aiohttp handlers."""

    def __init__(
        self,
        config: ServerConfig,
        load_backend: Callable[[], SearchBackend],
        index_dir: str | None = None,
        load_pages: Callable[[], PageIndex] | None = None,
        slot: WorkerSlot | None = None,
        threads: dict[str, str] | None = None,
    ) -> None:
        self.config = config
        self.slot = slot  # this process's place among --workers; None when it serves alone
        self.threads = threads or {}  # the thread policy in force (retriever.threads)
        self._load_backend = load_backend
        self._load_pages = load_pages  # None: no page reader (/open_page answers 501)
        self.index_dir = index_dir
        self.backend: SearchBackend | None = None
        self.pages: PageIndex | None = None
        self.status = "loading"
        self.load_error: str | None = None
        self.cache = LRUCache(config.cache_size)
        self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="retriever-search")
        self.batcher: MicroBatcher | None = None
        self._tasks: list[asyncio.Task] = []
        self.started = time.time()
        self.on_fatal: Callable[[], None] | None = None  # set by serve(): stop the process

    # --- lifecycle -------------------------------------------------------------------
    async def _load(self) -> None:
        loop = asyncio.get_running_loop()
        t0 = time.perf_counter()
        try:
            backend = await loop.run_in_executor(self.executor, self._load_backend)
            if self._load_pages is not None:
                self.pages = await loop.run_in_executor(self.executor, self._load_pages)
        except Exception as exc:
            self.status, self.load_error = "error", f"{type(exc).__name__}: {exc}"
            log.error(json.dumps({"event": "load_failed", "error": self.load_error}))
            if self.on_fatal:
                self.on_fatal()
            return
        self.backend = backend
        if self.slot is not None:
            self.slot.mark_loaded()
        self.batcher = MicroBatcher(
            backend.search,
            self.config.max_batch_size,
            self.config.batch_wait_ms / 1000,
            self.config.max_pending,
            self.executor,
            inline=bool(getattr(backend, "inline_ok", False)),
        )
        self._tasks.append(asyncio.create_task(self.batcher.run(), name="retriever-batcher"))
        self.status = "ready"
        log.info(
            json.dumps(
                {
                    "event": "ready",
                    "backend": backend.name,
                    "corpus_size": len(backend),
                    "pages": self.pages.summary() if self.pages else None,
                    "load_s": round(time.perf_counter() - t0, 2),
                }
            )
        )

    async def on_startup(self, app: web.Application) -> None:
        self._tasks.append(asyncio.create_task(self._load(), name="retriever-load"))

    async def on_cleanup(self, app: web.Application) -> None:
        self.status = "stopping"
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if self.batcher:
            self.batcher.fail_all(RuntimeError("server shutting down"))
        self.executor.shutdown(wait=True, cancel_futures=True)
        log.info(json.dumps({"event": "shutdown"}))

    # --- handlers --------------------------------------------------------------------
    def _unavailable(self, message: str) -> web.Response:
        return error_response(503, "server", message, headers={"Retry-After": str(self.config.retry_after_s)})

    async def health(self, request: web.Request) -> web.Response:
        # ready once every worker has loaded: a client that waited for it meets no loading peer
        ready = self.status == "ready" and (self.slot is None or self.slot.all_loaded())
        body: dict[str, Any] = {
            "status": self.status,
            "ready": ready,
            "backend": self.backend.name if self.backend else None,
            "corpus_size": len(self.backend) if self.backend else None,
            "index": self.index_dir,
            "uptime_s": round(time.time() - self.started, 1),
            "pending_queries": self.batcher.pending if self.batcher else 0,
            "cache": {"size": len(self.cache), "hits": self.cache.hits, "misses": self.cache.misses},
            "pages": self.pages.summary() if self.pages else None,
            "batching": self.batcher.stats.as_dict() if self.batcher else None,
            "worker": self.slot.summary() if self.slot else None,
            "threads": self.threads,
            "query_encoder": _query_encoder(self.backend),
        }
        if self.load_error:
            body["error"] = self.load_error
        return web.json_response(body, status=200 if ready else 503)

    async def retrieve(self, request: web.Request) -> web.Response:
        try:
            req = parse_retrieve_request(await _json_body(request), self.config)
        except RequestError as exc:
            return error_response(exc.status, exc.field, exc.message)
        request[N_QUERIES_KEY] = len(req.queries)
        if self.status != "ready" or self.batcher is None:
            return self._unavailable(f"index not ready (status: {self.status})")
        results: list[list[Hit] | None] = [self.cache.get((q, req.topk)) for q in req.queries]
        missing = [i for i, r in enumerate(results) if r is None]
        request[CACHE_HITS_KEY] = len(req.queries) - len(missing)
        if missing:
            try:
                fut = self.batcher.submit([req.queries[i] for i in missing], req.topk)
            except QueueFullError as exc:
                return self._unavailable(f"overloaded: {exc}")
            try:
                fresh = await fut
            except Exception as exc:
                return error_response(500, "server", f"search failed: {type(exc).__name__}: {exc}")
            for i, hits in zip(missing, fresh, strict=True):
                results[i] = hits
                self.cache.put((req.queries[i], req.topk), hits)
        if req.return_scores:
            payload = [[{"document": h.as_document(), "score": h.score} for h in hits] for hits in results]
        else:
            payload = [[h.as_document() for h in hits] for hits in results]
        return web.Response(
            body=_dumps({"result": payload}), content_type="application/json", charset="utf-8"
        )

    async def open_page(self, request: web.Request) -> web.Response:
        try:
            items = parse_open_page_request(await _json_body(request), self.config)
        except RequestError as exc:
            return error_response(exc.status, exc.field, exc.message)
        request[N_QUERIES_KEY] = len(items)
        if self.status != "ready":
            return self._unavailable(f"index not ready (status: {self.status})")
        if self.pages is None:
            return error_response(
                501,
                "path",
                "this server has no page index (a pyserini index, a corpus attached as jsonl "
                "without --docstore arrow, or --no-pages)",
            )
        result = [self.pages.open(it.id, it.title, it.offset, it.length) for it in items]
        return web.json_response({"result": result})


def _query_encoder(backend: SearchBackend | None) -> str | None:
    """The query encoder of ``backend``'s dense part, as ``--query-encoder`` names it; None: none."""
    if backend is None:
        return None
    encoder = getattr(backend, "encoder", None)
    if encoder is not None:
        return encoder.name
    parts = [*getattr(backend, "backends", ()), getattr(backend, "first_stage", None)]  # hybrid, rerank
    return next((name for part in parts if (name := _query_encoder(part)) is not None), None)


async def _json_body(request: web.Request) -> Any:
    """The decoded JSON body; malformed JSON is a ``RequestError`` on the field ``body``."""
    try:
        return await request.json(loads=json.loads)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise RequestError("body", f"malformed JSON: {exc}") from None


def create_app(service: RetrieverService) -> web.Application:
    cfg = service.config
    item = cfg.max_query_chars * 4 + 16  # a query, an id or a title, UTF-8 and JSON-escaped (+ a window)
    client_max = 64 * 1024 + max(cfg.max_queries_per_request, cfg.max_pages_per_request) * (item + 64)
    # The access log's middleware only where there is an access log: it is a coroutine layer,
    # clocks and a log-level check on every request.
    logged = [access_log_middleware()] if cfg.access_log is not None else []
    app = web.Application(client_max_size=client_max, middlewares=[*logged, json_errors_middleware])
    app.router.add_post("/retrieve", service.retrieve)
    app.router.add_post("/open_page", service.open_page)
    app.router.add_get("/health", service.health)
    app.on_startup.append(service.on_startup)
    app.on_cleanup.append(service.on_cleanup)
    return app


async def serve(service: RetrieverService) -> int:
    """Run until SIGTERM/SIGINT; drain in-flight requests; return the exit code."""
    cfg = service.config
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    service.on_fatal = stop.set
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    runner = web.AppRunner(create_app(service), access_log=None, shutdown_timeout=cfg.shutdown_timeout_s)
    await runner.setup()
    site = web.TCPSite(
        runner,
        cfg.host,
        cfg.port,
        backlog=1024,
        shutdown_timeout=cfg.shutdown_timeout_s,
        reuse_port=service.slot is not None,  # the workers share the port; the kernel spreads connections
    )
    await site.start()
    log.info(json.dumps({"event": "listening", "host": cfg.host, "port": cfg.port}))
    await stop.wait()
    log.info(json.dumps({"event": "stopping"}))
    await runner.cleanup()
    return 1 if service.load_error else 0


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The server's flags (``retriever.server_args``), with this module's usage as ``--help``."""
    return server_args.parse_args(argv, __doc__)


def main(argv: Sequence[str] | None = None) -> int:
    from retriever.corpus import DOCSTORE_FILE, DocStore
    from retriever.index import BackendOptions, open_backend, read_manifest, resolve_backend_name

    args = parse_args(argv)
    try:
        config = ServerConfig(
            **{k: getattr(args, k) for k in ServerConfig.field_names() if k != "access_log"},
            access_log=None if args.access_log == "off" else args.access_log,
        )
        resolve_backend_name(args.index, args.backend)  # fail before binding the port
    except (ValueError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    # Before any backend (torch, faiss) is imported: OpenMP reads its settings when it loads.
    share = max(1, available_cores() // config.workers) if config.workers > 1 else None
    threads = apply_thread_policy(share)
    configure_logging(config.access_log)
    options = BackendOptions(
        model_path=args.model,
        ef_search=args.ef_search,
        use_gpu=args.use_gpu,
        rrf_k=args.rrf_k,
        hybrid_depth=args.hybrid_depth,
        rerank_model=args.rerank_model,
        rerank_depth=args.rerank_depth,
        query_encoder=args.query_encoder,
        encoder_threads=share or 0,
        index_load=args.index_load,
        dense_index=args.dense_index,
        nprobe=args.nprobe,
    )
    index_dir = str(Path(args.index).resolve())
    # pages read Arrow columns: a pyserini index has no docstore, an attached jsonl one no columns
    arrow = read_manifest(index_dir).get("docstore", {"kind": "arrow"}).get("kind") == "arrow"
    has_docstore = arrow and (Path(index_dir) / DOCSTORE_FILE).is_file()
    load_pages = None if args.no_pages or not has_docstore else (lambda: PageIndex(DocStore(index_dir)))

    def run(slot: WorkerSlot | None) -> int:
        service = RetrieverService(
            config,
            lambda: open_backend(index_dir, args.backend, options),
            index_dir=index_dir,
            load_pages=load_pages,
            slot=slot,
            threads=threads,
        )
        return run_event_loop(serve(service))

    if config.workers == 1:
        return run(None)
    return run_workers(config.workers, run)


if __name__ == "__main__":
    sys.exit(main())
