"""Data parallelism takes the step of one loss over the whole mini-batch, as one rank would.

Two real gloo ranks (spawned processes) against the same update on one rank, in the
situation that exposed the old per-rank weighting: one rank's shard holds 2 model tokens,
the other's 12.
"""

from __future__ import annotations

import pytest
import torch

from agentrl.cluster.sharding import mini_batch_shards, pad_rows
from agentrl.core.losses import LOSS_AGG_MODES
from tests.support.data_parallel import run_ranks_each, run_single, token_batch

pytestmark = pytest.mark.slow  # spawns real gloo ranks

UNEVEN = [1, 1, 6, 6]  # rank 0 gets rows 0-1 (2 model tokens), rank 1 rows 2-3 (12)


def uneven_settings(mode: str) -> dict:
    return {"lr": 0.0, "loss_agg_mode": mode, "norm_tokens": 8, "mini_batch_size": 4, "micro_batch_size": 1}


SEVERAL_MINI_BATCHES = {"lr": 0.1, "loss_agg_mode": "token-mean", "mini_batch_size": 4, "micro_batch_size": 1}


def uneven_batch():
    return token_batch(UNEVEN)


def eight_row_batch():
    return token_batch([1, 7, 2, 2, 8, 1, 3, 5], seed=1)


# a step whose trajectories' steps give an odd row count: padded to the two ranks, one mini-batch
ODD_ROWS = {"lr": 0.0, "loss_agg_mode": "token-mean", "mini_batch_size": 8, "micro_batch_size": 1}


def seven_row_batch():
    return token_batch([3, 1, 6, 2, 5, 4, 2], seed=2)


@pytest.fixture(scope="module")
def on_two_ranks() -> dict[str, list[dict]]:
    """Every update below on the same two gloo ranks (one spawn for all), results by name, then rank."""
    jobs = {mode: (uneven_batch(), uneven_settings(mode)) for mode in LOSS_AGG_MODES}
    jobs["several_mini_batches"] = (eight_row_batch(), SEVERAL_MINI_BATCHES)
    jobs["padded_odd_rows"] = (pad_rows(seven_row_batch(), 2)[0], ODD_ROWS)
    results = run_ranks_each(
        [
            (mini_batch_shards(batch, 2, settings["mini_batch_size"]), settings)
            for batch, settings in jobs.values()
        ]
    )
    return dict(zip(jobs, results, strict=True))


@pytest.mark.parametrize("mode", LOSS_AGG_MODES)
def test_two_ranks_with_uneven_token_counts_give_the_one_rank_gradient(mode, on_two_ranks):
    single = run_single(uneven_batch(), **uneven_settings(mode))
    for result in on_two_ranks[mode]:
        torch.testing.assert_close(result["grad"], single["grad"], rtol=1e-5, atol=1e-6)


def test_two_ranks_over_several_mini_batches_end_with_the_one_rank_weights(on_two_ranks):
    """Two optimiser steps (mini-batches of 4 of 8 rows): each rank holds its half of each."""
    single = run_single(eight_row_batch(), **SEVERAL_MINI_BATCHES)
    assert not torch.equal(single["weight"], torch.tensor([[0.5, -1.0, 0.25]])), (
        "the update must move the weights"
    )
    for result in on_two_ranks["several_mini_batches"]:
        torch.testing.assert_close(result["weight"], single["weight"], rtol=1e-5, atol=1e-6)


def test_an_odd_row_count_padded_for_two_ranks_gives_the_one_rank_gradient_of_the_unpadded_rows(on_two_ranks):
    padded, added = pad_rows(seven_row_batch(), 2)
    assert added == 1 and len(padded) == 8 and float(padded["response_mask"][7].sum()) == 0.0
    single = run_single(seven_row_batch(), **ODD_ROWS)
    for result in on_two_ranks["padded_odd_rows"]:
        torch.testing.assert_close(result["grad"], single["grad"], rtol=1e-5, atol=1e-6)


def test_mini_batch_shards_give_each_rank_a_token_balanced_part_of_every_mini_batch():
    batch = token_batch([1, 2, 3, 4, 5, 6, 7, 8])
    shards = mini_batch_shards(batch, 2, 4)
    counts = [shard["response_mask"].sum(-1).tolist() for shard in shards]
    # mini-batch 1 holds 1-4 tokens, mini-batch 2 holds 5-8: each rank gets 2 rows of each,
    # 5 tokens apiece of the first and 13 of the second (row order would give 3/7 and 11/15)
    assert counts == [[1.0, 4.0, 5.0, 8.0], [2.0, 3.0, 6.0, 7.0]]
    with pytest.raises(ValueError, match="must divide both the mini-batch"):
        mini_batch_shards(batch, 3, 4)
