"""Loading from local directories and the critic (value model)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from agentrl.models.loading import (
    build_value_model,
    load_causal_lm,
    load_tokenizer,
)
from agentrl.models.tiny import make_tiny_model_dir


@pytest.fixture(scope="module")
def nano_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_model_dir(tmp_path_factory.mktemp("nano") / "m")


def test_load_causal_lm_and_tokenizer(nano_dir: Path):
    model = load_causal_lm(nano_dir, dtype="bfloat16")
    assert next(model.parameters()).dtype == torch.bfloat16
    tok = load_tokenizer(nano_dir)
    assert tok.padding_side == "left"
    batch = tok(["a", "a longer prompt"], padding=True, return_tensors="pt")
    assert batch.attention_mask[0, 0] == 0 and batch.attention_mask[0, -1] == 1
    assert load_tokenizer(nano_dir, padding_side="right").padding_side == "right"


def test_missing_or_bad_paths_name_the_problem(tmp_path: Path, nano_dir: Path):
    with pytest.raises(FileNotFoundError, match="not a directory"):
        load_causal_lm(tmp_path / "nope")
    with pytest.raises(FileNotFoundError, match="config.json"):
        build_value_model(tmp_path)
    with pytest.raises(ValueError, match="dtype"):
        load_causal_lm(nano_dir, dtype="float99")


def test_value_model_shapes_init_and_gradient(nano_dir: Path):
    critic = build_value_model(nano_dir)
    ids = torch.randint(10, 300, (3, 9))
    mask = torch.ones_like(ids)
    mask[0, :4] = 0  # left padding
    values = critic(ids, attention_mask=mask)
    assert values.shape == (3, 9) and values.dtype == torch.float32
    assert torch.count_nonzero(values) == 0, "zero-init head: a fresh critic predicts 0"
    values.sum().backward()
    assert critic.value_head.weight.grad is not None and critic.value_head.weight.grad.abs().sum() > 0
    small = build_value_model(nano_dir, head_init_std=0.02)
    assert torch.count_nonzero(small(ids, attention_mask=mask)) > 0
    # the backbone is the LM's, minus its head
    lm = load_causal_lm(nano_dir)
    assert torch.equal(critic.backbone.embed_tokens.weight, lm.model.embed_tokens.weight)


def test_value_model_left_padding_does_not_change_values(nano_dir: Path):
    critic = build_value_model(nano_dir, head_init_std=0.1)
    ids = torch.randint(10, 300, (1, 6))
    alone = critic(ids, attention_mask=torch.ones_like(ids))
    padded = torch.cat([torch.zeros(1, 3, dtype=torch.long), ids], dim=1)
    mask = torch.cat([torch.zeros(1, 3, dtype=torch.long), torch.ones_like(ids)], dim=1)
    with torch.no_grad():
        assert torch.allclose(critic(padded, attention_mask=mask)[:, 3:], alone, atol=1e-5)


def test_value_model_save_load_round_trip(tmp_path: Path, nano_dir: Path):
    critic = build_value_model(nano_dir, head_init_std=0.1)
    ids = torch.randint(10, 300, (2, 5))
    critic.save_pretrained(tmp_path / "critic")
    again = build_value_model(tmp_path / "critic")
    with torch.no_grad():
        assert torch.equal(critic(ids), again(ids))
