"""Streaming weight sync: buckets bound what is held at once, and the engines check what arrives."""

from __future__ import annotations

import pytest
import torch

from agentrl.engines.hf import HFEngine
from agentrl.engines.weights import buckets
from agentrl.models.loading import load_causal_lm


def test_buckets_keep_order_and_stay_under_the_byte_bound_unless_one_tensor_is_larger():
    tensors = [(f"w{i}", torch.zeros(n)) for i, n in enumerate([10, 20, 5, 100, 1, 1])]  # fp32: 4 bytes each
    groups = list(buckets(tensors, bucket_bytes=100))
    assert [name for group in groups for name, _ in group] == [name for name, _ in tensors]
    for group in groups:
        size = sum(t.numel() * 4 for _, t in group)
        assert size <= 100 or len(group) == 1, [name for name, _ in group]
    assert [[name for name, _ in g] for g in groups] == [["w0"], ["w1", "w2"], ["w3"], ["w4", "w5"]]


def test_a_stream_is_pulled_one_bucket_ahead_at_most():
    pulled: list[str] = []

    def stream():
        for i in range(6):
            pulled.append(f"w{i}")
            yield f"w{i}", torch.zeros(25)  # 100 bytes: one tensor per 150-byte bucket

    groups = buckets(stream(), bucket_bytes=150)
    next(groups)
    assert pulled == ["w0", "w1"], "the first bucket closes when the second tensor does not fit"


def test_malformed_streams_are_refused_naming_what_was_expected():
    with pytest.raises(TypeError, match=r"\(name, tensor\) pairs"):
        list(buckets([("w", [1.0, 2.0])]))
    with pytest.raises(ValueError, match="bucket_bytes"):
        list(buckets({}, bucket_bytes=0))


def test_hf_engine_names_a_weight_it_does_not_have_and_weights_that_never_arrived(tiny_dir, tokenizer):
    engine = HFEngine(load_causal_lm(tiny_dir), tokenizer)
    state = load_causal_lm(tiny_dir).state_dict()
    with pytest.raises(KeyError, match="not_a_weight"):
        engine.update_weights({"not_a_weight": torch.zeros(1)})
    first = next(iter(state))
    with pytest.raises(ValueError, match="shape"):
        engine.update_weights({first: torch.zeros(1)})
    partial = dict(list(state.items())[:2])
    with pytest.raises(ValueError, match="never arrived"):
        engine.update_weights(partial)
    engine.update_weights(state)  # the whole stream is accepted


def test_an_hf_engine_that_released_its_weights_refuses_to_generate_until_they_are_resent(
    tiny_dir, tokenizer
):
    from agentrl.engines.base import SamplingParams

    engine = HFEngine(load_causal_lm(tiny_dir), tokenizer)
    params = SamplingParams(max_new_tokens=2, greedy=True)
    assert engine.sleep(release_weights=True) > 0
    assert all(p.numel() == 0 for p in engine.model.parameters())
    with pytest.raises(RuntimeError, match="released its weights"):
        engine.generate_batch_sync([[5, 6, 7]], params)
    engine.wake_up()
    with pytest.raises(RuntimeError, match="update_weights"):
        engine.generate_batch_sync([[5, 6, 7]], params)
    engine.update_weights(load_causal_lm(tiny_dir).state_dict())
    assert len(engine.generate_batch_sync([[5, 6, 7]], params)[0].token_ids) == 2
