"""Training memory per data-parallel rank for Qwen2.5-class models, from the config alone (no weights).

    python -m benchmarks.memory_table [--out docs/memory_table.md] [--ranks 1 2 4 8]

Each model is built on the ``meta`` device from a ``transformers.Qwen2Config`` holding the
architecture's published values (``QWEN25`` in ``benchmarks/common/models.py``), so its
parameter count is exact and no memory is allocated. From it, per rank, for a trainable role
(actor or critic) with AdamW and fp32 master weights:

    P  = parameters of the causal LM, tied embeddings counted once (``model.parameters()``
         yields a shared tensor once)
    L  = parameters of the largest decoder layer (one FSDP unit per decoder layer)
    R  = P − (parameters of all decoder layers): what FSDP's root unit holds
         (embed_tokens, the final norm, and lm_head when it is not tied)
    S  = 16 B · P   fp32 parameters 4 B + fp32 gradients 4 B + Adam exp_avg 4 B + exp_avg_sq 4 B
    T  = 2 B · (R + L)   bf16 compute copy under FSDP mixed precision: the unsharded root unit,
         which FSDP2 keeps gathered from forward to backward (``reshard_after_forward`` is False
         for the root), plus the one decoder layer being computed

    dp                       GPU = S             (a full replica on every rank; N does not matter)
    fsdp, N ranks            GPU = S / N + T     (parameters, gradients, optimiser state sharded 1/N)
    fsdp + cpu offload       GPU = T             CPU = S / N  (the shards live, and step, in host memory)

    logits of one micro-batch = rows × response tokens × vocab × 4 B (fp32)
    logits of one chunk       = chunk tokens × vocab × 4 B (fp32)

Not counted: activations (what gradient checkpointing trades for recomputation), the logits
themselves (printed separately), the reference model (bf16 parameters only, 2 B · P, no
gradients or optimiser state), the vLLM engine's weights and KV cache, FSDP's prefetch of the
next layer (+2 B · L) and the unsharded gradient of a unit before its reduce-scatter, FSDP's
padding of shards to a multiple of N, the CUDA context and allocator fragmentation. dp counts
no bf16 copy. So the GPU column is a floor, not a budget. The critic is the backbone without
lm_head plus a value head (hidden_size + 1 parameters): its count is in the second table, and
its S and T follow from the same formulas.

GiB = 2**30 bytes. Runs in a few seconds on CPU (most of it importing transformers).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers.models.qwen2 import Qwen2Config, Qwen2ForCausalLM, Qwen2Model

from benchmarks.common.models import QWEN25

GIB = 2**30
STATE_BYTES_PER_PARAM = 4 + 4 + 8  # fp32 params, fp32 grads, Adam exp_avg + exp_avg_sq (fp32)
COMPUTE_BYTES_PER_PARAM = 2  # bf16 unsharded copy under FSDP mixed precision
LOGIT_BYTES = 4  # fp32 logits
STRATEGIES = ("dp", "fsdp", "fsdp + cpu offload")


@dataclass(frozen=True)
class ModelCounts:
    name: str
    parameters: int  # P: the causal LM, tied embeddings once
    largest_layer: int  # L
    root: int  # R: parameters outside the decoder layers
    embedding: int  # vocab_size × hidden_size (one matrix)
    critic_parameters: int  # backbone (no lm_head) + value head
    vocab_size: int


def count_parameters(model: torch.nn.Module) -> int:
    """Distinct parameters: a tensor shared by two modules (tied embeddings) counts once."""
    return sum(p.numel() for p in model.parameters())


def model_counts(name: str, config: Qwen2Config) -> ModelCounts:
    """Counts from a model built on the meta device (shapes only, no memory, no weights)."""
    with torch.device("meta"):
        model = Qwen2ForCausalLM(config)
        backbone = Qwen2Model(config)
    parameters = count_parameters(model)
    layers = [count_parameters(layer) for layer in model.model.layers]
    return ModelCounts(
        name=name,
        parameters=parameters,
        largest_layer=max(layers),
        root=parameters - sum(layers),
        embedding=config.vocab_size * config.hidden_size,
        critic_parameters=count_parameters(backbone) + config.hidden_size + 1,
        vocab_size=config.vocab_size,
    )


def state_bytes(parameters: int) -> int:
    """S: fp32 parameters, gradients and the two AdamW moments."""
    return STATE_BYTES_PER_PARAM * parameters


def transient_bytes(counts: ModelCounts) -> int:
    """T: the bf16 unsharded root unit plus one decoder layer."""
    return COMPUTE_BYTES_PER_PARAM * (counts.root + counts.largest_layer)


def per_rank_bytes(counts: ModelCounts, strategy: str, ranks: int) -> tuple[float, float | None]:
    """(GPU bytes, CPU bytes or None) per rank for ``strategy`` over ``ranks`` data-parallel ranks."""
    state = state_bytes(counts.parameters)
    if strategy == "dp":
        return float(state), None
    if strategy == "fsdp":
        return state / ranks + transient_bytes(counts), None
    if strategy == "fsdp + cpu offload":
        return float(transient_bytes(counts)), state / ranks
    raise ValueError(f"unknown strategy {strategy!r}; expected one of {STRATEGIES}")


def logits_bytes(tokens: int, vocab_size: int) -> int:
    """fp32 logits over ``tokens`` positions."""
    return tokens * vocab_size * LOGIT_BYTES


def gib(nbytes: float | None) -> str:
    return "—" if nbytes is None else f"{nbytes / GIB:.2f}"


def billions(n: int) -> str:
    return f"{n:,} ({n / 1e9:.2f} B)"


def memory_table(all_counts: list[ModelCounts], ranks: list[int]) -> str:
    lines = [
        "| model | strategy | ranks | parameters | GiB per rank on GPU | GiB per rank on CPU |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for counts in all_counts:
        for strategy in STRATEGIES:
            for n in ranks:
                gpu, cpu = per_rank_bytes(counts, strategy, n)
                lines.append(
                    f"| {counts.name} | {strategy} | {n} | {counts.parameters:,} | {gib(gpu)} | {gib(cpu)} |"
                )
    return "\n".join(lines)


def sizes_table(all_counts: list[ModelCounts], rows: int, response_tokens: int, chunk: int) -> str:
    lines = [
        "| model | parameters | critic parameters | embedding matrix | largest decoder layer (L) "
        f"| root unit (R) | bf16 R + L (GiB) | fp32 logits, {rows} × {response_tokens} tokens (GiB) "
        f"| fp32 logits, {chunk}-token chunk (GiB) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for c in all_counts:
        lines.append(
            f"| {c.name} | {billions(c.parameters)} | {billions(c.critic_parameters)} | {c.embedding:,} "
            f"| {c.largest_layer:,} | {c.root:,} | {gib(transient_bytes(c))} "
            f"| {gib(logits_bytes(rows * response_tokens, c.vocab_size))} "
            f"| {gib(logits_bytes(chunk, c.vocab_size))} |"
        )
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    p.add_argument("--out", type=Path, default=None, help="also write the tables (markdown) to this file")
    p.add_argument("--ranks", type=int, nargs="+", default=[1, 2, 4, 8], help="data-parallel ranks")
    p.add_argument("--micro-batch", type=int, default=64, help="rows of one micro-batch (Search-R1: 64)")
    p.add_argument(
        "--response-tokens", type=int, default=500, help="response tokens per row (Search-R1: 500)"
    )
    p.add_argument("--chunk", type=int, default=512, help="tokens per chunk of a chunked log-prob pass")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    all_counts = [model_counts(name, Qwen2Config(**values)) for name, values in QWEN25.items()]
    text = (
        "Parameters, gradients and AdamW state per data-parallel rank (fp32 master weights, "
        "bf16 compute under FSDP; formulas in benchmarks/memory_table.py):\n\n"
        + memory_table(all_counts, args.ranks)
        + "\n\nSizes per model (logits: what one full-vocabulary fp32 pass over the micro-batch "
        "materialises, against one chunk):\n\n"
        + sizes_table(all_counts, args.micro_batch, args.response_tokens, args.chunk)
        + "\n"
    )
    sys.stdout.write(text)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
