"""The critic: a value model V_ψ(s_t) per response token, trained by clipped regression on returns."""

from __future__ import annotations

from pathlib import Path

import torch

from agentrl.config.schema import ExperimentConfig
from agentrl.core.batch import Batch
from agentrl.core.losses import value_loss
from agentrl.core.masked import masked_mean
from agentrl.models.loading import build_value_model
from agentrl.workers.actor import DTYPES
from agentrl.workers.base import TrainableWorker
from agentrl.workers.forward import no_grad_over_micro_batches, value_forward


class CriticWorker(TrainableWorker):
    def __init__(self, config: ExperimentConfig, rank: int = 0, world_size: int = 1, master_port: int | None = None):
        super().__init__(config, rank, world_size, master_port)
        path = config.critic.model_path or config.actor.model_path
        self.model = build_value_model(path, dtype=DTYPES[config.critic.dtype], device=self.device)
        self._setup_optimizer(config.critic.optim)

    def _micro(self) -> tuple[int, int | None]:
        actor = self.config.actor
        return self.config.critic.ppo_micro_batch_size, actor.max_tokens_per_micro_batch if actor.use_dynamic_bsz else None

    def compute_values(self, batch: Batch) -> torch.Tensor:
        """V(s_t) for every response token: (B, R)."""
        self.model.eval()
        micro, max_tokens = self._micro()
        return no_grad_over_micro_batches(lambda mb: value_forward(self.model, mb), batch, micro, max_tokens)

    def _critic_loss(self, micro: Batch) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        critic = self.config.critic
        values = value_forward(self.model, micro)
        loss, metrics = value_loss(
            values,
            micro["values"],
            micro["returns"],
            micro["response_mask"],
            critic.cliprange_value,
            critic.loss_agg_mode,
            norm_tokens=self.config.data.max_response_length,
        )
        metrics = {**metrics, "vf_loss": loss.detach(), "vpred_mean": masked_mean(values.detach(), micro["response_mask"])}
        return loss, metrics

    def update_critic(self, batch: Batch) -> dict[str, float]:
        critic = self.config.critic
        micro, max_tokens = self._micro()
        return self.train_epochs(
            batch,
            self._critic_loss,
            mini_batch_size=critic.ppo_mini_batch_size,
            micro_batch_size=micro,
            epochs=critic.ppo_epochs,
            shuffle=self.config.actor.shuffle,
            metric_prefix="critic",
            token_weighted=critic.loss_agg_mode == "token-mean",
            max_tokens=max_tokens,
        )

    def save_checkpoint(self, directory: str) -> None:
        if self.rank == 0:
            self.model.save_pretrained(Path(directory) / "critic")
        self.save_training_state(directory, "critic")

    def load_checkpoint(self, directory: str) -> None:
        restored = build_value_model(Path(directory) / "critic", dtype=DTYPES[self.config.critic.dtype])
        with torch.no_grad():
            self.model.load_state_dict(restored.state_dict())
        self.load_training_state(directory, "critic")
