"""Waiting on a role's calls under deadlines, so that a lost or frozen node is named in seconds.

A role call is a method run on every rank of a group (``WorkerGroup``); its ranks often wait for
each other inside a collective, so one rank on a dead node leaves the others hanging, and Ray
itself notices a frozen node only when its heartbeat gives up (about a minute). ``gather`` waits
for a call's results while it

* names the rank whose actor died (``RayActorError``: its node or process is gone), also when a
  peer's collective failed first because of it;
* pings a small sentinel actor on every node the call's ranks run on (``NodeWatch``): a node
  whose sentinel has not answered for ``resources.node_timeout_s`` is frozen or cut off;
* stops a call that runs past ``resources.call_timeout_s``, when one is set.

Each of these raises ``RoleFailure``: the role, rank, node and method, which the trainer reports
with its last complete checkpoint and from which its supervisor may restart the run.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import ray
from ray.exceptions import ActorUnavailableError, RayActorError, RayTaskError
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

POLL_S = 0.5  # how often a wait looks at its ranks' nodes
PING_EVERY_S = 1.0  # how often a node's sentinel is asked whether it is alive
# a lost actor or node (Ray's view), as opposed to an exception raised by the method itself
LOST = (RayActorError, ActorUnavailableError)


@dataclass(frozen=True)
class RankSite:
    """Where one rank of a role runs: its Ray node's id and address."""

    rank: int
    node_id: str
    address: str


class RoleFailure(RuntimeError):
    """A rank of a role was lost (its node died or stopped answering), or a call ran past its deadline.

    ``node_lost``: the rank's node itself is gone or silent (a restart must keep off it), not only
    the rank's process (killed alone, e.g. for memory) or a call that ran too long.
    """

    def __init__(self, role: str, site: RankSite, method: str, what: str, node_lost: bool = False) -> None:
        self.role, self.site, self.method, self.what = role, site, method, what
        self.node_lost = node_lost
        super().__init__(f"{role} rank {site.rank} on node {site.address} {what} (during {method})")

    @property
    def node_id(self) -> str:
        return self.site.node_id


class _Sentinel:
    """The actor ``NodeWatch`` keeps on a node: it answers pings, nothing else."""

    def ping(self) -> bool:
        return True


class NodeWatch:
    """One sentinel actor per node, pinged by the driver while it waits on role calls.

    A node is lost when its sentinel died (Ray saw the node or the process go) or has left a
    ping unanswered for ``node_timeout_s`` seconds (the node is frozen or cut off from the driver).
    """

    def __init__(self, node_timeout_s: float) -> None:
        self.node_timeout_s = node_timeout_s
        self._sentinels: dict[str, Any] = {}
        self._pings: dict[str, tuple[Any, float]] = {}  # node -> (ping in flight, when sent)

    def add(self, node_ids: set[str], start_timeout_s: float = 120.0) -> None:
        """Start a sentinel on each node not watched yet and wait for its first answer."""
        new = sorted(set(node_ids) - set(self._sentinels))
        sentinel = ray.remote(num_cpus=0, max_restarts=0)(_Sentinel)
        for node in new:
            strategy = NodeAffinitySchedulingStrategy(node_id=node, soft=False)
            self._sentinels[node] = sentinel.options(scheduling_strategy=strategy).remote()
        ray.get([self._sentinels[node].ping.remote() for node in new], timeout=start_timeout_s)

    def lost(self, node_ids: set[str]) -> tuple[str, str] | None:
        """The first of ``node_ids`` found lost, with why; None while all answer. Never blocks.

        Silence counts from when the unanswered ping was sent, not from the last answer: between
        role calls nobody pings, and a node is not late for a question it was never asked.
        """
        now = time.monotonic()
        for node in sorted(node_ids):
            if node not in self._sentinels:
                continue
            ping = self._pings.get(node)
            if ping is None:
                self._pings[node] = (self._sentinels[node].ping.remote(), now)
                continue
            ref, sent = ping
            if ray.wait([ref], timeout=0)[0]:
                try:
                    ray.get(ref)
                except ActorUnavailableError:  # Ray's "not now": ask again, silence counting on
                    self._pings[node] = (self._sentinels[node].ping.remote(), sent)
                    if now - sent > self.node_timeout_s:
                        return node, f"stopped answering for {now - sent:.1f} s (its watch is unreachable)"
                    continue
                except RayActorError as error:
                    return node, f"was lost: the node's watch died ({type(error).__name__})"
                if now - sent >= PING_EVERY_S:  # answered: ask again, at most once a second
                    self._pings[node] = (self._sentinels[node].ping.remote(), now)
            elif now - sent > self.node_timeout_s:
                return node, (
                    f"stopped answering: its node did not answer for {now - sent:.1f} s "
                    f"(resources.node_timeout_s={self.node_timeout_s:g})"
                )
        return None

    def answers(self, node_id: str) -> bool:
        """Whether the node's sentinel answers a ping within ``node_timeout_s`` (blocks up to that);
        a node not watched counts as answering (nothing says it is gone)."""
        sentinel = self._sentinels.get(node_id)
        if sentinel is None:
            return True
        try:
            ray.get(sentinel.ping.remote(), timeout=self.node_timeout_s)
        except (*LOST, ray.exceptions.GetTimeoutError):
            return False
        return True

    def shutdown(self) -> None:
        for sentinel in self._sentinels.values():
            ray.kill(sentinel)
        self._sentinels.clear()
        self._pings.clear()


