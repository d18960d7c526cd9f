"""The GPU check: the trainer's GPU paths run in-process, each check PASS or FAIL with its figures.

    python -m benchmarks.gpu_check                     # CUDA, a Qwen2.5-0.5B-shaped random model
    python -m benchmarks.gpu_check --device cpu        # tiny shapes over gloo (what `make test` runs)

No Ray, no vLLM, no network: the roles are driven directly, as a Ray actor would drive them. The
model is random-init from Qwen2.5-0.5B's shape (vocabulary 151,936, hidden 896, 24 layers, 14
heads, 2 KV heads), fp32 master weights, bf16 compute. Two phases, each with its own worker:

* **dp**: an ``ActorWorker`` holding a full replica under bf16 autocast; its engine shares the
  training module (the colocated default).
  1. ``update/dp-bf16``: 20 PPO updates of one fixed batch (π_old its own log-probs, random
     advantages): the loss falls, every gradient norm is finite, no weight is in bf16.
  2. ``engine-vs-trainer/dp``: the transformers engine's continuous batching samples staggered
     requests; the trainer rescores the sampled tokens: mean and max |Δ log-prob|.
  5. ``logprob-memory``: one forward and backward at ``--logprob-tokens`` tokens, the chunked
     projection against the full vocabulary at once: peak memory of each.
     ``packing``: the same micro-batches packed against padded: real tokens/s, results equal.
* **fsdp**: an ``ActorWorker`` under FSDP2 on one rank over NCCL (gloo on the CPU), bf16 mixed
  precision; its engine holds its own bf16 copy.
  1. ``update/fsdp-nccl``: as for dp.
  3. ``weight-stream``: the sync into the engine's copy: seconds, and the allocator's peak above
     the memory held before it, against one bucket (or the largest tensor when larger); the
     baseline is the whole state dict gathered and sent in one call.
  4. ``sleep-wake``: the engine releases its copy and gets it back (allocated memory measured).
  2. ``engine-vs-trainer/fsdp``: after the wake, the engine's bf16 copy against the trainer.

Memory figures come from the CUDA allocator's statistics; on the CPU they are not measured
(``n/a``) and the memory checks pass on what can be checked there (bytes released, weights
restored, results equal). Writes ``gpu_check_<device>.json`` and ``.md`` to ``--out``.
"""
# long: one command for a GPU lent for minutes: the checks, the workers they drive and the report
# they write are read and run together, and each check is a few dozen lines of its own

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import math
import os
import platform
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402

MIB = 2**20


@dataclass(frozen=True)
class Shape:
    """The model's shape and the workload's sizes for one device."""

    vocab: int
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    intermediate: int
    rows: int  # trajectories in the update's fixed batch
    scale: int  # segment-length multiplier of the synthetic batch (workers.synthetic.ppo_batch)
    micro: int  # rows per micro-batch
    lr: float
    requests: int  # generation requests
    new_tokens: int  # most tokens a request samples
    logprob_tokens: int  # tokens of the chunked-vs-full pass
    steps: int = 20


SHAPES = {
    "cuda": Shape(151_936, 896, 24, 14, 2, 4864, 16, 8, 4, 1e-5, 32, 128, 8192),
    "cpu": Shape(2048, 64, 2, 4, 2, 128, 4, 1, 2, 1e-3, 6, 12, 512),
}
# |engine - trainer| log-prob over the sampled tokens when both compute in bf16
LOGPROB_TOLERANCE = {"mean": 0.02, "max": 0.5}
# max |packed - padded| log-prob in fp32; in bf16 the two layouts' kernels round differently (the
# first H200 run: max 0.024), so the layouts' equality is checked in fp32 and bf16 only reported
PACKING_TOLERANCE = 1e-3


@dataclass
class Check:
    """One check's outcome: PASS / FAIL (a criterion not met) / ERROR (it raised)."""

    name: str
    status: str = "ERROR"
    figures: dict[str, Any] = field(default_factory=dict)
    criterion: str = ""
    detail: str = ""


