"""``free_port``: a rendezvous port another process binds later, safe from the kernel's own picks."""

from __future__ import annotations

import random
import socket

import pytest

from agentrl import ports
from agentrl.ports import (
    NAMED_PORTS,
    bindable,
    ephemeral_ports,
    free_port,
    named_ports_outside_ephemeral,
)


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.2"])
def test_a_free_port_lies_outside_the_kernels_ephemeral_range_and_can_be_bound(host):
    # the kernel gives ephemeral ports to outgoing connections and port-0 servers at any moment:
    # one of those took a rendezvous port between its choice and its bind in CI (EADDRINUSE)
    if not named_ports_outside_ephemeral():
        pytest.skip("this host's ip_local_port_range covers every named port: free_port falls back")
    ephemeral = ephemeral_ports()
    for _ in range(20):
        port = free_port(host)
        assert port in NAMED_PORTS and port not in ephemeral, port
        assert bindable(host, port)  # on the host and on the wildcard


def test_processes_that_seeded_random_alike_draw_different_ports():
    state = random.getstate()
    drawn = set()
    try:
        for _ in range(5):
            random.seed(0)  # every worker of a run seeds the global generator with the run's seed
            drawn.add(free_port())
    finally:
        random.setstate(state)
    assert len(drawn) > 1


@pytest.mark.parametrize("held_on", ["127.0.0.1", "127.0.0.3"])
def test_a_port_held_on_the_host_or_on_another_address_is_not_given_out(monkeypatch, held_on):
    # rank 0's TCPStore binds every address: a port held on any one of them would fail it
    taken, other = free_port(), free_port()
    while other == taken:
        other = free_port()
    with socket.socket() as held:
        held.bind((held_on, taken))
        held.listen()
        monkeypatch.setattr(ports, "ephemeral_ports", lambda: range(0))
        monkeypatch.setattr(ports, "NAMED_PORTS", [taken, other])
        assert {free_port("127.0.0.1") for _ in range(10)} == {other}


def test_a_host_whose_ephemeral_range_covers_the_named_ports_gets_a_port_the_kernel_picks(monkeypatch):
    monkeypatch.setattr(ports, "ephemeral_ports", lambda: range(1, 65536))
    port = free_port()
    assert 0 < port < 65536
    assert bindable("127.0.0.1", port)
