"""Answer recall@1/3/5 of BM25, dense (MiniLM) and hybrid on NQ test and HotpotQA dev.

    python -m benchmarks.retrieval_recall --index indexes/wiki_mini \\
        [--corpus ../shared/data/corpus/wiki_mini.jsonl] [--data ../shared/data] [--limit N]

Builds the missing backends into --index first (BM25 ~4 s; dense ~3-12 min on 2 cores), then
prints a markdown table.  A question counts as recalled at k when a SQuAD-normalised golden
answer occurs (on token boundaries) in one of the top-k passages.  HotpotQA uses the 1,325
dev questions with ``all_supporting_in_corpus``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from benchmarks.common.paths import REPO, SHARED_DATA
from retriever.build_index import main as build_main
from retriever.evaluation import first_hit_rank, load_questions, recall_at_k
from retriever.index import open_backend, read_manifest

KS = (1, 3, 5)


def ensure_built(index: Path, corpus: Path, backends: list[str]) -> None:
    built = set(read_manifest(index).get("backends", {}))
    needed = {"bm25", "dense"} if "hybrid" in backends else set(backends)
    for backend in sorted(needed):
        if backend not in built:
            print(f"building {backend} index in {index} ...", file=sys.stderr)
            if build_main(["--corpus", str(corpus), "--backend", backend, "--out", str(index)]) != 0:
                raise SystemExit(f"building {backend} failed")


def evaluate(backend, questions: list[dict], batch: int = 256) -> tuple[dict[int, float], float]:
    t0 = time.perf_counter()
    ranks = []
    for start in range(0, len(questions), batch):
        chunk = questions[start : start + batch]
        results = backend.search([q["question"] for q in chunk], max(KS))
        ranks += [first_hit_rank(hits, q["golden_answers"]) for hits, q in zip(results, chunk, strict=True)]
    return recall_at_k(ranks, KS), time.perf_counter() - t0


def main() -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", default=str(SHARED_DATA))
    p.add_argument("--corpus", default=None, help="default: DATA/corpus/wiki_mini.jsonl")
    p.add_argument("--index", default=str(REPO / "indexes" / "wiki_mini"))
    p.add_argument(
        "--backends", nargs="+", default=["bm25", "dense", "hybrid"], choices=["bm25", "dense", "hybrid"]
    )
    p.add_argument(
        "--limit", type=int, default=None, help="seeded sample of N questions per set (quick look)"
    )
    args = p.parse_args()
    data = Path(args.data)
    index = Path(args.index)
    t_start = time.perf_counter()
    ensure_built(
        index, Path(args.corpus) if args.corpus else data / "corpus" / "wiki_mini.jsonl", args.backends
    )
    sets = {
        "NQ test": load_questions(data / "nq" / "test.jsonl", sample=args.limit),
        "HotpotQA dev (all supporting in corpus)": load_questions(
            data / "hotpotqa" / "dev.jsonl", require="all_supporting_in_corpus", sample=args.limit
        ),
    }
    backends = {name: open_backend(index, name) for name in args.backends}
    print("| question set | n | backend | R@1 | R@3 | R@5 | seconds |")
    print("|---|---|---|---|---|---|---|")
    for set_name, questions in sets.items():
        for name, backend in backends.items():
            r, secs = evaluate(backend, questions)
            print(
                f"| {set_name} | {len(questions)} | {name} "
                f"| {r[1]:.3f} | {r[3]:.3f} | {r[5]:.3f} | {secs:.1f} |",
                flush=True,
            )
    print(f"\ntotal {time.perf_counter() - t_start:.0f} s (index build excluded if it already existed)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
