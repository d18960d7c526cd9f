"""Retriever server throughput and latency, side by side with a baseline commit's server.

    python -m benchmarks.retriever_throughput --index indexes/wiki_mini [--backends bm25 dense]
        [--baseline-ref 063a5cf] [--new-server-args "..."] [--baseline-server-args "..."]
        [--clients 1 16 64] [--rounds 2] [--scale F]

For each backend: (a) in-process, one query per call, and (b) in-process, batches of 64 (the
physical limit of batching), each measured for the working tree and for the baseline ref in
their own subprocess; then two real server subprocesses on the same index -- the working
tree's ("new") and the one of ``--baseline-ref`` ("baseline", extracted with ``git archive``
into a temporary directory and run with the same interpreter) -- driven by 1, 16 and 64
concurrent clients (``RetrieverClient``), each request carrying one query.  At every client
level the two servers are measured alternately (baseline, new, baseline, new, ... ``--rounds``
times each) so drift on the machine hits both alike; the table gives each run's q/s, their
mean, the latencies over all runs, and the ratio new / baseline.  ``server CPU`` and
``bench CPU`` are the CPU milliseconds per request of the server process and of this load
generator (they share the machine's cores: when the generator's share is large, the
servers' own CPU per request is the honest comparison).  ``--baseline-ref ''`` measures the
working tree's server alone.

Queries are real NQ questions, all distinct, and the server cache is off, so every query
costs a real search.  Figures are printed, not asserted: they depend on the machine and on
whatever else runs.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shlex
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from agentrl.tools.retrieval.client import RetrieverClient
from benchmarks.common import retriever_in_process
from benchmarks.common.paths import REPO, SHARED_DATA
from benchmarks.common.retriever_in_process import IN_PROCESS, TOPK
from benchmarks.common.retriever_servers import (
    checkout_ref,
    cpu_s,
    env_for,
    health,
    start_server,
    stop_server,
)
from retriever.evaluation import load_questions
from retriever.event_loop import run_event_loop

DEFAULT_BASELINE = "063a5cf"  # the server before issue #30's BM25 work ("today's server")
PLANS = {  # backend -> (in-process single, in-process batched, requests per server run at 1/16/64 clients)
    "bm25": (500, 2048, {1: 500, 16: 2000, 64: 3000}),
    "dense": (150, 1024, {1: 150, 16: 600, 64: 1200}),
}


def _pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def in_process_at(root: Path, args: argparse.Namespace, backend: str, n_single: int, n_batched: int) -> dict:
    """The in-process rates (``retriever_in_process``) in a subprocess whose ``retriever`` is ``root``'s
    (its own memory and threads)."""
    cmd = [sys.executable, retriever_in_process.__file__, backend, "--index", args.index, "--data", args.data]
    cmd += ["--n", str(n_single), str(n_batched)]
    env = env_for(root)
    if args.thread_policy:  # as the server applies it to itself (retriever.threads)
        env = {"OMP_WAIT_POLICY": "PASSIVE", "KMP_BLOCKTIME": "0", **env}
    pin = None if args.pin_server is None else (lambda: os.sched_setaffinity(0, args.pin_server))
    out = subprocess.run(
        cmd, env=env, cwd=root, stdout=subprocess.PIPE, text=True, check=True, preexec_fn=pin
    )
    line = next(ln for ln in out.stdout.splitlines() if ln.startswith(IN_PROCESS))
    return json.loads(line[len(IN_PROCESS) :])


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
    return {"qps": n_requests / wall, "latencies": latencies, "errors": errors}


def measure(runner, server: tuple[subprocess.Popen, str], queries: list[str], conc: int, n: int) -> dict:
    """One run of ``n`` requests at ``conc`` clients, with the server's and this process's CPU time."""
    proc, url = server
    srv0, own0 = cpu_s(proc.pid), cpu_s()
    r = runner(drive(url, queries, conc, n))
    r["server_cpu_ms"] = 1000 * (cpu_s(proc.pid) - srv0) / n
    r["bench_cpu_ms"] = 1000 * (cpu_s() - own0) / n
    r["mean_batch"] = health(url)["batching"]["mean_recent_size"]
    return r


def summarize(runs: list[dict]) -> dict:
    lat = [x for r in runs for x in r["latencies"]]
    return {
        "runs": [r["qps"] for r in runs],
        "qps": statistics.mean(r["qps"] for r in runs),
        "p50_ms": 1000 * statistics.median(lat),
        "p99_ms": 1000 * _pct(lat, 0.99),
        "errors": sum(r["errors"] for r in runs),
        "mean_batch": statistics.mean(r["mean_batch"] for r in runs),
        "server_cpu_ms": statistics.mean(r["server_cpu_ms"] for r in runs),
        "bench_cpu_ms": statistics.mean(r["bench_cpu_ms"] for r in runs),
    }


HEADER = (
    "| clients | server | requests/run | q/s per run | q/s | p50 ms | p99 ms | errors | mean batch "
    "| server CPU ms/req | bench CPU ms/req | bench CPU share | vs in-process one query "
    "| server CPU vs in-process one query | vs in-process batched | new / baseline |"
)


def row(conc: int, side: str, n: int, s: dict, base: dict | None, ratio: str) -> str:
    """One table row; ``base`` is the side's in-process rates (None for the echo server)."""
    runs = ", ".join(f"{q:.0f}" for q in s["runs"])
    share = s["bench_cpu_ms"] / (s["bench_cpu_ms"] + s["server_cpu_ms"])
    single = f"{s['qps'] / base['single_qps']:.2f}×" if base else ""
    cpu = f"{s['server_cpu_ms'] / base['single_cpu_ms']:.2f}×" if base else ""
    batched = f"{s['qps'] / base['batched64_qps']:.0%}" if base else ""
    return (
        f"| {conc} | {side} | {n} | {runs} | {s['qps']:.1f} | {s['p50_ms']:.1f} | {s['p99_ms']:.1f} | "
        f"{s['errors']} | {s['mean_batch']:.1f} | {s['server_cpu_ms']:.3f} | {s['bench_cpu_ms']:.3f} | "
        f"{share:.0%} | {single} | {cpu} | {batched} | {ratio} |"
    )


