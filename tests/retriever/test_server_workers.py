"""Several server processes on one port (``--workers``): all serve, ready together, stop together."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from retriever.config import ServerConfig
from retriever.process import RetrieverProcess
from retriever.server_args import parse_args
from retriever.threads import available_cores
from retriever.workers import MAX_AUTO_WORKERS, auto_workers

REPO = Path(__file__).resolve().parents[2]


def _retrieve(server: RetrieverProcess, query: str) -> list:
    req = urllib.request.Request(
        server.retrieve_url, data=json.dumps({"queries": [query], "topk": 2}).encode(), method="POST"
    )
    with urllib.request.urlopen(req, timeout=10) as resp:
        return json.loads(resp.read())["result"][0]


def _worker_pids(server: RetrieverProcess, tries: int = 200) -> set[int]:
    """The worker pids ``/health`` reports over new connections, until both are seen."""
    pids: set[int] = set()
    for _ in range(tries):
        pids.add(server.health()["worker"]["pid"])
        if len(pids) == 2:
            break
    return pids


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"


def test_two_workers_share_the_port_each_ready_and_serving_and_stop_together(bm25_index, make_server):
    server = make_server(bm25_index, "--workers", "2")
    body = server.health()
    assert body["ready"] and body["worker"]["count"] == 2 and body["worker"]["loaded"] == 2
    pids = _worker_pids(server)
    assert len(pids) == 2 and server.proc.pid not in pids  # the supervisor serves nothing itself
    cores = len(os.sched_getaffinity(0))
    assert body["threads"]["OMP_NUM_THREADS"] == str(max(1, cores // 2))
    assert body["threads"]["OMP_WAIT_POLICY"] == "PASSIVE"
    hits = [_retrieve(server, f"who wrote the declaration of independence {i}") for i in range(20)]
    assert all(len(h) == 2 for h in hits)
    assert server.stop(signal.SIGTERM, timeout=20) == 0
    deadline = time.monotonic() + 10
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(_alive(p) for p in pids)
    log = server.log_path.read_text()
    assert log.count('"event": "shutdown"') == 2 and "Traceback" not in log


def test_a_worker_that_dies_stops_the_server_with_a_nonzero_code(bm25_index, make_server):
    server = make_server(bm25_index, "--workers", "2")
    victim, other = sorted(_worker_pids(server))
    os.kill(victim, signal.SIGKILL)
    assert server.proc.wait(20) != 0  # a launcher sees the server fail, not half of it serve
    deadline = time.monotonic() + 10
    while _alive(other) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(other)


def test_one_worker_serves_alone_with_the_quiet_thread_policy(bm25_server):
    body = bm25_server.health()
    assert body["worker"] is None
    assert body["threads"] == {"OMP_WAIT_POLICY": "PASSIVE", "KMP_BLOCKTIME": "0"}


def test_by_default_a_server_runs_one_worker_per_available_core(bm25_index, tmp_path):
    with RetrieverProcess(bm25_index, log_path=tmp_path / "server.log") as server:  # no --workers
        body = server.health()
    want = auto_workers(available_cores(), server.port)
    assert want == min(available_cores(), MAX_AUTO_WORKERS)
    assert (body["worker"] or {"count": 1})["count"] == want


def test_auto_workers_is_one_per_core_up_to_the_cap_and_one_on_port_zero():
    assert [auto_workers(cores, 8000) for cores in (1, 2, 7, 64)] == [1, 2, 7, MAX_AUTO_WORKERS]
    assert auto_workers(16, 0) == 1  # each worker would pick a port of its own
    with pytest.raises(ValueError, match="cores: expected >= 1"):
        auto_workers(0, 8000)
    assert parse_args(["--index", "x", "--port", "0"]).workers == 1
    assert parse_args(["--index", "x", "--workers", "3"]).workers == 3


def test_a_bad_workers_value_is_refused_naming_the_flag(capsys):
    for bad in ("0", "two", "-1"):
        with pytest.raises(SystemExit):
            parse_args(["--index", "x", "--workers", bad])
        err = capsys.readouterr().err
        assert "--workers" in err and "expected 'auto' or an integer >= 1" in err


def test_several_workers_on_port_zero_are_refused_naming_the_port():
    with pytest.raises(ValueError, match="port: 0 lets each process pick its own port"):
        ServerConfig(port=0, workers=2)
    with pytest.raises(ValueError, match="workers: expected an integer >= 1"):
        ServerConfig(workers=0)


def test_the_thread_policy_keeps_what_the_user_set_and_refuses_to_come_too_late():
    code = (
        "import os, sys; from retriever.threads import apply_thread_policy;"
        "print(apply_thread_policy(3));"
        "import torch;"
        "exec('try:\\n apply_thread_policy()\\nexcept RuntimeError as e:\\n print(e)')"
    )
    env = {**os.environ, "OMP_WAIT_POLICY": "ACTIVE", "PYTHONPATH": str(REPO)}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120, check=True
    ).stdout.splitlines()
    assert out[0] == str({"OMP_WAIT_POLICY": "ACTIVE", "KMP_BLOCKTIME": "0", "OMP_NUM_THREADS": "3"})
    assert out[1] == "apply_thread_policy: torch already imported; OpenMP read its settings then"
