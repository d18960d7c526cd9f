"""A wiki-18-sized flat index served through the bring-your-own-index path: start-up, memory, exactness.

    python -m benchmarks.byo_index --work /tmp/byo2m [--passages 2000000] [--dim 768] \\
        [--phases generate attach serve compress] [--out docs/results/retriever_scale]

Phases (each resumable: a phase whose output exists is skipped):

* ``generate``: a synthetic flat inner-product index of N x D float32 vectors (FAISS's own file
  format) and a matching corpus jsonl of N short passages, plus a randomly initialised
  768-dimensional BERT (2 layers, MiniLM's vocabulary) as the query encoder -- no model of that
  width ships offline.  The vectors have low intrinsic dimension, as sentence embeddings do: a
  64-dimensional mixture of 4,096 Gaussian clusters mapped into D dimensions by a fixed random
  matrix, plus isotropic noise, L2-normalised.
* ``attach``: ``python -m retriever.attach_index`` (timed; the vector check is off because the
  vectors were not made by the encoder).
* ``serve``: ``python -m retriever.server`` with ``--index-load ram`` and ``--index-load mmap``,
  each from a cold page cache (``drop_caches`` when the user may) and warm: seconds to ready,
  resident memory (anonymous and file-backed) at ready and after the queries; then 200 text
  queries over HTTP, whose top-10 is compared with an exact brute-force search in numpy of the
  same query vectors (encoded here with the same encoder) over all N vectors.
* ``compress``: ``retriever.compress_index``'s training and sweep for each ``--factories``
  entry, evaluated on 500 "paraphrase" queries (a passage's latent point with fresh noise),
  without and with exact re-scoring of the top 100 candidates from the mapped flat file.

Figures are printed and written as JSON under ``--out``; nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np

from benchmarks.common.paths import REPO, SHARED_DATA
from benchmarks.common.retriever_scale import (
    build_encoder,
    drop_page_cache,
    latent_queries,
    proc_memory_mb,
    synthetic_vectors,
)

LATENT_DIM, CLUSTERS = 64, 4096
TOPK = 10
RERANK_DEPTH = 100


def phase_generate(work: Path, n: int, dim: int, seed: int) -> None:
    import faiss

    if (work / "flat.faiss").exists() and (work / "corpus.jsonl").exists():
        print("generate: exists, skipped")
        return
    work.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    build_encoder(work / "encoder", dim, seed)
    index = faiss.IndexFlatIP(dim)
    for start, block in synthetic_vectors(n, dim, LATENT_DIM, CLUSTERS, seed):
        index.add(block)
        print(f"\rgenerate: {start + len(block):,}/{n:,} vectors", end="", file=sys.stderr)
    print(file=sys.stderr)
    faiss.write_index(index, str(work / "flat.faiss.tmp"))
    os.replace(work / "flat.faiss.tmp", work / "flat.faiss")
    del index
    with (work / "corpus.tmp").open("w", encoding="utf-8") as fh:
        for i in range(n):
            fh.write(
                json.dumps({"id": f"syn{i}", "contents": f'"Synthetic {i // 20}"\npassage {i} text'}) + "\n"
            )
    os.replace(work / "corpus.tmp", work / "corpus.jsonl")
    print(f"generate: {n:,} x {dim} in {time.perf_counter() - t0:.0f} s")


def phase_attach(work: Path) -> dict:
    if (work / "attach.json").exists() and (work / "idx" / "manifest.json").exists():
        print("attach: exists, skipped")
        return json.loads((work / "attach.json").read_text())
    cmd = [sys.executable, "-m", "retriever.attach_index", "--faiss-index", str(work / "flat.faiss")]
    cmd += [
        "--corpus",
        str(work / "corpus.jsonl"),
        "--out",
        str(work / "idx"),
        "--model",
        str(work / "encoder"),
    ]
    cmd += ["--pooling", "mean", "--query-prefix", "", "--passage-prefix", "", "--check-vectors", "0"]
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, cwd=REPO)
    result = {"attach_s": round(time.perf_counter() - t0, 1), "command": " ".join(cmd[1:])}
    (work / "attach.json").write_text(json.dumps(result))
    print(f"attach: {result['attach_s']} s")
    return result


def _start(work: Path, load: str, port: int) -> tuple[subprocess.Popen, float]:
    cmd = [sys.executable, "-m", "retriever.server", "--index", str(work / "idx"), "--backend", "dense"]
    cmd += ["--port", str(port), "--index-load", load, "--access-log", "off", "--cache-size", "0"]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    while time.perf_counter() - t0 < 900:
        if proc.poll() is not None:
            raise RuntimeError(f"server ({load}) exited with {proc.returncode} before it was ready")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                if json.loads(r.read())["ready"]:
                    return proc, time.perf_counter() - t0
        except OSError:
            time.sleep(0.05)
    proc.kill()
    proc.wait(60)
    raise RuntimeError(f"server ({load}) not ready in 900 s")


def _retrieve(port: int, queries: list[str]) -> tuple[list[list[dict]], list[float]]:
    results, latencies = [], []
    for q in queries:
        body = json.dumps({"queries": [q], "topk": TOPK, "return_scores": True}).encode()
        req = urllib.request.Request(
            f"http://127.0.0.1:{port}/retrieve", body, {"Content-Type": "application/json"}
        )
        t0 = time.perf_counter()
        with urllib.request.urlopen(req, timeout=600) as r:
            results.append(json.loads(r.read())["result"][0])
        latencies.append(time.perf_counter() - t0)
    return results, latencies


def brute_force(work: Path, query_vectors: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Exact top-k by numpy matrix products over the flat file's vectors, chunk by chunk."""
    import faiss

    base = faiss.read_index(str(work / "flat.faiss"), faiss.IO_FLAG_MMAP_IFC)
    best_s = np.full((len(query_vectors), k), -np.inf, dtype=np.float32)
    best_i = np.zeros((len(query_vectors), k), dtype=np.int64)
    for start in range(0, base.ntotal, 262_144):
        block = base.reconstruct_n(start, min(262_144, base.ntotal - start))
        scores = query_vectors @ block.T
        s = np.concatenate([best_s, scores], axis=1)
        i = np.concatenate([best_i, np.arange(start, start + len(block))[None, :].repeat(len(s), 0)], axis=1)
        top = np.argsort(-s, axis=1, kind="stable")[:, :k]
        best_s, best_i = np.take_along_axis(s, top, 1), np.take_along_axis(i, top, 1)
    return best_i, best_s


