"""/retrieve throughput alone vs. while /open_page is loaded too, on one retriever server.

    python -m benchmarks.page_reader_load [--backend bm25|dense] [--index DIR] [--corpus-limit N]
        [--phase-s 3] [--clients 32] [--rates 0.25 0.5 1]

One server subprocess (``--backend``, BM25 by default) over ``--index``, or over an index of
the shared corpus (34,624 passages, or its first ``--corpus-limit``) built into a temporary
directory when ``--index`` has none of that backend; cache off, on 127.0.0.1. ``--clients``
closed-loop clients send /retrieve requests of one distinct NQ question each (top 3) through
``RetrieverClient``. Phases, ``--phase-s`` seconds each after a one-second warm-up:

* ``pages at r``: /retrieve as above, plus /open_page requests at ``r`` times the /retrieve
  rate of the ``alone`` phase before it (open loop, paced every 10 ms): one window of 200
  words of a random title at a random offset per request, the page reader's traffic when an
  agent opens about ``r`` pages per search;
* ``pages saturating``: /retrieve as above plus as many closed-loop /open_page clients;
* ``alone``: /retrieve only, before the first mix and after each one. A mix is compared with
  the mean of the two ``alone`` phases around it, so the machine's drift over the run (other
  jobs on shared cores) moves the baseline with it;
* ``pages only``: the closed-loop /open_page clients alone.

The server's CPU time (user + system, from ``/proc``) is read over each phase; its CPU per
request of each endpoint, measured alone, predicts the share of /retrieve's rate that a server
bound by its CPU keeps at ``r`` pages per search: ``1 / (1 + r * cpu_page / cpu_retrieve)``.

Figures are printed, not asserted. The load generator runs in this process, on the same
cores as the server, so what /open_page costs the client counts too; on a 2-core machine
shared with other work the figures move by several percent from run to run. BM25 on CPU
is the worst case for sharing: a query costs ~0.15 ms, so the server is bound by HTTP and
JSON on its one event loop, where /open_page is served too. With dense retrieval the
encoder dominates a query and the loop has room (``--backend dense --corpus-limit 1000``:
encoding a query costs the same on a small corpus, and the small index builds in a minute).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

from agentrl.tools.retrieval.client import RetrieverClient
from benchmarks.common.paths import REPO, SHARED_DATA
from benchmarks.common.retriever_servers import start_server
from retriever.build_index import main as build_index
from retriever.corpus import DocStore
from retriever.evaluation import load_questions
from retriever.event_loop import run_event_loop

TOPK, PAGE_WORDS, WARMUP_S = 3, 200, 1.0


class Phase:
    """Counts one endpoint's requests sent after the warm-up and answered before the phase's end."""

    def __init__(self, measure_from: float, until: float) -> None:
        self.measure_from = measure_from
        self.until = until
        self.done = 0
        self.errors = 0
        self.shed = 0  # open loop: requests not sent because 256 were already in flight
        self.latencies: list[float] = []

    def record(self, t_start: float, ok: bool) -> None:
        now = time.perf_counter()
        if t_start < self.measure_from or now > self.until:
            return
        self.done += ok
        self.errors += not ok
        self.latencies.append(now - t_start)


async def _retrieve_loop(client: RetrieverClient, queries: list[str], phase: Phase, until: float) -> None:
    while time.perf_counter() < until:
        t = time.perf_counter()
        try:
            res = await client.retrieve([random.choice(queries)], TOPK)
            phase.record(t, len(res[0]) == TOPK)
        except Exception:
            phase.record(t, False)


async def _open_one(client: RetrieverClient, titles: list[str], phase: Phase) -> None:
    t = time.perf_counter()
    item = {"title": random.choice(titles), "offset": random.choice((0, 0, 200, 400)), "length": PAGE_WORDS}
    try:
        (window,) = await client.open_pages([item])
        phase.record(t, window["found"])
    except Exception:
        phase.record(t, False)


async def _paced_pages(client: RetrieverClient, titles: list[str], rate: float, phase: Phase, until: float):
    """Open loop at ``rate`` requests/s, sent every 10 ms; beyond 256 in flight a request is shed."""
    tick, owed, tasks = 0.01, 0.0, set()
    while time.perf_counter() < until:
        owed += rate * tick
        while owed >= 1:
            owed -= 1
            if len(tasks) >= 256:
                phase.shed += 1
                continue
            task = asyncio.create_task(_open_one(client, titles, phase))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
        await asyncio.sleep(tick)
    await asyncio.gather(*tasks)


async def _closed_pages(client: RetrieverClient, titles: list[str], phase: Phase, until: float) -> None:
    while time.perf_counter() < until:
        await _open_one(client, titles, phase)


def _cpu_s(pid: int) -> float:
    """CPU seconds (user + system, all threads) process ``pid`` has used so far (Linux)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def _server_cpu_s(pid: int, measure_from: float, until: float) -> float:
    await asyncio.sleep(max(0.0, measure_from - time.perf_counter()))
    used = _cpu_s(pid)
    await asyncio.sleep(max(0.0, until - time.perf_counter()))
    return _cpu_s(pid) - used


