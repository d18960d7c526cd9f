"""Variable-length attention for packed rows: each sequence attends to itself only, no dense mask,
and everything that is not a packed row is transformers' sdpa unchanged."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM, Qwen2Config

from agentrl.models.attention import VARLEN_SDPA, sequence_bounds, use_varlen_attention
from agentrl.models.forward import policy_forward
from agentrl.models.layout import pack_rows, pack_sequences, row_capacity
from tests.models.test_forward_chunked import (
    TEMPERATURE,
    assert_same,
    build_model,
    outputs_and_gradients,
    rollout_batch,
)


def test_sequence_bounds_split_each_row_where_the_positions_restart():
    positions = torch.tensor([[0, 1, 2, 0, 1, 0], [0, 1, 2, 3, 4, 5]])
    assert sequence_bounds(positions) == [[(0, 3), (3, 5), (5, 6)], [(0, 6)]]


def attention_calls(monkeypatch) -> list[tuple[int, bool]]:
    """(query length, mask given) of every sdpa call the attention makes."""
    calls: list[tuple[int, bool]] = []
    original = torch.nn.functional.scaled_dot_product_attention

    def recording(query, key, value, attn_mask=None, **kwargs):
        calls.append((query.shape[-2], attn_mask is not None))
        return original(query, key, value, attn_mask=attn_mask, **kwargs)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", recording)
    return calls


@pytest.mark.parametrize("arch", ["qwen2", "llama"])
@pytest.mark.parametrize("capacity", [None, "longest"])
def test_varlen_packed_log_probs_entropy_and_gradients_equal_the_padded_sdpa_path(
    tmp_path_factory, monkeypatch, arch, capacity
):
    directory = tmp_path_factory.getbasetemp() / f"packed-{arch}"
    reference = build_model(directory, arch, "sdpa")
    model = build_model(directory, arch, VARLEN_SDPA)
    batch = rollout_batch(model.config.vocab_size, rows=6)
    lengths = batch["attention_mask"].sum(-1).tolist()
    if capacity == "longest":  # several rows, several sequences in some of them
        capacity = max(lengths)
        monkeypatch.setattr("agentrl.models.forward.row_capacity", lambda _model, _batch: capacity)
    packed_rows = pack_sequences(batch, capacity).input_ids
    assert packed_rows.shape[0] < len(lengths)
    # A bounded row's unfilled tail is padding that forms a sequence of its own.
    width = packed_rows.shape[1]
    tails = [width - sum(lengths[i] for i in row) for row in pack_rows(lengths, width)]
    sequences = lengths + [tail for tail in tails if tail > 0]

    padded = outputs_and_gradients(
        reference,
        batch,
        lambda: policy_forward(reference, batch, TEMPERATURE, with_entropy=True, chunk_tokens=6),
    )
    calls = attention_calls(monkeypatch)
    packed = outputs_and_gradients(
        model,
        batch,
        lambda: policy_forward(model, batch, TEMPERATURE, with_entropy=True, chunk_tokens=6, packed=True),
    )
    assert_same(packed, padded)
    # Every sequence on its own, without a mask: attention costs Σ L², not (row length)².
    layers = model.config.num_hidden_layers
    assert sorted(calls) == sorted([(length, False) for length in sequences] * layers)


def test_padded_batches_and_cached_generation_are_unchanged_by_the_switch(tmp_path_factory):
    directory = tmp_path_factory.getbasetemp() / "packed-qwen2"
    reference = build_model(directory, "qwen2", "sdpa").eval()
    model = build_model(directory, "qwen2", "sdpa").eval()
    assert use_varlen_attention(model) and model.config._attn_implementation == VARLEN_SDPA
    batch = rollout_batch(model.config.vocab_size)
    with torch.no_grad():
        ours, _ = policy_forward(model, batch)
        theirs, _ = policy_forward(reference, batch)
    assert torch.equal(ours, theirs)
    prompts = torch.tensor([[0, 0, 5, 9, 4], [7, 3, 8, 2, 6]])  # the first row left-padded
    attention = (prompts != 0).long()
    settings = {"max_new_tokens": 6, "do_sample": False, "pad_token_id": 0}
    with torch.no_grad():
        ours = model.generate(input_ids=prompts, attention_mask=attention, **settings)
        theirs = reference.generate(input_ids=prompts, attention_mask=attention, **settings)
    assert torch.equal(ours, theirs)


def test_switching_leaves_eager_models_alone_and_one_row_is_packed_under_varlen(tmp_path_factory):
    directory = tmp_path_factory.getbasetemp() / "packed-qwen2"
    eager = build_model(directory, "qwen2", "eager")
    assert not use_varlen_attention(eager) and eager.config._attn_implementation == "eager"
    batch = rollout_batch(eager.config.vocab_size)
    assert row_capacity(eager, batch) is not None  # dense-mask attention: rows are bounded
    model = build_model(directory, "qwen2", "sdpa")
    use_varlen_attention(model)
    assert row_capacity(model, batch) is None


def test_a_packed_sequence_longer_than_the_sliding_window_is_refused_by_name():
    config = Qwen2Config(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=4,
        num_key_value_heads=2,
        use_sliding_window=True,
        sliding_window=4,
        max_window_layers=0,
    )
    model = AutoModelForCausalLM.from_config(config, attn_implementation=VARLEN_SDPA)
    ids = torch.arange(3, 13).unsqueeze(0)
    positions = torch.tensor([[0, 1, 2, 3, 4, 5, 0, 1, 2, 3]])
    with pytest.raises(ValueError, match="sliding window \\(4\\)"):
        model(input_ids=ids, position_ids=positions)
