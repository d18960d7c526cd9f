"""Real tokens per second of the log-prob pass, packed micro-batches vs the padded layout.

    python -m benchmarks.packing_throughput          # the quickstart's dump, else the built-in mix
    python -m benchmarks.packing_throughput --dump runs/quickstart/sft_data.jsonl --repeats 5

Lengths: (prompt, response) token counts, and the response's segments, of trajectories read
from a dump with ``prompt_ids`` / ``response_ids`` (/ ``segments``) per JSON line: the
quickstart's ``sft_data.jsonl`` or a rollout dump. Without the file the built-in
``BUILTIN_LENGTHS`` is used: 32 pairs drawn (``random.seed(0)``) from the quickstart's
``sft_data.jsonl`` of a quickstart run (tiny-model Search-R1 trajectories: prompts of ~122 tokens,
one or two searches, responses of 20 to 210 tokens), every response token a model token.

Each micro-batch is 16 trajectories drawn at random (as a shuffled update would cut them),
laid out as ``collate`` does. One pass over all micro-batches is forward + backward of the
token-mean NLL of the model tokens through ``policy_forward`` (chunked projection, default
``chunk_tokens``), with ``packed`` False or True. The model is a random-init Qwen2 built from a
config, fp32 on the CPU: hidden 512, 8 layers and a 5,000-token vocabulary, so that the LM
head's share of the flops is Qwen2.5-3B's (~10%). The head projects the response tokens only,
the same work in both layouts; a toy model with a big vocabulary over a thin backbone would be
mostly head and hide what packing saves (``--vocab 32000 --layers 4`` shows it). After a warm-up pass of
each variant, ``--repeats`` passes alternate between the two; the median is reported.
Throughput counts real (attended) tokens only, the same for both variants.
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import statistics
import time
from pathlib import Path

DEFAULT_DUMP = "runs/quickstart/sft_data.jsonl"  # what `make quickstart` writes
# prompt:response token counts
BUILTIN_LENGTHS = (
    "121:20 126:20 120:94 125:201 125:22 122:22 120:22 121:20 122:22 121:20 122:22 126:207 122:22 "
    "122:93 121:20 122:94 121:90 122:22 122:196 125:22 122:22 122:195 122:22 122:94 121:99 121:20 "
    "122:22 120:22 121:91 122:22 122:22 120:22"
)
MODEL, OBSERVATION = 1, 2


def read_lengths(path: str | None) -> tuple[list[tuple[int, list[int]]], str]:
    """(prompt length, response segments) per trajectory, and where they came from."""
    if path and Path(path).is_file():
        shapes = []
        for line in Path(path).read_text().splitlines():
            row = json.loads(line)
            segments = row.get("segments") or [MODEL] * len(row["response_ids"])
            shapes.append((len(row["prompt_ids"]), list(segments)))
        return shapes, path
    pairs = [tuple(int(n) for n in pair.split(":")) for pair in BUILTIN_LENGTHS.split()]
    return [(p, [MODEL] * r) for p, r in pairs], f"built-in mix ({path} not found)"


def build_micro_batches(shapes, count: int, size: int, vocab: int, seed: int) -> list:
    """``count`` micro-batches of ``size`` random trajectories, collated with random token ids."""
    from agentrl.agent.collate import collate
    from agentrl.agent.trajectory import PromptSpec, Segment, Trajectory

    rng = random.Random(seed)
    batches = []
    for b in range(count):
        trajectories = []
        for i, (prompt, segments) in enumerate(rng.sample(shapes, size)):
            prompt_ids = [rng.randrange(3, vocab) for _ in range(prompt)]
            traj = Trajectory(prompt=PromptSpec(prompt_ids), group_id=f"{b}-{i}", uid=f"{b}-{i}")
            for segment, run in itertools.groupby(segments):  # the dump's model/observation runs
                kind = Segment.MODEL if segment == MODEL else Segment.OBSERVATION
                traj.append([rng.randrange(3, vocab) for _ in run], kind)
            trajectories.append(traj)
        batches.append(collate(trajectories, pad_token_id=0))
    return batches


def one_pass(model, batches, packed: bool) -> float:
    """Seconds for forward + backward of the log-prob loss over every micro-batch."""
    from agentrl.models.forward import policy_forward

    start = time.perf_counter()
    for batch in batches:
        log_probs, _ = policy_forward(model, batch, packed=packed)
        mask = batch["response_mask"]
        (-(log_probs * mask).sum() / mask.sum().clamp(min=1)).backward()
    model.zero_grad(set_to_none=True)
    return time.perf_counter() - start


def computed_tokens(batches) -> int:
    """Tokens the padded layout computes: rows × trimmed width per micro-batch."""
    from agentrl.models.layout import trim_padding

    return sum(trim_padding(b).input_ids.numel() for b in batches)


def build_model(layers: int, attn: str, vocab: int):
    """Random-init Qwen2, hidden 512, ``vocab`` tokens, ``layers`` decoder layers."""
    import torch
    from transformers import AutoModelForCausalLM, Qwen2Config

    config = Qwen2Config(
        vocab_size=vocab,
        hidden_size=512,
        intermediate_size=1408,
        num_hidden_layers=layers,
        num_attention_heads=8,
        num_key_value_heads=4,
        tie_word_embeddings=False,
    )
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(config, attn_implementation=attn).train()


def head_share(model) -> float:
    """The LM head's share of the weights a response token goes through (its share of the flops)."""
    head = model.get_output_embeddings().weight.numel()
    layers = sum(p.numel() for p in model.get_decoder().layers.parameters())
    return head / (head + layers)


