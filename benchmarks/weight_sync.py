"""Weight sync: seconds and peak memory to push new policy weights into a rollout engine.

    python -m benchmarks.weight_sync [--engines hf,vllm,vllm-async] [--model-cache DIR] [--repeats 3]

The policy is the real SmolLM2-135M-Instruct (imported once from the pip-shipped GGUF into
``--model-cache``), fp32 as the trainer holds it. Each engine holds its own copy. For every
engine the same run measures the baseline -- the whole state dict in one call, as the sync
worked before streaming -- against the stream in buckets of the default size and of a small
size: median seconds per sync, the peak resident memory the sync added (this process and its
children, sampled every 5 ms), and the largest |engine - trainer| log-prob after the sync on a
greedy continuation (it must stay ~0: the stream carries the same weights).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import tempfile
import threading
import time
from pathlib import Path

from benchmarks.common.models import smollm2_model_dir

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


class PeakMemory:
    """Peak resident memory of this process and its children above the level at entry."""

    def __enter__(self) -> PeakMemory:
        import psutil

        self._process = psutil.Process()
        self._start = self._now()
        self.peak = self._start
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def _now(self) -> int:
        total = self._process.memory_info().rss
        for child in self._process.children(recursive=True):
            with contextlib.suppress(Exception):  # a child that just exited
                total += child.memory_info().rss
        return total

    def _sample(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self._now())
            time.sleep(0.005)

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self._now())

    @property
    def added_mb(self) -> float:
        return (self.peak - self._start) / 2**20


def logprob_gap(engine, trainer, prompt: list[int]) -> float:
    """Largest |engine log-prob - trainer log-prob| over a 16-token greedy continuation."""
    import asyncio

    import torch

    from agentrl.engines.base import SamplingParams

    result = asyncio.run(engine.generate_batch([prompt], SamplingParams(max_new_tokens=16, greedy=True)))[0]
    ids = torch.tensor([prompt + result.token_ids])
    with torch.no_grad():
        logits = trainer(ids).logits[0].float()
    expected = torch.log_softmax(logits, dim=-1)
    return max(
        abs(expected[len(prompt) - 1 + j, t].item() - lp)
        for j, (t, lp) in enumerate(zip(result.token_ids, result.log_probs, strict=True))
    )


def build(name: str, model_dir: Path, tokenizer):
    from agentrl.engines import build_engine
    from agentrl.models.loading import load_causal_lm

    if name == "hf":
        return build_engine("hf", model=load_causal_lm(model_dir), tokenizer=tokenizer)
    return build_engine(name, model_path=model_dir, dtype="float32", max_model_len=1024, max_batch_size=8)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--engines", default="hf,vllm,vllm-async")
    parser.add_argument("--model-cache", default=None, help="where the imported SmolLM2 directory is kept")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--small-bucket-mb", type=int, default=32)
    args = parser.parse_args()

    import torch

    from agentrl.engines.weights import DEFAULT_BUCKET_BYTES
    from agentrl.models.loading import load_causal_lm, load_tokenizer
    from agentrl.models.sharding import stream_full_tensors

    with tempfile.TemporaryDirectory() as tmp:
        model_dir = smollm2_model_dir(args.model_cache, tmp)
        tokenizer = load_tokenizer(model_dir)
        trainer = load_causal_lm(model_dir).eval()
        size_mb = sum(t.numel() * t.element_size() for t in trainer.state_dict().values()) / 2**20
        threads = torch.get_num_threads()
        print(f"policy: SmolLM2-135M-Instruct, fp32 state dict {size_mb:.0f} MB; torch threads {threads}")
        prompt = tokenizer("The capital of France is", add_special_tokens=False).input_ids
        generator = torch.Generator().manual_seed(0)
        modes = [
            ("whole state dict, one call", None),
            (f"stream, {DEFAULT_BUCKET_BYTES // 2**20} MB buckets", DEFAULT_BUCKET_BYTES),
            (f"stream, {args.small_bucket_mb} MB buckets", args.small_bucket_mb * 2**20),
        ]
        print(f"\n{'engine':<12}{'sync':<30}{'s/sync':>8}{'peak +MB':>10}{'max |dlogp|':>13}")
        for name in [e.strip() for e in args.engines.split(",") if e.strip()]:
            engine = build(name, model_dir, tokenizer)
            try:
                baseline = None
                for label, bucket in modes:
                    seconds, peaks = [], []
                    for _ in range(args.repeats):
                        with torch.no_grad():  # new weights each time, as after an update
                            for p in trainer.parameters():
                                p.add_(torch.randn(p.shape, generator=generator) * 1e-4)
                        if hasattr(engine, "weight_bucket_bytes"):
                            engine.weight_bucket_bytes = bucket or 2**62  # None: all in one bucket
                        with PeakMemory() as memory:
                            start = time.perf_counter()
                            if bucket is None:  # the old path: a full copy, then one call
                                engine.update_weights({k: v.clone() for k, v in trainer.state_dict().items()})
                            else:
                                engine.update_weights(stream_full_tensors(trainer))
                            seconds.append(time.perf_counter() - start)
                        peaks.append(memory.added_mb)
                    gap = logprob_gap(engine, trainer, prompt)
                    median = statistics.median(seconds)
                    baseline = baseline or median
                    print(
                        f"{name:<12}{label:<30}{median:>8.3f}{max(peaks):>10.0f}{gap:>13.2e}"
                        f"   ({baseline / median:.2f}x the one-call speed)"
                    )
            finally:
                engine.shutdown()


if __name__ == "__main__":
    main()
