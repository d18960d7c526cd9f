"""Attach an existing FAISS index and its corpus jsonl to an index directory, without re-embedding.

    python -m retriever.attach_index --faiss-index /data/e5_Flat.index --corpus /data/wiki-18.jsonl \\
        --model /models/e5-base-v2 --out indexes/wiki18
    python -m retriever.server --index indexes/wiki18 --backend dense

The encoder defaults are Search-R1's for ``e5_Flat.index``: mean pooling, L2-normalised,
``"query: "`` before a query and ``"passage: "`` before a passage.  Before anything is written
the command checks that the index's dimension equals the encoder's, that its vector count
equals the corpus's line count, and (for an index that can give its vectors back) that a few
passages re-encoded now are the vectors stored for them: a wrong pooling or prefix fails here,
not as quietly bad retrieval.  Then it validates the corpus once while writing its line-offset
table (``corpus_offsets.npy``, a progress bar), or with ``--docstore arrow`` copies it into
``docs.arrow`` (which the page reader needs).  Nothing is copied from the index: the manifest
records its path, and the server memory-maps it.
"""

from __future__ import annotations

import argparse
import itertools
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

import faiss
import numpy as np

from retriever.build_index import (
    corpus_fingerprint,
    default_model_path,
    encoder_config_from_args,
    ensure_docstore,
    progress_bar,
    same_corpus,
)
from retriever.corpus import CorpusFormatError, count_lines, iter_corpus
from retriever.dense import POOLING_MODES, DenseEncoder
from retriever.faiss_io import metric_name, read_faiss_index
from retriever.index import DOCSTORE_KINDS, read_manifest, write_manifest
from retriever.jsonl_store import OFFSETS_FILE, build_offsets

VECTOR_CHECK_MIN_COSINE = 0.99  # re-encoding in another batch or thread count moves fp32 by ~1e-6


class AttachError(ValueError):
    """The index, the corpus and the encoder do not fit together; the message says how."""


def check_vectors(index, encoder: DenseEncoder, corpus: Path, n: int) -> float | None:
    """The lowest cosine between the stored vectors of the corpus's first ``n`` passages and those
    passages re-encoded now; ``None`` when the index cannot give its vectors back.

    The first rows, not a sample: they cost reading ``n`` lines, not a pass over 13 GB.
    """
    passages = list(itertools.islice(iter_corpus(corpus), min(n, index.ntotal)))
    if not passages:
        return None
    if not isinstance(faiss.downcast_index(index), faiss.IndexFlat):
        print(
            f"note: vector check skipped: {type(index).__name__} stores approximate vectors", file=sys.stderr
        )
        return None
    try:
        stored = np.stack([index.reconstruct(i) for i in range(len(passages))]).astype(np.float32)
    except RuntimeError as exc:  # e.g. an IVF index without a direct map
        print(f"note: vector check skipped: {str(exc).splitlines()[0]}", file=sys.stderr)
        return None
    fresh = encoder.encode_passages([p.contents for p in passages])
    stored /= np.linalg.norm(stored, axis=1, keepdims=True) + 1e-12
    fresh /= np.linalg.norm(fresh, axis=1, keepdims=True) + 1e-12
    return float((stored * fresh).sum(axis=1).min())


def open_servable_index(index_path: Path) -> faiss.Index:
    """The index at ``index_path``, memory-mapped, if the dense backend can serve it: rows as ids,
    inner product; otherwise an ``AttachError`` naming ``--faiss-index``."""
    try:
        index = read_faiss_index(index_path, "mmap")
    except (RuntimeError, FileNotFoundError) as exc:  # not a file, or not a FAISS index
        raise AttachError(f"--faiss-index: {index_path}: {str(exc).splitlines()[0]}") from None
    if "IDMap" in type(index).__name__:
        raise AttachError(
            f"--faiss-index: {index_path} is an {type(index).__name__}: it answers with its own ids, "
            "not row numbers; attach the index it wraps"
        )
    if index.metric_type != faiss.METRIC_INNER_PRODUCT:
        raise AttachError(
            f"--faiss-index: {index_path} ranks by {metric_name(index)}; the dense backend serves "
            "inner-product indexes (normalised vectors: the same ranking as cosine)"
        )
    return index


