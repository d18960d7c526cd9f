"""One backend's in-process search rate, in a child process whose ``retriever`` is a given tree's.

``retriever_throughput`` runs this file by its path (``python PATH``, never ``-m``) with
``PYTHONPATH`` led by the tree under test and that tree as the working directory: ``-m`` would put
the working directory ahead of ``PYTHONPATH``, and a baseline tree has its own ``benchmarks/``.
So it imports nothing from ``benchmarks``: only the standard library and ``retriever``.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

TOPK = 3
IN_PROCESS = "IN_PROCESS "  # the line this process reports its figures on


def in_process(backend_name: str, index: Path, queries: list[str], n_single: int, n_batched: int) -> dict:
    """Queries a second through ``open_backend``, one query per call and in batches of 64, and
    the CPU one query per call costs this process (all its threads), in ms."""
    from retriever.index import open_backend

    backend = open_backend(index, backend_name)
    backend.search(queries[:8], TOPK)  # warm-up (thread pools, first touch of mmapped pages)
    t0, cpu0 = time.perf_counter(), time.process_time()
    for q in queries[:n_single]:
        backend.search([q], TOPK)
    single = n_single / (time.perf_counter() - t0)
    single_cpu_ms = 1000 * (time.process_time() - cpu0) / n_single
    t0 = time.perf_counter()
    for start in range(0, n_batched, 64):
        backend.search(queries[start : start + 64], TOPK)
    batched = n_batched / (time.perf_counter() - t0)
    return {"single_qps": single, "batched64_qps": batched, "single_cpu_ms": single_cpu_ms}


def main() -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("backend")
    p.add_argument("--index", required=True)
    p.add_argument("--data", required=True, help="the shared data directory (nq/test.jsonl)")
    p.add_argument("--n", type=int, nargs=2, required=True, metavar=("SINGLE", "BATCHED"))
    args = p.parse_args()
    from retriever.evaluation import load_questions

    queries = [q["question"] for q in load_questions(Path(args.data) / "nq" / "test.jsonl")]
    figures = in_process(args.backend, Path(args.index), queries, *args.n)
    print(IN_PROCESS + json.dumps(figures), flush=True)


if __name__ == "__main__":
    main()
