"""The single-controller PPO loop.

The driver owns the data, the KL controller and the bookkeeping; the model roles live in
Ray worker groups (actor + rollout, critic, reference, reward; ``roles.py``). ``fit()``
is the training loop, one stage per line; each stage is a method that returns its values
and ``fit()`` assigns them, so nothing a stage computes waits on ``self`` for a later one.
"""

from __future__ import annotations

import math
from contextlib import closing
from dataclasses import asdict
from pathlib import Path

from tqdm import tqdm

from agentrl.agent.dump import dump_trajectories
from agentrl.agent.generation import RolloutResult, prompt_encoder
from agentrl.cluster.sharding import mini_batch_shards, pad_rows
from agentrl.config.loader import to_yaml
from agentrl.config.schema import ExperimentConfig
from agentrl.core.advantages import get_advantage_estimator
from agentrl.core.batch import Batch
from agentrl.core.kl_control import build_kl_controller
from agentrl.models.loading import load_tokenizer
from agentrl.models.update import NonFiniteLossError
from agentrl.seeding import rng_state, set_rng_state
from agentrl.tools.check import check_tools
from agentrl.trainer.alarms import DeadSignalAlarms
from agentrl.trainer.checkpoint import CheckpointManager, TrainerState, rank_score
from agentrl.trainer.dataset import StatefulLoader, build_datasets
from agentrl.trainer.group_filter import Scored
from agentrl.trainer.roles import Roles, start_roles
from agentrl.trainer.shaping import (
    advantages_and_returns,
    checked_staleness,
    kl_penalised_rewards,
    outcome_on_last_tokens,
    overlong_filtered_mask,
    single_step_or_refuse,
    stale_rollout_correction,
)
from agentrl.trainer.step_metrics import StepTimer, bookkeeping_metrics, step_metrics
from agentrl.trainer.step_sampler import StepSampler
from agentrl.trainer.time_budget import TimeBudget
from agentrl.trainer.tracking import Tracker, first_non_finite
from agentrl.trainer.validation import validate, validation_prompts
from agentrl.workers.base import RunContext


class TrainingDiverged(RuntimeError):
    """A loss, gradient or metric became NaN/inf. Nothing from the failing step is saved."""