def exactness(results: list[list[dict]], truth_i: np.ndarray, truth_s: np.ndarray) -> dict:
    """Identical top-k lists, and whether every difference is a tie (scores within 1e-5)."""
    identical, ties_only = 0, 0
    for got, ti, ts in zip(results, truth_i, truth_s, strict=True):
        ids = [int(h["document"]["id"][3:]) for h in got]
        if ids == ti.tolist():
            identical += 1
        elif np.allclose([h["score"] for h in got], ts, atol=1e-5):
            ties_only += 1
    return {"queries": len(results), "identical_top10": identical, "differ_only_in_tied_order": ties_only}


def phase_serve(work: Path, n_queries: int, port: int) -> dict:
    from retriever.dense import DenseEncoder, EncoderConfig

    questions = [json.loads(line)["question"] for line in (Path(args_data()) / "nq" / "test.jsonl").open()]
    queries = questions[:n_queries]
    cfg = EncoderConfig(model_path=str(work / "encoder"), pooling="mean")
    qv = DenseEncoder(cfg).encode_queries(queries)
    truth_i, truth_s = brute_force(work, qv, TOPK)
    out: dict = {}
    for load in ("ram", "mmap"):
        for cache in ("cold", "warm"):
            dropped = drop_page_cache() if cache == "cold" else False
            proc, ready_s = _start(work, load, port)
            try:
                at_ready = proc_memory_mb(proc.pid)
                results, lat = _retrieve(port, queries)
                after = proc_memory_mb(proc.pid)
            finally:
                proc.terminate()
                proc.wait(60)
            row = {"ready_s": round(ready_s, 2), "page_cache_dropped": dropped, "rss_at_ready_mb": at_ready}
            row |= {"rss_after_queries_mb": after, "first_query_ms": round(1000 * lat[0], 1)}
            row |= {"median_query_ms": round(1000 * float(np.median(lat)), 1)}
            row |= exactness(results, truth_i, truth_s)
            out[f"{load}_{cache}"] = row
            print(f"serve {load} {cache}: {json.dumps(row)}", flush=True)
    return out


