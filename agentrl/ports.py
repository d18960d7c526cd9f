"""Ports another process binds later, drawn where the kernel does not hand out ports on its own.

A rendezvous port (rank 0's TCPStore), a Ray head's port or a retriever server's port is chosen
by one process and bound by another, seconds later. A port the kernel picked (bind to port 0)
lies in its ephemeral range, where any outgoing connection or port-0 server on the host may take
it in between; ``free_port`` draws from a range outside it instead. Standard library only: the
retriever service imports it too.
"""

from __future__ import annotations

import random
import socket
from pathlib import Path

__all__ = ["NAMED_PORTS", "bindable", "ephemeral_ports", "free_port", "named_ports_outside_ephemeral"]

# Ports chosen by name: above Ray's worker ports (10002-19999 by default) and its client proxy's
# (23000-23999), below Kubernetes' NodePorts (30000-32767) and Linux's default ephemeral range
# (32768-60999), where the kernel picks the local port of every outgoing connection and of every
# server bound to port 0.
NAMED_PORTS = range(24000, 30000)


def ephemeral_ports() -> range:
    """The ports the kernel hands out on its own (``ip_local_port_range``; Linux's default where
    that cannot be read)."""
    try:
        low, high = map(int, Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    except (OSError, ValueError):
        low, high = 32768, 60999
    return range(low, high + 1)


def bindable(host: str, port: int) -> bool:
    """Whether ``port`` binds on ``host`` and on every IPv4 address: rank 0's TCPStore binds
    the wildcard, so a port another process holds on any one address would fail it."""
    for address in dict.fromkeys((host, "")):
        with socket.socket() as sock:
            try:
                sock.bind((address, port))
            except OSError:
                return False
    return True


def named_ports_outside_ephemeral() -> list[int]:
    """The ports of :data:`NAMED_PORTS` the kernel does not hand out on its own on this host."""
    ephemeral = ephemeral_ports()
    return [port for port in NAMED_PORTS if port not in ephemeral]


def free_port(host: str = "127.0.0.1") -> int:
    """A port free on ``host`` now, outside the kernel's ephemeral range when one is free there.

    The port is bound later by another process (rank 0's TCPStore, seconds on). A port the kernel
    gave out would be in its ephemeral range, where any outgoing connection or port-0 server on the
    host may take it in between (CI lost a rendezvous to ``EADDRINUSE`` that way); a port drawn at
    random from :data:`NAMED_PORTS` can only be taken by a process that names it too.
    """
    candidates = named_ports_outside_ephemeral()
    draw = random.Random()  # seeded from the OS: the run's seeded ``random`` gives every group one draw
    for _ in range(64 if candidates else 0):
        port = draw.choice(candidates)
        if bindable(host, port):
            return port
    with socket.socket() as sock:  # a host whose ephemeral range covers them all (or all taken)
        sock.bind((host, 0))
        return sock.getsockname()[1]