class Memory:
    """The CUDA allocator's figures; None everywhere on the CPU (not measured there)."""

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"

    def allocated(self) -> int | None:
        if not self.cuda:
            return None
        torch.cuda.synchronize()
        return torch.cuda.memory_allocated()

    @contextlib.contextmanager
    def peak_above(self) -> Iterator[dict[str, int | None]]:
        """Yields a dict that holds, on exit, the peak allocated above the level at entry."""
        out: dict[str, int | None] = {"peak": None}
        if not self.cuda:
            yield out
            return
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        yield out
        torch.cuda.synchronize()
        out["peak"] = torch.cuda.max_memory_allocated() - base


def mib(value: int | None) -> float | str:
    return "n/a" if value is None else round(value / MIB, 1)


def run_check(checks: list[Check], name: str, body: Callable[[Check], None]) -> Check:
    """Run ``body`` on a new check; an exception makes it an ERROR with the traceback's tail."""
    check = Check(name)
    checks.append(check)
    start = time.perf_counter()
    try:
        body(check)
    except Exception as exc:  # a failing check must not stop the others
        check.status = "ERROR"
        check.detail = f"{type(exc).__name__}: {exc}\n" + "".join(traceback.format_exc(limit=-6))[-1500:]
    check.figures["check_s"] = round(time.perf_counter() - start, 2)
    print(f"[{check.status}] {name} {json.dumps(check.figures)}", flush=True)
    if check.status == "ERROR":
        print(check.detail, flush=True)
    return check


def verdict(check: Check, ok: bool, criterion: str) -> None:
    check.status = "PASS" if ok else "FAIL"
    check.criterion = criterion


# --- the model and the workers ------------------------------------------------------


def build_model_dir(shape: Shape, out: Path) -> Path:
    """A random-init Qwen2 of ``shape`` (fp32) and the tiny tokenizer, as an HF directory. Its head
    is untied (Qwen2.5-0.5B ties it): the stream's largest tensor is then an honest 519 MiB."""
    from agentrl.models.tiny import DEFAULT_TEXTS, build_tiny_causal_lm, train_tokenizer

    return build_tiny_causal_lm(
        train_tokenizer(DEFAULT_TEXTS, 512),
        out,
        hidden_size=shape.hidden,
        layers=shape.layers,
        heads=shape.heads,
        kv_heads=shape.kv_heads,
        intermediate_size=shape.intermediate,
        max_position_embeddings=max(4096, 2 * shape.logprob_tokens),
        vocab_size=shape.vocab,
    )


def make_worker(model_dir: Path, shape: Shape, device: str, strategy: str) -> Any:
    from agentrl.config.schema import ActorConfig, OptimConfig, RolloutConfig, UpdateConfig
    from agentrl.workers.actor import ActorWorker
    from agentrl.workers.base import RunContext

    actor = ActorConfig(
        model_path=str(model_dir),
        compute_dtype="bfloat16",
        optim=OptimConfig(lr=shape.lr, weight_decay=0.0),
        update=UpdateConfig(mini_batch_size=shape.rows, micro_batch_size=shape.micro, shuffle=False),
        rollout=RolloutConfig(max_batch_size=shape.requests, free_engine_memory=False),
    )
    context = RunContext(
        seed=0,
        device=device,
        total_steps=shape.steps,
        max_prompt_length=4096,
        max_response_length=4096,
        strategy=strategy,
    )
    return ActorWorker(actor, context)


def fixed_batch(worker: Any, shape: Shape) -> Any:
    """The synthetic agent batch with π_old = the worker's own log-probs (ratio 1 at step 0)."""
    from agentrl.workers.synthetic import ppo_batch

    batch = ppo_batch(shape.vocab, rows=shape.rows, scale=shape.scale)
    batch["old_log_probs"] = worker.compute_log_prob(batch)
    return batch


# --- the checks ---------------------------------------------------------------------


