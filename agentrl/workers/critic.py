"""The critic: a value model V_ψ(s_t) per response token, trained by clipped regression on returns."""

from __future__ import annotations

from pathlib import Path

import torch

from agentrl.config.schema import CriticConfig
from agentrl.core.batch import Batch
from agentrl.core.losses import value_loss
from agentrl.core.masked import masked_mean
from agentrl.models.attention import use_varlen_attention
from agentrl.models.forward import no_grad_over_micro_batches, value_forward
from agentrl.models.loading import DTYPES, build_value_model
from agentrl.models.sharding import full_state_dict
from agentrl.workers.base import RunContext, TrainableWorker


class CriticWorker(TrainableWorker):
    """``critic.model_path`` must be resolved by the driver (it defaults to the actor's model)."""

    def __init__(
        self,
        critic: CriticConfig,
        context: RunContext,
        rank: int = 0,
        world_size: int = 1,
        master_port: int | None = None,
        master_addr: str | None = None,
    ):
        super().__init__(context, rank, world_size, master_port, master_addr)
        if not critic.model_path:
            raise ValueError(
                "CriticWorker needs critic.model_path (the driver fills it from actor.model_path)"
            )
        self.critic = critic
        self.model = build_value_model(critic.model_path, dtype=torch.float32, device=self.device)
        if critic.gradient_checkpointing:
            self.model.backbone.gradient_checkpointing_enable()
        if critic.update.pack_sequences:
            use_varlen_attention(self.model.backbone)
        self._lay_out(DTYPES[critic.compute_dtype], critic.cpu_offload)
        self._setup_optimizer(critic.optim)

    def compute_values(self, batch: Batch) -> torch.Tensor:
        """V(s_t) for every response token: (B, R)."""
        self.model.eval()
        update = self.critic.update
        max_tokens = update.max_tokens_per_micro_batch if update.use_dynamic_bsz else None
        with self.compute():
            return no_grad_over_micro_batches(
                lambda mb: value_forward(self.model, mb, packed=update.pack_sequences),
                batch,
                update.micro_batch_size,
                max_tokens,
                packed=update.pack_sequences,
            )

    def _critic_loss(self, micro: Batch) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        with self.compute():
            values = value_forward(self.model, micro, packed=self.critic.update.pack_sequences)
        loss, metrics = value_loss(
            values,
            micro["values"],
            micro["returns"],
            micro["response_mask"],
            self.critic.cliprange_value,
            self.critic.loss_agg_mode,
            norm_tokens=self.context.max_response_length,
        )
        metrics = {
            **metrics,
            "vf_loss": loss.detach(),
            "vpred_mean": masked_mean(values.detach(), micro["response_mask"]),
        }
        return loss, metrics

    def update_critic(self, batch: Batch) -> dict[str, float]:
        weighting = "tokens" if self.critic.loss_agg_mode == "token-mean" else "sequences"
        return self.train_epochs(batch, self._critic_loss, self.critic.update, "critic", weighting)

    def save_checkpoint(self, directory: str) -> None:
        """``critic/`` as a plain directory (gathered under fsdp) plus the training state."""
        out = Path(directory) / "critic"
        if self.context.strategy == "fsdp":
            state = full_state_dict(self.model)  # a collective; rank 0 receives the tensors
            if self.rank == 0:
                self.model.save_pretrained(out, state_dict=state)
        elif self.rank == 0:
            self.model.save_pretrained(out)
        self.save_training_state(directory, "critic")

    def load_checkpoint(self, directory: str) -> None:
        if self.context.strategy != "fsdp":  # under fsdp the weights come back with the shards
            restored = build_value_model(Path(directory) / "critic", dtype=torch.float32)
            with torch.no_grad():
                self.model.load_state_dict(restored.state_dict())
        self.load_training_state(directory, "critic")
