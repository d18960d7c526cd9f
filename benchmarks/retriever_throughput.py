"""Retriever server throughput and latency vs. the backend called in-process.

    python benchmarks/retriever_throughput.py --index indexes/wiki_mini [--backends bm25 dense]

For each backend: (a) in-process, one query per call; (b) in-process, batches of 64 (the
physical limit of batching); then a real server subprocess driven by 1, 16 and 64 concurrent
clients (``RetrieverClient``), each request carrying one query.  Queries are real NQ
questions, all distinct, and the server cache is off, so every query costs a real search.
Figures are printed, not asserted: they depend on the machine and on whatever else runs.
Targets (dense, 64 clients): >= 70% of in-process batched QPS and >= 4x one-at-a-time QPS.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from agentrl.agent.tools.search_client import RetrieverClient
from retriever.evaluation import load_questions
from retriever.index import open_backend

REPO = Path(__file__).resolve().parents[1]
TOPK = 3


def _pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def in_process(backend_name: str, index: Path, queries: list[str], n_single: int, n_batched: int) -> dict:
    backend = open_backend(index, backend_name)
    backend.search(queries[:8], TOPK)  # warm-up (thread pools, first-touch of mmapped pages)
    t0 = time.perf_counter()
    for q in queries[:n_single]:
        backend.search([q], TOPK)
    single = n_single / (time.perf_counter() - t0)
    t0 = time.perf_counter()
    for start in range(0, n_batched, 64):
        backend.search(queries[start : start + 64], TOPK)
    batched = n_batched / (time.perf_counter() - t0)
    return {"single_qps": single, "batched64_qps": batched}


async def drive(url: str, queries: list[str], concurrency: int, n_requests: int) -> dict:
    client = RetrieverClient(url, timeout_s=60, deadline_s=120, max_attempts=1, max_connections=concurrency)
    await client.retrieve([queries[-1]], TOPK)  # open a connection first
    latencies: list[float] = []
    errors = 0
    it = iter(range(n_requests))

    async def worker() -> None:
        nonlocal errors
        for i in it:
            t = time.perf_counter()
            try:
                res = await client.retrieve([queries[i % len(queries)]], TOPK)
                assert len(res[0]) == TOPK
            except Exception:
                errors += 1
            latencies.append(time.perf_counter() - t)

    t0 = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    wall = time.perf_counter() - t0
    await client.close()
    return {
        "qps": n_requests / wall,
        "p50_ms": 1000 * statistics.median(latencies),
        "p99_ms": 1000 * _pct(latencies, 0.99),
        "errors": errors,
    }


def start_server(index: Path, backend: str) -> tuple[subprocess.Popen, str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [
        sys.executable,
        "-m",
        "retriever.server",
        "--index",
        str(index),
        "--backend",
        backend,
        "--port",
        str(port),
        "--cache-size",
        "0",
        "--access-log",
        "off",
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=REPO)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url + "/health", timeout=1) as r:
                if json.loads(r.read())["ready"]:
                    return proc, url
        except OSError:
            time.sleep(0.2)
    proc.kill()
    raise RuntimeError("server did not become ready")


def main() -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--index", default=str(REPO / "indexes" / "wiki_mini"))
    p.add_argument("--data", default=str(REPO.parent / "shared" / "data"))
    p.add_argument("--backends", nargs="+", default=["bm25", "dense"])
    p.add_argument("--scale", type=float, default=1.0, help="multiply the request counts")
    args = p.parse_args()
    index = Path(args.index)
    queries = [q["question"] for q in load_questions(Path(args.data) / "nq" / "test.jsonl")]
    plans = {  # backend -> (single, batched, {concurrency: requests})
        "bm25": (500, 2048, {1: 500, 16: 2000, 64: 3000}),
        "dense": (150, 1024, {1: 150, 16: 600, 64: 1200}),
    }
    try:
        import uvloop

        runner = uvloop.run
    except ImportError:
        runner = asyncio.run
    for name in args.backends:
        single_n, batched_n, levels = plans.get(name, plans["dense"])
        s = args.scale
        base = in_process(name, index, queries, int(single_n * s), int(batched_n * s))
        print(f"\n## {name}\n")
        print(f"in-process one query per call : {base['single_qps']:8.1f} q/s")
        print(f"in-process batches of 64      : {base['batched64_qps']:8.1f} q/s")
        print(
            "\n| clients | requests | q/s | p50 ms | p99 ms | errors | mean batch "
            "| vs batched | vs one-at-a-time |"
        )
        print("|---|---|---|---|---|---|---|---|---|")
        proc, url = start_server(index, name)
        try:
            for conc, n in levels.items():
                r = runner(drive(url, queries, conc, int(n * s)))
                with urllib.request.urlopen(url + "/health", timeout=10) as resp:
                    r["mean_batch"] = json.loads(resp.read())["batching"]["mean_recent_size"]
                print(
                    f"| {conc} | {int(n * s)} | {r['qps']:.1f} | {r['p50_ms']:.1f} | {r['p99_ms']:.1f} | "
                    f"{r['errors']} | {r['mean_batch']} | {r['qps'] / base['batched64_qps']:.0%} | "
                    f"{r['qps'] / base['single_qps']:.1f}x |",
                    flush=True,
                )
        finally:
            proc.terminate()
            proc.wait(30)
    return 0


if __name__ == "__main__":
    sys.exit(main())
