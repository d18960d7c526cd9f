"""Worker groups: N Ray actors of one role, addressed as one.

The driver never talks to a single worker: it asks the group to run a method on all
ranks (``run_all``), or to split a batch / list across ranks, run the method on each
shard and reassemble the results (``run_sharded``, ``run_shards``). Ranks of one group
share a torch.distributed process group whose rank 0 listens on its own node's address,
so a group may span nodes. Batches are split by token count, not by row count: the
rank that would hold the longest trajectories does not set the pace for the others.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import ray
import torch

from agentrl.cluster.role_calls import (
    LOST,
    POLL_S,
    CallPolicy,
    RankSite,
    RoleFailure,
    check_calls,
    gather,
)
from agentrl.cluster.runtime_env import worker_runtime_env
from agentrl.cluster.sharding import balanced_partition, chunk_bounds, token_counts
from agentrl.core.batch import Batch
from agentrl.ports import free_port


def _rendezvous(avoid: frozenset[int] = frozenset()) -> tuple[str, int]:
    """This node's address and a free port on it that is not in ``avoid`` (run where rank 0 will
    run). ``avoid``: the ports of the run's groups that start beside this one and may not have
    bound theirs yet."""
    port = free_port("")
    while port in avoid:
        port = free_port("")
    return ray.util.get_node_ip_address(), port


def combine(results: list[Any]) -> Any:
    """The ranks' results of one call as one (what ``run_shards`` and ``Pending.result`` return)."""
    first = results[0]
    if callable(getattr(type(first), "merge", None)):  # e.g. RolloutResult: the type knows how
        return type(first).merge(results)
    if isinstance(first, Batch):
        return Batch.concat(results)
    if isinstance(first, torch.Tensor):
        return torch.cat(results, dim=0)
    if isinstance(first, list):
        return [item for part in results for item in part]
    if isinstance(first, dict):  # metrics: average over ranks
        return {k: float(np.mean([r[k] for r in results if k in r])) for k in first}
    if isinstance(first, tuple):
        return tuple(combine([r[i] for r in results]) for i in range(len(first)))
    return results


class Pending:
    """Results of a method submitted to every rank and not yet collected (``submit_sharded``);
    ``collect`` waits for them (the group's ``gather``, under its deadlines)."""

    def __init__(self, refs: list[Any], collect: Callable[[list[Any]], list[Any]]) -> None:
        self._refs = refs
        self._collect = collect

    def result(self) -> Any:
        """Wait for every rank and reassemble (as ``run_shards`` does)."""
        return combine(self._collect(self._refs))

    def done(self) -> bool:
        """Whether every rank has answered (``result`` then returns without waiting)."""
        _, waiting = ray.wait(self._refs, num_returns=len(self._refs), timeout=0)
        return not waiting


@dataclass(frozen=True)
class Placement:
    """Where a group's ranks run: bundle ``bundles[r]`` of placement group ``group`` for rank r,
    with ``torch_threads[r]`` threads each."""

    group: Any  # ray.util.placement_group.PlacementGroup
    bundles: tuple[int, ...]
    torch_threads: tuple[int, ...]

    def strategy(self, rank: int) -> Any:
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        return PlacementGroupSchedulingStrategy(self.group, placement_group_bundle_index=self.bundles[rank])


@dataclass(frozen=True)
class GroupSpec:
    """What a worker group starts: ``world_size`` Ray actors, rank r made as
    ``worker_cls(*args, r, world_size, master_port, master_addr)`` (``args``: the role's config
    section and the run context), each asking Ray for ``num_cpus`` and ``num_gpus``.
    ``max_concurrency`` > 1 lets a submitted method (``submit_sharded``) run on each actor while
    the driver calls others. ``name``: the role, as failures and messages name the group."""

    worker_cls: type
    args: tuple[Any, ...] = ()
    world_size: int = 1
    name: str = "worker"
    num_cpus: float = 1.0
    num_gpus: float = 0.0
    max_concurrency: int = 1


