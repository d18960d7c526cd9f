"""The actor: the policy being trained, colocated with its rollout engine.

It samples trajectories (multi-turn, through the agent's generation manager), recomputes
their log-probs under the current weights (``old_log_probs``), and updates itself with
the clipped PPO objective plus entropy bonus and optional KL loss. Which engine serves the
rollout is decided once by ``engines.factory``; keeping its own weight copy current and its
memory free between rollouts is the ``engines.link.EngineLink``'s job; the checkpoint's HF
directory is written by ``models.export``.
"""

from __future__ import annotations

from pathlib import Path

import torch

from agentrl.agent.generation import RolloutResult
from agentrl.config.schema import ActorConfig
from agentrl.core.batch import Batch
from agentrl.core.losses import agg_loss, kl_penalty, policy_loss
from agentrl.core.masked import masked_mean
from agentrl.engines.factory import choose_engine
from agentrl.models.attention import use_varlen_attention
from agentrl.models.export import export_hf_dir, plain_weights
from agentrl.models.forward import no_grad_over_micro_batches, policy_forward
from agentrl.models.loading import DTYPES, load_causal_lm, load_tokenizer
from agentrl.models.lora import add_lora, load_adapters
from agentrl.workers.base import ModelWorker, RoleWorker, TrainableWorker
from agentrl.workers.rollouts import Rollouts


class PolicyWorker(RoleWorker, ModelWorker):
    """A causal LM that can score its responses; the reference is one that never trains.

    Built from the actor's config section: the reference *is* the actor's starting policy,
    scored with the actor's temperature, micro-batching and compute dtype. The trained actor
    keeps fp32 weights (the optimiser's master copy); the frozen reference is held in the
    compute dtype. Under fsdp both are sharded (the reference without optimiser state).
    """

    trainable = False

    def _setup(self, actor: ActorConfig) -> None:
        self.actor = actor
        self.model_path = actor.model_path
        compute_dtype = DTYPES[actor.compute_dtype]
        weights_dtype = torch.float32 if self.trainable else compute_dtype
        self.model = load_causal_lm(self.model_path, dtype=weights_dtype, device=self.device)
        self.tokenizer = load_tokenizer(self.model_path)
        self.temperature = actor.rollout.temperature
        self.lora = self.trainable and actor.lora.rank > 0
        if self.trainable and actor.gradient_checkpointing:
            self.model.gradient_checkpointing_enable()
            if self.lora:  # frozen embeddings: checkpointed blocks still need an input that takes grads
                self.model.enable_input_require_grads()
        if not self.trainable:
            self.model.eval()
            self.model.requires_grad_(False)
        if actor.update.pack_sequences:
            use_varlen_attention(self.model)  # packed rows attend per sequence, without a dense mask
        if self.lora:
            self.model = add_lora(self.model, actor.lora)  # base frozen; the reference = adapters off
        self._lay_out(compute_dtype, actor.cpu_offload and self.trainable)

    def compute_log_prob(self, batch: Batch) -> torch.Tensor:
        """log π(a_t) (temperature-scaled, as sampled) of every response token: (B, R)."""
        self.model.eval()
        update = self.actor.update
        max_tokens = update.max_tokens_per_micro_batch if update.use_dynamic_bsz else None
        batch = self.on_device(batch)
        with self.compute():
            log_probs = no_grad_over_micro_batches(
                lambda mb: policy_forward(
                    self.model,
                    mb,
                    self.temperature,
                    chunk_tokens=update.logit_chunk_tokens,
                    packed=update.pack_sequences,
                )[0],
                batch,
                update.micro_batch_size,
                max_tokens,
                packed=update.pack_sequences,
            )
        return log_probs.cpu()

    def compute_ref_log_prob(self, batch: Batch) -> torch.Tensor:
        """log π_ref of every response token with the LoRA adapters disabled: the starting policy,
        scored by the actor's own module (no reference worker runs when the actor trains adapters)."""
        if not self.lora:
            raise RuntimeError("compute_ref_log_prob needs actor.lora.rank > 0; use the reference worker")
        with self.model.disable_adapter():
            return self.compute_log_prob(batch)

    def weight_checksum(self) -> float:
        """Sum of all parameters: evidence that weights moved. Under fsdp it gathers the shards,
        a collective: call it on every rank (``run_all``)."""
        with torch.no_grad():
            full = [p.full_tensor() if hasattr(p, "full_tensor") else p for p in self.model.parameters()]
            return float(sum(p.double().sum() for p in full))


class ReferenceWorker(PolicyWorker):
    """Frozen copy of the starting policy: the KL anchor."""

    trainable = False


