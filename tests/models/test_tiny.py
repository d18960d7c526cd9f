"""The locally built tiny model: tokenizer, chat template, save/reload, architecture choice."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from agentrl.models.tiny import (
    DEFAULT_TEXTS,
    TAG_TOKENS,
    build_tiny_causal_lm,
    make_tiny_model_dir,
    train_tokenizer,
)


@pytest.fixture(scope="module")
def nano_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_model_dir(tmp_path_factory.mktemp("nano") / "m")


def test_tags_are_single_tokens_kept_by_decode(nano_dir: Path):
    tok = AutoTokenizer.from_pretrained(nano_dir)
    for tag in TAG_TOKENS:
        ids = tok(tag, add_special_tokens=False).input_ids
        assert len(ids) == 1, f"{tag} split into {ids}"
    text = "<think> a </think> <search> capital of France </search> <answer> Paris </answer>"
    ids = tok(text, add_special_tokens=False).input_ids
    assert tok.decode(ids, skip_special_tokens=True) == text
    assert tok.pad_token_id != tok.eos_token_id
    assert tok.decode([tok.eos_token_id, tok.pad_token_id], skip_special_tokens=True) == ""


def test_chat_template_renders_roles_and_generation_prompt(nano_dir: Path):
    tok = AutoTokenizer.from_pretrained(nano_dir)
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi?"}]
    text = tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
    assert (
        text
        == "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi?<|im_end|>\n<|im_start|>assistant\n"
    )
    assert not tok.apply_chat_template(msgs, tokenize=False).endswith("assistant\n")


@pytest.mark.parametrize("arch", ["qwen2", "llama"])
def test_save_reload_round_trip(tmp_path: Path, arch: str):
    tok = train_tokenizer(DEFAULT_TEXTS, vocab_size=400)
    out = build_tiny_causal_lm(tok, tmp_path / arch, arch=arch, hidden_size=32, layers=1, heads=2, seed=3)
    model = AutoModelForCausalLM.from_pretrained(out)
    again = AutoTokenizer.from_pretrained(out)
    assert model.config.model_type == arch
    assert model.config.vocab_size == len(tok) == len(again)
    for text in [*DEFAULT_TEXTS[:4], "naïve 日本 <|im_end|>"]:
        assert again(text).input_ids == tok(text).input_ids, "reloaded tokenizer splits text differently"
    # same seed, same weights; another seed, other weights
    same = AutoModelForCausalLM.from_pretrained(
        build_tiny_causal_lm(tok, tmp_path / "b", arch=arch, hidden_size=32, layers=1, heads=2, seed=3)
    )
    other = AutoModelForCausalLM.from_pretrained(
        build_tiny_causal_lm(tok, tmp_path / "c", arch=arch, hidden_size=32, layers=1, heads=2, seed=4)
    )
    ids = torch.tensor([tok("hello world").input_ids])
    with torch.no_grad():
        assert torch.equal(model(ids).logits, same(ids).logits)
        assert not torch.allclose(model(ids).logits, other(ids).logits)


def test_nano_is_small_and_bad_arguments_are_named(tmp_path: Path, nano_dir: Path):
    model = AutoModelForCausalLM.from_pretrained(nano_dir)
    assert sum(p.numel() for p in model.parameters()) < 1_000_000
    with pytest.raises(ValueError, match="vocab_size"):
        train_tokenizer(["abc"], vocab_size=10)
    with pytest.raises(ValueError, match="arch"):
        build_tiny_causal_lm(train_tokenizer(DEFAULT_TEXTS, 400), tmp_path, arch="gpt9")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="size"):
        make_tiny_model_dir(tmp_path, size="huge")  # type: ignore[arg-type]
