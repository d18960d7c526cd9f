"""Packed micro-batches: every row's real tokens in one row, results equal to the padded layout."""

from __future__ import annotations

import pytest
import torch

from agentrl.core.batch import Batch
from agentrl.models.forward import (
    micro_batches,
    no_grad_over_micro_batches,
    policy_forward,
    value_forward,
)
from agentrl.models.layout import pack_rows, pack_sequences
from agentrl.models.loading import build_value_model
from tests.models.test_forward_chunked import (
    TEMPERATURE,
    assert_same,
    build_model,
    outputs_and_gradients,
    response_attention,
    rollout_batch,
)


@pytest.mark.parametrize("capacity", [None, 0, 40])
def test_packed_rows_hold_each_sequence_whole_with_positions_restarting_at_zero(capacity):
    batch = rollout_batch(vocab_size=100)
    attention = batch["attention_mask"].bool()
    packed = pack_sequences(batch, capacity)
    lengths = attention.sum(-1).tolist()
    rows, width = packed.input_ids.shape
    if capacity is None:
        assert (rows, width) == (1, sum(lengths))
    else:
        assert width == max(capacity, max(lengths))
        assert rows == (len(lengths) if capacity == 0 else 3)  # 40: [30], [20, 18], [16]
    flat_ids, flat_positions = packed.input_ids.flatten(), packed.position_ids.flatten()
    for i, (start, length) in enumerate(zip(packed.starts, lengths, strict=True)):
        assert start // width == (start + length - 1) // width, "a sequence never spans two rows"
        assert flat_ids[start : start + length].tolist() == batch["input_ids"][i][attention[i]].tolist()
        assert flat_positions[start : start + length].tolist() == list(range(length))
    index = packed.index
    assert torch.equal(flat_ids[index.sources + 1], index.targets)  # each source precedes its token
    assert torch.equal(batch["responses"][index.rows, index.columns], index.targets)


def test_rows_are_filled_first_fit_decreasing_within_the_capacity():
    assert pack_rows([5, 3, 4, 2, 6], capacity=8) == [[4, 3], [0, 1], [2]]
    assert pack_rows([9, 1], capacity=4) == [[0], [1]]  # too long for any row: a row of its own


SHARED_ROWS = 6  # with 6 rows, the two shortest sequences share a row of the longest's capacity


@pytest.fixture(params=["bounded-rows", "one-row"])
def layout(request, monkeypatch) -> str:
    """bounded-rows: the sdpa/eager layout (rows of the longest sequence's length); one-row: the
    flash-attention layout (every sequence in one row), selected as a flash model would."""
    if request.param == "one-row":
        monkeypatch.setattr("agentrl.models.forward.row_capacity", lambda _model, _batch: None)
    return request.param


def assert_rows_are_shared(batch: Batch, layout: str) -> None:
    capacity = None if layout == "one-row" else int(batch["attention_mask"].sum(-1).max())
    assert pack_sequences(batch, capacity).input_ids.shape[0] < batch["input_ids"].shape[0]


@pytest.mark.parametrize("arch", ["qwen2", "llama"])
@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_packed_log_probs_entropy_and_gradients_equal_the_padded_path(tmp_path_factory, arch, attn, layout):
    model = build_model(tmp_path_factory.getbasetemp() / f"packed-{arch}", arch, attn)
    batch = rollout_batch(model.config.vocab_size, rows=SHARED_ROWS)
    assert_rows_are_shared(batch, layout)

    def run(packed: bool):
        return policy_forward(model, batch, TEMPERATURE, with_entropy=True, chunk_tokens=6, packed=packed)

    padded = outputs_and_gradients(model, batch, lambda: run(False))
    packed = outputs_and_gradients(model, batch, lambda: run(True))
    assert_same(packed, padded)
    log_probs, entropy = run(True)
    outside = ~response_attention(batch)
    assert torch.all(log_probs[outside] == 0) and torch.all(entropy[outside] == 0)
    assert log_probs.shape == batch["responses"].shape


