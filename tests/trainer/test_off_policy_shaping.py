"""The driver's off-policy arithmetic without Ray: the staleness bound read from the batch's own
versions, and the correction chosen by ``algorithm.is_*`` applied to the loss mask."""

from __future__ import annotations

import math

import pytest
import torch

from agentrl.config.schema import AlgorithmConfig
from agentrl.core.batch import Batch
from agentrl.trainer.shaping import StaleBatchError, checked_staleness, stale_rollout_correction


def _batch(versions: list[list[int]], old: list[list[float]], rollout: list[list[float]]) -> Batch:
    v = torch.tensor(versions)
    return Batch.from_dict(
        {
            "response_versions": v,
            "response_mask": (v >= 0).float(),
            "old_log_probs": torch.tensor(old),
            "rollout_log_probs": torch.tensor(rollout),
        },
        {},
    )


def test_a_batch_within_the_bound_reports_its_staleness_histogram_and_version_spread():
    # trained at version 5: row 0 sampled by weights of version 4 then 5 (continued across an update)
    batch = _batch([[4, 4, 5, -1], [5, 5, -1, -1]], [[0.0] * 4] * 2, [[0.0] * 4] * 2)
    metrics = checked_staleness(batch, version=5, max_staleness=1)
    assert metrics["off_policy/staleness_frac/0"] == pytest.approx(3 / 5)
    assert metrics["off_policy/staleness_frac/1"] == pytest.approx(2 / 5)
    assert metrics["off_policy/staleness_max"] == 1 and metrics["off_policy/version_spread"] == 1


@pytest.mark.parametrize(
    ("versions", "held"), [([[3, 5, -1]], r"\[3, 5\]"), ([[6, 6, -1]], r"\[6\]")], ids=["too_old", "too_new"]
)
def test_a_token_older_than_the_bound_or_newer_than_the_weights_stops_the_step_naming_the_versions(
    versions, held
):
    batch = _batch(versions, [[0.0] * 3], [[0.0] * 3])
    with pytest.raises(StaleBatchError, match=r"max_staleness=1 .*\(version 5\).*holds versions " + held):
        checked_staleness(batch, version=5, max_staleness=1)


def test_rejection_takes_the_tokens_outside_the_band_out_of_the_loss_mask_and_truncation_keeps_them():
    # ρ = exp(old − rollout) per token: e^1 ≈ 2.72 (outside [1/2, 2]), 1, e^−1 ≈ 0.37 (outside)
    batch = _batch([[0, 0, 0]], [[0.0, 0.0, 0.0]], [[-1.0, 0.0, 1.0]])
    algo = AlgorithmConfig(tis_cap=2.0, is_level="token", is_mode="reject")
    weights, keep, metrics = stale_rollout_correction(batch, algo)
    assert keep.tolist() == [[0.0, 1.0, 0.0]] and weights.tolist() == [[0.0, 1.0, 0.0]]
    assert metrics["off_policy/is_rejected_frac"] == pytest.approx(2 / 3)
    truncate = AlgorithmConfig(tis_cap=2.0, is_level="token", is_mode="truncate")
    weights, keep, metrics = stale_rollout_correction(batch, truncate)
    assert keep.tolist() == [[1.0, 1.0, 1.0]]
    assert weights[0].tolist() == pytest.approx([2.0, 1.0, math.exp(-1)])
    assert metrics["off_policy/is_truncated_frac"] == pytest.approx(1 / 3)


def test_a_sampled_token_without_a_version_stops_the_step_rather_than_passing_unchecked():
    batch = _batch([[5, 5, -1]], [[0.0] * 3], [[0.0] * 3])
    batch["response_mask"] = torch.tensor([[1.0, 1.0, 1.0]])  # the third was sampled, its turn unrecorded
    with pytest.raises(StaleBatchError, match=r"1 sampled tokens of this batch carry no weights version"):
        checked_staleness(batch, version=5, max_staleness=1)
