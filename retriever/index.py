"""The index directory layout and opening a backend from it.

    DIR/manifest.json   corpus fingerprint, passage count, the document store's kind, the backends built
    DIR/docs.arrow      the document store (row -> {"id","contents"}), shared by all backends, or
    DIR/corpus_offsets.npy  line offsets into the user's own corpus jsonl (attach_index: no copy)
    DIR/dense/          FAISS index + encoder config            (build_index --backend dense)
    DIR/bm25/           bm25s index + tokenizer config          (build_index --backend bm25)
    pyserini            a path to an existing Lucene index      (build_index --backend pyserini)

One directory may hold several backends; ``hybrid`` fuses dense and BM25 from the same docstore.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from retriever.base import SearchBackend
from retriever.corpus import DocStore, DocStoreLike

MANIFEST_FILE = "manifest.json"
BACKEND_CHOICES = ("auto", "dense", "bm25", "hybrid", "pyserini")
DOCSTORE_KINDS = ("arrow", "jsonl")


def read_manifest(index_dir: str | Path) -> dict:
    path = Path(index_dir) / MANIFEST_FILE
    if not path.exists():
        return {"backends": {}}
    return json.loads(path.read_text())


def write_manifest(index_dir: str | Path, manifest: dict) -> None:
    path = Path(index_dir) / MANIFEST_FILE
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(manifest, indent=2))
    tmp.replace(path)


@dataclass
class BackendOptions:
    """Serve-time knobs that are not baked into the index."""

    model_path: str | None = None  # override the dense encoder's saved model_path
    ef_search: int | None = None  # HNSW efSearch; None = as recorded, else 128
    use_gpu: str = "auto"  # auto | yes | no (dense flat index, faiss-gpu)
    bm25_threads: int = 0
    rrf_k: float = 60.0
    hybrid_depth: int = 50
    rerank_model: str | None = None
    rerank_depth: int = 20
    rerank_batch_size: int = 32
    index_load: str = "mmap"  # mmap | ram: how the dense FAISS file is opened (retriever.faiss_io)
    dense_index: str = "base"  # "base", or the name of a compressed index (retriever.compress_index)
    nprobe: int | None = None  # IVF lists searched; None = what compress_index recorded
    query_encoder: str = "auto"  # | transformers | onnx-int8 | onnx-fp32 (retriever.onnx_encoder)
    encoder_threads: int = 0  # ONNX Runtime intra-op threads; 0 = its default (all cores)


def open_docstore(index_dir: str | Path, manifest: dict | None = None) -> DocStoreLike:
    """The index directory's document store, of the kind its manifest records.

    Index directories written before the manifest named a kind hold ``docs.arrow``.
    """
    manifest = read_manifest(index_dir) if manifest is None else manifest
    spec = manifest.get("docstore", {"kind": "arrow"})
    kind = spec.get("kind")
    if kind == "arrow":
        return DocStore(index_dir)
    if kind == "jsonl":
        from retriever.jsonl_store import OFFSETS_FILE, JsonlDocStore

        return JsonlDocStore(spec["corpus"], Path(index_dir) / spec.get("offsets", OFFSETS_FILE))
    raise ValueError(f"manifest.docstore.kind: expected one of {DOCSTORE_KINDS}, got {kind!r}")


def resolve_backend_name(index_dir: str | Path, backend: str) -> str:
    """Pick ``auto`` as hybrid when both dense and BM25 exist, else the one that exists."""
    if backend not in BACKEND_CHOICES:
        raise ValueError(f"backend: expected one of {BACKEND_CHOICES}, got {backend!r}")
    built = set(read_manifest(index_dir).get("backends", {}))
    if backend == "auto":
        if {"dense", "bm25"} <= built:
            return "hybrid"
        for name in ("dense", "bm25", "pyserini"):
            if name in built:
                return name
        raise FileNotFoundError(
            f"index: no backend built in {index_dir}; run python -m retriever.build_index"
        )
    needed = {"dense", "bm25"} if backend == "hybrid" else {backend}
    missing = needed - built
    if missing:
        raise FileNotFoundError(
            f"backend: {backend!r} needs {sorted(missing)} built in {index_dir} (have {sorted(built)})"
        )
    return backend


def open_backend(
    index_dir: str | Path, backend: str = "auto", options: BackendOptions | None = None
) -> SearchBackend:
    """Load the named backend (slow: reads indexes, loads models) -- call it off the event loop."""
    opts = options or BackendOptions()
    name = resolve_backend_name(index_dir, backend)
    manifest = read_manifest(index_dir)
    result: SearchBackend
    if name == "pyserini":
        from retriever.pyserini_backend import PyseriniBackend

        result = PyseriniBackend(manifest["backends"]["pyserini"]["lucene_index"])
    else:
        docstore = open_docstore(index_dir, manifest)
        if name in ("dense", "hybrid"):
            from retriever.dense import DenseBackend
            from retriever.onnx_encoder import query_encoder_factory

            dense = DenseBackend(
                index_dir,
                docstore,
                manifest["backends"]["dense"],
                model_path=opts.model_path,
                ef_search=opts.ef_search,
                use_gpu=opts.use_gpu,
                index_load=opts.index_load,
                dense_index=opts.dense_index,
                nprobe=opts.nprobe,
                make_encoder=query_encoder_factory(opts.query_encoder, index_dir, opts.encoder_threads),
            )
        if name in ("bm25", "hybrid"):
            from retriever.bm25 import BM25Backend

            bm25 = BM25Backend(index_dir, docstore, n_threads=opts.bm25_threads)
        if name == "hybrid":
            from retriever.hybrid import HybridBackend

            result = HybridBackend([dense, bm25], rrf_k=opts.rrf_k, depth=opts.hybrid_depth)
        else:
            result = dense if name == "dense" else bm25
    if opts.rerank_model:
        from retriever.rerank import CrossEncoderReranker, RerankedBackend

        reranker = CrossEncoderReranker(opts.rerank_model, batch_size=opts.rerank_batch_size)
        result = RerankedBackend(result, reranker, depth=opts.rerank_depth)
    return result
