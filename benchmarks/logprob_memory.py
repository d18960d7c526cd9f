"""Peak memory of the log-prob pass, chunked projection vs the plain full logits, at a 151,936 vocabulary.

    python -m benchmarks.logprob_memory                          # 8 x 512 response tokens
    python -m benchmarks.logprob_memory --rows 4 --response 256 --entropy

One pass is what the actor's update does per micro-batch: the forward (``policy_forward``
with ``chunk_tokens``, or the plain computation it replaced: full ``(B, T, V)`` logits, the
response columns, fp32, T-scaled) and the backward of a token-mean loss on the log-probs
(``--entropy`` adds an entropy term with gradient). The model is a random-init Qwen2 built
from a config with Qwen2.5's vocabulary (151,936) over a small backbone (hidden 128, 2 layers)
so it runs on a CPU: the vocabulary is what the logits' size depends on.

Each variant runs in a fresh subprocess, which reads ``ru_maxrss`` (the process's peak
resident memory) after building the model and the batch, runs one pass, and reads it again:
the difference is the pass's peak above the baseline (parameter gradients included, the
same in both variants). ``tracemalloc`` would not see torch's allocations.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time

VOCAB = 151_936


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux reports KiB


def measure(variant: str, rows: int, prompt: int, response: int, chunk: int, entropy: bool) -> dict:
    """One pass of ``variant`` in this process: peak RSS above the post-build baseline, and seconds."""
    import torch
    from transformers import AutoModelForCausalLM, Qwen2Config

    from agentrl.core.batch import Batch
    from agentrl.core.losses import entropy_from_logits, log_probs_from_logits
    from agentrl.models.forward import policy_forward

    config = Qwen2Config(
        vocab_size=VOCAB,
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        tie_word_embeddings=False,
    )
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config).train()
    generator = torch.Generator().manual_seed(1)
    input_ids = torch.randint(0, VOCAB, (rows, prompt + response), generator=generator)
    attention = torch.ones_like(input_ids)
    batch = Batch.from_dict(
        {
            "input_ids": input_ids,
            "attention_mask": attention,
            "position_ids": attention.cumsum(-1) - 1,
            "responses": input_ids[:, prompt:],
        }
    )
    baseline = peak_rss_mib()
    start = time.perf_counter()
    if variant == "chunked":
        log_probs, ent = policy_forward(model, batch, 1.0, with_entropy=entropy, chunk_tokens=chunk)
    else:  # the computation policy_forward did before chunking
        logits = model(
            input_ids=input_ids, attention_mask=attention, position_ids=batch["position_ids"]
        ).logits
        response_logits = logits[:, prompt - 1 : prompt - 1 + response].float() / 1.0
        log_probs = log_probs_from_logits(response_logits, batch["responses"])
        ent = entropy_from_logits(response_logits) if entropy else None
        del logits, response_logits
    loss = -log_probs.mean() - (ent.mean() if ent is not None else 0.0)
    loss.backward()
    seconds = time.perf_counter() - start
    return {"variant": variant, "peak_mib": peak_rss_mib() - baseline, "baseline_mib": baseline, "s": seconds}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=8)
    parser.add_argument("--prompt", type=int, default=64, help="prompt tokens per row")
    parser.add_argument("--response", type=int, default=512, help="response tokens per row")
    parser.add_argument("--chunk-tokens", type=int, default=1024)
    parser.add_argument("--entropy", action="store_true", help="add an entropy term with gradient")
    parser.add_argument("--variant", choices=("plain", "chunked"), help="internal: run one variant here")
    args = parser.parse_args()
    shape = (args.rows, args.prompt, args.response, args.chunk_tokens, args.entropy)
    if args.variant:
        print(json.dumps(measure(args.variant, *shape)))
        return
    results = {}
    for variant in ("plain", "chunked"):
        command = [sys.executable, "-m", __spec__.name, "--variant", variant, "--rows", str(args.rows)]
        command += ["--prompt", str(args.prompt), "--response", str(args.response)]
        command += ["--chunk-tokens", str(args.chunk_tokens)] + (["--entropy"] if args.entropy else [])
        out = subprocess.run(command, check=True, capture_output=True, text=True).stdout
        results[variant] = json.loads(out.strip().splitlines()[-1])
    tokens = args.rows * args.response
    print(
        f"vocab {VOCAB}, {args.rows} x {args.response} response tokens (+{args.prompt} prompt each), "
        f"chunk {args.chunk_tokens}, entropy term: {args.entropy}"
    )
    print(f"one fp32 logits tensor of the response tokens: {tokens * VOCAB * 4 / 2**20:.0f} MiB")
    for variant, r in results.items():
        print(
            f"{variant:8s} peak above baseline {r['peak_mib']:8.0f} MiB   "
            f"(baseline {r['baseline_mib']:.0f} MiB, pass {r['s']:.1f} s)"
        )
    ratio = results["plain"]["peak_mib"] / max(results["chunked"]["peak_mib"], 1.0)
    print(f"plain / chunked peak: {ratio:.1f}x")


if __name__ == "__main__":
    main()
