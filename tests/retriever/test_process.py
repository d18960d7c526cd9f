"""RetrieverProcess: a real server subprocess is started, answers, and never outlives its job."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from retriever.build_index import main as build_index
from retriever.process import RetrieverProcess, RetrieverStartError

PASSAGES = [
    {"id": "p1", "contents": '"Quorvia"\nQuorvia is a country whose capital is Blenmar.'},
    {"id": "p2", "contents": '"Blenmar"\nBlenmar is a harbour city with a stone bridge.'},
    {"id": "p3", "contents": '"Tavix"\nTavix is a mining company headquartered in Blenmar.'},
]


@pytest.fixture(scope="module")
def small_index(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("proc_index")
    corpus = root / "corpus.jsonl"
    corpus.write_text("".join(json.dumps(p) + "\n" for p in PASSAGES))
    assert (
        build_index(["--corpus", str(corpus), "--backend", "bm25", "--out", str(root / "index"), "--quiet"])
        == 0
    )
    return root / "index"


def _port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie (exited, not yet reaped by its parent) counts as gone
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return True


def test_serves_when_ready_and_stops_cleanly(small_index: Path, tmp_path: Path):
    with RetrieverProcess(small_index, log_path=tmp_path / "server.log") as server:
        assert server.running and server.health()["ready"] is True
        body = json.dumps({"queries": ["mining company Tavix"], "topk": 1}).encode()
        request = urllib.request.Request(
            server.retrieve_url, data=body, headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=10) as resp:
            assert json.loads(resp.read())["result"][0][0]["id"] == "p3"
    assert server.proc.returncode == 0, "SIGTERM must drain and exit 0"
    assert not _port_open(server.port)
    assert server.stop() == 0  # idempotent


def test_a_bad_index_fails_fast_with_the_servers_own_message(tmp_path: Path):
    bad = tmp_path / "not_an_index"
    bad.mkdir()
    server = RetrieverProcess(bad, log_path=tmp_path / "bad.log", ready_timeout_s=60)
    with pytest.raises(RetrieverStartError, match="exited with code"):
        server.start()
    assert not server.running
    with pytest.raises(FileNotFoundError, match="index_dir"):
        RetrieverProcess(tmp_path / "nowhere")


@pytest.mark.skipif(sys.platform != "linux", reason="parent-death signal is Linux-only")
def test_server_dies_with_a_killed_parent(small_index: Path, tmp_path: Path):
    """A job killed with SIGKILL runs no cleanup; the server must not be left orphaned."""
    script = (
        "import sys, time\n"
        "from retriever.process import RetrieverProcess\n"
        f"s = RetrieverProcess({str(small_index)!r}).start()\n"
        "print(s.proc.pid, s.port, flush=True)\n"
        "time.sleep(600)\n"
    )
    parent = subprocess.Popen(
        [sys.executable, "-c", script],
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).resolve().parents[2],
    )
    try:
        pid, port = (int(x) for x in parent.stdout.readline().split())
        assert _pid_alive(pid) and _port_open(port)
        parent.send_signal(signal.SIGKILL)
        parent.wait(10)
        deadline = time.monotonic() + 20
        while _pid_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _pid_alive(pid), "the retriever outlived its parent"
    finally:
        parent.kill()
