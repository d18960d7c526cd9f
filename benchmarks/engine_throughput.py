"""Generated tokens per second of the HF and vLLM engines at a few batch sizes.

    python -m benchmarks.engine_throughput                       # tiny model, both engines
    python -m benchmarks.engine_throughput --model MODEL_DIR     # a converted real model
    python -m benchmarks.engine_throughput --engines hf --batch-sizes 8,64

Each engine gets one warm-up batch, then ``--repeats`` timed ``generate_batch`` calls
of chat-formatted questions (sampling at T=1, seeded, so both engines decode
comparable lengths). Throughput counts sampled tokens only (not prompt tokens).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

QUESTIONS = [
    "What is the capital of France?",
    "Who wrote Pride and Prejudice?",
    "How many legs does a spider have?",
    "What is the largest planet in the solar system?",
    "When did the first humans land on the Moon?",
    "Which river flows through Cairo?",
    "What is the boiling point of water at sea level?",
    "Who painted the Mona Lisa?",
]


def build_prompts(tokenizer, n: int) -> list[list[int]]:
    prompts = []
    for i in range(n):
        msgs = [{"role": "user", "content": f"{QUESTIONS[i % len(QUESTIONS)]} (question {i})"}]
        text = tokenizer.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False)
        prompts.append(tokenizer(text, add_special_tokens=False).input_ids)
    return prompts


def measure(engine, prompts: list[list[int]], max_new_tokens: int, repeats: int) -> float:
    from agentrl.engines.base import SamplingParams

    params = SamplingParams(max_new_tokens=max_new_tokens, temperature=1.0, seed=0)
    engine.generate_batch_sync(prompts[: min(4, len(prompts))], params)  # warm-up
    tokens, seconds = 0, 0.0
    for _ in range(repeats):
        t0 = time.perf_counter()
        results = engine.generate_batch_sync(prompts, params)
        seconds += time.perf_counter() - t0
        tokens += sum(len(r.token_ids) for r in results)
    return tokens / seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", help="HF model directory (default: a fresh tiny 'small' model)")
    parser.add_argument("--engines", default="hf,vllm")
    parser.add_argument("--batch-sizes", default="8,64")
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from agentrl.engines.hf import HFEngine
    from agentrl.models.loading import load_tokenizer
    from agentrl.models.tiny import make_tiny_model_dir

    model_dir = (
        Path(args.model)
        if args.model
        else make_tiny_model_dir(Path(tempfile.mkdtemp()) / "tiny", size="small")
    )
    batch_sizes = [int(b) for b in args.batch_sizes.split(",")]
    engines = args.engines.split(",")
    prompts_all = build_prompts(load_tokenizer(model_dir), max(batch_sizes))
    results: dict[tuple[str, int], float] = {}
    for kind in engines:
        if kind == "hf":
            engine = HFEngine.from_pretrained(model_dir, dtype="float32", max_batch_size=max(batch_sizes))
        elif kind == "vllm":
            from agentrl.engines.vllm_engine import VLLMEngine

            engine = VLLMEngine(
                model_dir, dtype="float32", max_batch_size=max(batch_sizes), max_model_len=1024
            )
        else:
            raise SystemExit(f"--engines: unknown engine {kind!r} (expected hf or vllm)")
        for b in batch_sizes:
            results[(kind, b)] = measure(engine, prompts_all[:b], args.max_new_tokens, args.repeats)
            print(f"{kind:5s} batch {b:3d}: {results[(kind, b)]:8.1f} tok/s", flush=True)
        engine.shutdown()
        del engine

    print(f"\nmodel: {model_dir}  max_new_tokens={args.max_new_tokens}")
    if "hf" in engines and "vllm" in engines:
        for b in batch_sizes:
            print(f"batch {b:3d}: vllm/hf = {results[('vllm', b)] / results[('hf', b)]:.2f}x")


if __name__ == "__main__":  # vLLM may spawn its engine core: keep this guard
    main()