def check_update(check: Check, worker: Any, shape: Shape) -> None:
    batch = fixed_batch(worker, shape)
    tokens = int(batch["attention_mask"].sum())
    losses, norms = [], []
    start = time.perf_counter()
    for _ in range(shape.steps):
        metrics = worker.update_actor(batch)
        losses.append(metrics["actor/pg_loss"])
        norms.append(metrics["actor/grad_norm"])
    seconds = time.perf_counter() - start
    dtypes = sorted({str(p.dtype) for p in worker.model.parameters()})
    check.figures |= {
        "loss_first": round(losses[0], 5),
        "loss_last": round(losses[-1], 5),
        "grad_norm_max": round(max(norms), 4),
        "weight_dtypes": dtypes,
        "update_tokens_per_s": round(tokens * shape.steps / seconds),
        "steps": shape.steps,
        "tokens_per_step": tokens,
    }
    ok = losses[-1] < losses[0] and all(math.isfinite(n) for n in norms) and dtypes == ["torch.float32"]
    verdict(check, ok, f"loss falls over {shape.steps} steps; every grad norm finite; weights fp32")


def sample(engine: Any, shape: Shape, temperature: float) -> tuple[list[list[int]], list[Any], float]:
    """Staggered requests of ragged prompt and answer lengths into the engine's running batch."""
    from agentrl.engines.base import SamplingParams

    generator = torch.Generator().manual_seed(7)
    prompts = [
        torch.randint(3, shape.vocab, (8 + 5 * i,), generator=generator).tolist()
        for i in range(shape.requests)
    ]

    async def one(i: int, prompt: list[int]) -> Any:
        await asyncio.sleep(0.002 * i)  # later requests join a batch already decoding
        new = max(2, shape.new_tokens - (i % 4) * shape.new_tokens // 4)
        return await engine.generate(
            prompt, SamplingParams(max_new_tokens=new, temperature=temperature, seed=i)
        )

    async def all_of() -> list[Any]:
        return await asyncio.gather(*(one(i, p) for i, p in enumerate(prompts)))

    start = time.perf_counter()
    results = asyncio.run(all_of())
    return prompts, results, time.perf_counter() - start


def forward_seconds(engine: Any) -> dict[str, float]:
    """Seconds the engine's forwards (and their sampling) took so far, by kind (prefill, decode)."""
    totals: dict[str, float] = {}
    for (kind, _rows), tally in engine.stats.forwards.items():
        totals[kind] = totals.get(kind, 0.0) + tally.seconds
    return totals


def check_engine(check: Check, worker: Any, shape: Shape) -> None:
    from agentrl.agent.collate import collate
    from agentrl.agent.trajectory import PromptSpec, Segment, Trajectory

    engine = worker.engine_link.engine
    _, _, first_seconds = sample(engine, shape, worker.temperature)  # the first pays for warm-up
    before = forward_seconds(engine)
    prompts, results, seconds = sample(engine, shape, worker.temperature)
    spent = {kind: round(s - before.get(kind, 0.0), 3) for kind, s in forward_seconds(engine).items()}
    trajectories = []
    for i, (prompt, result) in enumerate(zip(prompts, results, strict=True)):
        trajectory = Trajectory(prompt=PromptSpec(prompt), group_id=f"g{i}", uid=str(i))
        trajectory.append(result.token_ids, Segment.MODEL, result.log_probs)
        trajectories.append(trajectory)
    batch = collate(trajectories, pad_token_id=0)
    trainer = worker.compute_log_prob(batch)
    mask = batch["response_mask"].bool()
    gap = (trainer - batch["rollout_log_probs"]).abs()[mask]
    sampled = sum(len(r.token_ids) for r in results)
    check.figures |= {
        "mean_abs_diff": round(float(gap.mean()), 5),
        "max_abs_diff": round(float(gap.max()), 4),
        "sampled_tokens": sampled,
        "generation_tokens_per_s": round(sampled / seconds),
        "first_run_tokens_per_s": round(sampled / first_seconds),
        "forward_s_by_kind": spent,
        "wall_s": round(seconds, 3),
        "engine_weights": str(next(engine.model.parameters()).dtype),
    }
    ok = float(gap.mean()) <= LOGPROB_TOLERANCE["mean"] and float(gap.max()) <= LOGPROB_TOLERANCE["max"]
    verdict(check, ok, f"mean |Δ| <= {LOGPROB_TOLERANCE['mean']}, max |Δ| <= {LOGPROB_TOLERANCE['max']}")


def long_batch(shape: Shape) -> Any:
    from agentrl.core.batch import Batch

    prompt = 64
    generator = torch.Generator().manual_seed(3)
    input_ids = torch.randint(3, shape.vocab, (1, shape.logprob_tokens), generator=generator)
    attention = torch.ones_like(input_ids)
    return Batch.from_dict(
        {
            "input_ids": input_ids,
            "attention_mask": attention,
            "position_ids": attention.cumsum(-1) - 1,
            "responses": input_ids[:, prompt:],
        }
    )


def check_logprob_memory(check: Check, worker: Any, shape: Shape, memory: Memory) -> None:
    from agentrl.models.forward import policy_forward

    batch = worker.on_device(long_batch(shape))
    peaks: dict[str, int | None] = {}
    seconds: dict[str, float] = {}
    # alternated, the second round reported: the first pass of a shape pays for the kernels' warm-up
    for name, chunk in (("chunked", 1024), ("full", None)) * 2:
        worker.model.zero_grad(set_to_none=True)
        with memory.peak_above() as peak:
            start = time.perf_counter()
            with worker.compute():
                log_probs, _ = policy_forward(worker.model, batch, 1.0, chunk_tokens=chunk)
            (-log_probs.mean()).backward()
            del log_probs
            if memory.cuda:
                torch.cuda.synchronize()
            seconds[name] = round(time.perf_counter() - start, 3)
        worker.model.zero_grad(set_to_none=True)
        peaks[name] = peak["peak"] if peaks.get(name) is None else max(peaks[name], peak["peak"])
    check.figures |= {
        "tokens": shape.logprob_tokens,
        "chunked_peak_mib": mib(peaks["chunked"]),
        "full_peak_mib": mib(peaks["full"]),
        "chunked_s": seconds["chunked"],
        "full_s": seconds["full"],
    }
    if memory.cuda:
        check.figures["full_over_chunked"] = round(peaks["full"] / max(peaks["chunked"], 1), 2)
        verdict(check, peaks["chunked"] < peaks["full"], "chunked peak below the full-vocabulary peak")
    else:
        verdict(check, True, "both passes run (memory measured on CUDA only)")


def check_packing(check: Check, worker: Any, shape: Shape) -> None:
    """Packed against padded micro-batches: equal log-probs in fp32 (the layout computes the same
    thing), real tokens/s of a forward and backward in the run's bf16 (alternated, second round)."""
    from agentrl.models.attention import use_varlen_attention
    from agentrl.models.forward import policy_forward
    from agentrl.workers.synthetic import ppo_batch

    use_varlen_attention(worker.model)
    batch = worker.on_device(ppo_batch(shape.vocab, rows=shape.rows, scale=shape.scale, seed=5))
    tokens = int(batch["attention_mask"].sum())
    mask = batch["response_mask"].bool()
    with torch.no_grad():  # fp32: no autocast, so the two layouts may differ by fp32 rounding only
        exact = {
            packed: policy_forward(worker.model, batch, 1.0, packed=packed)[0] for packed in (False, True)
        }
    gap = float((exact[True] - exact[False]).abs()[mask].max())
    rates, results = {}, {}
    for packed in (False, True, False, True):
        start = time.perf_counter()
        with worker.compute():
            log_probs, _ = policy_forward(worker.model, batch, 1.0, packed=packed)
        log_probs.sum().backward()
        worker.model.zero_grad(set_to_none=True)
        if worker.device.type == "cuda":
            torch.cuda.synchronize()
        rates[packed] = tokens / (time.perf_counter() - start)
        results[packed] = log_probs.detach()
    bf16_gap = (results[True] - results[False]).abs()[mask]
    check.figures |= {
        "real_tokens": tokens,
        "padded_tokens": int(batch["attention_mask"].numel()),
        "packed_tokens_per_s": round(rates[True]),
        "padded_tokens_per_s": round(rates[False]),
        "packed_over_padded": round(rates[True] / rates[False], 2),
        "fp32_max_abs_diff": round(gap, 6),
        "bf16_mean_abs_diff": round(float(bf16_gap.mean()), 5),
        "bf16_max_abs_diff": round(float(bf16_gap.max()), 4),
        "attention": str(worker.model.config._attn_implementation),
    }
    verdict(
        check,
        gap <= PACKING_TOLERANCE,
        f"packed log-probs equal padded in fp32 (max |Δ| <= {PACKING_TOLERANCE})",
    )


def check_weight_stream(check: Check, worker: Any, memory: Memory) -> None:
    from agentrl.engines.weights import DEFAULT_BUCKET_BYTES
    from agentrl.models.export import plain_weights

    link = worker.engine_link
    engine = link.engine  # built now: its own bf16 copy, behind the policy
    largest = max(p.numel() * 4 for p in worker.model.parameters())  # fp32, gathered whole
    bound = max(DEFAULT_BUCKET_BYTES, largest)
    with memory.peak_above() as streamed:
        seconds = link.push()
    with memory.peak_above() as whole:
        start = time.perf_counter()
        engine.update_weights(dict(plain_weights(worker.model)))
        whole_s = time.perf_counter() - start
    engine_bytes = sum(p.numel() * p.element_size() for p in engine.model.parameters())
    check.figures |= {
        "stream_s": round(seconds, 3),
        "stream_peak_above_mib": mib(streamed["peak"]),
        "bound_mib": mib(bound),
        "engine_weights_mib": mib(engine_bytes),
        "whole_state_dict_s": round(whole_s, 3),
        "whole_state_dict_peak_above_mib": mib(whole["peak"]),
    }
    if memory.cuda:
        if streamed["peak"]:  # on one rank the stream's tensors are the shards themselves: nothing new
            check.figures["whole_over_stream_peak"] = round(whole["peak"] / streamed["peak"], 2)
        verdict(
            check, streamed["peak"] <= bound, "peak above the held weights <= one bucket (or largest tensor)"
        )
    else:
        verdict(check, not link.stale, "the stream completes (memory measured on CUDA only)")


def check_sleep_wake(check: Check, worker: Any, memory: Memory) -> None:
    link = worker.engine_link
    engine = link.engine
    weights = sum(p.numel() * p.element_size() for p in engine.model.parameters())
    before = memory.allocated()
    freed = engine.sleep(release_weights=True)
    asleep = memory.allocated()
    empty = all(p.numel() == 0 for p in engine.model.parameters())
    engine.wake_up()
    link.push()
    awake = memory.allocated()
    restored = all(p.numel() > 0 for p in engine.model.parameters())
    check.figures |= {
        "engine_weights_mib": mib(weights),
        "reported_freed_mib": mib(freed),
        "allocated_before_mib": mib(before),
        "allocated_asleep_mib": mib(asleep),
        "allocated_awake_mib": mib(awake),
    }
    ok = freed == weights and empty and restored
    if memory.cuda:
        ok = ok and before - asleep >= 0.95 * weights and awake - asleep >= 0.95 * weights
    verdict(check, ok, "sleep frees the engine's weights (allocator) and the wake restores them")


# --- the run ------------------------------------------------------------------------


def release(worker: Any) -> None:
    worker.shutdown()
    del worker
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def phase(checks: list[Check], name: str, build: Callable[[], Any], steps: list[tuple]) -> None:
    """Build a worker and run ``steps`` (check name, body) on it; a failed build errs them all."""
    holder: dict[str, Any] = {}

    def setup(check: Check) -> None:
        start = time.perf_counter()
        holder["worker"] = build()
        check.figures["build_s"] = round(time.perf_counter() - start, 2)
        verdict(check, True, "the worker builds")

    if run_check(checks, f"{name}/setup", setup).status != "PASS":
        return
    worker = holder.pop("worker")
    try:
        for check_name, body in steps:
            run_check(checks, check_name, lambda c, body=body: body(c, worker))
    finally:
        release(worker)


def environment(device: torch.device) -> dict[str, Any]:
    import transformers

    info = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "device": device.type,
    }
    if device.type == "cuda":
        info["gpu"] = torch.cuda.get_device_name(0)
        info["gpu_memory_gib"] = round(torch.cuda.get_device_properties(0).total_memory / 2**30, 1)
    return info


