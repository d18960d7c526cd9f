"""A run's roles in the test's own process: the real workers behind the worker groups' calls, no Ray.

The driver's logic (dynamic sampling, checkpoint ranking, a diverged step, π_old from the
update's forward, learning itself) does not depend on where the workers run, so it
is tested with ``start_in_process(trainer)`` instead of a Ray cluster: the same
``role_specs`` the trainer starts, each a real worker of one rank (``resources.strategy=dp``).
Ray's wiring (placement, several ranks, FSDP, lost nodes) keeps its own end-to-end tests.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agentrl.cluster.group import combine
from agentrl.trainer.ppo_trainer import PPOTrainer
from agentrl.trainer.roles import Roles, role_specs


class Collected:
    """A result already at hand, handed over as ``WorkerGroup``'s ``Pending`` hands one over."""

    def __init__(self, value: Any) -> None:
        self.value = value

    def result(self) -> Any:
        return self.value

    def done(self) -> bool:
        return True


class InProcessGroup:
    """A worker group of one rank in this process, answering ``WorkerGroup``'s calls.

    A submitted call runs at once: a one-step-off rollout then samples before the update it would
    overlap, on the same weights, so the step trains on the same data as on Ray."""

    world_size = 1

    def __init__(self, name: str, worker: Any) -> None:
        self.name = name
        self.worker = worker

    def run_rank0(self, method: str, *args: Any, **kwargs: Any) -> Any:
        return getattr(self.worker, method)(*args, **kwargs)

    run_sharded = run_rank0

    def run_all(self, method: str, *args: Any, **kwargs: Any) -> list[Any]:
        return [self.run_rank0(method, *args, **kwargs)]

    def run_shards(self, method: str, shards: Sequence[Any], *args: Any, **kwargs: Any) -> Any:
        (shard,) = shards
        return self.run_rank0(method, shard, *args, **kwargs)

    def submit_chunks(self, method: str, items: Sequence[Any], *args: Any, **kwargs: Any) -> Collected:
        # reassembled as the Ray group reassembles its ranks' results, one rank's too
        return Collected(combine([self.run_rank0(method, items, *args, first_index=0, **kwargs)]))

    def submit_to(self, rank: int, method: str, *args: Any, **kwargs: Any) -> Collected:
        assert rank == 0, f"an in-process group has one rank, not rank {rank}"
        return Collected(combine([self.run_rank0(method, *args, **kwargs)]))

    def wait_any(self, pending: Sequence[Collected], method: str) -> None:
        """Every submitted call has run already: nothing to wait for."""

    def shutdown(self) -> None:
        self.worker.shutdown()

    kill = shutdown


def in_process_roles(trainer: PPOTrainer) -> Roles:
    """The roles ``trainer`` would start on Ray, each one real worker in this process."""
    config = trainer.config
    if config.resources.strategy != "dp":
        raise ValueError("in-process roles are one rank each: resources.strategy must be dp")
    use_reference_worker = trainer.use_reference and not trainer.reference_in_actor
    specs = role_specs(config, trainer.context, trainer.use_critic, use_reference_worker)
    several = [f"{spec.role}: {spec.world_size}" for spec in specs if spec.world_size != 1]
    if several:
        raise ValueError(f"in-process roles are one rank each; this run asks for more ({', '.join(several)})")
    return Roles.of(
        {spec.role: InProcessGroup(spec.role, spec.cls(spec.section, trainer.context)) for spec in specs}
    )


def start_in_process(trainer: PPOTrainer) -> None:
    """``trainer``'s roles started in this process: what ``PPOTrainer.init_workers`` does on Ray (to
    set as a trainer's ``init_workers``, or patch over the class's)."""
    trainer.take_roles(in_process_roles(trainer))


def run_in_process(trainer: PPOTrainer) -> dict[str, float]:
    """``trainer.fit()`` on in-process roles; the workers are shut down after."""
    trainer.init_workers = lambda: start_in_process(trainer)
    try:
        return trainer.fit()
    finally:
        trainer.shutdown()
