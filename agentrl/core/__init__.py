"""Pure tensor math for RL on language models: torch only, no Ray, no I/O.

Modules are named after what they compute:

- ``masked``: reductions and whitening under the loss mask
- ``advantages``: GAE, GRPO/Dr.GRPO, RLOO, REINFORCE++ and their registry
- ``losses``: KL estimators, loss aggregation, clipped policy and value losses, entropy
- ``kl_control``: fixed and adaptive KL coefficient controllers
- ``off_policy``: importance weights for tokens sampled by older weights, their ESS and staleness
- ``batch``: the ``Batch`` container passed between roles
"""

from agentrl.core.advantages import (
    ADVANTAGE_ESTIMATORS,
    AdvantageInputs,
    compute_gae,
    compute_grpo_advantages,
    compute_reinforce_pp_advantages,
    compute_rloo_advantages,
    get_advantage_estimator,
)
from agentrl.core.batch import Batch
from agentrl.core.kl_control import AdaptiveKLController, FixedKLController, build_kl_controller
from agentrl.core.losses import (
    agg_loss,
    entropy_from_logits,
    kl_penalty,
    log_probs_from_logits,
    policy_loss,
    value_loss,
)
from agentrl.core.masked import last_true_index, masked_mean, masked_sum, masked_var, masked_whiten
from agentrl.core.placement import place_score_on_last_token

__all__ = [
    "ADVANTAGE_ESTIMATORS",
    "AdaptiveKLController",
    "AdvantageInputs",
    "Batch",
    "FixedKLController",
    "agg_loss",
    "build_kl_controller",
    "compute_gae",
    "compute_grpo_advantages",
    "compute_reinforce_pp_advantages",
    "compute_rloo_advantages",
    "entropy_from_logits",
    "get_advantage_estimator",
    "kl_penalty",
    "last_true_index",
    "log_probs_from_logits",
    "masked_mean",
    "masked_sum",
    "masked_var",
    "masked_whiten",
    "place_score_on_last_token",
    "policy_loss",
    "value_loss",
]
