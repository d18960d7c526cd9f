"""A wrong ``resources.ray_address`` is named in seconds, before ``ray.init`` (which would retry for
minutes), and a run stopped by it ends with one ``error:`` line and no traceback."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from agentrl.cluster import join
from agentrl.cluster.join import check_address, parse_address
from agentrl.config.errors import DEBUG_ENV, StartupError
from agentrl.ports import free_port

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def quick_retries(monkeypatch):
    monkeypatch.setattr(join, "RETRY_PAUSE_S", 0.05)


def run_trainer(tmp_path: Path, address: str, debug: bool) -> tuple[subprocess.CompletedProcess, float]:
    """``python -m agentrl.trainer.main`` with a config that passes the config and tool checks (its
    files exist, empty: nothing may read them before the address is checked); its seconds."""
    (tmp_path / "train.parquet").touch()
    (tmp_path / "model").mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", DEBUG_ENV)}
    if debug:
        env[DEBUG_ENV] = "1"
    overrides = [
        f"data.train_files=[{tmp_path / 'train.parquet'}]",
        f"actor.model_path={tmp_path / 'model'}",
        f"trainer.run_dir={tmp_path / 'run'}",
        f"resources.ray_address={address}",
    ]
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "agentrl.trainer.main", *overrides],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    return done, time.monotonic() - started


def test_a_run_at_an_address_nothing_answers_ends_in_seconds_with_one_error_line_and_no_traceback(tmp_path):
    address = f"127.0.0.2:{free_port('127.0.0.2')}"  # drawn free and never bound: nothing answers
    done, seconds = run_trainer(tmp_path, address, debug=False)
    output = done.stdout + done.stderr
    errors = [line for line in output.splitlines() if line.startswith("error:")]
    assert done.returncode == 2, output
    assert seconds <= 15, f"{seconds:.1f} s"
    assert len(errors) == 1, output
    assert f"resources.ray_address={address}" in errors[0] and "refused" in errors[0]
    assert "ray start --head" in errors[0]
    assert "Traceback" not in output
    assert not (tmp_path / "run").exists()


def test_with_agentrl_debug_the_traceback_is_printed_above_the_error_line(tmp_path):
    address = f"127.0.0.2:{free_port('127.0.0.2')}"
    done, _ = run_trainer(tmp_path, address, debug=True)
    lines = done.stderr.splitlines()
    assert done.returncode == 2, done.stderr
    assert "Traceback (most recent call last):" in done.stderr
    assert "StartupError" in done.stderr
    assert lines[-1].startswith("error: cannot reach the Ray cluster at resources.ray_address=")


@pytest.mark.parametrize(
    "address", ["headnode", "10.0.0.5:", ":6379", "10.0.0.5:99999", "http://10.0.0.5:6379", "a b:6379"]
)
def test_an_address_that_is_not_host_and_port_is_refused_naming_the_key_and_the_forms(address):
    started = time.monotonic()
    with pytest.raises(StartupError) as raised:
        check_address(address)
    message = str(raised.value)
    assert message.startswith(f"resources.ray_address={address!r} is not an address")
    assert "HOST:PORT" in message and "ray://HOST[:PORT]" in message and "auto" in message
    assert time.monotonic() - started < 1  # nothing was tried


def test_host_and_port_forms_parse_ipv6_in_brackets_included():
    assert parse_address("10.0.0.5:6379") == ("10.0.0.5", 6379)
    assert parse_address("head-1.cluster.local:6380") == ("head-1.cluster.local", 6380)
    assert parse_address("[::1]:6379") == ("::1", 6379)
    assert parse_address("::1:6379") is None  # ambiguous without brackets
    assert parse_address("10.0.0.5") is None


def test_nothing_is_checked_for_a_local_cluster():
    for address in (None, "", "local"):
        check_address(address)  # would raise if it tried a connection


def test_a_refused_address_is_tried_three_times_and_named_with_what_to_check(quick_retries):
    address = f"127.0.0.2:{free_port('127.0.0.2')}"
    with pytest.raises(StartupError) as raised:
        check_address(address)
    message = str(raised.value)
    assert f"resources.ray_address={address}: the connection was refused" in message
    assert "3 attempt(s)" in message and "ray start --head --port=" in message


def test_a_head_that_starts_while_the_address_is_tried_is_found(monkeypatch):
    monkeypatch.setattr(join, "RETRY_PAUSE_S", 0.5)
    port = free_port("127.0.0.2")
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)

    def start_late() -> None:
        time.sleep(0.2)  # after the first attempt was refused, before the second
        server.bind(("127.0.0.2", port))
        server.listen()

    thread = threading.Thread(target=start_late)
    thread.start()
    try:
        check_address(f"127.0.0.2:{port}")
    finally:
        thread.join()
        server.close()


def test_a_ray_client_address_is_tried_at_the_client_port(quick_retries):
    port = free_port("127.0.0.2")
    with pytest.raises(StartupError, match=rf"ray://127\.0\.0\.2:{port}: .*refused.*serves Ray Client"):
        check_address(f"ray://127.0.0.2:{port}")
    with pytest.raises(StartupError, match=r"nothing listens on port 10001 there") as raised:
        check_address("ray://127.0.0.2")  # no port: Ray Client's default
    assert "resources.ray_address=ray://127.0.0.2" in str(raised.value)


def test_a_host_name_that_does_not_resolve_is_named_after_one_attempt(quick_retries):
    with pytest.raises(StartupError, match=r"'nosuchhost\.invalid' was not resolved") as raised:
        check_address("nosuchhost.invalid:6379")
    assert "1 attempt(s)" in str(raised.value) and "Check the host name" in str(raised.value)


def test_auto_without_a_running_cluster_says_how_to_start_one(monkeypatch):
    import ray._private.services as services

    def nothing_running(address, temp_dir=None):
        raise ConnectionError("Could not find any running Ray instance.")

    monkeypatch.setattr(services, "canonicalize_bootstrap_address", nothing_running)
    with pytest.raises(
        StartupError, match=r"resources\.ray_address=auto found no running Ray cluster"
    ) as raised:
        check_address("auto")
    assert "ray start --head --port=6379" in str(raised.value)


def test_auto_is_checked_at_the_address_it_resolves_to(monkeypatch, quick_retries):
    import ray._private.services as services

    stale = f"127.0.0.2:{free_port('127.0.0.2')}"  # a head that stopped without cleaning up
    monkeypatch.setattr(services, "canonicalize_bootstrap_address", lambda address, temp_dir=None: stale)
    monkeypatch.setenv("RAY_ADDRESS", stale)
    with pytest.raises(StartupError, match=rf"ray_address=auto \(found {stale} in RAY_ADDRESS\): .*refused"):
        check_address("auto")
