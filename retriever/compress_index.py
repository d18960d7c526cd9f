"""Build a compressed dense index (IVF-PQ, HNSW-SQ, any FAISS factory string) from the flat one.

    python -m retriever.compress_index --index indexes/wiki18 --factory "OPQ64,IVF4096,PQ64" --name ivfpq
    python -m retriever.server --index indexes/wiki18 --backend dense --dense-index ivfpq

The vectors come from the directory's base index (built here or attached), read back from the
memory-mapped flat file in chunks: no encoder, no re-embedding.  Training uses a seeded sample
(``--train-size``).  The build then measures, against an exact search of the flat index on the
same queries, recall@k (the share of the flat top-k that the compressed top-k also returns)
for each value of the search knob (IVF ``nprobe``, HNSW ``efSearch``), with the query latency
of each, and records the smallest knob value that reaches ``--target-recall`` with the index's
bytes per passage in the manifest.  With ``--rerank-depth R`` the sweep is measured again with
the top R candidates re-scored exactly from the memory-mapped flat file (``exact_rerank``), and
the server does the same: the compressed index stays in memory, the flat file on disk.
Queries: ``--queries FILE`` (jsonl with a ``question`` field, or plain lines) encoded by
the index's own encoder; without it, stored vectors of held-out rows, each searched with its
own row removed from both answers.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import faiss
import numpy as np
from tqdm import tqdm

from retriever.dense import BASE_INDEX, DENSE_SUBDIR, dense_index_file
from retriever.exact_rerank import exact_rerank
from retriever.faiss_io import find_hnsw, read_faiss_index, set_search_params
from retriever.index import read_manifest, write_manifest

IVF_SWEEP = (1, 2, 4, 8, 16, 32, 64, 128, 256)
HNSW_SWEEP = (16, 32, 64, 128, 256, 512)


def sample_rows(n: int, size: int, seed: int) -> np.ndarray:
    return np.sort(np.random.default_rng(seed).choice(n, min(size, n), replace=False))


def read_rows(index: faiss.Index, rows: np.ndarray) -> np.ndarray:
    """The stored vectors of ``rows`` (any order) as float32."""
    return np.stack([index.reconstruct(int(r)) for r in rows]).astype(np.float32)


def train_and_fill(
    base: faiss.Index, factory: str, train_size: int, seed: int, chunk: int = 65_536, quiet: bool = False
) -> faiss.Index:
    """A ``factory`` index trained on a seeded sample of ``base``'s vectors and filled with all of them."""
    index = faiss.index_factory(base.d, factory, base.metric_type)
    if not index.is_trained:
        index.train(read_rows(base, sample_rows(base.ntotal, train_size, seed)))
    with tqdm(total=base.ntotal, desc=f"add {factory}", unit="vec", disable=quiet, file=sys.stderr) as bar:
        for start in range(0, base.ntotal, chunk):
            n = min(chunk, base.ntotal - start)
            index.add(base.reconstruct_n(start, n))
            bar.update(n)
    return index


def sweep_knob(index: faiss.Index) -> tuple[str | None, tuple[int, ...]]:
    """The search knob worth sweeping for ``index`` and its values."""
    try:
        nlist = faiss.extract_index_ivf(index).nlist
        return "nprobe", tuple(v for v in IVF_SWEEP if v <= nlist)
    except RuntimeError:
        pass
    if find_hnsw(index) is not None:
        return "efSearch", HNSW_SWEEP
    return None, ()


def recall_at_k(truth: np.ndarray, found: np.ndarray) -> float:
    """Mean share of each row of ``truth`` (exact top-k) present in the same row of ``found``."""
    k = truth.shape[1]
    return float(np.mean([len(set(t) & set(f)) / k for t, f in zip(truth, found, strict=True)]))


def _search(
    index: faiss.Index,
    queries: np.ndarray,
    k: int,
    exclude: np.ndarray | None,
    flat: faiss.Index | None = None,
    depth: int = 0,
) -> np.ndarray:
    """Top-k rows, with each query's own row removed first when the queries are stored vectors;
    with ``depth`` the top ``depth`` candidates are re-scored exactly against ``flat`` first."""
    want = k + (exclude is not None)
    rows = index.search(queries, max(want, depth))[1]
    if depth:
        rows = exact_rerank(flat, queries, rows, want)[1]
    if exclude is None:
        return rows
    return np.stack([[r for r in row if r != own][:k] for row, own in zip(rows, exclude, strict=True)])


def evaluate(
    compressed: faiss.Index,
    base: faiss.Index,
    queries: np.ndarray,
    k: int,
    exclude: np.ndarray | None = None,
    single: int = 100,
    rerank_depth: int = 0,
) -> list[dict]:
    """Recall@k against the exact search of ``base`` and latency, for each value of the knob
    (each search re-scoring its top ``rerank_depth`` candidates exactly when that is > 0)."""
    truth = _search(base, queries, k, exclude)
    knob, values = sweep_knob(compressed)
    rows = []
    for value in values or (None,):
        if knob == "nprobe":
            set_search_params(compressed, nprobe=value)
        elif knob == "efSearch":
            set_search_params(compressed, ef_search=value)
        t0 = time.perf_counter()
        found = _search(compressed, queries, k, exclude, base, rerank_depth)
        batched = time.perf_counter() - t0
        t0 = time.perf_counter()
        for q in queries[:single]:
            _search(compressed, q[None, :], k, None, base, rerank_depth)
        one = (time.perf_counter() - t0) / min(single, len(queries))
        rows.append(
            {
                "knob": knob,
                "value": value,
                "rerank_depth": rerank_depth,
                f"recall@{k}": round(recall_at_k(truth, found), 4),
                "ms_per_query_single": round(1000 * one, 3),
                "qps_batched": round(len(queries) / batched, 1),
            }
        )
    return rows


