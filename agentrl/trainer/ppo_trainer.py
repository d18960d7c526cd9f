"""The single-controller PPO loop.

The driver owns the data, the KL controller and the bookkeeping; the model roles live in
Ray worker groups (actor + rollout, critic, reference, reward). ``fit()`` is the loop of
DESIGN §1, one stage per line; everything else here is a named helper for one of them.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path

import numpy as np
import ray
import torch
from tqdm import tqdm

from agentrl.agent.dump import dump_trajectories
from agentrl.agent.generation import collate, rollout_metrics
from agentrl.config.loader import to_yaml
from agentrl.config.schema import ExperimentConfig
from agentrl.core.advantages import AdvantageInputs, get_advantage_estimator, place_score_on_last_token
from agentrl.core.batch import Batch
from agentrl.core.kl_control import build_kl_controller
from agentrl.core.losses import kl_penalty
from agentrl.core.masked import masked_mean, masked_whiten
from agentrl.models.loading import load_tokenizer
from agentrl.rewards.scorers import answer_metrics, golds_from_ground_truth
from agentrl.seeding import derive_seed, rng_state, set_rng_state
from agentrl.trainer.checkpoint import CheckpointManager
from agentrl.trainer.dataset import StatefulLoader, build_prompt_dataset
from agentrl.trainer.tracking import Tracker, first_non_finite
from agentrl.workers.actor import ActorWorker, ReferenceWorker
from agentrl.workers.base import NonFiniteLossError
from agentrl.workers.critic import CriticWorker
from agentrl.workers.group import WorkerGroup, mini_batch_shards
from agentrl.workers.reward import RewardModelWorker, RuleRewardWorker


def validation_metrics(batch: Batch) -> dict[str, float]:
    """EM overall and per data source, answer rate and searches, under ``val/``."""
    em = np.asarray(batch["em"], dtype=float)
    sources = np.asarray(batch["data_source"])
    metrics = {
        "val/em/mean": float(em.mean()),
        "val/finish_ratio": float(np.mean(batch["finished"].astype(float))),
        "val/searches/mean": float(np.mean(batch["num_searches"].astype(float))),
    }
    for source in sorted(set(sources)):
        metrics[f"val/{source}/em"] = float(em[sources == source].mean())
    return metrics


def _injected_save_delay(step: int) -> None:
    """Fault injection for the crash-during-save test: ``AGENTRL_FAULT_SAVE_DELAY="STEP:SECONDS"``
    stalls the save of checkpoint STEP half-written, so a test can SIGKILL the process there."""
    spec = os.environ.get("AGENTRL_FAULT_SAVE_DELAY")
    if spec:
        at, seconds = spec.split(":")
        if int(at) == step:
            time.sleep(float(seconds))


class TrainingDiverged(RuntimeError):
    """A loss, gradient or metric became NaN/inf. Nothing from the failing step is saved."""


class PPOTrainer:
    def __init__(self, config: ExperimentConfig) -> None:
        self.config = config
        algo, actor = config.algorithm, config.actor
        self.estimator = get_advantage_estimator(algo.adv_estimator)
        self.use_critic = self.estimator.needs_critic
        self.use_reference = algo.use_kl_in_reward or actor.use_kl_loss
        self.kl_ctrl = build_kl_controller(algo.kl_ctrl.type, algo.kl_ctrl.kl_coef, algo.kl_ctrl.target_kl, algo.kl_ctrl.horizon)
        self.run_dir = Path(config.trainer.run_dir)
        self.tokenizer = load_tokenizer(actor.model_path)
        self.train_data = build_prompt_dataset(config.data.train_files, self.tokenizer, config.data.max_prompt_length, "train")
        self.val_data = (
            build_prompt_dataset(config.data.val_files, self.tokenizer, config.data.max_prompt_length, "validation")
            if config.data.val_files
            else None
        )
        for name, data in (("train", self.train_data), ("validation", self.val_data)):
            if data is not None and data.filtered_overlong:
                tqdm.write(
                    f"{name}: {data.filtered_overlong} prompts longer than data.max_prompt_length="
                    f"{config.data.max_prompt_length} were left out ({len(data.prompts)} kept)"
                )
        self.loader = StatefulLoader(
            self.train_data.prompts, config.data.train_batch_size, config.data.shuffle, config.data.seed
        )
        self.checkpoints = CheckpointManager(self.run_dir, config.trainer.max_ckpt_to_keep)
        self.global_step = 0
        self.timings: dict[str, float] = {}
        self.actor = self.critic = self.reference = self.reward = None
        self.rollout_stats: dict[str, float] = {}
        self.last_trajectories: list = []

    # --- the loop --------------------------------------------------------------------

    def fit(self) -> dict[str, float]:
        self.init_workers()
        self.resume()
        tracker = Tracker(self.config.trainer.logger, self.run_dir, self.config.trainer.project_name,
                          self.config.trainer.experiment_name, asdict(self.config))
        metrics: dict[str, float] = {}
        try:
            if self.config.trainer.val_before_train and self.val_data is not None and self.global_step == 0:
                tracker.log(self.validate(), step=0)
            progress = tqdm(total=self.config.trainer.total_steps, initial=self.global_step, desc="training", unit="step")
            while not self.finished():
                prompts = self.loader.next_batch()
                self.timings = {}
                with self.timer("step"):
                    # Stage 1: rollout (multi-turn: generate → <search> → retrieve → <information> → …)
                    with self.timer("gen"):
                        batch = self.generate_sequences(prompts)
                    # Stage 2: make training data
                    with self.timer("old_log_prob"):
                        batch["old_log_probs"] = self.actor.run_sharded("compute_log_prob", batch)
                    if self.use_critic:
                        with self.timer("values"):
                            batch["values"] = self.critic.run_sharded("compute_values", batch)
                    if self.use_reference:
                        with self.timer("ref"):
                            batch["ref_log_probs"] = self.reference.run_sharded("compute_log_prob", batch)
                    with self.timer("reward"):
                        batch["token_level_scores"], reward_metrics = self.compute_reward(batch)
                    batch["token_level_rewards"], kl_metrics = self.apply_kl_penalty(batch)
                    with self.timer("adv"):
                        batch["advantages"], batch["returns"] = self.compute_advantages(batch)
                    # Stage 3: update
                    update_metrics = {}
                    if self.use_critic:
                        with self.timer("update_critic"):
                            update_metrics |= self.update("critic", "update_critic", batch)
                    if self.global_step >= self.config.critic.warmup_steps or not self.use_critic:
                        with self.timer("update_actor"):
                            update_metrics |= self.update("actor", "update_actor", batch)
                self.global_step += 1
                metrics = self.step_metrics(batch) | reward_metrics | kl_metrics | update_metrics
                self.check_finite(metrics)
                if self.config.trainer.dump_trajectories:
                    self.dump(batch)
                if self._due(self.config.trainer.test_freq) and self.val_data is not None:
                    metrics |= self.validate()
                tracker.log(metrics, self.global_step)
                progress.update(1)
                if self._due(self.config.trainer.save_freq) or self.finished():
                    self.save_checkpoint()
            progress.close()
        finally:
            tracker.close()
        return metrics

    # --- stages ----------------------------------------------------------------------

    def generate_sequences(self, prompts: list, validate: bool = False) -> Batch:
        n = 1 if validate else self.config.actor.rollout.n
        seed = None if validate else derive_seed(self.config.seed, "rollout", self.global_step)
        trajectories, timing = self.actor.run_sharded("generate_sequences", prompts, n, seed, validate)
        self.rollout_stats = rollout_metrics(trajectories) | timing
        self.last_trajectories = trajectories
        return collate(trajectories, pad_token_id=self.tokenizer.pad_token_id, tokenizer=self.tokenizer)

    def compute_reward(self, batch: Batch) -> tuple[torch.Tensor, dict[str, float]]:
        """Sequence scores from the reward role, placed on each response's last model token."""
        scores, metrics = self.reward.run_rank0("compute_scores", batch)
        batch["scores"] = scores
        return place_score_on_last_token(scores, batch["response_mask"]), metrics

    def apply_kl_penalty(self, batch: Batch) -> tuple[torch.Tensor, dict[str, float]]:
        """token_level_rewards = scores − β · KL(π_old ‖ π_ref) per model token (when KL is in the reward)."""
        mask = batch["response_mask"]
        metrics = {"kl/coef": self.kl_ctrl.value}
        if not self.use_reference:
            return batch["token_level_scores"], metrics
        kl = kl_penalty(batch["old_log_probs"], batch["ref_log_probs"], self.config.algorithm.kl_penalty)
        kl = torch.where(mask.bool(), kl, torch.zeros_like(kl))
        current_kl = float(masked_mean(kl, mask))
        metrics["kl/mean"] = current_kl
        if not self.config.algorithm.use_kl_in_reward:
            return batch["token_level_scores"], metrics
        rewards = batch["token_level_scores"] - self.kl_ctrl.value * kl
        self.kl_ctrl.update(current_kl, n_steps=len(batch))
        return rewards, metrics

    def compute_advantages(self, batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
        algo = self.config.algorithm
        inputs = AdvantageInputs(
            token_level_rewards=batch["token_level_rewards"],
            mask=batch["response_mask"],
            values=batch["values"] if self.use_critic else None,
            group_ids=list(batch["group_id"]),
            gamma=algo.gamma,
            lam=algo.lam,
            norm_adv_by_std_in_grpo=algo.norm_adv_by_std_in_grpo,
        )
        advantages, returns = self.estimator.fn(inputs)
        if self.use_critic and algo.whiten_advantages:
            advantages = masked_whiten(advantages, batch["response_mask"])
        return advantages, returns

    def update(self, role: str, method: str, batch: Batch) -> dict[str, float]:
        group = self.critic if role == "critic" else self.actor
        mini_batch_size = (self.config.critic if role == "critic" else self.config.actor).ppo_mini_batch_size
        try:
            return group.run_shards(method, mini_batch_shards(batch, group.world_size, mini_batch_size))
        except ray.exceptions.RayTaskError as error:
            if isinstance(error.cause, NonFiniteLossError):
                raise TrainingDiverged(f"step {self.global_step + 1}: {error.cause}; no checkpoint written") from None
            raise

    def validate(self) -> dict[str, float]:
        """Greedy rollouts on the validation set; EM per data source (no critic, no update)."""
        prompts = self.val_data.prompts
        limit = self.config.data.val_limit
        if limit is not None and limit < len(prompts):
            picked = np.random.default_rng(self.config.seed).choice(len(prompts), limit, replace=False)
            prompts = [prompts[i] for i in sorted(picked)]
        parts = []
        size = self.config.data.val_batch_size
        for start in tqdm(range(0, len(prompts), size), desc="validating", leave=False):
            batch = self.generate_sequences(prompts[start : start + size], validate=True)
            # EM is reported whatever the training scorer is: it is the metric users compare.
            batch["em"] = [
                answer_metrics(text, answer, golds_from_ground_truth(truth))["em"]
                for text, answer, truth in zip(batch["response_text"], batch["answer"], batch["ground_truth"], strict=True)
            ]
            parts.append(batch.select("em", "data_source", "num_searches", "finished"))
        return validation_metrics(Batch.concat(parts))

    # --- bookkeeping -----------------------------------------------------------------

    def step_metrics(self, batch: Batch) -> dict[str, float]:
        mask = batch["response_mask"]
        metrics = dict(self.rollout_stats)
        metrics |= {
            "env/turns/mean": self.rollout_stats["rollout/num_turns"],
            "env/valid_search/mean": self.rollout_stats["rollout/num_searches"],
            "env/finish_ratio": self.rollout_stats["rollout/finished"],
            "response_length/mean": float(batch["attention_mask"][:, batch["prompts"].shape[1]:].sum(-1).float().mean()),
            "response_length/model_tokens_mean": float(mask.sum(-1).mean()),
        }
        metrics |= {
            "critic/score/mean": float(batch["scores"].mean()),
            "critic/rewards/mean": float(batch["token_level_rewards"].sum(-1).mean()),
            "critic/advantages/mean": float(masked_mean(batch["advantages"], mask)),
            "critic/returns/mean": float(masked_mean(batch["returns"], mask)),
            "rollout/logprob_diff": float(masked_mean((batch["old_log_probs"] - batch["rollout_log_probs"]).abs(), mask)),
        }
        if self.use_critic:
            metrics["critic/values/mean"] = float(masked_mean(batch["values"], mask))
        metrics |= {f"timing_s/{k}": v for k, v in self.timings.items()}
        total_tokens = float(batch["attention_mask"].sum())
        metrics["throughput/tokens_per_s"] = total_tokens / max(self.timings.get("step", 1e-9), 1e-9)
        metrics["training/global_step"] = float(self.global_step)
        metrics["data/filtered_overlong_prompts"] = float(self.train_data.filtered_overlong)
        return metrics

    def check_finite(self, metrics: dict[str, float]) -> None:
        bad = first_non_finite(metrics)
        if bad is not None:
            raise TrainingDiverged(f"step {self.global_step}: metric '{bad}' is {metrics[bad]}; no checkpoint written")

    @contextlib.contextmanager
    def timer(self, name: str) -> Iterator[None]:
        start = time.perf_counter()
        yield
        self.timings[name] = self.timings.get(name, 0.0) + time.perf_counter() - start

    def _due(self, freq: int) -> bool:
        return freq > 0 and self.global_step % freq == 0

    def finished(self) -> bool:
        epochs_done = self.loader.epochs_completed >= self.config.trainer.total_epochs
        return self.global_step >= self.config.trainer.total_steps or epochs_done

    def dump(self, batch: Batch) -> None:
        """This step's trajectories with their scores (view with ``python -m agentrl.agent.viewer``)."""
        dump_trajectories(
            self.last_trajectories,
            self.run_dir / "trajectories" / f"step_{self.global_step}.jsonl",
            self.tokenizer,
            rewards=batch["scores"].tolist(),
            step=self.global_step,
        )

    # --- workers, checkpoints --------------------------------------------------------

    def init_workers(self) -> None:
        res = self.config.resources
        groups = res.actor_workers * (2 if self.use_reference else 1) + (res.critic_workers if self.use_critic else 0)
        needed_cpus = res.cpus_per_worker * groups + min(res.cpus_per_worker, 0.5)  # + the reward worker
        if not ray.is_initialized():
            if res.ray_address:
                ray.init(address=res.ray_address)
            else:
                ray.init(num_cpus=max(int(np.ceil(needed_cpus)), res.num_cpus or os.cpu_count() or 1),
                         include_dashboard=False, log_to_driver=True)
        available = ray.cluster_resources().get("CPU", 0.0)
        if available < needed_cpus:
            # Ray would wait forever for a worker it cannot place; say so instead.
            raise RuntimeError(
                f"the Ray cluster has {available:g} CPUs but the roles need {needed_cpus:g} "
                f"({groups} workers × resources.cpus_per_worker={res.cpus_per_worker:g} + the reward worker); "
                "lower resources.cpus_per_worker or give the cluster more CPUs"
            )
        cpu, gpu = res.cpus_per_worker, res.num_gpus_per_worker
        self.actor = WorkerGroup(ActorWorker, self.config, res.actor_workers, cpu, gpu, "actor")
        if self.use_critic:
            self.critic = WorkerGroup(CriticWorker, self.config, res.critic_workers, cpu, gpu, "critic")
        if self.use_reference:
            self.reference = WorkerGroup(ReferenceWorker, self.config, res.actor_workers, cpu, gpu, "reference")
        reward_cls = RewardModelWorker if self.config.reward.reward_model_path else RuleRewardWorker
        self.reward = WorkerGroup(reward_cls, self.config, 1, min(cpu, 0.5), 0.0, "reward")
        self.run_dir.mkdir(parents=True, exist_ok=True)
        (self.run_dir / "config.yaml").write_text(to_yaml(self.config))

    def save_checkpoint(self) -> Path:
        partial = self.checkpoints.partial_dir(self.global_step)
        self.actor.run_all("save_checkpoint", str(partial))
        _injected_save_delay(self.global_step)
        if self.use_critic:
            self.critic.run_all("save_checkpoint", str(partial))
        torch.save(
            {
                "global_step": self.global_step,
                "loader": self.loader.state_dict(),
                "kl_ctrl": self.kl_ctrl.state_dict(),
                "rng": rng_state(),
            },
            partial / "trainer_state.pt",
        )
        return self.checkpoints.commit(partial, self.global_step, {"experiment": self.config.trainer.experiment_name})

    def resume(self) -> None:
        mode = self.config.trainer.resume_mode
        if mode == "disable":
            return
        path = self.checkpoints.latest() if mode == "auto" else Path(mode)
        if path is None:
            return
        state = torch.load(path / "trainer_state.pt", weights_only=False)
        self.global_step = state["global_step"]
        self.loader.load_state_dict(state["loader"])
        self.kl_ctrl.load_state_dict(state["kl_ctrl"])
        set_rng_state(state["rng"])
        self.actor.run_all("load_checkpoint", str(path))
        if self.use_critic:
            self.critic.run_all("load_checkpoint", str(path))
        tqdm.write(f"resumed from {path} at step {self.global_step}")

    def shutdown(self) -> None:
        for group in (self.actor, self.critic, self.reference, self.reward):
            if group is not None:
                group.shutdown()
