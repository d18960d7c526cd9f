"""Off-policy correction: importance weights (truncate / reject, token / sequence), ESS, staleness."""

import math

import pytest
import torch

from agentrl.core.off_policy import (
    effective_sample_size,
    importance_weights,
    stale_tokens,
    staleness_metrics,
)

LN = math.log


def _log_probs(log_ratio: list[list[float]]) -> tuple[torch.Tensor, torch.Tensor]:
    """(old, behaviour) log-probs whose difference old − behaviour is ``log_ratio``."""
    behaviour = torch.full((len(log_ratio), len(log_ratio[0])), -1.0)
    return behaviour + torch.tensor(log_ratio), behaviour


# --- token level -----------------------------------------------------------------------


def test_token_truncation_caps_each_ratio_and_zeroes_the_masked_out_token():
    # ρ = 0.5, 3.0 (above C = 2) and a masked-out token whose behaviour log-prob is −inf.
    old = torch.tensor([[LN(0.2), LN(0.3), LN(0.9)]])
    behaviour = torch.tensor([[LN(0.4), LN(0.1), -math.inf]])
    mask = torch.tensor([[1.0, 1.0, 0.0]])

    weights, keep, metrics = importance_weights(old, behaviour, mask, level="token", mode="truncate", cap=2.0)

    torch.testing.assert_close(weights, torch.tensor([[0.5, 2.0, 0.0]]))
    torch.testing.assert_close(keep, mask)
    assert metrics["off_policy/is_weight_mean"] == pytest.approx((0.5 + 2.0) / 2)
    assert metrics["off_policy/is_truncated_frac"] == pytest.approx(1 / 2)
    assert metrics["off_policy/is_rejected_frac"] == 0.0
    assert metrics["off_policy/ess"] == pytest.approx(2.5**2 / (2 * (0.5**2 + 2.0**2)))


def test_truncation_accepts_a_cap_below_one_and_caps_every_ratio_there():
    old, behaviour = _log_probs([[LN(0.25), LN(4.0)]])
    weights, _, metrics = importance_weights(
        old, behaviour, torch.ones(1, 2), level="token", mode="truncate", cap=0.5
    )
    torch.testing.assert_close(weights, torch.tensor([[0.25, 0.5]]))
    assert metrics["off_policy/is_truncated_frac"] == pytest.approx(1 / 2)


def test_token_rejection_drops_tokens_below_one_over_cap_and_above_cap():
    # ρ = 0.25 (< 1/C), 1.5, 3.0 (> C), 0.8, and a masked-out token that would be rejected.
    old, behaviour = _log_probs([[LN(0.25), LN(1.5), LN(3.0), LN(0.8), LN(100.0)]])
    mask = torch.tensor([[1.0, 1.0, 1.0, 1.0, 0.0]])

    weights, keep, metrics = importance_weights(old, behaviour, mask, level="token", mode="reject", cap=2.0)

    torch.testing.assert_close(keep, torch.tensor([[0.0, 1.0, 0.0, 1.0, 0.0]]))
    torch.testing.assert_close(weights, torch.tensor([[0.0, 1.5, 0.0, 0.8, 0.0]]))
    assert metrics["off_policy/is_rejected_frac"] == pytest.approx(2 / 4)
    assert metrics["off_policy/is_truncated_frac"] == 0.0
    assert metrics["off_policy/is_weight_mean"] == pytest.approx((1.5 + 0.8) / 2)
    assert metrics["off_policy/ess"] == pytest.approx(2.3**2 / (2 * (1.5**2 + 0.8**2)))


def test_rejection_with_cap_one_keeps_only_tokens_sampled_on_policy():
    old, behaviour = _log_probs([[0.0, LN(1.1), 0.0, LN(0.9)]])
    weights, keep, _ = importance_weights(
        old, behaviour, torch.ones(1, 4), level="token", mode="reject", cap=1.0
    )
    torch.testing.assert_close(keep, torch.tensor([[1.0, 0.0, 1.0, 0.0]]))
    torch.testing.assert_close(weights, torch.tensor([[1.0, 0.0, 1.0, 0.0]]))


# --- sequence level ----------------------------------------------------------------------


def test_sequence_truncation_gives_every_token_of_a_row_the_exp_of_its_summed_log_ratio():
    # Row 0: ρ = 2 · 1.5 = 3; row 1: ρ = 3 · 3 = 9, capped at 4. Masked positions hold log-ratios +inf and 5,
    # which must not enter the sums.
    old, behaviour = _log_probs([[LN(2.0), LN(1.5), 7.0], [LN(3.0), 5.0, LN(3.0)]])
    behaviour[0, 2] = -math.inf
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 1.0]])

    weights, keep, metrics = importance_weights(
        old, behaviour, mask, level="sequence", mode="truncate", cap=4.0
    )

    torch.testing.assert_close(weights, torch.tensor([[3.0, 3.0, 0.0], [4.0, 0.0, 4.0]]))
    torch.testing.assert_close(keep, mask)
    assert metrics["off_policy/is_truncated_frac"] == pytest.approx(2 / 4)
    assert metrics["off_policy/is_weight_mean"] == pytest.approx((3 + 3 + 4 + 4) / 4)
    # Two units (rows) with weights 3 and 4, not four tokens.
    assert metrics["off_policy/ess"] == pytest.approx(7**2 / (2 * (9 + 16)))