@dataclass
class CallPolicy:
    """How long a role's calls may take: the node watch and ``resources.call_timeout_s``."""

    watch: NodeWatch | None = None
    call_timeout_s: float | None = None


def gather(refs: list[Any], sites: list[RankSite], role: str, method: str, policy: CallPolicy) -> list[Any]:
    """The results of one call on each rank (``refs[i]`` ran on ``sites[i]``), in rank order.

    Raises ``RoleFailure`` for a lost rank, a lost node or a call past its deadline; an exception
    the method raised is re-raised as Ray gives it (``RayTaskError``) unless another rank of the
    same call turns out to be lost within ``node_timeout_s``, which then is the failure named.
    """
    start = time.monotonic()
    where = {ref: i for i, ref in enumerate(refs)}
    results: list[Any] = [None] * len(refs)
    pending = list(refs)
    while pending:
        ready, pending = ray.wait(pending, num_returns=len(pending), timeout=POLL_S)
        raised: list[tuple[Any, RayTaskError]] = []
        for ref in ready:  # every ready rank first: a lost one is the failure, whatever else raised
            try:
                results[where[ref]] = ray.get(ref)
            except LOST as error:
                raise _lost_rank(role, sites[where[ref]], method, error, policy) from error
            except RayTaskError as error:
                raised.append((ref, error))
        if raised:
            culprit = _culprit([sites[where[r]] for r in pending], pending, role, method, policy)
            if culprit is not None:
                raise culprit from raised[0][1]
            raise raised[0][1]
        failure = check_calls(pending, [sites[where[r]] for r in pending], role, method, policy, start)
        if failure is not None:
            raise failure
    return results


def check_calls(
    pending: list[Any], sites: list[RankSite], role: str, method: str, policy: CallPolicy, start: float
) -> RoleFailure | None:
    """A lost node among the pending ranks', or the call's deadline passed; None while neither."""
    if not pending:
        return None
    if policy.watch is not None:
        lost = policy.watch.lost({site.node_id for site in sites})
        if lost is not None:
            node, why = lost
            return RoleFailure(role, next(s for s in sites if s.node_id == node), method, why, node_lost=True)
    limit = policy.call_timeout_s
    if limit is not None and time.monotonic() - start > limit:
        what = f"did not finish within resources.call_timeout_s={limit:g}"
        return RoleFailure(role, sites[0], method, what)
    return None


def _culprit(
    sites: list[RankSite], pending: list[Any], role: str, method: str, policy: CallPolicy
) -> RoleFailure | None:
    """After one rank raised: a pending rank of the call that turns out lost, if any does in time.

    A collective raises on the surviving ranks as soon as a peer's connection drops, often
    before Ray has seen the peer's actor die; the lost rank is the failure to report.
    """
    grace = policy.watch.node_timeout_s if policy.watch is not None else 0.0
    deadline = time.monotonic() + grace
    while pending and time.monotonic() < deadline:
        ready, pending_now = ray.wait(pending, num_returns=1, timeout=POLL_S)
        for ref in ready:
            site = sites[pending.index(ref)]
            try:
                ray.get(ref)
            except LOST as error:
                return _lost_rank(role, site, method, error, policy)
            except RayTaskError:
                pass
        sites = [sites[pending.index(r)] for r in pending_now]
        pending = pending_now
        if policy.watch is not None and pending:
            lost = policy.watch.lost({site.node_id for site in sites})
            if lost is not None:
                node, why = lost
                return RoleFailure(
                    role, next(s for s in sites if s.node_id == node), method, why, node_lost=True
                )
    return None


def _lost_rank(
    role: str, site: RankSite, method: str, error: BaseException, policy: CallPolicy
) -> RoleFailure:
    """The failure of a rank whose actor died: its node is lost too unless the node still answers."""
    node_lost = policy.watch is None or not policy.watch.answers(site.node_id)
    where = "with its node" if node_lost else "its node still answers"
    what = f"was lost: its actor died or became unreachable ({type(error).__name__}; {where})"
    return RoleFailure(role, site, method, what, node_lost=node_lost)
