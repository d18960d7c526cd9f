"""The retriever throughput benchmark's own arithmetic: core lists, table rows, a process tree's CPU."""

from __future__ import annotations

import subprocess
import sys
import time

from benchmarks.common.retriever_servers import cpu_s
from benchmarks.retriever_throughput import _cores, parse_args, row


def test_a_core_list_reads_single_numbers_ranges_and_commas():
    assert _cores("1") == {1}
    assert _cores("0,2-3") == {0, 2, 3}


def test_relative_index_and_data_paths_become_absolute(tmp_path, monkeypatch):
    # the baseline runs from another checkout, where a relative path would name nothing
    monkeypatch.chdir(tmp_path)
    args = parse_args(["--index", "indexes/wiki_mini", "--data", "data"])
    assert args.index == str(tmp_path / "indexes" / "wiki_mini")
    assert args.data == str(tmp_path / "data")


def test_a_row_gives_the_load_generators_share_and_both_in_process_ratios():
    summary = {
        "runs": [90.0, 110.0],
        "qps": 100.0,
        "p50_ms": 9.0,
        "p99_ms": 20.0,
        "errors": 0,
        "mean_batch": 1.0,
        "server_cpu_ms": 3.0,
        "bench_cpu_ms": 1.0,
    }
    rates = {"single_qps": 125.0, "batched64_qps": 400.0, "single_cpu_ms": 2.5}
    cells = [c.strip() for c in row(1, "new", 200, summary, rates, "").split("|")]
    # bench share, vs one query, server CPU vs one query's in-process CPU, vs batched
    assert cells[12:16] == ["25%", "0.80×", "1.20×", "25%"]
    echo = [c.strip() for c in row(1, "echo", 200, summary, None, "").split("|")]
    assert echo[13:16] == ["", "", ""]  # no in-process rate for a server that searches nothing


BURN = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.6: pass\ntime.sleep(30)"
SPAWN = f"import subprocess, sys, time\nsubprocess.Popen([sys.executable, '-c', {BURN!r}])\ntime.sleep(30)"


def test_a_servers_cpu_counts_its_worker_processes():
    parent = subprocess.Popen([sys.executable, "-c", SPAWN])
    try:
        deadline = time.monotonic() + 20
        while cpu_s(parent.pid) < 0.6 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert cpu_s(parent.pid) >= 0.6  # the parent alone sleeps: the burnt CPU is its child's
    finally:
        subprocess.run(["pkill", "-P", str(parent.pid)], check=False)
        parent.kill()
        parent.wait()