async def run_phase(
    url: str, pid: int, queries: list[str], titles: list[str], args, pages: str | float | None
) -> dict:
    """One phase: ``pages`` is None (retrieve alone), a rate in pages/s, ``"saturate"`` (closed-loop
    page clients beside the retrieve clients) or ``"only"`` (closed-loop page clients alone)."""
    n = args.clients
    retrieval = RetrieverClient(url, timeout_s=60, deadline_s=120, max_attempts=1, max_connections=n)
    reader = RetrieverClient(url, timeout_s=60, deadline_s=120, max_attempts=1, max_connections=256)
    start = time.perf_counter()
    measure_from, until = start + WARMUP_S, start + WARMUP_S + args.phase_s
    r_phase, p_phase = Phase(measure_from, until), Phase(measure_from, until)
    jobs = [] if pages == "only" else [_retrieve_loop(retrieval, queries, r_phase, until) for _ in range(n)]
    if pages in ("saturate", "only"):
        jobs += [_closed_pages(reader, titles, p_phase, until) for _ in range(n)]
    elif pages is not None:
        jobs.append(_paced_pages(reader, titles, float(pages), p_phase, until))
    cpu_s, *_ = await asyncio.gather(_server_cpu_s(pid, measure_from, until), *jobs)
    await retrieval.close()
    await reader.close()

    def figures(phase: Phase) -> dict:
        lat = sorted(phase.latencies) or [0.0]
        return {
            "per_s": phase.done / args.phase_s,
            "p50_ms": 1000 * statistics.median(lat),
            "p99_ms": 1000 * lat[min(len(lat) - 1, int(0.99 * len(lat)))],
            "errors": phase.errors,
            "shed": phase.shed,
        }

    return {"retrieve": figures(r_phase), "open_page": figures(p_phase), "server_cpu_s": cpu_s}


def print_costs(rows: list[tuple[str, dict, float | None]], phase_s: float, rates: list[float]) -> None:
    """The server's CPU per request of each endpoint, each measured alone, and what they predict.

    Steadier than the rates on a busy machine where a request costs the server about the same
    CPU however busy the machine is (BM25: HTTP, JSON and a cheap search)."""
    per_retrieve = statistics.mean(
        row["server_cpu_s"] / (row["retrieve"]["per_s"] * phase_s) for name, row, _ in rows if name == "alone"
    )
    (only,) = [row for name, row, _ in rows if name == "pages only"]
    per_page = only["server_cpu_s"] / (only["open_page"]["per_s"] * phase_s)
    shares = ", ".join(f"{r:g} -> {1 / (1 + r * per_page / per_retrieve):.0%}" for r in rates)
    print(
        f"\nserver CPU per request (each alone): /retrieve {per_retrieve * 1e6:.0f} us, /open_page "
        f"{per_page * 1e6:.0f} us. A server bound by its CPU keeps this share of its /retrieve rate "
        f"at r pages per search: {shares}"
    )