def markdown(info: dict[str, Any], checks: list[Check], shape: Shape) -> str:
    lines = [
        f"# GPU check ({info['device']})",
        "",
        "`python -m benchmarks.gpu_check" + (" --device cpu" if info["device"] == "cpu" else "") + "`",
        "",
        "Environment: " + ", ".join(f"{k} {v}" for k, v in info.items()),
        "",
        f"Model: random-init Qwen2, vocabulary {shape.vocab}, hidden {shape.hidden}, {shape.layers} layers, "
        f"{shape.heads} heads ({shape.kv_heads} KV), fp32 master weights, bf16 compute.",
        "",
        "| check | result | criterion | figures |",
        "|---|---|---|---|",
    ]
    for c in checks:
        figures = ", ".join(f"{k} {v}" for k, v in c.figures.items())
        cells = [c.name, c.status, c.criterion, figures]
        lines.append("| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |")
    failed = [c for c in checks if c.status == "ERROR"]
    for c in failed:
        lines += ["", f"## {c.name}: error", "", "```", c.detail.strip(), "```"]
    return "\n".join(lines) + "\n"


def render(record_path: Path) -> str:
    """The markdown table of a written JSON record (to redo the table without rerunning)."""
    record = json.loads(record_path.read_text())
    checks = [Check(**c) for c in record["checks"]]
    return markdown(record["environment"], checks, Shape(**record["shape"]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--out", default="docs/results/gpu", help="where the JSON and markdown go")
    parser.add_argument("--logprob-tokens", type=int, help="tokens of the chunked-vs-full pass")
    args = parser.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        print("no CUDA device here: run with --device cpu", file=sys.stderr)
        return 2
    shape = SHAPES[args.device]
    if args.logprob_tokens:
        shape = replace(shape, logprob_tokens=args.logprob_tokens)
    device = torch.device(args.device)
    memory = Memory(device)
    info = environment(device)
    print(json.dumps(info), flush=True)
    checks: list[Check] = []
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = Path(tmp) / "model"
        build = run_check(
            checks, "model/build", lambda c: (build_model_dir(shape, model_dir), verdict(c, True, ""))
        )
        if build.status == "PASS":
            phase(
                checks,
                "dp",
                lambda: make_worker(model_dir, shape, args.device, "dp"),
                [
                    ("update/dp-bf16", lambda c, w: check_update(c, w, shape)),
                    ("engine-vs-trainer/dp", lambda c, w: check_engine(c, w, shape)),
                    ("logprob-memory", lambda c, w: check_logprob_memory(c, w, shape, memory)),
                    ("packing", lambda c, w: check_packing(c, w, shape)),
                ],
            )
            phase(
                checks,
                "fsdp",
                lambda: make_worker(model_dir, shape, args.device, "fsdp"),
                [
                    (
                        "update/fsdp-" + ("nccl" if args.device == "cuda" else "gloo"),
                        lambda c, w: check_update(c, w, shape),
                    ),
                    ("weight-stream", lambda c, w: check_weight_stream(c, w, memory)),
                    ("sleep-wake", lambda c, w: check_sleep_wake(c, w, memory)),
                    ("engine-vs-trainer/fsdp", lambda c, w: check_engine(c, w, shape)),
                ],
            )
    info["total_s"] = round(time.perf_counter() - started, 1)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    record = {"environment": info, "shape": shape.__dict__, "checks": [c.__dict__ for c in checks]}
    (out / f"gpu_check_{args.device}.json").write_text(json.dumps(record, indent=1) + "\n")
    (out / f"gpu_check_{args.device}.md").write_text(markdown(info, checks, shape))
    passed = sum(c.status == "PASS" for c in checks)
    print(f"{passed}/{len(checks)} checks passed in {info['total_s']} s; written to {out}", flush=True)
    return 0 if passed == len(checks) else 1


if __name__ == "__main__":
    sys.exit(main())
