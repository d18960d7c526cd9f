"""LLM judge wall time: a batch judged with bounded concurrency vs one request at a time, and from cache.

    python -m benchmarks.judge_latency [--samples 64] [--latency-s 0.2] [--concurrency 64]
        [--baseline-samples 8]

The judge (``agentrl.rewards.judge``, pointwise) scores ``--samples`` distinct answers against
the chat-completions stub of the tests (``tests/support/judge_stub.py``) on 127.0.0.1, which
answers each request after ``--latency-s`` (a hosted judge's 100-500 ms, not its throughput
limits). Figures:

* ``concurrent``: the batch with ``max_concurrency = --concurrency`` (the acceptance target:
  64 samples in < 1 s at 200 ms);
* ``one at a time``: ``max_concurrency = 1``, the baseline, measured on ``--baseline-samples``
  of the samples and extrapolated linearly to ``--samples`` (a request at a time costs the
  latency each, so 64 of them would take ~13 s of a shared machine for no new information);
  the ratio is the extrapolated baseline over ``concurrent``;
* ``cache-hit pass``: the same batch again through a new judge over the first one's disk cache
  (no request is sent).

Figures are printed, not asserted. The stub and the judge share this process's cores (on
different event loops), so the figures include the stub's own JSON work.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from agentrl.config.schema import JudgeConfig
from agentrl.rewards.judge import JudgeGroup, LLMJudge, judge_batch
from tests.support.judge_stub import JudgeStub


def timed(judge: LLMJudge, groups: list[JudgeGroup]) -> float:
    start = time.perf_counter()
    judge_batch(judge, groups)
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=64)
    parser.add_argument("--latency-s", type=float, default=0.2)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--baseline-samples", type=int, default=8)
    args = parser.parse_args()
    question = "What is the capital of France?"
    answers = [f"Paris (answer {i})" for i in range(args.samples)]
    with JudgeStub(latency_s=args.latency_s) as stub, tempfile.TemporaryDirectory() as tmp:
        cached = JudgeConfig(url=stub.url, max_concurrency=args.concurrency, cache_dir=str(Path(tmp) / "c"))
        judge = LLMJudge(cached)
        concurrent = timed(judge, [JudgeGroup(question, answers, ["Paris"])])
        metrics = judge.metrics()
        again = LLMJudge(cached)
        cache_pass = timed(again, [JudgeGroup(question, answers, ["Paris"])])
        hits = again.metrics()["judge/cache_hits"]
        serial = LLMJudge(JudgeConfig(url=stub.url, max_concurrency=1))
        few = answers[: args.baseline_samples]
        measured = timed(serial, [JudgeGroup(question, few, ["Paris"])])
        baseline = measured * args.samples / len(few)
    rows = [
        (
            f"concurrent (max_concurrency {args.concurrency})",
            f"{concurrent:7.3f} s",
            f"{metrics['judge/requests']:.0f} requests, latency mean "
            f"{metrics['judge/latency_mean_s']:.3f} s, p95 {metrics['judge/latency_p95_s']:.3f} s",
        ),
        (
            "one at a time (max_concurrency 1)",
            f"{baseline:7.3f} s",
            f"extrapolated: {measured:.3f} s measured for {len(few)} samples x {args.samples / len(few):g}",
        ),
        ("ratio one at a time / concurrent", f"{baseline / concurrent:7.1f} x", ""),
        (
            "cache-hit pass (new judge, same cache)",
            f"{cache_pass:7.3f} s",
            f"{hits:.0f} cache hits, no request",
        ),
    ]
    print(f"{args.samples} samples, stub latency {args.latency_s * 1000:.0f} ms, pointwise judge")
    for label, figure, note in rows:
        print(f"{label:<40} {figure}" + (f"  ({note})" if note else ""))
    verdict = "met" if concurrent < 1.0 else "NOT met"
    print(f"target: {args.samples} samples judged in < 1 s: {verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
