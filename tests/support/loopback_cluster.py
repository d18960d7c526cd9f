"""A two-node Ray cluster on one machine, started with docs/scaling.md's commands.

The head listens on 127.0.0.2 and the worker node on 127.0.0.3 (both loopback addresses, so
nothing leaves the machine), each with its own CPUs, under one temporary directory and with
token authentication on, as the docs start a cluster. A node can be killed (its raylet and every
process under it, SIGKILL) or frozen (SIGSTOP) to test what the trainer does when a node is lost.
Every process is found by this cluster's own temporary directory or node address, so other Ray
clusters on the machine (other tests') are never touched: ``ray stop`` would stop them all.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path

from agentrl.ports import free_port

HEAD_IP, WORKER_IP = "127.0.0.2", "127.0.0.3"


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _children() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        tree.setdefault(ppid, []).append(int(entry.name))
    return tree


def _with_descendants(pids: list[int]) -> list[int]:
    tree, found, stack = _children(), [], list(pids)
    while stack:
        pid = stack.pop()
        if pid not in found:
            found.append(pid)
            stack += tree.get(pid, [])
    return found


class LoopbackCluster:
    """Head on 127.0.0.2 and one worker node on 127.0.0.3, ``cpus`` CPUs each."""

    def __init__(self, root: Path, cpus: int = 2) -> None:
        self.root = root
        self.cpus = cpus
        self.temp_dir = root / "ray"  # short: Ray's socket paths must stay under 108 bytes
        self.token_path = root / "auth_token"
        self.port = free_port(HEAD_IP)
        self.address = f"{HEAD_IP}:{self.port}"
        self.ray = str(Path(sys.executable).with_name("ray"))

    def env(self, token_mode: bool = True) -> dict[str, str]:
        """The environment of this cluster's commands: its own token file, never ~/.ray's."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
        env["RAY_AUTH_TOKEN_PATH"] = str(self.token_path)
        if token_mode:
            env["RAY_AUTH_MODE"] = "token"
        return env

    def start(self) -> LoopbackCluster:
        self.token_path.write_text(secrets.token_hex(32))  # what `ray get-auth-token --generate` writes
        self._ray_start(
            "--head",
            f"--node-ip-address={HEAD_IP}",
            f"--port={self.port}",
            f"--temp-dir={self.temp_dir}",
            "--include-dashboard=false",
            f"--ray-client-server-port={free_port(HEAD_IP)}",
        )
        self.start_worker()
        return self

    def start_worker(self) -> None:
        self._ray_start(f"--address={self.address}", f"--node-ip-address={WORKER_IP}")

    def _ray_start(self, *args: str) -> None:
        command = [
            self.ray,
            "start",
            *args,
            f"--num-cpus={self.cpus}",
            "--num-gpus=0",
            "--disable-usage-stats",
        ]
        done = subprocess.run(command, env=self.env(), capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(command)} failed:\n{done.stdout}\n{done.stderr}")

    def node_pids(self, ip: str) -> list[int]:
        """The raylet of the node at ``ip`` and every process under it (workers, agents)."""
        raylets = [
            pid
            for pid in map(int, filter(str.isdigit, os.listdir("/proc")))
            if (line := _cmdline(pid)).split(" ", 1)[0].endswith("raylet")
            and f"--node_ip_address={ip} " in line
            and str(self.temp_dir) in line
        ]
        return _with_descendants(raylets)

    def kill_node(self, ip: str = WORKER_IP) -> list[int]:
        """Lose a node at once, as a power cut would: SIGKILL its raylet and everything under it."""
        pids = self.node_pids(ip)
        for pid in pids:
            _signal(pid, signal.SIGKILL)
        return pids

    def freeze_node(self, ip: str = WORKER_IP) -> list[int]:
        """Stop a node without closing a connection (a hung machine): SIGSTOP its processes."""
        pids = self.node_pids(ip)
        for pid in pids:
            _signal(pid, signal.SIGSTOP)
        return pids

    def replace_worker(self) -> None:
        """Kill the worker node (frozen or not) and start a fresh one in its place."""
        for pid in self.node_pids(WORKER_IP):
            _signal(pid, signal.SIGCONT)
        self.kill_node(WORKER_IP)
        time.sleep(1.0)
        self.start_worker()

    def stop(self) -> None:
        """Kill every process of this cluster (found by its temporary directory)."""
        marks = (str(self.temp_dir), f"--address={self.address}")  # the client server names only the address
        mine = [
            pid
            for pid in map(int, filter(str.isdigit, os.listdir("/proc")))
            if any(mark in _cmdline(pid) for mark in marks)
        ]
        for pid in _with_descendants(mine):
            _signal(pid, signal.SIGCONT)
            _signal(pid, signal.SIGKILL)


def _signal(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)