class ActorWorker(PolicyWorker, TrainableWorker, Rollouts):
    trainable = True

    def _setup(self, actor: ActorConfig) -> None:
        super()._setup(actor)
        self._setup_optimizer(actor.optim)
        context = self.context
        choice = choose_engine(
            actor.rollout,
            strategy=context.strategy,
            overlap_rollout=context.overlap_rollout,
            lora=self.lora,
            partial_rollout=context.partial_rollout,
        )
        self.engine_link = self.link_engine(
            choice, self.model_path, weights=lambda: plain_weights(self.model, lora=self.lora)
        )

    # --- Stage 1: rollout ------------------------------------------------------------

    def generate_sequences(
        self,
        prompts: list,
        n: int,
        seed: int | None = None,
        validate: bool = False,
        first_index: int = 0,
        weights_version: int = 0,
    ) -> RolloutResult:
        """Multi-turn rollouts of ``prompts``, ``n`` samples each: trajectories and metrics.

        ``prompts`` are the step's prompts from ``first_index`` on (``WorkerGroup.submit_chunks``):
        sample k of the step's prompt i draws its own stream, row ``i·n + k`` of one stream for the
        whole step, so a rollout samples the same tokens on any number of ranks, and a run resumed
        on fewer ranks continues as it would have (``Rollouts.sample``). ``weights_version``: the
        updates the engine's weights have had (the driver synced them), recorded on every turn
        sampled.
        """
        if not self.engine_link.choice.own_copy:
            self.model.eval()  # the engine generates with the training module itself
        self.rollout.weights.value = weights_version
        return self.sample(prompts, n, seed, validate, first_index)

    def export_weights(self) -> dict[str, torch.Tensor] | None:
        """The plain weights now (merged under LoRA) as CPU tensors, for the rollout workers: rank 0's,
        None on the others (gathering the shards is a collective under fsdp: every rank calls it)."""
        stream = plain_weights(self.model, lora=self.lora)
        weights = {name: tensor.detach().to("cpu", copy=True) for name, tensor in stream}
        return weights if self.rank == 0 else None

    def sync_engine(self, weights_version: int | None = None) -> float | None:
        """Bring the engine's own copy up to the current weights if an update (or a sleep) left it
        behind; the seconds it took, or None when nothing was sent. The driver calls it before
        submitting a rollout that will run during the next update (a collective under fsdp), and,
        with ``weights_version`` (the updates the weights now have), right after an update while
        that rollout may still be generating (``trainer.partial_rollout: continue``): the engine
        takes the weights between two decode steps, and the turns asked for from then on record
        the new version."""
        seconds = self.engine_link.sync()
        if weights_version is not None:
            self.rollout.weights.value = weights_version  # after the swap: never ahead of the engine
        return seconds

    # --- Stage 3: update -------------------------------------------------------------

    def _actor_loss(self, micro: Batch) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        actor = self.actor
        mask = micro["response_mask"]
        norm = self.context.max_response_length  # the Dr.GRPO constant: the response budget
        need_entropy = actor.entropy_coeff != 0
        with self.compute():
            log_probs, entropy = policy_forward(
                self.model,
                micro,
                self.temperature,
                with_entropy=True,
                entropy_grad=need_entropy,
                chunk_tokens=actor.update.logit_chunk_tokens,
                packed=actor.update.pack_sequences,
            )
        from_forward = self.context.old_log_prob_source == "update_forward"
        # update_forward (actor.skip_old_log_prob): one on-policy optimiser step, so π_old is this forward
        old_log_probs = log_probs.detach() if from_forward else micro["old_log_probs"]
        pg_loss, metrics = policy_loss(
            log_probs,
            old_log_probs,
            micro["advantages"],
            micro.get("policy_mask", mask),  # a rollout drawn ahead: rejected tokens leave this loss only
            clip_low=actor.clip_ratio_low,
            clip_high=actor.clip_ratio_high,
            dual_clip_c=actor.dual_clip_c,
            agg=actor.loss_agg_mode,
            norm_tokens=norm,
            token_weights=micro.get("tis_weights"),  # a rollout drawn ahead: importance weights
        )
        loss = pg_loss
        metrics = {**metrics, "pg_loss": pg_loss.detach()}
        # reported per model token whatever the loss aggregation, so runs compare; the bonus
        # itself is aggregated like the policy loss
        metrics["entropy"] = masked_mean(entropy.detach(), mask)
        if need_entropy:
            loss = loss - actor.entropy_coeff * agg_loss(entropy, mask, actor.loss_agg_mode, norm)
        if actor.use_kl_loss:
            kl = kl_penalty(log_probs, micro["ref_log_probs"], actor.kl_loss_type)
            kl_loss = agg_loss(kl, mask, actor.loss_agg_mode, norm)
            loss = loss + actor.kl_loss_coef * kl_loss
            metrics["kl_loss"] = kl_loss.detach()
        metrics["approx_kl_to_rollout"] = masked_mean(old_log_probs - log_probs.detach(), mask)
        if from_forward:  # the engine-vs-trainer gap stage 2 would have shown, under its name
            gap = (log_probs.detach() - micro["rollout_log_probs"]).abs()
            metrics["rollout/logprob_diff"] = masked_mean(gap, mask)
        return loss, metrics

    def update_actor(self, batch: Batch) -> dict[str, float]:
        weighting = "tokens" if self.actor.loss_agg_mode == "token-mean" else "sequences"
        metrics = self.train_epochs(batch, self._actor_loss, self.actor.update, "actor", weighting)
        self.engine_link.weights_changed()
        return metrics

    # --- checkpoints -----------------------------------------------------------------

    def save_checkpoint(self, directory: str) -> None:
        """``actor/``: the fp32 policy as a plain HF directory (gathered under fsdp), which
        evaluation and serving read; plus the training state (sharded under fsdp)."""
        out = Path(directory) / "actor"
        sharded = self.context.strategy == "fsdp"
        export_hf_dir(
            self.model, out, rank=self.rank, sharded=sharded, lora=self.lora, tokenizer=self.tokenizer
        )
        self.save_training_state(directory, "actor")

    def load_checkpoint(self, directory: str) -> None:
        if self.lora:  # the base never trains: only the adapters come back
            load_adapters(self.model, Path(directory) / "actor")
        elif self.context.strategy != "fsdp":  # under fsdp the weights come back with the shards
            state = load_causal_lm(Path(directory) / "actor", dtype=torch.float32).state_dict()
            with torch.no_grad():
                self.model.load_state_dict(state)
        self.load_training_state(directory, "actor")
        self.engine_link.weights_changed()

    def shutdown(self) -> None:
        self.engine_link.shutdown()
        super().shutdown()