def pick(rows: list[dict], k: int, target: float) -> dict:
    """The first (cheapest) sweep row whose recall reaches ``target``, else the best one."""
    for row in rows:
        if row[f"recall@{k}"] >= target:
            return row
    return max(rows, key=lambda r: r[f"recall@{k}"])


def load_query_vectors(path: Path, meta: dict, limit: int) -> np.ndarray:
    """Encode up to ``limit`` queries of ``path`` with the index's own encoder settings."""
    from retriever.dense import DenseEncoder, EncoderConfig

    texts = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            texts.append(json.loads(line)["question"] if line.lstrip().startswith("{") else line.strip())
    return DenseEncoder(EncoderConfig(**meta["encoder"])).encode_queries(texts[:limit])


def compress(args: argparse.Namespace) -> dict:
    """Build, write and evaluate one compressed index; record it in the manifest and return its entry."""
    out = Path(args.index)
    manifest = read_manifest(out)
    meta = manifest.get("backends", {}).get("dense")
    if meta is None:
        raise ValueError(f"--index: {out} has no dense index (build_index --backend dense, or attach_index)")
    if args.name == BASE_INDEX:
        raise ValueError(f"--name: {BASE_INDEX!r} is the uncompressed index's name")
    if not re.fullmatch(r"[A-Za-z0-9_.-]+", args.name) or args.name.startswith("."):
        raise ValueError(f"--name: expected letters, digits, '_', '-' or '.', got {args.name!r}")
    base_path, _ = dense_index_file(out, meta, BASE_INDEX)
    base = read_faiss_index(base_path, "mmap")
    if not isinstance(faiss.downcast_index(base), faiss.IndexFlat):
        raise ValueError(f"--index: the base index {base_path} is {type(base).__name__}; compress a flat one")
    t0 = time.perf_counter()
    index = train_and_fill(base, args.factory, args.train_size, args.seed, quiet=args.quiet)
    build_s = time.perf_counter() - t0
    path = out / DENSE_SUBDIR / f"{args.name}.faiss"
    path.parent.mkdir(parents=True, exist_ok=True)
    faiss.write_index(index, str(path))
    if args.queries:
        queries, exclude = load_query_vectors(Path(args.queries), meta, args.eval_queries), None
    else:
        exclude = sample_rows(base.ntotal, args.eval_queries, args.seed + 1)
        queries = read_rows(base, exclude)
    rows = evaluate(index, base, queries, args.k, exclude)
    depth = args.rerank_depth
    reranked = evaluate(index, base, queries, args.k, exclude, rerank_depth=depth) if depth else []
    chosen = pick(reranked if args.rerank_depth else rows, args.k, args.target_recall)
    size, base_size = path.stat().st_size, base_path.stat().st_size
    entry = {
        "file": path.name,
        "factory": args.factory,
        "train_size": min(args.train_size, base.ntotal),
        "build_s": round(build_s, 1),
        "bytes": size,
        "bytes_per_passage": round(size / max(1, index.ntotal), 1),
        "fraction_of_base_bytes": round(size / base_size, 4),
        "queries": args.queries or f"{len(queries)} stored vectors (own row excluded)",
        f"recall@{args.k}": chosen[f"recall@{args.k}"],
        "search_params": {"nprobe": chosen["value"]} if chosen["knob"] == "nprobe" else {},
        "rerank_depth": args.rerank_depth,
        "sweep": rows,
        "sweep_reranked": reranked,
    }
    if chosen["knob"] == "efSearch":
        entry["search_params"] = {"ef_search": chosen["value"]}
    manifest = read_manifest(out)  # re-read: the build took a while
    manifest["backends"]["dense"].setdefault("compressed", {})[args.name] = entry
    write_manifest(out, manifest)
    return entry


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m retriever.compress_index",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--index", required=True, help="index directory with a flat dense index")
    p.add_argument("--factory", required=True, help='FAISS factory, e.g. "IVF1024,PQ64"')
    p.add_argument("--name", required=True, help="what the server calls it (--dense-index NAME)")
    p.add_argument("--train-size", type=int, default=200_000, help="vectors sampled for training")
    p.add_argument("--queries", help="jsonl ('question') or text lines")
    p.add_argument("--eval-queries", type=int, default=500)
    p.add_argument("--k", type=int, default=5)
    p.add_argument("--target-recall", type=float, default=0.95)
    p.add_argument(
        "--rerank-depth",
        type=int,
        default=0,
        help="re-score this many candidates with the mapped flat file's exact vectors (0: off)",
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--quiet", action="store_true")
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    args = parse_args(argv)
    try:
        entry = compress(args)
    except (ValueError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    k = args.k
    print(f"| search knob | recall@{k} | ms/query | q/s (batch) |")
    print("|---|---|---|---|")
    for row in entry["sweep"] + entry["sweep_reranked"]:
        rerank = f", re-rank {row['rerank_depth']}" if row["rerank_depth"] else ""
        print(
            f"| {row['knob']}={row['value']}{rerank} | {row[f'recall@{k}']:.4f} | "
            f"{row['ms_per_query_single']:.2f} | {row['qps_batched']:.0f} |"
        )
    print(
        f"{args.name} ({args.factory}): {entry['bytes_per_passage']:.0f} bytes/passage, "
        f"{entry['fraction_of_base_bytes']:.3f} of the flat index; recall@{k} {entry[f'recall@{k}']:.4f} "
        f"at {entry['search_params'] or 'default search parameters'}; built in {entry['build_s']} s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