def _titles(index: Path, n: int, seed: int) -> tuple[list[str], int]:
    """``n`` titles of passages drawn from the index's document store, and its size."""
    docs = DocStore(index)
    rows = random.Random(seed).sample(range(len(docs)), min(n, len(docs)))
    return [docs.get(row).title for row in rows], len(docs)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--backend", default="bm25", choices=["bm25", "dense"])
    p.add_argument("--index", default=str(REPO / "indexes" / "wiki_mini"))
    p.add_argument("--corpus-limit", type=int, default=None, help="building: the corpus's first N passages")
    p.add_argument("--data", default=str(SHARED_DATA))
    p.add_argument("--phase-s", type=float, default=3.0)
    p.add_argument("--clients", type=int, default=32)
    p.add_argument("--rates", type=float, nargs="+", default=[0.25, 0.5, 1.0])
    args = p.parse_args()
    random.seed(0)
    data = Path(args.data)
    queries = [q["question"] for q in load_questions(data / "nq" / "test.jsonl")]
    index = Path(args.index)
    scratch = tempfile.TemporaryDirectory(prefix="page_reader_load_")
    if not (index / args.backend).is_dir():
        lines = (data / "corpus" / "wiki_mini.jsonl").read_text(encoding="utf-8").splitlines()
        lines = lines[: args.corpus_limit]
        index, corpus = Path(scratch.name) / "index", Path(scratch.name) / "corpus.jsonl"
        corpus.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
        build_index(["--corpus", str(corpus), "--backend", args.backend, "--out", str(index), "--quiet"])
    titles, n_passages = _titles(index, 5000, seed=0)
    runner = run_event_loop
    proc, url = start_server(index, args.backend)
    rows: list[tuple[str, dict, float | None]] = []  # (phase, its figures, the alone rate around it)
    try:

        def phase(pages: str | float | None) -> dict:
            return runner(run_phase(url, proc.pid, queries, titles, args, pages))

        before = phase(None)
        rows.append(("alone", before, None))
        mixes: list[tuple[str, float | str]] = [(f"pages at {r:g}x", r) for r in args.rates]
        for name, mix in [*mixes, ("pages saturating", "saturate")]:
            pages = mix if isinstance(mix, str) else mix * before["retrieve"]["per_s"]
            mixed, after = phase(pages), phase(None)
            alone = (before["retrieve"]["per_s"] + after["retrieve"]["per_s"]) / 2
            rows += [(name, mixed, alone), ("alone", after, None)]
            before = after
        rows.append(("pages only", phase("only"), None))
    finally:
        proc.terminate()
        proc.wait(30)
        scratch.cleanup()
    print(f"\n{args.backend}, {n_passages} passages, {args.clients} clients, {args.phase_s:g} s phases,")
    print(
        f"{os.cpu_count()} CPUs; latencies in ms; each mix against the mean of the alone phases around it\n"
    )
    header = "phase, /retrieve q/s, vs alone, p50, p99, /open_page /s, p50, p99, server CPU, errors, shed"
    print("| " + " | ".join(header.split(", ")) + " |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for name, row, alone in rows:
        r, o = row["retrieve"], row["open_page"]
        pages = f"{o['per_s']:.0f} | {o['p50_ms']:.1f} | {o['p99_ms']:.1f}" if o["per_s"] else "– | – | –"
        ratio = f"**{r['per_s'] / alone:.0%}**" if alone else ""
        retrieve = (
            f"{r['per_s']:.0f} | {ratio} | {r['p50_ms']:.1f} | {r['p99_ms']:.1f}"
            if r["per_s"]
            else "– | | – | –"
        )
        cpu = f"{row['server_cpu_s'] / args.phase_s:.0%}"
        print(
            f"| {name} | {retrieve} | {pages} | {cpu} | {r['errors'] + o['errors']} | {o['shed']} |",
            flush=True,
        )
    print_costs(rows, args.phase_s, args.rates)
    return 0


if __name__ == "__main__":
    sys.exit(main())
