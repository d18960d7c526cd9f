"""Query encoding speed and NQ recall: transformers fp32 (the reference) vs ONNX Runtime fp32 and int8.

    python -m benchmarks.query_encoder --index indexes/wiki_mini \\
        [--data ../shared/data] [--threads 2] [--rounds 3] [--limit N] [--k 5] [--index-load mmap]

Needs a built dense index (python -m retriever.build_index --backend dense); its passages stay
encoded by transformers fp32, only the query encoder changes.  Each encoder is opened the way
the server opens it (open_backend with BackendOptions.query_encoder); the first onnx start
exports and quantises into INDEX/dense/onnx (timed and printed).  Speed: queries/s of
encode_queries on real NQ test questions at batch 1 and batch 64, the median of --rounds
interleaved rounds, with the ratio to transformers fp32 from the same run.  Recall: NQ test
R@1/R@k (``--k``, 5) over the whole index (same FAISS search, the file opened as ``--index-load``
says), the paired 95% bootstrap interval of each encoder's R@k minus the reference's (the same
questions), plus how often each encoder's top-1 and top-k agree with the reference's.  The row
"onnx-int8, one run per batch" is the int8 encoder without its length-sorted runs of 16 (the
whole batch padded to its longest query, as the transformers path does), to show what each part
of the speed-up buys.
"""

from __future__ import annotations

import argparse
import copy
import logging
import os
import statistics
import sys
import time
from pathlib import Path

from agentrl.eval.stats import paired_bootstrap
from benchmarks.common.paths import REPO, SHARED_DATA
from retriever.evaluation import first_hit_rank, load_questions, recall_at_k
from retriever.index import BackendOptions, open_backend

ENCODERS = ("transformers", "onnx-fp32", "onnx-int8")
BATCHES = {1: 200, 64: 1024}  # batch size -> queries encoded per round


def queries_per_second(encoder, questions: list[str], batch: int) -> float:
    t0 = time.perf_counter()
    for start in range(0, len(questions), batch):
        encoder.encode_queries(questions[start : start + batch])
    return len(questions) / (time.perf_counter() - t0)


def speed(encoders: dict, questions: list[str], rounds: int) -> dict[tuple[str, int], float]:
    """Median queries/s per (encoder, batch); rounds interleave the encoders so load drifts evenly."""
    samples: dict[tuple[str, int], list[float]] = {}
    for encoder in encoders.values():  # warm-up: first calls allocate and pick kernels
        encoder.encode_queries(questions[:64])
    for _ in range(rounds):
        for batch, count in BATCHES.items():
            for name, encoder in encoders.items():
                qps = queries_per_second(encoder, questions[:count], batch)
                samples.setdefault((name, batch), []).append(qps)
    return {key: statistics.median(vals) for key, vals in samples.items()}


def retrieval(backend, questions: list[dict], k: int) -> list[list]:
    out = []
    for start in range(0, len(questions), 256):
        out += backend.search([q["question"] for q in questions[start : start + 256]], k)
    return out


def agreement(results: list[list], reference: list[list]) -> tuple[float, float]:
    """Share of questions with the same top-1 passage, and the mean top-k overlap."""
    same_top1 = sum(1 for a, b in zip(results, reference, strict=True) if a[0].doc_id == b[0].doc_id)
    overlap = [
        len({h.doc_id for h in a} & {h.doc_id for h in b}) / len(b)
        for a, b in zip(results, reference, strict=True)
    ]
    return same_top1 / len(reference), sum(overlap) / len(overlap)


def hit_at(results: list[list], nq: list[dict], k: int) -> list[float]:
    """1.0 for each question with a gold answer in its top ``k`` passages, else 0.0."""
    ranks = [first_hit_rank(h, q["golden_answers"]) for h, q in zip(results, nq, strict=True)]
    return [1.0 if r is not None and r <= k else 0.0 for r in ranks]


def print_table(qps: dict, results: dict, nq: list[dict], names: list[str], k: int) -> None:
    """One markdown row per encoder: speed and its ratio to transformers, recall and agreement."""
    recalls = {
        name: recall_at_k(
            [first_hit_rank(h, q["golden_answers"]) for h, q in zip(r, nq, strict=True)], (1, k)
        )
        for name, r in results.items()
    }
    reference = hit_at(results["transformers"], nq, k)
    head = f"| query encoder | q/s batch 1 | x | q/s batch 64 | x | NQ R@1 | NQ R@{k} | ΔR@{k} [95% paired] "
    print(head + f"| same top-1 | top-{k} overlap |\n" + "|---" * 10 + "|")
    for name in names:
        b1, b64 = qps[(name, 1)], qps[(name, 64)]
        row = f"| {name} | {b1:.0f} | {b1 / qps[('transformers', 1)]:.2f} "
        row += f"| {b64:.0f} | {b64 / qps[('transformers', 64)]:.2f} "
        if name in results:
            same1, overlap = agreement(results[name], results["transformers"])
            diff, lo, hi = paired_bootstrap(hit_at(results[name], nq, k), reference)
            r = recalls[name]
            row += f"| {r[1]:.3f} | {r[k]:.3f} | {diff:+.3f} [{lo:+.3f}, {hi:+.3f}] "
            row += f"| {same1:.3f} | {overlap:.3f} |"
        else:
            row += "|" + " |" * 5
        print(row)


def main() -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--index", default=str(REPO / "indexes" / "wiki_mini"))
    p.add_argument("--data", default=str(SHARED_DATA))
    p.add_argument("--threads", type=int, default=2, help="torch and ONNX Runtime intra-op threads")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--limit", type=int, default=None, help="seeded sample of N questions (quick look)")
    p.add_argument("--k", type=int, default=5, help="recall@k and top-k overlap")
    p.add_argument("--index-load", choices=["mmap", "ram"], default="mmap", help="how FAISS opens its file")
    args = p.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s")  # the export's timing
    import torch

    torch.set_num_threads(args.threads)
    nq = load_questions(Path(args.data) / "nq" / "test.jsonl", sample=args.limit)
    texts = [q["question"] for q in nq]
    backends = {}
    for name in ENCODERS:
        t0 = time.perf_counter()
        opts = BackendOptions(
            query_encoder=name, encoder_threads=args.threads, use_gpu="no", index_load=args.index_load
        )
        backends[name] = open_backend(args.index, "dense", opts)
        print(f"opened {name} in {time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True)
    encoders = {name: b.encoder for name, b in backends.items()}
    encoders["onnx-int8, one run per batch"] = copy.copy(encoders["onnx-int8"])
    encoders["onnx-int8, one run per batch"].rows_per_run = max(BATCHES)
    qps = speed(encoders, texts, args.rounds)
    results = {name: retrieval(b, nq, args.k) for name, b in backends.items()}
    print(
        f"\n{len(nq)} NQ test questions, {len(backends['transformers'])} passages, "
        f"{args.threads} threads, median of {args.rounds} rounds, FAISS file {args.index_load}\n"
    )
    print_table(qps, results, nq, list(encoders), args.k)
    return 0


if __name__ == "__main__":
    sys.exit(main())
