"""Restarting a run from its last complete checkpoint when a node is lost (``trainer.max_restarts``).

``Supervisor.fit()`` runs ``PPOTrainer.fit()``. When a role call fails for a reason outside the
code (``RoleFailure``: a rank's actor or node died, a node stopped answering, a call passed its
deadline), it kills every worker and, while restarts are left, waits until the cluster can hold
the roles again without the failed node, at the configured world sizes or (with
``trainer.restart_shrink``) the largest smaller ones that still divide the batch, and fits a
fresh trainer from the last complete checkpoint, which reshards to the new world size. Steps
after that checkpoint are trained again from its weights, optimiser and loader state, so no
step's update is applied twice. Each restart is logged in the metrics at the step it resumes
from (``supervisor/*``). With no restart left the run stops with ``RunStopped``, naming the
role, rank, node and the checkpoint to resume from.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from tqdm import tqdm

from agentrl.cluster.fit import fit_world_sizes
from agentrl.cluster.placement import free_nodes
from agentrl.cluster.role_calls import RoleFailure
from agentrl.config.schema import ExperimentConfig
from agentrl.trainer.checkpoint import checkpoint_step
from agentrl.trainer.ppo_trainer import PPOTrainer

SETTLE_S = 10.0  # how long a smaller cluster is watched for the killed workers' room to come back


class RunStopped(RuntimeError):
    """A role failed and no restart was left (or none fits): the message says where to resume from."""


@dataclass(frozen=True)
class Restart:
    """One restart: what failed, where the run resumes and on how many ranks."""

    number: int
    failure: str
    checkpoint: Path | None
    resumed_step: int
    actor_workers: int
    critic_workers: int

    def metrics(self) -> dict[str, float]:
        """The restart as an event in the metrics log, at the step the run resumes from."""
        return {
            "supervisor/restarts": float(self.number),
            "supervisor/resumed_step": float(self.resumed_step),
            "supervisor/actor_workers": float(self.actor_workers),
            "supervisor/critic_workers": float(self.critic_workers),
        }


def stopped_message(failure: RoleFailure, checkpoint: Path | None, restarts: int, limit: int) -> str:
    """What a user reads when the run stops after a failure: what failed, and where to resume from."""
    if checkpoint is None:
        resume = "no checkpoint was complete yet: a new run starts from step 0"
    else:
        step = checkpoint_step(checkpoint)
        resume = (
            f"the last complete checkpoint is {checkpoint} (step {step}); resume from it with "
            "trainer.resume_mode=auto (the default) once the cluster can hold the roles"
        )
    used = f"after {restarts} restart(s), " if restarts else ""
    return f"{failure}; {used}trainer.max_restarts={limit}, so the run stops; {resume}"


class Supervisor:
    """``fit()`` on a ``PPOTrainer``, restarted from its last complete checkpoint after a failure."""

    def __init__(
        self, config: ExperimentConfig, make_trainer: Callable[..., PPOTrainer] = PPOTrainer
    ) -> None:
        self.config = config
        self.make_trainer = make_trainer
        self.trainer: PPOTrainer | None = None
        self.restarts: list[Restart] = []
        self.avoid: set[str] = set()  # nodes that failed: no restart places anything there

    def fit(self) -> dict[str, float]:
        config, events = self.config, None
        limit = self.config.trainer.max_restarts
        while True:
            self.trainer = self.make_trainer(config, avoid_nodes=frozenset(self.avoid))
            try:
                return self.trainer.fit(events)
            except RoleFailure as failure:
                failed, self.trainer = self.trainer, None  # released here, not again by shutdown()
                # this run's newest (a stale one in run_dir is not), or the one the attempt resumed
                checkpoint = failed.last_checkpoint or (
                    self.restarts[-1].checkpoint if self.restarts else None
                )
                failed.shutdown(graceful=False)
                if len(self.restarts) >= limit:
                    raise RunStopped(
                        stopped_message(failure, checkpoint, len(self.restarts), limit)
                    ) from failure
                if failure.node_lost:  # a rank's own process may die on a healthy node (memory)
                    self.avoid.add(failure.node_id)
                config = self.restart_config(failure, checkpoint, failed)
                events = self.restarts[-1].metrics()

    def restart_config(
        self, failure: RoleFailure, checkpoint: Path | None, failed: PPOTrainer
    ) -> ExperimentConfig:
        """The config of the next attempt: world sizes the cluster holds now (for the roles ``failed``
        ran), resuming ``checkpoint``."""
        settings = self.config.trainer
        reference = failed.use_reference and not failed.reference_in_actor
        sized = self.wait_for_room(failed.use_critic, reference)
        if sized is None:
            message = stopped_message(failure, checkpoint, len(self.restarts), settings.max_restarts)
            size = "" if settings.restart_shrink else " at their full size (trainer.restart_shrink=false)"
            raise RunStopped(
                f"{message}. No restart: within trainer.restart_wait_s={settings.restart_wait_s:g} the "
                f"cluster could not hold the roles{size} without node(s) {sorted(self.avoid)}"
            )
        resume = str(checkpoint) if checkpoint is not None else self.config.trainer.resume_mode
        sized = replace(sized, trainer=replace(sized.trainer, resume_mode=resume))
        step = checkpoint_step(checkpoint) if checkpoint is not None else 0
        restart = Restart(
            len(self.restarts) + 1,
            str(failure),
            checkpoint,
            step,
            sized.resources.actor_workers,
            sized.resources.critic_workers,
        )
        self.restarts.append(restart)
        tqdm.write(
            f"restart {restart.number}/{self.config.trainer.max_restarts}: {failure}; resuming from "
            f"{checkpoint or 'the start'} (step {step}) on {restart.actor_workers} actor rank(s)"
        )
        return sized

    def wait_for_room(self, use_critic: bool, use_reference: bool) -> ExperimentConfig | None:
        """The largest world sizes the cluster holds without the failed nodes, once the killed
        workers' resources are back (or ``SETTLE_S`` passed); None when nothing fits in time."""
        cfg = self.config
        start = time.monotonic()
        full = (cfg.resources.actor_workers, cfg.resources.critic_workers)
        while True:
            waited = time.monotonic() - start
            sized = fit_world_sizes(cfg, use_critic, use_reference, free_nodes(frozenset(self.avoid)))
            if sized is not None:
                size = (sized.resources.actor_workers, sized.resources.critic_workers)
                if size == full or (cfg.trainer.restart_shrink and waited >= SETTLE_S):
                    return sized
            if waited >= cfg.trainer.restart_wait_s:
                return sized if cfg.trainer.restart_shrink else None
            time.sleep(1.0)

    def shutdown(self) -> None:
        if self.trainer is not None:
            self.trainer.shutdown()


def train_to_policy(config: ExperimentConfig) -> Path:
    """Run a supervised ``fit()``, then release its workers and Ray (whatever happened); returns
    the policy directory (``…/actor``) evaluation reads: the best checkpoint's under
    ``trainer.keep_best_by``, else the last one's."""
    import ray

    supervisor = Supervisor(config)
    try:
        supervisor.fit()
        checkpoints = supervisor.trainer.checkpoints
        ranked = checkpoints.best() if config.trainer.keep_best_by else None
        final = ranked or checkpoints.latest()
    finally:
        supervisor.shutdown()
        if ray.is_initialized():
            ray.shutdown()
    if final is None:
        raise RuntimeError(f"{config.trainer.run_dir}: training finished without a checkpoint to evaluate")
    return final / "actor"
