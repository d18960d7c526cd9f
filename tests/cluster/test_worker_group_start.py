"""A run's worker groups start side by side (``WorkerGroup`` asks for its ranks and returns;
``wait_started`` waits), on a real local Ray cluster; their rendezvous ports never coincide."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import ray

from agentrl.cluster import group as group_module
from agentrl.cluster.group import GroupSpec, WorkerGroup, wait_all_started
from agentrl.cluster.role_calls import CallPolicy, RoleFailure

pytestmark = pytest.mark.slow  # starts a local Ray cluster


class Meeting:
    """A stand-in role worker: its constructor leaves ``mine`` and waits up to 30 s for ``theirs``,
    which only a worker of the other group leaves. Started one group after the other, the first
    never sees the second's file and fails."""

    def __init__(self, mine: str, theirs: str, rank: int, world_size: int, port, addr) -> None:
        Path(mine).touch()
        deadline = time.monotonic() + 30
        while not Path(theirs).exists():
            if time.monotonic() > deadline:
                raise RuntimeError(f"rank {rank} waited 30 s for {theirs}: the groups started one by one")
            time.sleep(0.05)

    def where(self) -> tuple[str, str]:
        return ray.get_runtime_context().get_node_id(), ray.util.get_node_ip_address()

    def hello(self) -> str:
        return "hello"

    def nap(self, seconds: float) -> float:
        time.sleep(seconds)
        return seconds


def test_two_groups_are_constructed_together_and_answer_once_waited_for(ray_cluster, tmp_path):
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    first = WorkerGroup(GroupSpec(Meeting, (a, b), name="first", num_cpus=0))
    second = WorkerGroup(GroupSpec(Meeting, (b, a), name="second", num_cpus=0))
    try:
        for started in (first, second):
            assert started.wait_started() is started
            assert [site.rank for site in started.sites] == [0]
        assert first.run_rank0("hello") == "hello" and second.run_all("hello") == ["hello"]
    finally:
        first.kill()
        second.kill()


class Broken:
    """A stand-in role worker whose constructor raises at once."""

    def __init__(self, rank: int, world_size: int, port, addr) -> None:
        raise ValueError("model_path 'nowhere' does not exist")

    def where(self) -> tuple[str, str]:  # never reached
        return "", ""


def test_the_first_constructor_to_fail_is_raised_at_once_naming_its_role_not_as_a_lost_node(
    ray_cluster, tmp_path
):
    # the first group waits 30 s for a file nobody writes; waited on in order, its own timeout
    # would come first. A constructor's error is the user's to fix, not a node for a restart to avoid.
    never = str(tmp_path / "never")
    slow = WorkerGroup(GroupSpec(Meeting, (str(tmp_path / "slow"), never), name="actor", num_cpus=0))
    broken = WorkerGroup(GroupSpec(Broken, name="reward", num_cpus=0))
    try:
        with pytest.raises(
            RuntimeError, match=r"(?s)reward rank 0 failed to start: .*'nowhere' does not exist"
        ) as raised:
            wait_all_started([slow, broken])
        assert not isinstance(raised.value, RoleFailure)
        assert not Path(never).exists() and not slow.sites, "the slow group was not waited for"
    finally:
        slow.kill()
        broken.kill()


def test_calling_a_group_before_it_has_started_is_refused(ray_cluster, tmp_path):
    waiting = WorkerGroup(
        GroupSpec(Meeting, (str(tmp_path / "c"), str(tmp_path / "c")), name="critic", num_cpus=0)
    )
    try:
        with pytest.raises(RuntimeError, match=r"critic: call wait_started\(\) before calling its ranks"):
            waiting.run_rank0("hello")
    finally:
        waiting.kill()


def test_a_rendezvous_port_skips_the_ports_of_groups_started_beside_it(monkeypatch):
    offered = iter([29500, 29501, 29500, 29502])
    monkeypatch.setattr(group_module, "free_port", lambda host="": next(offered))
    _, port = group_module._rendezvous(frozenset({29500, 29501}))
    assert port == 29502


def test_waiting_for_the_first_of_a_groups_calls_stops_at_the_call_deadline_naming_the_group(
    ray_cluster, tmp_path
):
    # wait_any (the group buffer's wait) is under resources.call_timeout_s as every gathered call is
    both = str(tmp_path / "both")
    group = WorkerGroup(
        GroupSpec(Meeting, (both, both), name="rollout", num_cpus=0, max_concurrency=2),
        calls=CallPolicy(call_timeout_s=1.0),
    ).wait_started()
    try:
        quick = group.submit_to(0, "nap", 0.1)
        group.wait_any([quick], "nap")
        assert quick.done() and quick.result() == [0.1]  # one rank's answer
        slow = [group.submit_to(0, "nap", 30.0), group.submit_to(0, "nap", 30.0)]
        start = time.monotonic()
        with pytest.raises(
            RoleFailure,
            match=r"rollout rank 0 on node .* did not finish within resources\.call_timeout_s=1 "
            r"\(during nap\)",
        ):
            group.wait_any(slow, "nap")
        assert time.monotonic() - start < 5.0 and not any(p.done() for p in slow)
    finally:
        group.kill()