class WorkerGroup:
    def __init__(
        self,
        spec: GroupSpec,
        placement: Placement | None = None,
        calls: CallPolicy | None = None,
        avoid_ports: frozenset[int] = frozenset(),
    ) -> None:
        """The ranks of ``spec``, placed by ``placement`` when given. ``calls``: the deadlines
        every call is waited on under (``role_calls.gather``); none by default. ``avoid_ports``:
        rendezvous ports of groups started beside this one, not to be reused.

        The ranks are asked for here and start in the background; ``wait_started`` waits for
        them."""
        self.name = spec.name
        self.world_size = world_size = spec.world_size
        self.calls = calls or CallPolicy()
        # Chosen here for one rank too (FSDP makes a process group even of one), so that no two
        # groups starting together can pick the same port before either has bound it.
        rendezvous = ray.remote(num_cpus=0)(_rendezvous)
        if placement is not None:
            rendezvous = rendezvous.options(scheduling_strategy=placement.strategy(0))
        addr, port = ray.get(rendezvous.remote(avoid_ports))
        self.port = port  # the rendezvous port
        self.workers = []
        for rank in range(world_size):
            options: dict[str, Any] = {
                "num_cpus": spec.num_cpus,
                "num_gpus": spec.num_gpus,
                "max_concurrency": spec.max_concurrency,
            }
            threads = None
            if placement is not None:
                options["scheduling_strategy"] = placement.strategy(rank)
                threads = placement.torch_threads[rank]
            remote_cls = ray.remote(spec.worker_cls).options(
                runtime_env=worker_runtime_env(threads), **options
            )
            self.workers.append(remote_cls.remote(*spec.args, rank, world_size, port, addr))
        # asked now, waited on in ``wait_started``: the groups of a run start side by side
        self._where = [w.where.remote() for w in self.workers]
        self.sites: list[RankSite] = []

    def wait_started(self) -> WorkerGroup:
        """``wait_all_started`` for this group alone."""
        wait_all_started([self])
        return self

    def _locate(self, rank: int, ref: Any) -> RankSite:
        """Where rank ``rank`` runs; a rank lost while starting (its node died) is a ``RoleFailure``
        as a lost rank later is, so a supervisor's restart that loses a node too restarts again. A
        constructor that raised is a ``RuntimeError`` naming role and rank: a restart would fail
        the same way."""
        try:
            node, address = ray.get(ref)
        except LOST as error:
            if getattr(error, "actor_init_failed", False):  # its constructor raised: not a lost node
                raise RuntimeError(f"{self.name} rank {rank} failed to start: {error}") from error
            site = RankSite(rank, "", "(not known: it was lost while starting)")
            what = f"was lost while starting ({type(error).__name__})"
            raise RoleFailure(self.name, site, "__init__", what) from error
        return RankSite(rank, node, address)

    def gather(self, refs: list[Any], method: str) -> list[Any]:
        """The results of ``refs`` (refs[r] from rank r), waited on under this group's deadlines."""
        return gather(refs, self.sites[: len(refs)], self.name, method, self.calls)

    def _check_started(self) -> None:
        # before a call is sent: a call sent to ranks nobody waited for would run unobserved
        if len(self.sites) < self.world_size:
            raise RuntimeError(f"{self.name}: call wait_started() before calling its ranks")

    def run_all(self, method: str, *args: Any, **kwargs: Any) -> list[Any]:
        self._check_started()
        return self.gather([getattr(w, method).remote(*args, **kwargs) for w in self.workers], method)

    def run_rank0(self, method: str, *args: Any, **kwargs: Any) -> Any:
        self._check_started()
        return self.gather([getattr(self.workers[0], method).remote(*args, **kwargs)], method)[0]

    def run_sharded(self, method: str, items: Batch | Sequence, *args: Any, **kwargs: Any) -> Any:
        """Split ``items`` across ranks, run ``method(shard, *args)`` on each, reassemble.

        A ``Batch`` is split by token count (equal rows per rank); a tensor result comes back
        in the batch's own row order. Other sequences are cut into contiguous chunks.
        """
        if self.world_size == 1:
            return self.run_rank0(method, items, *args, **kwargs)
        if not isinstance(items, Batch) or len(items) % self.world_size:
            return self.submit_sharded(method, items, *args, **kwargs).result()
        parts = balanced_partition(token_counts(items), self.world_size)
        result = self.run_shards(method, [items.index(rows) for rows in parts], *args, **kwargs)
        if isinstance(result, torch.Tensor):
            order = torch.tensor([i for rows in parts for i in rows])
            restored = torch.empty_like(result)
            restored[order] = result
            return restored
        return result

    def run_shards(self, method: str, shards: Sequence[Any], *args: Any, **kwargs: Any) -> Any:
        """Run ``method(shards[r], *args)`` on rank r and reassemble, for callers that shard themselves."""
        return self.submit_shards(method, shards, *args, **kwargs).result()

    def submit_shards(self, method: str, shards: Sequence[Any], *args: Any, **kwargs: Any) -> Pending:
        """``run_shards`` without waiting: the results come from ``Pending.result()``."""
        self._check_started()
        if len(shards) != self.world_size:
            raise ValueError(f"{len(shards)} shards for a {self.name} group of {self.world_size} ranks")
        workers = zip(self.workers, shards, strict=True)
        refs = [getattr(w, method).remote(shard, *args, **kwargs) for w, shard in workers]
        return Pending(refs, lambda done: self.gather(done, method))

    def submit_sharded(self, method: str, items: Sequence[Any], *args: Any, **kwargs: Any) -> Pending:
        """``run_sharded`` for a plain sequence (contiguous chunks), without waiting."""
        bounds = chunk_bounds(len(items), self.world_size)
        shards = [items[a:b] for a, b in zip(bounds[:-1], bounds[1:], strict=True)]
        return self.submit_shards(method, shards, *args, **kwargs)

    def submit_chunks(self, method: str, items: Sequence[Any], *args: Any, **kwargs: Any) -> Pending:
        """``method(chunk, *args, first_index=i)`` on each rank, without waiting: rank r gets the r-th
        contiguous chunk of ``items`` and ``i``, its first item's place in ``items``, so whatever a
        rank derives per item (a sample's seed) does not depend on how many ranks there are."""
        self._check_started()
        bounds = chunk_bounds(len(items), self.world_size)
        refs = [
            getattr(w, method).remote(items[a:b], *args, first_index=int(a), **kwargs)
            for w, a, b in zip(self.workers, bounds[:-1], bounds[1:], strict=True)
        ]
        return Pending(refs, lambda done: self.gather(done, method))

    def submit_to(self, rank: int, method: str, *args: Any, **kwargs: Any) -> Pending:
        """``method(*args)`` on rank ``rank`` alone, without waiting (a unit of work the caller
        places itself, as ``group_buffer`` places each group on the least busy rollout worker)."""
        self._check_started()
        refs = [getattr(self.workers[rank], method).remote(*args, **kwargs)]
        return Pending(refs, lambda done: gather(done, [self.sites[rank]], self.name, method, self.calls))

    def wait_any(self, pending: Sequence[Pending], method: str) -> None:
        """Return once one of ``pending`` (this group's calls of ``method``) is done; ``RoleFailure``
        first when a node of this group is lost meanwhile, or when the wait alone outlasts
        ``resources.call_timeout_s`` (every call waited on started before it), as ``gather`` says."""
        refs = [ref for p in pending for ref in p._refs]
        start = time.monotonic()
        while refs:
            ready, _ = ray.wait(refs, num_returns=1, timeout=POLL_S)
            if ready:
                return
            failure = check_calls(refs, self.sites, self.name, method, self.calls, start)
            if failure is not None:
                raise failure

    def shutdown(self) -> None:
        # Best effort: the actors are killed next whatever happens here.
        with contextlib.suppress(Exception):
            ray.get([w.shutdown.remote() for w in self.workers], timeout=30)
        self.kill()

    def kill(self) -> None:
        """Stop the actors at once, without their own shutdown: after a failure, a rank may hang in
        a collective whose peer is gone, or sit on a node that no longer answers."""
        for worker in self.workers:
            ray.kill(worker)


def wait_all_started(groups: Sequence[WorkerGroup]) -> None:
    """Wait until every rank of ``groups`` is constructed and record where each runs (each group's
    ``sites``, for failures to name). The first constructor to fail is raised as soon as it does,
    by role, whichever group it is in; until then the ranks of all groups start side by side."""
    pending = {ref: (group, rank) for group in groups for rank, ref in enumerate(group._where)}
    found: dict[int, dict[int, RankSite]] = {id(group): {} for group in groups}
    while pending:
        ready, _ = ray.wait(list(pending), num_returns=1)
        group, rank = pending.pop(ready[0])
        found[id(group)][rank] = group._locate(rank, ready[0])
    for group in groups:
        group.sites = [found[id(group)][rank] for rank in range(group.world_size)]
