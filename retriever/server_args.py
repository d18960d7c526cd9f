"""The retriever server's command line: its flags, their defaults and their help."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from retriever.config import ServerConfig
from retriever.threads import available_cores
from retriever.workers import MAX_AUTO_WORKERS, auto_workers


def parse_args(argv: Sequence[str] | None = None, description: str | None = None) -> argparse.Namespace:
    """The parsed flags of ``python -m retriever.server``; ``description`` heads ``--help``."""
    from retriever.index import BACKEND_CHOICES

    defaults = ServerConfig()
    p = argparse.ArgumentParser(
        prog="python -m retriever.server",
        description=description,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--index", required=True, help="index directory built by retriever.build_index")
    p.add_argument(
        "--backend",
        default="auto",
        choices=BACKEND_CHOICES,
        help="auto = hybrid if dense and bm25 are both built, else whichever exists",
    )
    p.add_argument("--host", default=defaults.host)
    p.add_argument("--port", type=int, default=defaults.port)
    for name in (
        "default_topk",
        "max_topk",
        "max_queries_per_request",
        "max_query_chars",
        "default_page_words",
        "max_page_words",
        "max_pages_per_request",
        "max_batch_size",
        "max_pending",
        "retry_after_s",
        "cache_size",
    ):
        p.add_argument("--" + name.replace("_", "-"), type=int, default=getattr(defaults, name))
    p.add_argument(
        "--workers",
        type=_workers,
        default="auto",
        help="server processes sharing the port (SO_REUSEPORT), each with its share of the cores; "
        f"auto (the default): one per available core, at most {MAX_AUTO_WORKERS}, one with --port 0",
    )
    p.add_argument("--batch-wait-ms", type=float, default=defaults.batch_wait_ms)
    p.add_argument("--shutdown-timeout-s", type=float, default=defaults.shutdown_timeout_s)
    p.add_argument("--access-log", default=defaults.access_log, help="'-' = stderr, a file path, or 'off'")
    p.add_argument(
        "--no-pages",
        action="store_true",
        help="build no page index: /open_page answers 501 (saves its memory)",
    )
    g = p.add_argument_group("backend")
    g.add_argument("--model", default=None, help="override the dense encoder's model directory")
    g.add_argument("--ef-search", type=int, default=None, help="HNSW efSearch (default: recorded, or 128)")
    g.add_argument(
        "--use-gpu", default="auto", choices=["auto", "yes", "no"], help="faiss-gpu for a flat index"
    )
    g.add_argument(
        "--index-load",
        default="mmap",
        choices=["mmap", "ram"],
        help="open the dense FAISS file memory-mapped (seconds, pages on demand) or read it all",
    )
    g.add_argument(
        "--dense-index", default="base", help="'base' or a compressed index's name (compress_index)"
    )
    g.add_argument("--nprobe", type=int, default=None, help="IVF lists searched (default: as recorded)")
    g.add_argument("--rrf-k", type=float, default=60.0)
    g.add_argument("--hybrid-depth", type=int, default=50, help="candidates per backend before fusion")
    g.add_argument("--rerank-model", default=None, help="local cross-encoder dir; enables reranking")
    g.add_argument("--rerank-depth", type=int, default=20)
    g.add_argument(  # the names of onnx_encoder.QUERY_ENCODERS, which imports faiss: too early here
        "--query-encoder",
        choices=["auto", "transformers", "onnx-int8", "onnx-fp32"],
        default="auto",
        help="auto: onnx-int8 on the CPU, transformers (the reference) on a GPU or for pooling onnx lacks",
    )
    args = p.parse_args(argv)
    if args.workers == "auto":  # decided here, once: the config and the thread shares take the count
        args.workers = auto_workers(available_cores(), args.port)
    return args


def _workers(text: str) -> int | str:
    """``--workers``: ``auto`` or a positive integer."""
    if text == "auto":
        return text
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected 'auto' or an integer >= 1, got {text!r}")
    return value