def phase_compress(work: Path, factories: list[str], train_size: int, seed: int) -> list[dict]:
    import faiss

    from retriever.compress_index import evaluate, pick, train_and_fill
    from retriever.faiss_io import read_faiss_index

    base = read_faiss_index(work / "flat.faiss", "mmap")
    queries = latent_queries(base.ntotal, base.d, LATENT_DIM, CLUSTERS, seed, 500)
    rows = []
    for factory in factories:
        path = work / f"{factory.replace(',', '_')}.faiss"
        t0 = time.perf_counter()
        if path.exists():
            index = faiss.read_index(str(path))
        else:
            index = train_and_fill(base, factory, train_size, seed)
            faiss.write_index(index, str(path))
        built_s = time.perf_counter() - t0
        sweep = evaluate(index, base, queries, k=5)
        reranked = evaluate(index, base, queries, k=5, rerank_depth=RERANK_DEPTH)
        row = {"factory": factory, "build_or_load_s": round(built_s, 1), "bytes": path.stat().st_size}
        row |= {"bytes_per_passage": round(path.stat().st_size / base.ntotal, 1)}
        row |= {"fraction_of_flat": round(path.stat().st_size / (work / "flat.faiss").stat().st_size, 4)}
        row |= {"chosen": pick(sweep, 5, 0.95), "chosen_reranked": pick(reranked, 5, 0.95)}
        row |= {"sweep": sweep, "sweep_reranked": reranked}
        rows.append(row)
        shown = {k: v for k, v in row.items() if not k.startswith("sweep")}
        print(f"compress {factory}: {json.dumps(shown)}", flush=True)
    return rows


def args_data() -> str:
    return os.environ.get("AGENTRL_DATA", str(SHARED_DATA))


def main() -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--work", default="/tmp/byo2m")
    p.add_argument("--passages", type=int, default=2_000_000)
    p.add_argument("--dim", type=int, default=768)
    p.add_argument("--phases", nargs="+", default=["generate", "attach", "serve", "compress"])
    p.add_argument("--queries", type=int, default=200)
    p.add_argument("--factories", nargs="+", default=["IVF1024,PQ96", "IVF1024,PQ192"])
    p.add_argument("--train-size", type=int, default=50_000)
    p.add_argument("--port", type=int, default=18431)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=str(REPO / "docs" / "results" / "retriever_scale"))
    args = p.parse_args()
    work, out = Path(args.work), Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    report_path = out / f"byo_{args.passages}x{args.dim}.json"
    report = json.loads(report_path.read_text()) if report_path.exists() else {}
    report["setup"] = {
        "passages": args.passages,
        "dim": args.dim,
        "latent_dim": LATENT_DIM,
        "clusters": CLUSTERS,
    }
    if "generate" in args.phases:
        phase_generate(work, args.passages, args.dim, args.seed)
    if "attach" in args.phases:
        report["attach"] = phase_attach(work)
    if "serve" in args.phases:
        report["serve"] = phase_serve(work, args.queries, args.port)
    if "compress" in args.phases:
        report["compress"] = phase_compress(work, args.factories, args.train_size, args.seed)
    report_path.write_text(json.dumps(report, indent=2))
    print(f"wrote {report_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
