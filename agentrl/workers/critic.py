"""The critic: a value model V_ψ(s_t) per response token, trained by clipped regression on returns."""

from __future__ import annotations

from pathlib import Path

import torch

from agentrl.config.schema import CriticConfig
from agentrl.core.batch import Batch
from agentrl.core.losses import value_loss
from agentrl.core.masked import masked_mean
from agentrl.models.attention import use_varlen_attention
from agentrl.models.export import export_hf_dir
from agentrl.models.forward import no_grad_over_micro_batches, value_forward
from agentrl.models.loading import DTYPES, build_value_model
from agentrl.workers.base import RoleWorker, TrainableWorker


class CriticWorker(RoleWorker, TrainableWorker):
    """``critic.model_path`` must be resolved by the driver (it defaults to the actor's model)."""

    def _setup(self, critic: CriticConfig) -> None:
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
        batch = self.on_device(batch)
        with self.compute():
            values = no_grad_over_micro_batches(
                lambda mb: value_forward(self.model, mb, packed=update.pack_sequences),
                batch,
                update.micro_batch_size,
                max_tokens,
                packed=update.pack_sequences,
            )
        return values.cpu()

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
        export_hf_dir(self.model, out, rank=self.rank, sharded=self.context.strategy == "fsdp")
        self.save_training_state(directory, "critic")

    def load_checkpoint(self, directory: str) -> None:
        if self.context.strategy != "fsdp":  # under fsdp the weights come back with the shards
            restored = build_value_model(Path(directory) / "critic", dtype=torch.float32)
            with torch.no_grad():
                self.model.load_state_dict(restored.state_dict())
        self.load_training_state(directory, "critic")
