"""A checkpoint of two fsdp ranks, loaded by fresh workers, ends where the uninterrupted run ends: the
actor's and the critic's weights and each rank's optimiser shards (spawned gloo ranks, no Ray).

The trainer's own resume (a run killed while writing a checkpoint, the loader, the batches) is
tested on in-process roles in ``tests/trainer/test_ppo_trainer.py``; this is the sharded state
under it, which only several ranks have."""

from __future__ import annotations

import pytest
import torch

from tests.support.checkpoint_ranks import round_trip

pytestmark = pytest.mark.slow  # spawns real gloo ranks, twice


@pytest.fixture(scope="module")
def fsdp_round_trip(tiny_model_dir, tmp_path_factory):
    return round_trip(tiny_model_dir, "fsdp", 2, str(tmp_path_factory.mktemp("fsdp_checkpoint")))


@pytest.mark.parametrize("role", ["actor", "critic"])
def test_two_fsdp_ranks_resumed_from_a_checkpoint_end_with_the_uninterrupted_weights_and_optimiser_shards(
    fsdp_round_trip, role
):
    straight, resumed = fsdp_round_trip
    weights, again = straight[0][role]["weights"], resumed[0][role]["weights"]
    assert weights and weights.keys() == again.keys()
    for name in weights:
        torch.testing.assert_close(torch.tensor(again[name]), torch.tensor(weights[name]), rtol=0, atol=0)
    for rank, (mine, theirs) in enumerate(zip(straight, resumed, strict=True)):
        moments, restored = mine[role]["moments"], theirs[role]["moments"]
        assert moments and moments.keys() == restored.keys(), f"rank {rank}: other optimiser slots"
        # a fresh optimiser's first step would give other moments than Adam's second
        assert any(any(v != 0 for v in values) for values in moments.values())
        for slot in moments:
            assert restored[slot] == moments[slot], f"rank {rank}: {slot} differs after the resume"
        assert theirs[role]["lr"] == mine[role]["lr"]