def test_sequence_level_rejection_masks_every_token_of_a_row_outside_the_bounds():
    # Row ratios with C = 2: 3.0 (above C), 1.2 (kept), 0.25 (below 1/C).
    old, behaviour = _log_probs([[LN(2.0), LN(1.5), 0.0], [LN(1.2), 0.0, 0.0], [LN(0.5), LN(0.5), 0.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])

    weights, keep, metrics = importance_weights(
        old, behaviour, mask, level="sequence", mode="reject", cap=2.0
    )

    torch.testing.assert_close(keep, torch.tensor([[0.0, 0.0, 0.0], [1.0, 1.0, 1.0], [0.0, 0.0, 0.0]]))
    torch.testing.assert_close(weights, torch.tensor([[0.0, 0.0, 0.0], [1.2, 1.2, 1.2], [0.0, 0.0, 0.0]]))
    assert metrics["off_policy/is_rejected_frac"] == pytest.approx(4 / 7)
    assert metrics["off_policy/is_weight_mean"] == pytest.approx(1.2)
    assert metrics["off_policy/ess"] == pytest.approx(1.0)


def test_a_summed_log_ratio_beyond_twenty_is_clamped_before_exp():
    old, behaviour = _log_probs([[15.0, 15.0]])
    weights, _, _ = importance_weights(
        old, behaviour, torch.ones(1, 2), level="sequence", mode="truncate", cap=math.inf
    )
    torch.testing.assert_close(weights, torch.full((1, 2), math.exp(20.0)))


def test_weights_carry_no_gradient_into_the_log_probs():
    old, behaviour = _log_probs([[LN(0.5), LN(3.0)]])
    old.requires_grad_(True)
    weights, _, _ = importance_weights(
        old, behaviour, torch.ones(1, 2), level="token", mode="truncate", cap=2.0
    )
    assert not weights.requires_grad


@pytest.mark.parametrize("level", ["token", "sequence"])
@pytest.mark.parametrize("mode", ["truncate", "reject"])
def test_a_batch_with_no_masked_token_gives_zero_weights_and_zero_metrics_without_nan(level, mode):
    old = torch.tensor([[math.nan, 0.0], [-math.inf, 3.0]])
    behaviour = torch.tensor([[0.0, -math.inf], [math.nan, -50.0]])
    mask = torch.zeros(2, 2)

    weights, keep, metrics = importance_weights(old, behaviour, mask, level=level, mode=mode, cap=2.0)

    torch.testing.assert_close(weights, torch.zeros(2, 2))
    torch.testing.assert_close(keep, torch.zeros(2, 2))
    assert metrics == {
        "off_policy/is_weight_mean": 0.0,
        "off_policy/is_truncated_frac": 0.0,
        "off_policy/is_rejected_frac": 0.0,
        "off_policy/ess": 0.0,
    }


def test_invalid_arguments_raise_value_errors_naming_the_argument():
    old, behaviour = _log_probs([[0.0]])
    mask = torch.ones(1, 1)
    with pytest.raises(ValueError, match="cap must be > 0"):
        importance_weights(old, behaviour, mask, level="token", mode="truncate", cap=0.0)
    with pytest.raises(ValueError, match=r"cap must be >= 1 in mode 'reject'"):
        importance_weights(old, behaviour, mask, level="token", mode="reject", cap=0.5)
    with pytest.raises(ValueError, match=r"unknown level 'row'.*'token', 'sequence'"):
        importance_weights(old, behaviour, mask, level="row", mode="truncate", cap=2.0)
    with pytest.raises(ValueError, match=r"unknown mode 'clip'.*'truncate', 'reject'"):
        importance_weights(old, behaviour, mask, level="token", mode="clip", cap=2.0)


# --- effective sample size ---------------------------------------------------------------


def test_ess_of_equal_weights_is_one_whatever_sits_under_the_mask():
    weights = torch.tensor([[0.7, 0.7, 50.0], [0.7, 0.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    assert effective_sample_size(weights, mask, "token") == pytest.approx(1.0)


def test_ess_of_unequal_token_weights_matches_kish():
    # (1 + 3)² / (2 · (1 + 9)) = 0.8
    assert effective_sample_size(torch.tensor([[1.0, 3.0]]), torch.ones(1, 2), "token") == pytest.approx(0.8)
    # One unit carries all the weight: ESS = 1/N.
    dominated = torch.tensor([[1.0, 0.0, 0.0, 0.0]])
    assert effective_sample_size(dominated, torch.ones(1, 4), "token") == pytest.approx(1 / 4)


def test_sequence_level_ess_counts_rows_not_tokens():
    weights = torch.tensor([[2.0, 2.0, 0.0], [1.0, 1.0, 1.0], [9.0, 9.0, 9.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0], [0.0, 0.0, 0.0]])
    # Units: rows 0 and 1 (row 2 has no token) → (2 + 1)² / (2 · (4 + 1)) = 0.9
    assert effective_sample_size(weights, mask, "sequence") == pytest.approx(0.9)
    # Tokens 2, 2, 1, 1, 1 → 7² / (5 · 11)
    assert effective_sample_size(weights, mask, "token") == pytest.approx(49 / 55)


def test_ess_with_no_unit_is_zero():
    assert effective_sample_size(torch.ones(2, 3), torch.zeros(2, 3), "token") == 0.0
    assert effective_sample_size(torch.ones(2, 3), torch.zeros(2, 3), "sequence") == 0.0


# --- staleness ----------------------------------------------------------------------------

VERSIONS = torch.tensor([[5, 4, 4, -1], [3, 3, 5, -1]])
# Row 0's last token is masked in but has no version (−1); row 1's version 5 is masked out.
MASK = torch.tensor([[1.0, 1.0, 1.0, 1.0], [1.0, 1.0, 0.0, 0.0]])


def test_staleness_histogram_counts_only_sampled_tokens_with_a_version():
    # Counted versions 5, 4, 4, 3, 3 at current version 5 → staleness 0, 1, 1, 2, 2.
    metrics = staleness_metrics(VERSIONS, MASK, current_version=5, max_staleness=2)
    assert metrics == pytest.approx(
        {
            "off_policy/staleness_mean": 6 / 5,
            "off_policy/staleness_max": 2.0,
            "off_policy/staleness_frac/0": 1 / 5,
            "off_policy/staleness_frac/1": 2 / 5,
            "off_policy/staleness_frac/2": 2 / 5,
            "off_policy/version_spread": 2.0,
        }
    )
    fracs = [metrics[f"off_policy/staleness_frac/{k}"] for k in range(3)]
    assert sum(fracs) == pytest.approx(1.0)


def test_staleness_histogram_sums_below_one_when_tokens_are_older_than_max_staleness():
    metrics = staleness_metrics(VERSIONS, MASK, current_version=5, max_staleness=1)
    assert "off_policy/staleness_frac/2" not in metrics
    assert metrics["off_policy/staleness_frac/0"] + metrics["off_policy/staleness_frac/1"] == pytest.approx(
        3 / 5
    )


def test_version_spread_ignores_masked_out_and_unversioned_positions():
    versions = torch.tensor([[7, 9, -1, 0], [8, 8, 8, 1]])
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0], [1.0, 0.0, 0.0, 0.0]])
    # Counted versions 7, 9, 8: spread 9 − 7 = 2, not 9 − (−1) or 9 − 0.
    assert staleness_metrics(versions, mask, current_version=9, max_staleness=3)[
        "off_policy/version_spread"
    ] == pytest.approx(2.0)


def test_staleness_metrics_with_no_sampled_token_are_all_zero():
    metrics = staleness_metrics(VERSIONS, torch.zeros(2, 4), current_version=5, max_staleness=1)
    assert metrics == {
        "off_policy/staleness_mean": 0.0,
        "off_policy/staleness_max": 0.0,
        "off_policy/staleness_frac/0": 0.0,
        "off_policy/staleness_frac/1": 0.0,
        "off_policy/version_spread": 0.0,
    }


def test_stale_tokens_counts_too_old_and_newer_than_current_sampled_tokens():
    versions = torch.tensor([[6, 5, 2, -1], [1, 5, 3, 0]])
    mask = torch.tensor([[1.0, 1.0, 1.0, 1.0], [1.0, 1.0, 1.0, 0.0]])
    # At current version 5, max 2: 6 is newer than current, 2 and 1 are 3 and 4 versions old.
    # 5, 5 and 3 are within bounds; −1 has no version and the 0 is masked out.
    assert stale_tokens(versions, mask, current_version=5, max_staleness=2) == 3
    assert stale_tokens(VERSIONS, MASK, current_version=5, max_staleness=2) == 0
    assert stale_tokens(VERSIONS, MASK, current_version=5, max_staleness=1) == 2


def test_negative_max_staleness_is_rejected():
    with pytest.raises(ValueError, match="max_staleness"):
        stale_tokens(VERSIONS, MASK, current_version=5, max_staleness=-1)
    with pytest.raises(ValueError, match="max_staleness"):
        staleness_metrics(VERSIONS, MASK, current_version=5, max_staleness=-1)
