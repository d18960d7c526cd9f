"""Role calls under deadlines (``agentrl.cluster.role_calls``) on a real local Ray cluster.

Ranks are small actors that stand in for a role's workers; a "collective" is a call that waits
for its peer. A dead rank, a call past its deadline and a node that stops answering each become a
``RoleFailure`` naming rank and node within seconds; an error the method raises itself stays what
it was.
"""

from __future__ import annotations

import os
import signal
import time

import pytest
import ray

from agentrl.cluster.role_calls import CallPolicy, NodeWatch, RankSite, RoleFailure, gather

pytestmark = pytest.mark.slow  # starts a local Ray cluster


@ray.remote(num_cpus=0)
class Rank:
    def __init__(self, rank: int) -> None:
        self.rank = rank

    def value(self, seconds: float = 0.0) -> int:
        time.sleep(seconds)
        return self.rank

    def fail(self, message: str) -> None:
        raise RuntimeError(message)

    def pid(self) -> int:
        return os.getpid()


def sites(n: int) -> list[RankSite]:
    node = ray.get_runtime_context().get_node_id()
    return [RankSite(r, node, f"10.0.0.{r}") for r in range(n)]


def test_results_come_back_in_rank_order(ray_cluster):
    ranks = [Rank.remote(r) for r in range(3)]
    refs = [ranks[2].value.remote(0.3), ranks[0].value.remote(0.0), ranks[1].value.remote(0.1)]
    assert gather(refs, sites(3), "actor", "value", CallPolicy()) == [2, 0, 1]


def test_a_rank_whose_actor_dies_is_named_even_when_its_peer_raised_first(ray_cluster):
    ranks = [Rank.remote(r) for r in range(2)]
    watch = NodeWatch(node_timeout_s=5.0)
    # rank 0's "collective" fails on the lost connection before Ray reports rank 1's death
    refs = [ranks[0].fail.remote("Connection closed by peer"), ranks[1].value.remote(30.0)]
    time.sleep(0.2)
    ray.kill(ranks[1])
    start = time.monotonic()
    with pytest.raises(RoleFailure) as caught:
        gather(refs, sites(2), "actor", "update_actor", CallPolicy(watch))
    assert time.monotonic() - start < 5.0
    failure = caught.value
    assert (failure.role, failure.site.rank, failure.method) == ("actor", 1, "update_actor")
    assert "actor rank 1 on node 10.0.0.1 was lost" in str(failure)
    assert not failure.node_lost, "only the process died: its node still answers, a restart may use it"


def test_a_lost_rank_ready_in_the_same_poll_as_its_peers_error_is_still_the_failure(ray_cluster):
    ranks = [Rank.remote(r) for r in range(2)]
    ray.kill(ranks[1])
    refs = [ranks[0].fail.remote("Connection closed by peer"), ranks[1].value.remote(0.0)]
    ray.wait(refs, num_returns=2, timeout=10)  # both are done before the call is waited on
    with pytest.raises(RoleFailure, match="actor rank 1 on node 10.0.0.1 was lost"):
        gather(refs, sites(2), "actor", "update_actor", CallPolicy(NodeWatch(node_timeout_s=2.0)))


def test_an_error_the_method_raises_is_not_taken_for_a_lost_node(ray_cluster):
    ranks = [Rank.remote(r) for r in range(2)]
    refs = [ranks[0].fail.remote("loss is nan"), ranks[1].fail.remote("loss is nan")]
    with pytest.raises(ray.exceptions.RayTaskError, match="loss is nan"):
        gather(refs, sites(2), "actor", "update_actor", CallPolicy(NodeWatch(node_timeout_s=2.0)))


def test_a_call_past_its_deadline_names_the_first_rank_still_running(ray_cluster):
    ranks = [Rank.remote(r) for r in range(2)]
    ray.get([rank.value.remote() for rank in ranks])  # both started: only rank 1's call is slow
    refs = [ranks[0].value.remote(0.0), ranks[1].value.remote(20.0)]
    start = time.monotonic()
    with pytest.raises(RoleFailure, match=r"critic rank 1 on node 10\.0\.0\.1 did not finish within "):
        gather(refs, sites(2), "critic", "compute_values", CallPolicy(call_timeout_s=1.0))
    assert time.monotonic() - start < 4.0
    ray.kill(ranks[1])


def test_a_node_whose_watch_stops_answering_is_lost_after_the_node_timeout(ray_cluster):
    node = ray.get_runtime_context().get_node_id()
    watch = NodeWatch(node_timeout_s=2.0)
    watch.add({node})
    assert watch.lost({node}) is None  # the first ping goes out
    time.sleep(1.2)
    assert watch.lost({node}) is None  # answered: the node is alive
    (sentinel,) = watch._sentinels.values()
    pid = ray.get(sentinel.__ray_call__.remote(lambda self: os.getpid()))
    os.kill(pid, signal.SIGSTOP)  # a frozen node: its processes stop without closing anything
    try:
        rank = Rank.remote(0)
        start = time.monotonic()
        with pytest.raises(
            RoleFailure, match=r"actor rank 0 on node 10\.0\.0\.0 stopped answering"
        ) as caught:
            gather([rank.value.remote(30.0)], sites(1), "actor", "generate_sequences", CallPolicy(watch))
        assert 2.0 <= time.monotonic() - start < 6.0
        assert caught.value.node_lost
    finally:
        os.kill(pid, signal.SIGCONT)
        watch.shutdown()


def test_a_node_whose_watch_died_does_not_answer_and_one_alive_does(ray_cluster):
    node = ray.get_runtime_context().get_node_id()
    watch = NodeWatch(node_timeout_s=2.0)
    watch.add({node})
    try:
        assert watch.answers(node)
        (sentinel,) = watch._sentinels.values()
        ray.kill(sentinel)
        # ray.kill only asks for the kill: a ping sent at once can still be served, so the
        # watch is asked once the sentinel is known dead (its own calls fail)
        deadline = time.monotonic() + 10.0
        while time.monotonic() < deadline:
            try:
                ray.get(sentinel.ping.remote(), timeout=2.0)
            except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError):
                break
            time.sleep(0.1)
        else:
            pytest.fail("the killed sentinel still answered after 10 s")
        assert not watch.answers(node)
    finally:
        watch.shutdown()