def test_packed_values_and_their_gradients_equal_the_padded_path(tmp_path_factory, layout):
    directory = tmp_path_factory.getbasetemp() / "packed-qwen2"
    build_model(directory, "qwen2")
    critic = build_value_model(directory, head_init_std=0.5)
    batch = rollout_batch(critic.config.vocab_size, rows=SHARED_ROWS, seed=3)
    assert_rows_are_shared(batch, layout)
    mask = response_attention(batch)
    results = []
    for packed in (False, True):
        critic.zero_grad(set_to_none=True)
        values = value_forward(critic, batch, packed=packed)
        (values[mask] * torch.linspace(0.2, 1.0, int(mask.sum()))).sum().backward()
        grads = {name: p.grad.clone() for name, p in critic.named_parameters()}
        results.append((values[mask].detach(), values[mask].detach(), grads))
        assert values.shape == batch["responses"].shape
    assert_same(results[1], results[0])


def test_the_packed_forward_computes_fewer_tokens_than_the_padded_one(tmp_path_factory):
    model = build_model(tmp_path_factory.getbasetemp() / "packed-qwen2", "qwen2")
    batch = rollout_batch(model.config.vocab_size, rows=SHARED_ROWS)
    computed = []
    handle = model.get_input_embeddings().register_forward_hook(
        lambda _m, args, _out: computed.append(args[0].numel())
    )
    try:
        with torch.no_grad():
            policy_forward(model, batch, packed=True)
            policy_forward(model, batch, packed=False)
    finally:
        handle.remove()
    real_tokens = int(batch["attention_mask"].sum())
    assert real_tokens <= computed[0] < computed[1]
    # One unbounded row (the flash-attention layout) computes exactly the real tokens.
    assert pack_sequences(batch).input_ids.numel() == real_tokens


def test_without_restarting_positions_the_packed_sequences_would_see_each_other(tmp_path_factory):
    model = build_model(tmp_path_factory.getbasetemp() / "packed-qwen2", "qwen2")
    batch = rollout_batch(model.config.vocab_size)
    packed = pack_sequences(batch)
    with torch.no_grad():
        separate = model(input_ids=packed.input_ids, position_ids=packed.position_ids).logits
        continuous = torch.arange(packed.input_ids.shape[1]).unsqueeze(0)
        joined = model(input_ids=packed.input_ids, position_ids=continuous).logits
    second_sequence = int(batch["attention_mask"][0].sum())
    assert torch.allclose(separate[:, :second_sequence], joined[:, :second_sequence], atol=1e-5)
    assert not torch.allclose(separate[:, second_sequence:], joined[:, second_sequence:], atol=1e-3)


def test_packing_refuses_a_row_whose_first_response_token_has_no_prompt_before_it():
    batch = rollout_batch(vocab_size=100, rows=2)
    prompt_width = batch["input_ids"].shape[1] - batch["responses"].shape[1]
    batch["attention_mask"][1, :prompt_width] = 0
    with pytest.raises(ValueError, match="prompt token"):
        pack_sequences(batch)


def test_packed_micro_batches_budget_real_tokens_and_no_grad_passes_match_the_padded_ones(tmp_path_factory):
    model = build_model(tmp_path_factory.getbasetemp() / "packed-qwen2", "qwen2")
    batch = Batch.concat([rollout_batch(model.config.vocab_size, seed=s) for s in range(3)])
    lengths = batch["attention_mask"].sum(-1)
    budget = int(lengths[:3].sum())
    groups = list(micro_batches(batch, micro_batch_size=99, max_tokens=budget, packed=True))
    assert sum(len(g) for g in groups) == len(batch)
    assert all(int(g["attention_mask"].sum()) <= budget or len(g) == 1 for g in groups)
    padded_groups = list(micro_batches(batch, micro_batch_size=99, max_tokens=budget))
    assert len(groups) < len(padded_groups)  # packing fits more rows in the same budget
    packed = no_grad_over_micro_batches(
        lambda mb: policy_forward(model, mb, TEMPERATURE, packed=True)[0], batch, 99, budget, packed=True
    )
    padded = no_grad_over_micro_batches(lambda mb: policy_forward(model, mb, TEMPERATURE)[0], batch, 2)
    mask = response_attention(batch)
    torch.testing.assert_close(packed[mask], padded[mask], atol=1e-5, rtol=1e-5)
