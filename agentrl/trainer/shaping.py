"""From scores to what the update trains on, on the driver: token rewards, advantages, masks, weights.

Stage 2's arithmetic once the roles have filled the batch (π_old, values, π_ref): the score put
on the last model token of the trajectory's last step and the KL penalty in the reward, the
advantage estimator (whitened for a critic) with the trajectories' steps and their turn rewards,
DAPO's overlong filter, and, for a rollout drawn ahead, its importance weights and the check
that no trained token is staler than the run allows.
"""

from __future__ import annotations

import torch

from agentrl.config.schema import AlgorithmConfig
from agentrl.core.advantages import AdvantageEstimator, AdvantageInputs
from agentrl.core.batch import Batch
from agentrl.core.kl_control import KLController
from agentrl.core.losses import kl_in_reward
from agentrl.core.masked import masked_mean, masked_whiten
from agentrl.core.off_policy import importance_weights, stale_tokens, staleness_metrics
from agentrl.core.overlong import overlong_loss_mask, overlong_rows
from agentrl.core.placement import place_score_on_last_token


def outcome_on_last_tokens(batch: Batch) -> torch.Tensor:
    """token_level_scores: each trajectory's score on the last model token of its last step."""
    last_step = torch.tensor([bool(x) for x in batch["last_step"]]) if "last_step" in batch else None
    return place_score_on_last_token(batch["scores"], batch["response_mask"], last_step)


def kl_penalised_rewards(
    batch: Batch, kl_ctrl: KLController, algo: AlgorithmConfig, kl_anchor: bool
) -> tuple[torch.Tensor, dict[str, float]]:
    """token_level_rewards = scores − β · KL(π_old ‖ π_ref) per model token when the KL is in the
    reward (``algorithm.use_kl_in_reward``; β from ``kl_ctrl``, updated here), else the scores.
    ``kl_anchor``: the batch holds both π_old (recomputed) and π_ref, so ``kl/mean`` is measured."""
    metrics = {"kl/coef": kl_ctrl.value}
    scores = batch["token_level_scores"]
    if not kl_anchor:  # no π_old before the update (update_forward): the KL loss reports the KL instead
        return scores, metrics
    mask = batch["response_mask"]
    rewards, kl = kl_in_reward(
        scores, batch["old_log_probs"], batch["ref_log_probs"], mask, kl_ctrl.value, algo.kl_penalty
    )
    metrics["kl/mean"] = current_kl = float(masked_mean(kl, mask))
    if not algo.use_kl_in_reward:
        return scores, metrics
    kl_ctrl.update(current_kl, n_steps=len(batch))
    return rewards, metrics


def advantages_and_returns(
    batch: Batch, estimator: AdvantageEstimator, algo: AlgorithmConfig, use_critic: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """The estimator's advantages and returns of the token rewards (GAE with the critic's values,
    or a group estimator over ``group_id``); a critic's advantages whitened when asked.

    A batch whose trajectories span several rows (steps) gives the estimator their layout
    (``uid``, ``step_index``); one with turn rewards (``turn_scores``, not all 0) gives it
    those and where the turns end. Neither: exactly the one-row-per-trajectory arithmetic."""
    stepped = "num_steps" in batch and max(batch["num_steps"], default=1) > 1
    turns = batch.get("turn_scores")
    with_turns = turns is not None and bool(turns.abs().sum() > 0)
    inputs = AdvantageInputs(
        token_level_rewards=batch["token_level_rewards"],
        mask=batch["response_mask"],
        values=batch["values"] if use_critic else None,
        group_ids=list(batch["group_id"]),
        gamma=algo.gamma,
        lam=algo.lam,
        norm_adv_by_std_in_grpo=algo.norm_adv_by_std_in_grpo,
        trajectory_ids=list(batch["uid"]) if stepped else None,
        step_index=torch.tensor(list(batch["step_index"])) if stepped else None,
        turn_rewards=turns if with_turns else None,
        turn_ends=batch["response_turn_ends"] if with_turns else None,
        turn_index=batch["response_turn_index"] if with_turns else None,
    )
    advantages, returns = estimator.fn(inputs)
    if use_critic and algo.whiten_advantages:
        advantages = masked_whiten(advantages, batch["response_mask"])
    return advantages, returns


def overlong_filtered_mask(batch: Batch) -> tuple[torch.Tensor, dict[str, float]]:
    """DAPO's overlong filter: the loss mask with every truncated sample's tokens out (after the
    advantages: the sample's score still counts for its group), and the share of samples masked."""
    overlong = overlong_rows(batch["response_truncated"], batch["context_truncated"])
    mask = overlong_loss_mask(batch["response_mask"], overlong)
    return mask, {"overlong_filter/masked_share": float(overlong.float().mean())}


class StaleBatchError(RuntimeError):
    """A batch holds tokens older than ``trainer.max_staleness`` allows (or newer than the weights
    being trained): the rollout's bookkeeping is wrong, and training on it would hide that."""


def stale_rollout_correction(
    batch: Batch, algo: AlgorithmConfig
) -> tuple[torch.Tensor, torch.Tensor, dict[str, float]]:
    """A rollout drawn ahead: the engine sampled with older weights than π_old (recomputed), so each
    token (or sequence, ``algorithm.is_level``) is re-weighted by π_old / π_rollout, truncated at
    ``algorithm.tis_cap`` or rejected outside [1/tis_cap, tis_cap] (``algorithm.is_mode``). Returns
    the weights, the policy loss's mask (``response_mask`` without the rejected tokens: the critic,
    the KL and the metrics keep the whole mask) and the metrics."""
    return importance_weights(
        batch["old_log_probs"],
        batch["rollout_log_probs"],
        batch["response_mask"],
        level=algo.is_level,
        mode=algo.is_mode,
        cap=algo.tis_cap,
    )


def checked_staleness(batch: Batch, version: int, max_staleness: int) -> dict[str, float]:
    """The staleness of the batch's sampled tokens against the weights of ``version`` being trained,
    read from the batch itself (``response_versions``); ``StaleBatchError`` when one is older than
    ``max_staleness`` updates or newer than ``version``."""
    versions, mask = batch["response_versions"], batch["response_mask"]
    unversioned = int(((mask > 0) & (versions < 0)).sum())
    if unversioned:  # a trajectory recorded without Trajectory.add_turn: its age is unknown
        raise StaleBatchError(
            f"{unversioned} sampled tokens of this batch carry no weights version (a turn recorded "
            "without Trajectory.add_turn); the staleness bound cannot be checked"
        )
    bad = stale_tokens(versions, mask, version, max_staleness)
    if bad:
        found = versions[(mask > 0) & (versions >= 0)]
        raise StaleBatchError(
            f"{bad} sampled tokens of this batch are more than trainer.max_staleness={max_staleness} "
            f"updates older than the weights being trained (version {version}), or newer; the batch "
            f"holds versions {sorted(set(found.tolist()))}"
        )
    return staleness_metrics(versions, mask, version, max_staleness)


def single_step_or_refuse(rows: int, mini_batch_size: int) -> None:
    """Under ``actor.skip_old_log_prob`` π_old is the update's own forward, right only for one
    optimiser step; a trajectory of several steps (rows) can push a batch past one mini-batch."""
    if rows > mini_batch_size:
        raise ValueError(
            f"actor.skip_old_log_prob=true needs one optimiser step, but this step's {rows} rows (its "
            f"trajectories' steps) exceed actor.update.mini_batch_size={mini_batch_size}; set "
            "actor.skip_old_log_prob=false, or actor.rollout.keep_thinking=true for a template that "
            "rewrites earlier turns"
        )
