"""The data plane's interface and rendezvous: real gloo ranks on loopback addresses.

127.0.0.2 stands for another node's address: the loopback interface holds all of 127.0.0.0/8,
so the interface is derived through its network, not an exact address match.
"""

from __future__ import annotations

import time

import psutil
import pytest
import torch.distributed as dist

from agentrl.cluster.data_plane import IFNAME_VARIABLES, interface_env, interface_for
from agentrl.ports import free_port
from agentrl.workers.base import RunContext, Worker
from tests.support.rendezvous_ranks import meet

LOOPBACK = interface_for("127.0.0.1")


def context(rendezvous_timeout_s: float = 120.0, socket_ifname: str | None = None) -> RunContext:
    return RunContext(
        seed=0,
        device="cpu",
        total_steps=1,
        max_prompt_length=8,
        max_response_length=8,
        rendezvous_timeout_s=rendezvous_timeout_s,
        socket_ifname=socket_ifname,
    )


@pytest.fixture
def clean_env(monkeypatch):
    """No interface variables from the user or from an earlier test in this process; whatever
    a worker sets is undone after the test."""
    for name in (*IFNAME_VARIABLES, "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.setenv(name, "")  # recorded, so that teardown removes what the test sets
        monkeypatch.delenv(name)
    return monkeypatch


def test_an_address_on_loopbacks_network_belongs_to_the_loopback_interface():
    assert LOOPBACK is not None and LOOPBACK in psutil.net_if_addrs()
    assert interface_for("127.0.0.2") == LOOPBACK


def test_an_address_on_no_local_network_has_no_interface():
    assert interface_for("198.51.100.7") is None  # TEST-NET-2: documentation only, never assigned


def test_a_configured_interface_this_host_lacks_is_refused_with_the_ones_it_has(clean_env):
    with pytest.raises(ValueError, match=r"resources\.socket_ifname='no-such-if0'") as raised:
        interface_env("127.0.0.1", "no-such-if0")
    assert LOOPBACK in str(raised.value), "the error should list this host's interfaces"


def test_a_configured_interface_wins_over_the_environment(clean_env):
    clean_env.setenv("GLOO_SOCKET_IFNAME", "user-choice")
    assert interface_env("127.0.0.1", LOOPBACK) == {name: LOOPBACK for name in IFNAME_VARIABLES}


def test_the_users_variables_are_kept_when_nothing_is_configured(clean_env):
    clean_env.setenv("GLOO_SOCKET_IFNAME", "user-gloo")
    clean_env.setenv("NCCL_SOCKET_IFNAME", "user-nccl")
    assert interface_env("127.0.0.1", None) == {}
    clean_env.delenv("NCCL_SOCKET_IFNAME")
    assert interface_env("127.0.0.1", None) == {"NCCL_SOCKET_IFNAME": LOOPBACK}  # only the unset one


def test_without_config_or_environment_the_node_addresses_interface_is_used(clean_env):
    assert interface_env("127.0.0.2", None) == {name: LOOPBACK for name in IFNAME_VARIABLES}
    assert interface_env("198.51.100.7", None) == {}  # nothing holds it: left to the hostname


def test_two_gloo_ranks_meet_at_another_address_through_the_derived_interface():
    ranks = meet(2, "127.0.0.2", free_port("127.0.0.2"))
    assert [rank["sum"] for rank in ranks] == [3.0, 3.0]
    assert [rank["ifname"] for rank in ranks] == [LOOPBACK, LOOPBACK]
    # the rendezvous deadline (30 s) bounds only the meeting: collectives get torch's 30 min back
    assert [rank["timeout_s"] for rank in ranks] == [1800.0, 1800.0]


@pytest.mark.parametrize(
    "rank, cause",
    [(1, "nobody listens at rank 0's address"), (0, "the other rank never comes")],
)
def test_ranks_that_cannot_meet_fail_within_the_rendezvous_timeout_naming_where(clean_env, rank, cause):
    port = free_port("127.0.0.2")  # closed again: nobody listens there
    started = time.monotonic()
    with pytest.raises(RuntimeError) as raised:
        Worker(
            context(rendezvous_timeout_s=3.0),
            rank=rank,
            world_size=2,
            master_port=port,
            master_addr="127.0.0.2",
        )
    elapsed = time.monotonic() - started
    message = str(raised.value)
    assert f"rank {rank} of 2 on node 127.0.0.2" in message, cause
    assert f"127.0.0.2:{port}" in message
    assert f"GLOO_SOCKET_IFNAME={LOOPBACK}" in message
    assert "resources.rendezvous_timeout_s=3 s" in message
    assert "resources.socket_ifname" in message and "firewall" in message
    assert isinstance(raised.value.__cause__, dist.DistError)
    assert not dist.is_initialized()
    assert elapsed < 60, (
        f"waited {elapsed:.0f} s: not the 3 s rendezvous timeout"
    )  # torch's default is 30 min
