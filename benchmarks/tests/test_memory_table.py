"""benchmarks/memory_table.py: exact parameter counts from a config, and the per-rank memory formulas."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from transformers.models.qwen2 import Qwen2Config, Qwen2ForCausalLM

from benchmarks import memory_table as mt
from benchmarks.common.models import QWEN25


def tiny_config(tied: bool) -> Qwen2Config:
    return Qwen2Config(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=3,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=503,
        tie_word_embeddings=tied,
        max_position_embeddings=128,
    )


@pytest.mark.parametrize("tied", [True, False])
def test_meta_count_equals_a_real_model(tied: bool) -> None:
    config = tiny_config(tied)
    counts = mt.model_counts("tiny", config)
    torch.manual_seed(0)
    real = Qwen2ForCausalLM(config)  # real CPU tensors
    assert counts.parameters == sum(p.numel() for p in real.parameters())
    assert counts.root + config.num_hidden_layers * counts.largest_layer == counts.parameters
    layer = sum(p.numel() for p in real.model.layers[0].parameters())
    assert counts.largest_layer == layer


def test_tied_embeddings_counted_once() -> None:
    tied = mt.model_counts("tied", tiny_config(True))
    untied = mt.model_counts("untied", tiny_config(False))
    embedding = 503 * 32
    assert tied.embedding == untied.embedding == embedding
    assert untied.parameters - tied.parameters == embedding
    assert untied.root - tied.root == embedding  # lm_head lives in the root unit only when untied
    real = Qwen2ForCausalLM(tiny_config(True))
    assert real.lm_head.weight is real.model.embed_tokens.weight
    with_duplicates = sum(p.numel() for _, p in real.named_parameters(remove_duplicate=False))
    assert with_duplicates - tied.parameters == embedding  # the shared matrix is not counted twice
    # The critic drops lm_head: same count as the tied LM plus the value head (hidden + 1).
    assert tied.critic_parameters == tied.parameters + 32 + 1
    assert untied.critic_parameters == untied.parameters - embedding + 32 + 1


@pytest.mark.parametrize("ranks", [1, 2, 4, 8])
def test_fsdp_shards_the_dp_state(ranks: int) -> None:
    counts = mt.model_counts("tiny", tiny_config(False))
    dp_gpu, dp_cpu = mt.per_rank_bytes(counts, "dp", ranks)
    assert dp_gpu == 16 * counts.parameters and dp_cpu is None
    assert mt.per_rank_bytes(counts, "dp", 1) == (dp_gpu, None)  # a replica whatever N is
    transient = mt.transient_bytes(counts)
    assert transient == 2 * (counts.root + counts.largest_layer)
    fsdp_gpu, fsdp_cpu = mt.per_rank_bytes(counts, "fsdp", ranks)
    assert fsdp_cpu is None
    assert fsdp_gpu - transient == pytest.approx(dp_gpu / ranks)
    offload_gpu, offload_cpu = mt.per_rank_bytes(counts, "fsdp + cpu offload", ranks)
    assert offload_gpu == transient
    assert offload_cpu == pytest.approx(dp_gpu / ranks)
    with pytest.raises(ValueError, match="unknown strategy"):
        mt.per_rank_bytes(counts, "zero3", ranks)


def test_published_qwen25_counts_and_logits() -> None:
    expected = {
        "Qwen2.5-0.5B": 494_032_768,
        "Qwen2.5-1.5B": 1_543_714_304,
        "Qwen2.5-3B": 3_085_938_688,
        "Qwen2.5-7B": 7_615_616_512,
    }
    for name, values in QWEN25.items():
        assert mt.model_counts(name, Qwen2Config(**values)).parameters == expected[name]
    assert mt.logits_bytes(64 * 500, 151936) == 64 * 500 * 151936 * 4


def test_main_writes_the_tables(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "table.md"
    assert mt.main(["--out", str(out), "--ranks", "1", "2"]) == 0
    printed = capsys.readouterr().out
    assert out.read_text() == printed
    rows = [line for line in printed.splitlines() if line.startswith("| Qwen2.5-")]
    assert len(rows) == 4 * 3 * 2 + 4  # model × strategy × ranks, then one sizes row per model
    assert "| Qwen2.5-7B | fsdp + cpu offload | 2 | 7,615,616,512 |" in printed