def bench_backend(name: str, args: argparse.Namespace, queries: list[str], baseline: Path | None) -> None:
    single_n, batched_n, levels = PLANS.get(name, PLANS["dense"])
    s = args.scale
    roots = {"baseline": baseline, "new": REPO} if baseline else {"new": REPO}
    extra = {"baseline": shlex.split(args.baseline_server_args), "new": shlex.split(args.new_server_args)}
    print(f"\n## {name}\n")
    base = {}
    for side, root in roots.items():
        base[side] = in_process_at(root, args, name, int(single_n * s), int(batched_n * s))
        print(
            f"in-process ({side:8s}): one query per call {base[side]['single_qps']:8.1f} q/s, "
            f"batches of 64 {base[side]['batched64_qps']:8.1f} q/s, "
            f"CPU {base[side]['single_cpu_ms']:.2f} ms per single query",
            flush=True,
        )
    runner = run_event_loop
    servers = {}
    try:
        for side, root in roots.items():
            servers[side] = start_server(Path(args.index), name, extra[side], root, args.pin_server)
        if args.echo:
            servers["echo"] = start_server(
                Path(args.index), name, (), REPO, args.pin_server, "benchmarks.common.echo_server"
            )
        for side in servers:  # untimed warm-up: connections, first touch of the mmapped index
            runner(drive(servers[side][1], queries, 8, 200))
        print("\n" + HEADER + "\n|" + "---|" * (HEADER.count("|") - 1))
        for conc in args.clients:
            n = int(levels.get(conc, max(levels.values())) * s)
            runs: dict[str, list[dict]] = {side: [] for side in servers}
            for _ in range(args.rounds):
                for side in servers:  # alternate, baseline first
                    runs[side].append(measure(runner, servers[side], queries, conc, n))
            summary = {side: summarize(r) for side, r in runs.items()}
            for side in servers:
                ratio = ""
                if side == "new" and "baseline" in summary:
                    ratio = f"**{summary['new']['qps'] / summary['baseline']['qps']:.2f}×**"
                print(row(conc, side, n, summary[side], base.get(side), ratio), flush=True)
    finally:
        for proc, _ in servers.values():
            stop_server(proc)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--index", default=str(REPO / "indexes" / "wiki_mini"))
    p.add_argument("--data", default=str(SHARED_DATA))
    p.add_argument("--backends", nargs="+", default=["bm25", "dense"])
    p.add_argument("--scale", type=float, default=1.0, help="multiply the request counts")
    p.add_argument("--clients", type=int, nargs="+", default=[1, 16, 64], help="client levels")
    p.add_argument("--rounds", type=int, default=2, help="runs per server at each level, alternating")
    p.add_argument(
        "--baseline-ref",
        default=DEFAULT_BASELINE,
        help="the commit whose server is the baseline ('' = measure the working tree's server alone)",
    )
    p.add_argument("--new-server-args", default="", help="extra flags for the working tree's server")
    p.add_argument("--baseline-server-args", default="", help="extra flags for the baseline's server")
    p.add_argument("--echo", action="store_true", help="also measure a bare aiohttp echo server (no search)")
    p.add_argument("--pin-server", type=_cores, default=None, metavar="CPUS", help="e.g. 1 or 2-3")
    p.add_argument("--pin-bench", type=_cores, default=None, metavar="CPUS", help="the load generator's")
    p.add_argument(
        "--thread-policy",
        action="store_true",
        help="run the in-process rates under the server's own thread policy (quiet OpenMP pools)",
    )
    args = p.parse_args(argv)
    # the baseline's server and in-process runs start from a checkout elsewhere, so a path
    # relative to the caller's directory must be fixed here, before any of them starts
    args.index = str(Path(args.index).resolve())
    args.data = str(Path(args.data).resolve())
    if args.rounds < 1 or args.scale <= 0 or min(args.clients) < 1:
        p.error("--rounds and --clients: expected integers >= 1; --scale: expected > 0")
    return args


def _cores(text: str) -> set[int]:
    """``"1"``, ``"0,2"`` or ``"2-3"`` as a set of CPU numbers."""
    cores: set[int] = set()
    for part in text.split(","):
        low, _, high = part.partition("-")
        cores.update(range(int(low), int(high or low) + 1))
    return cores


def main(argv: Sequence[str] | None = None) -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    args = parse_args(argv)
    if args.pin_bench is not None:
        os.sched_setaffinity(0, args.pin_bench)
    queries = [q["question"] for q in load_questions(Path(args.data) / "nq" / "test.jsonl")]
    with checkout_ref(args.baseline_ref) if args.baseline_ref else contextlib.nullcontext() as baseline:
        if baseline:
            print(f"baseline: {args.baseline_ref} extracted to {baseline}; new: the working tree {REPO}")
        for name in args.backends:
            bench_backend(name, args, queries, baseline)
    return 0


if __name__ == "__main__":
    sys.exit(main())