class PPOTrainer:
    def __init__(self, config: ExperimentConfig, avoid_nodes: frozenset[str] = frozenset()) -> None:
        """``avoid_nodes``: Ray node ids no worker may be placed on (nodes a supervisor saw fail)."""
        self.config = config
        self.avoid_nodes = avoid_nodes
        algo, actor = config.algorithm, config.actor
        rollout = config.actor.rollout
        self.context = RunContext.from_config(config, check_tools(rollout.tools, rollout.tool_format))
        self.estimator = get_advantage_estimator(algo.adv_estimator)
        self.use_critic = self.estimator.needs_critic
        self.use_reference = algo.use_kl_in_reward or actor.use_kl_loss
        # A LoRA actor scores the reference itself (adapters off): no reference worker starts.
        self.reference_in_actor = self.use_reference and actor.lora.rank > 0
        self.kl_ctrl = build_kl_controller(
            algo.kl_ctrl.type, algo.kl_ctrl.kl_coef, algo.kl_ctrl.target_kl, algo.kl_ctrl.horizon
        )
        self.run_dir = Path(config.trainer.run_dir)
        self.tokenizer = load_tokenizer(actor.model_path)
        encode = prompt_encoder(actor.rollout, self.tokenizer)  # the rollout's: hermes adds the tools
        self.train_data, self.val_data = build_datasets(config.data, self.tokenizer, encode)
        self.loader = StatefulLoader(
            self.train_data.prompts, config.data.train_batch_size, config.data.shuffle, config.data.seed
        )
        self.checkpoints = CheckpointManager(self.run_dir, config.trainer.max_ckpt_to_keep)
        self.alarms = DeadSignalAlarms(
            config.trainer.alarm_after_steps,
            watch_tools=bool(self.context.tools.names),
            watch_groups=self.estimator.needs_groups,
            dynamic_sampling=algo.dynamic_sampling.enable,
        )
        self.global_step = 0
        self.last_checkpoint: Path | None = None  # the newest this run resumed from or wrote
        self.roles: Roles | None = None
        self.sampler: StepSampler | None = None  # with the roles (init_workers)
        self.budget = TimeBudget(config.trainer.time_budget_minutes)  # fit()'s time, across resumes

    # --- the loop --------------------------------------------------------------------

    def fit(self, events: dict[str, float] | None = None) -> dict[str, float]:
        """Train to the end of the run; ``events`` (a supervisor's restart) are logged first, at the
        step the run resumes from."""
        self.start()
        metrics: dict[str, float] = {}
        with closing(self.open_tracker()) as tracker:
            self.log_start(tracker, events)
            with self.progress() as progress:
                done = self.finished()
                while not done:
                    metrics = self.step()
                    validated = self.validation_due()
                    if validated:
                        metrics |= self.validate()
                    metrics["training/elapsed_s"] = self.budget.spent_s()  # fit()'s wall time, validation in
                    tracker.log(metrics, self.global_step)
                    progress.update(1)
                    done = self.finished()  # once: the step that ends the run is the one saved
                    self.maybe_save(metrics, validated, done)
        return metrics

    def start(self) -> None:
        """The workers up, the run resumed from its newest checkpoint (``trainer.resume_mode``), the
        time budget counting."""
        self.init_workers()
        self.resume()
        self.budget.start()

    def open_tracker(self) -> Tracker:
        t = self.config.trainer
        return Tracker(t.logger, self.run_dir, t.project_name, t.experiment_name, asdict(self.config))

    def progress(self) -> tqdm:
        total = self.config.trainer.total_steps
        return tqdm(total=total, initial=self.global_step, desc="training", unit="step")

    def log_start(self, tracker: Tracker, events: dict[str, float] | None) -> None:
        """A supervisor's restart events, then, for a run that starts at step 0 with
        ``trainer.val_before_train``, a validation at step 0."""
        if events:
            tracker.log(events, self.global_step)
        if self.config.trainer.val_before_train and self.val_data is not None and self.global_step == 0:
            tracker.log(self.validate(), step=0)

    def step(self) -> dict[str, float]:
        """One training step, on-policy or on a rollout drawn ahead (``trainer.max_staleness``); its
        metrics."""
        if self.context.max_staleness > 0:
            return self.off_policy_step()
        return self.train_step(self.loader.next_batch())

    def validation_due(self) -> bool:
        return self._due(self.config.trainer.test_freq) and self.val_data is not None

    def maybe_save(self, metrics: dict[str, float], validated: bool, done: bool) -> None:
        """A checkpoint every ``trainer.save_freq`` steps, after the run's last step, and after each
        validated step when checkpoints are ranked by ``trainer.keep_best_by``."""
        keep_best_by = self.config.trainer.keep_best_by
        ranked = validated and keep_best_by is not None
        if self._due(self.config.trainer.save_freq) or done or ranked:
            self.save_checkpoint(rank_score(metrics, keep_best_by) if ranked else None)

    def train_step(self, prompts: list) -> dict[str, float]:
        """One on-policy PPO step on ``prompts`` (and the further prompts dynamic sampling draws);
        returns the step's metrics."""
        timer = StepTimer()
        with timer("step"):
            # Stage 1: rollout (multi-turn: generate → <search> → retrieve → <information> → …), scored
            scored, sampling_metrics = self.sampler.sample(prompts, self.global_step, timer)
            batch, metrics = self.learn(scored, timer, off_policy=False)
            metrics |= self.push_weights(self.global_step + 1, timer)
        metrics |= sampling_metrics
        return self.close_step(scored.rollout, batch, metrics, timer)

    def off_policy_step(self) -> dict[str, float]:
        """One step trained on the oldest rollout drawn ahead (its weights up to
        ``trainer.max_staleness`` updates stale), after drawing the next ones, which then generate
        during this step's update."""
        timer = StepTimer()
        with timer("step"):
            with timer("gen_wait"):  # with dynamic sampling by groups, their scoring too
                taken = self.sampler.take_ahead(self.global_step, timer)
            # up to max_staleness (by groups: trainer.groups_ahead) in flight; without rollout workers
            # (one at most) the actor's engine is brought up to date before it draws
            sync = None if self.roles.rollout else lambda: self.sync_engine(timer)
            self.sampler.fill_ahead(self.global_step, self.can_draw_ahead, sync)
            scored, signal = self.sampler.scored_ahead(taken, self.global_step, timer)
            batch, metrics = self.learn(scored, timer, off_policy=True)
            if self.roles.rollout is not None:  # the rollouts in flight go on with the new weights
                metrics |= self.push_weights(self.global_step + 1, timer)
            elif self.config.trainer.partial_rollout != "off" and self.sampler.in_flight:
                with timer("weight_sync_partial"):  # the rollout in flight goes on with the new weights
                    self.roles.actor.run_all("sync_engine", self.global_step + 1)
        metrics |= signal
        return self.close_step(scored.rollout, batch, metrics, timer)

    def sync_engine(self, timer: StepTimer) -> None:
        with timer("weight_sync"):
            self.roles.actor.run_all("sync_engine")

    def push_weights(self, weights_version: int, timer: StepTimer) -> dict[str, float]:
        """``Roles.push_weights``, timed as ``timing_s/weight_push`` when the run has rollout workers."""
        if self.roles.rollout is None:
            return {}
        with timer("weight_push"):
            return self.roles.push_weights(weights_version)

    def learn(self, scored: Scored, timer: StepTimer, off_policy: bool) -> tuple[Batch, dict[str, float]]:
        """Stages 2 and 3 of a step: the training batch from the scored rollout, then the updates."""
        # every stage splits a batch evenly over its group's ranks; a trajectory's steps add rows
        ranks = [g.world_size for g in (self.roles.actor, self.roles.critic, self.roles.reference) if g]
        batch, padding = pad_rows(scored.batch, math.lcm(*ranks))
        # first, from the batch itself: a stale batch stops before any role computes on it
        staleness = checked_staleness(batch, self.global_step, self.context.max_staleness)
        if self.context.old_log_prob_source == "update_forward":
            single_step_or_refuse(len(batch), self.config.actor.update.mini_batch_size)
        # Stage 2: make training data
        if self.context.old_log_prob_source == "recomputed":  # else π_old is the update's own forward
            with timer("old_log_prob"):
                batch["old_log_probs"] = self.roles.actor.run_sharded("compute_log_prob", batch)
        if self.use_critic:
            with timer("values"):
                batch["values"] = self.roles.critic.run_sharded("compute_values", batch)
        if self.use_reference:
            with timer("ref"):
                batch["ref_log_probs"] = (
                    self.roles.actor.run_sharded("compute_ref_log_prob", batch)
                    if self.reference_in_actor
                    else self.roles.reference.run_sharded("compute_log_prob", batch)
                )
        algo = self.config.algorithm
        batch["token_level_scores"] = outcome_on_last_tokens(batch)
        kl_anchor = self.use_reference and self.context.old_log_prob_source == "recomputed"
        batch["token_level_rewards"], metrics = kl_penalised_rewards(batch, self.kl_ctrl, algo, kl_anchor)
        with timer("adv"):
            batch["advantages"], batch["returns"] = advantages_and_returns(
                batch, self.estimator, algo, self.use_critic
            )
        if algo.overlong_filter:
            batch["response_mask"], overlong_metrics = overlong_filtered_mask(batch)
            metrics |= overlong_metrics
        if off_policy:  # rejection takes tokens out of the policy loss only (policy_mask)
            batch["tis_weights"], batch["policy_mask"], is_metrics = stale_rollout_correction(batch, algo)
            metrics |= is_metrics
        metrics |= staleness
        # Stage 3: update
        update_metrics = self.update(batch, timer)
        if padding:
            batch = batch.index(list(range(len(batch) - padding)))
        metrics = (
            step_metrics(batch, self.use_critic, self.context.old_log_prob_source)
            | scored.reward_metrics
            | metrics
        )
        return batch, metrics | update_metrics

    def close_step(
        self, rollout: RolloutResult, batch: Batch, metrics: dict[str, float], timer: StepTimer
    ) -> dict[str, float]:
        """Count the step; its metrics, checked finite; the trajectories dumped when asked."""
        self.global_step += 1
        metrics = rollout.metrics | metrics | timer.metrics()
        metrics |= bookkeeping_metrics(
            batch, timer.seconds["step"], self.global_step, self.train_data.filtered_overlong
        )
        metrics |= self.alarms.observe(self.global_step, metrics)
        self.check_finite(metrics)
        if self.config.trainer.dump_trajectories:
            self.dump(rollout, batch)
        return metrics

    # --- stage 3 -------------------------------------------------------------------

    def update(self, batch: Batch, timer: StepTimer) -> dict[str, float]:
        """The critic's update, then (after the critic warm-up) the actor's."""
        metrics: dict[str, float] = {}
        if self.use_critic:
            with timer("update_critic"):
                metrics |= self.update_role("critic", "update_critic", batch)
        if not self.use_critic or self.global_step >= self.config.critic.warmup_steps:
            with timer("update_actor"):
                metrics |= self.update_role("actor", "update_actor", batch)
        return metrics

    def update_role(self, role: str, method: str, batch: Batch) -> dict[str, float]:
        group = self.roles.critic if role == "critic" else self.roles.actor
        mini_batch_size = (
            self.config.critic if role == "critic" else self.config.actor
        ).update.mini_batch_size
        try:
            return group.run_shards(method, mini_batch_shards(batch, group.world_size, mini_batch_size))
        except Exception as error:
            cause = getattr(error, "cause", error)  # a Ray task's error carries the worker's own
            if isinstance(cause, NonFiniteLossError):
                step = self.global_step + 1
                raise TrainingDiverged(f"step {step}: {cause}; no checkpoint written") from None
            raise

    def validate(self) -> dict[str, float]:
        """The validation metrics now (``validation.validate``) of the run's ``data.val_limit`` prompts."""
        data = self.config.data
        prompts = validation_prompts(self.val_data.prompts, data.val_limit, self.config.seed)
        return validate(self.sampler, prompts, data, self.global_step, self.tokenizer, self.context.tools)

    # --- bookkeeping -----------------------------------------------------------------

    def check_finite(self, metrics: dict[str, float]) -> None:
        bad = first_non_finite(metrics)
        if bad is not None:
            raise TrainingDiverged(
                f"step {self.global_step}: metric '{bad}' is {metrics[bad]}; no checkpoint written"
            )

    def _due(self, freq: int) -> bool:
        return freq > 0 and self.global_step % freq == 0

    def can_draw_ahead(self, ahead: int = 1) -> bool:
        """Whether the step ``ahead`` steps after the one in progress will run, so its prompts may be
        drawn now."""
        trainer = self.config.trainer
        return (
            self.global_step + ahead < trainer.total_steps
            and self.loader.epochs_completed < trainer.total_epochs
        )

    def finished(self) -> bool:
        """Whether the run is over: ``total_steps`` trained, its time budget spent, or ``total_epochs``
        drawn and no rollout in flight (its prompts were drawn within the budget: a step to train)."""
        if self.global_step >= self.config.trainer.total_steps:
            return True
        if self.budget.over():
            return True  # a rollout in flight is dropped: the checkpoint redraws its prompts
        in_flight = self.sampler is not None and self.sampler.in_flight
        return not in_flight and self.loader.epochs_completed >= self.config.trainer.total_epochs

    def dump(self, rollout: RolloutResult, batch: Batch) -> None:
        """This step's trajectories with their scores (view with ``python -m agentrl.agent.viewer``)."""
        last = [i for i, is_last in enumerate(batch["last_step"]) if is_last]  # a row per trajectory
        dump_trajectories(
            rollout.trajectories,
            self.run_dir / "trajectories" / f"step_{self.global_step}.jsonl",
            self.tokenizer,
            rewards=batch["scores"][last].tolist(),
            step=self.global_step,
            append=False,  # a step trained again after a resume replaces its dump, never adds to it
        )

    # --- workers, checkpoints --------------------------------------------------------

    def init_workers(self) -> None:
        """Start the roles on the Ray cluster (``roles.start_roles``) and take them."""
        use_reference_worker = self.use_reference and not self.reference_in_actor
        self.take_roles(
            start_roles(self.config, self.context, self.use_critic, use_reference_worker, self.avoid_nodes)
        )

    def take_roles(self, roles: Roles) -> None:
        """The run's roles and the step sampler over them; the run directory with its config."""
        self.roles = roles
        grouped = self.estimator.needs_groups
        self.sampler = StepSampler(self.config, self.roles, self.tokenizer, self.loader, grouped)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        (self.run_dir / "config.yaml").write_text(to_yaml(self.config))

    def save_checkpoint(self, score: float | None = None) -> Path:
        """This step's checkpoint; ``score``: its rank under ``trainer.keep_best_by``. A resumed run
        draws prompts from where the sampler says (before a rollout in flight)."""
        partial = self.checkpoints.partial_dir(self.global_step)
        self.roles.actor.run_all("save_checkpoint", str(partial))
        if self.use_critic:
            self.roles.critic.run_all("save_checkpoint", str(partial))
        sampler = self.sampler
        state = TrainerState(self.global_step, sampler.loader_state(), self.kl_ctrl.state_dict(), rng_state())
        state.train_seconds, state.ahead = self.budget.spent_s(), sampler.ahead_record()
        state.save(partial)
        info: dict = {"experiment": self.config.trainer.experiment_name}
        if score is not None:
            info |= {"score": score, "score_metric": self.config.trainer.keep_best_by}
        self.last_checkpoint = self.checkpoints.commit(partial, self.global_step, info)
        return self.last_checkpoint

    def resume(self) -> None:
        mode = self.config.trainer.resume_mode
        if mode == "disable":
            return
        path = self.checkpoints.latest() if mode == "auto" else Path(mode)
        if path is None:
            return
        state = TrainerState.load(path)
        self.global_step = state.global_step
        self.loader.load_state_dict(state.loader)
        self.sampler.restore_ahead(state.ahead)
        self.kl_ctrl.load_state_dict(state.kl_ctrl)
        set_rng_state(state.rng)
        self.budget.spent_before = state.train_seconds
        self.roles.actor.run_all("load_checkpoint", str(path))
        if self.use_critic:
            self.roles.critic.run_all("load_checkpoint", str(path))
        self.push_weights(self.global_step, StepTimer())  # the rollout workers start from the restored policy
        self.last_checkpoint = path
        tqdm.write(f"resumed from {path} at step {self.global_step}")

    def shutdown(self, graceful: bool = True) -> None:
        """Release the workers; ``graceful`` False kills them at once (after a failure)."""
        if self.roles is not None:
            self.roles.shutdown(graceful)