def qwen25_3b_head_share() -> float:
    """``head_share`` of Qwen2.5-3B, built on the meta device from its published config."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from benchmarks.common.models import QWEN25

    with torch.device("meta"):
        return head_share(Qwen2ForCausalLM(Qwen2Config(**QWEN25["Qwen2.5-3B"])))


def timed_passes(model, batches, repeats: int) -> dict[bool, list[float]]:
    """Seconds per pass, padded (False) and packed (True): a warm-up each, then alternating repeats."""
    for packed in (False, True):
        one_pass(model, batches, packed)
    times: dict[bool, list[float]] = {False: [], True: []}
    for _ in range(repeats):
        for packed in (False, True):
            times[packed].append(one_pass(model, batches, packed))
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dump", default=DEFAULT_DUMP, help="trajectory dump (JSON lines)")
    parser.add_argument("--micro-batches", type=int, default=4)
    parser.add_argument("--micro-batch-size", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--attn", default="sdpa", help="attention implementation: sdpa | eager")
    parser.add_argument(
        "--dense-mask",
        action="store_true",
        help="packed rows under plain sdpa (a block-diagonal mask) instead of the varlen attention",
    )
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument(
        "--vocab",
        type=int,
        default=5_000,
        help="5,000 with 8 layers: the LM head's share of Qwen2.5-3B's flops",
    )
    args = parser.parse_args()

    import torch

    from agentrl.models.attention import use_varlen_attention

    model = build_model(args.layers, args.attn, args.vocab)
    if args.attn == "sdpa" and not args.dense_mask:
        use_varlen_attention(model)  # what the workers do when pack_sequences is on
    shapes, source = read_lengths(args.dump)
    batches = build_micro_batches(shapes, args.micro_batches, args.micro_batch_size, args.vocab, 0)
    real = sum(int(b["attention_mask"].sum()) for b in batches)
    padded_cost = computed_tokens(batches)
    times = timed_passes(model, batches, args.repeats)
    # The same pass through a model without decoder layers: the vocabulary projection of the
    # response tokens and the loss, which both layouts compute alike.
    head_only = statistics.median(timed_passes(build_model(0, args.attn, args.vocab), batches, 3)[False])
    seconds = {p: statistics.median(times[p]) for p in (False, True)}
    padded, packed = real / seconds[False], real / seconds[True]
    print(f"lengths: {source} ({len(shapes)} trajectories); torch threads {torch.get_num_threads()}")
    print(
        f"{args.micro_batches} micro-batches x {args.micro_batch_size} sequences: {real} real tokens, "
        f"{padded_cost} computed by the padded layout ({padded_cost / real:.2f}x), "
        f"attention {model.config._attn_implementation}"
    )
    print(
        f"model: hidden 512, {args.layers} layers, vocabulary {args.vocab}; {head_share(model):.0%} of its "
        f"per-token flops in the LM head (Qwen2.5-3B: {qwen25_3b_head_share():.0%})"
    )
    for name, key, rate in (("padded", False, padded), ("packed", True, packed)):
        runs = " ".join(f"{t:.1f}" for t in times[key])
        print(f"{name}: {rate:8.0f} real tokens/s   (median {seconds[key]:.2f} s of: {runs})")
    print(f"packed / padded: {packed / padded:.2f}x")
    print(
        f"of which the same in both (vocabulary projection + loss, 0-layer model): {head_only:.2f} s per pass"
    )


if __name__ == "__main__":
    main()