def write_docstore(args: argparse.Namespace, corpus: Path, out: Path, lines: int) -> tuple[dict, int]:
    """Write the document store ``--docstore`` asks for; return the updated manifest and its size."""
    manifest = read_manifest(out)
    if args.docstore == "arrow":
        n = ensure_docstore(corpus, out, args.quiet, accept_jsonl=False)
        return read_manifest(out), n
    fp = corpus_fingerprint(corpus)
    # the same corpus file keeps the row-based indexes built over it (a BM25 index, say);
    # another corpus keeps only what is not row-based (a Lucene index)
    same = same_corpus(manifest.get("corpus") or {}, corpus, fp)
    with progress_bar(lines, "offsets", args.quiet) as bar:
        n = build_offsets(corpus, out / OFFSETS_FILE, on_progress=bar.update)
    backends = manifest.get("backends", {})
    manifest.update(
        corpus=(manifest.get("corpus") or {}) | fp if same else fp,
        num_passages=n,
        docstore={"kind": "jsonl", "corpus": str(corpus), "offsets": OFFSETS_FILE},
        backends=backends if same else {k: v for k, v in backends.items() if k == "pyserini"},
    )
    return manifest, n


def attach(args: argparse.Namespace) -> dict:
    """Check the index against encoder and corpus, write the docstore and the manifest; return a summary."""
    t0 = time.perf_counter()
    index_path, corpus, out = Path(args.faiss_index).resolve(), Path(args.corpus).resolve(), Path(args.out)
    if not corpus.is_file():
        raise AttachError(f"--corpus: {corpus} is not a file")
    index = open_servable_index(index_path)
    model = args.model or default_model_path()
    if not model:
        raise AttachError("--model: required (a local sentence-transformers model directory)")
    cfg = encoder_config_from_args(args, model)
    encoder = DenseEncoder(cfg)
    if encoder.dim != index.d:
        raise AttachError(
            f"--model: the encoder gives {encoder.dim}-dimensional vectors but {index_path} holds {index.d}"
        )
    lines = count_lines(corpus)
    if lines != index.ntotal:
        raise AttachError(
            f"--corpus: {corpus} has {lines} lines but {index_path} holds {index.ntotal} vectors; "
            "row i of the index must be line i of the corpus"
        )
    cosine = check_vectors(index, encoder, corpus, args.check_vectors) if args.check_vectors > 0 else None
    if cosine is not None and cosine < VECTOR_CHECK_MIN_COSINE:
        raise AttachError(
            "--model/--pooling/--passage-prefix/--max-seq-length: passages re-encoded now match the "
            f"stored vectors only to cosine {cosine:.3f} (need >= {VECTOR_CHECK_MIN_COSINE}): the index "
            "was not built this way; --check-vectors 0 skips the check"
        )
    out.mkdir(parents=True, exist_ok=True)
    manifest, n = write_docstore(args, corpus, out, lines)
    manifest.setdefault("backends", {})["dense"] = {
        "encoder": asdict(cfg),
        "dim": int(index.d),
        "index_type": "attached",
        "index_path": str(index_path),
        "index_class": type(index).__name__,
        "metric": metric_name(index),
        "num_passages": int(index.ntotal),
        "vector_check_min_cosine": cosine,
    }
    write_manifest(out, manifest)
    return {
        "out": str(out),
        "passages": n,
        "dim": int(index.d),
        "index_class": type(index).__name__,
        "vector_check_min_cosine": cosine,
        "seconds": round(time.perf_counter() - t0, 1),
    }


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m retriever.attach_index",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--faiss-index", required=True, help="an existing FAISS index file (e.g. e5_Flat.index)")
    p.add_argument("--corpus", required=True, help="its corpus jsonl: line i is the index's row i")
    p.add_argument("--out", required=True, help="index directory to write (manifest + offset table)")
    p.add_argument("--model", help="local model directory of the encoder the index was built with")
    p.add_argument("--pooling", default="mean", choices=list(POOLING_MODES))
    p.add_argument("--no-normalize", action="store_true", help="the vectors were not L2-normalised")
    p.add_argument("--query-prefix", default="query: ")
    p.add_argument("--passage-prefix", default="passage: ")
    p.add_argument("--max-seq-length", type=int, default=None)
    p.add_argument("--docstore", default="jsonl", choices=list(DOCSTORE_KINDS))
    p.add_argument(
        "--check-vectors",
        type=int,
        default=8,
        help="passages re-encoded to check the encoder settings against the stored vectors (0: skip)",
    )
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    args = parse_args(argv)
    try:
        summary = attach(args)
    except (AttachError, CorpusFormatError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    check = summary["vector_check_min_cosine"]
    print(
        f"attached {summary['index_class']} ({summary['passages']} passages, {summary['dim']} dimensions) "
        f"to {summary['out']} in {summary['seconds']} s"
        + (f"; stored vectors match the encoder (min cosine {check:.4f})" if check is not None else "")
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
