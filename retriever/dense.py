"""Dense retrieval: a sentence-transformers encoder over a FAISS inner-product index.

Any local model directory works (e5-base-v2 for real runs, the pip-shipped all-MiniLM-L6-v2
here).  Pooling, normalisation and the query/passage prefixes are part of the index's saved
config, because a query must be encoded exactly the way the passages were.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import faiss
import numpy as np

from retriever.base import Hit
from retriever.corpus import DocStoreLike, Passage, contents_in_chunks
from retriever.exact_rerank import exact_rerank
from retriever.faiss_io import read_faiss_index, set_search_params
from retriever.flat_search import flat_search, flat_vectors

log = logging.getLogger(__name__)

DENSE_SUBDIR = "dense"
POOLING_MODES = ("model", "mean", "cls", "max")
INDEX_TYPES = ("flat", "hnsw")


@dataclass
class EncoderConfig:
    """How text becomes vectors.  ``pooling="model"`` keeps the model directory's own modules."""

    model_path: str
    pooling: str = "model"
    normalize: bool = True
    query_prefix: str = ""
    passage_prefix: str = ""
    max_seq_length: int | None = None
    batch_size: int = 64

    def __post_init__(self) -> None:
        if self.pooling not in POOLING_MODES:
            raise ValueError(f"pooling: expected one of {POOLING_MODES}, got {self.pooling!r}")
        if self.batch_size < 1:
            raise ValueError(f"batch_size: expected >= 1, got {self.batch_size}")


class DenseEncoder:
    """Encodes queries and passages with the configured prefixes, pooling and normalisation."""

    name = "transformers"  # as BackendOptions.query_encoder names it

    def __init__(self, config: EncoderConfig, device: str = "cpu") -> None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")  # never reach for a model hub at run time
        from sentence_transformers import SentenceTransformer

        if not Path(config.model_path).is_dir():
            raise FileNotFoundError(f"model_path: {config.model_path!r} is not a local model directory")
        self.config = config
        if config.pooling == "model":
            self.model = SentenceTransformer(config.model_path, device=device)
        else:
            try:  # sentence-transformers >= 6 moved the module classes
                from sentence_transformers.sentence_transformer.modules import Pooling, Transformer
            except ImportError:
                from sentence_transformers.models import Pooling, Transformer
            transformer = Transformer(config.model_path, max_seq_length=config.max_seq_length)
            get_dim = (
                getattr(transformer, "get_embedding_dimension", None)
                or transformer.get_word_embedding_dimension
            )
            dim = get_dim()
            pooling = Pooling(dim, pooling_mode=config.pooling)
            self.model = SentenceTransformer(modules=[transformer, pooling], device=device)
        if config.max_seq_length is not None:
            self.model.max_seq_length = config.max_seq_length
        self.dim = int(self.encode_queries(["probe"]).shape[1])

    def _encode(self, texts: list[str], prefix: str) -> np.ndarray:
        vecs = self.model.encode(
            [prefix + t for t in texts],
            batch_size=self.config.batch_size,
            normalize_embeddings=self.config.normalize,
            convert_to_numpy=True,
            show_progress_bar=False,
        )
        return np.ascontiguousarray(vecs, dtype=np.float32)

    def encode_queries(self, queries: list[str]) -> np.ndarray:
        return self._encode(queries, self.config.query_prefix)

    def encode_passages(self, passages: list[str]) -> np.ndarray:
        return self._encode(passages, self.config.passage_prefix)


def _new_index(dim: int, index_type: str, hnsw_m: int, ef_construction: int) -> faiss.Index:
    if index_type == "flat":
        return faiss.IndexFlatIP(dim)
    if index_type == "hnsw":
        index = faiss.IndexHNSWFlat(dim, hnsw_m, faiss.METRIC_INNER_PRODUCT)
        index.hnsw.efConstruction = ef_construction
        return index
    raise ValueError(f"index_type: expected one of {INDEX_TYPES}, got {index_type!r}")


def build_dense_index(
    passages: Iterable[Passage],
    out_dir: str | Path,
    encoder: DenseEncoder,
    index_type: str = "flat",
    hnsw_m: int = 32,
    ef_construction: int = 200,
    chunk_size: int = 4096,
    on_progress: Callable[[int], None] | None = None,
) -> dict:
    """Encode passages in chunks (bounded memory) and write ``out_dir/dense/``; return its config."""
    sub = Path(out_dir) / DENSE_SUBDIR
    sub.mkdir(parents=True, exist_ok=True)
    index = _new_index(encoder.dim, index_type, hnsw_m, ef_construction)
    for chunk in contents_in_chunks(passages, chunk_size):
        index.add(encoder.encode_passages(chunk))
        if on_progress:
            on_progress(len(chunk))
    faiss.write_index(index, str(sub / "index.faiss"))
    meta = {
        "encoder": asdict(encoder.config),
        "dim": encoder.dim,
        "index_type": index_type,
        "hnsw_m": hnsw_m,
        "num_passages": int(index.ntotal),
    }
    (sub / "config.json").write_text(json.dumps(meta, indent=2))
    return meta


def _maybe_to_gpu(index: faiss.Index, use_gpu: str) -> tuple[faiss.Index, bool]:
    """Shard a flat index over all GPUs in fp16 when faiss-gpu and a GPU are present.

    Only the flat index goes to GPU (faiss has no GPU HNSW).  ``use_gpu``: auto | yes | no.
    This path cannot run on the CPU-only CI machines.
    """
    if use_gpu == "no":
        return index, False
    n_gpus = faiss.get_num_gpus() if hasattr(faiss, "get_num_gpus") else 0
    can = n_gpus > 0 and hasattr(faiss, "index_cpu_to_all_gpus") and isinstance(index, faiss.IndexFlat)
    if not can:
        if use_gpu == "yes":
            raise RuntimeError(
                f"use_gpu=yes but faiss GPUs={n_gpus}, gpu API={hasattr(faiss, 'index_cpu_to_all_gpus')}, "
                f"index={type(index).__name__} (only flat indexes go to GPU)"
            )
        return index, False
    co = faiss.GpuMultipleClonerOptions()
    co.shard = True
    co.useFloat16 = True
    return faiss.index_cpu_to_all_gpus(index, co=co), True


DEFAULT_EF_SEARCH = 128
BASE_INDEX = "base"  # the index build_index wrote or attach_index recorded; compressed ones have names


def dense_index_file(index_dir: str | Path, meta: dict, name: str = BASE_INDEX) -> tuple[Path, dict]:
    """The file of the dense index ``name`` and the search parameters recorded with it.

    ``base`` is ``DIR/dense/index.faiss`` for an index built here, or the user's own file for an
    attached one (``index_path``); a compressed index (``retriever.compress_index``) is a named
    entry of ``meta["compressed"]`` whose file lives under ``DIR/dense/``.
    """
    if name == BASE_INDEX:
        path = meta.get("index_path") or Path(index_dir) / DENSE_SUBDIR / "index.faiss"
        return Path(path), {}
    compressed = meta.get("compressed", {})
    if name not in compressed:
        raise ValueError(
            f"dense_index: no index named {name!r} in {index_dir}; "
            f"expected one of {[BASE_INDEX, *sorted(compressed)]}"
        )
    entry = compressed[name]
    params = dict(entry.get("search_params", {}), rerank_depth=entry.get("rerank_depth", 0))
    return Path(index_dir) / DENSE_SUBDIR / entry["file"], params


class DenseBackend:
    """Batched dense search: one encode + one FAISS search per call."""

    name = "dense"

    def __init__(
        self,
        index_dir: str | Path,
        docstore: DocStoreLike,
        meta: dict,
        model_path: str | None = None,
        ef_search: int | None = None,
        use_gpu: str = "auto",
        device: str | None = None,
        index_load: str = "mmap",
        dense_index: str = BASE_INDEX,
        nprobe: int | None = None,
        make_encoder: Callable[[EncoderConfig, str], Any] | None = None,
    ) -> None:
        enc_cfg = EncoderConfig(**meta["encoder"])
        if model_path is not None:  # the index may have been built on another machine / path
            enc_cfg.model_path = model_path
        if device is None:
            device = "cuda" if faiss.get_num_gpus() > 0 and use_gpu != "no" else "cpu"
        # make_encoder: another query encoder (retriever.onnx_encoder); passages stay DenseEncoder's
        self.encoder = (make_encoder or DenseEncoder)(enc_cfg, device)
        if self.encoder.dim != meta["dim"]:
            raise ValueError(f"model_path: encoder dim {self.encoder.dim} != index dim {meta['dim']}")
        for name, value in (("nprobe", nprobe), ("ef_search", ef_search)):
            if value is not None and value < 1:
                raise ValueError(f"{name}: expected >= 1 (or unset: as recorded), got {value}")
        path, params = dense_index_file(index_dir, meta, dense_index)
        index = read_faiss_index(path, index_load)
        # an explicit option wins over what compress_index recorded, which wins over the default
        ef = ef_search or params.get("ef_search") or DEFAULT_EF_SEARCH
        set_search_params(index, nprobe=nprobe or params.get("nprobe"), ef_search=ef)
        self.index, self.on_gpu = _maybe_to_gpu(index, use_gpu)
        # a loaded inner-product flat index is searched by BLAS products (retriever.flat_search)
        self.flat_vectors = None if self.on_gpu else flat_vectors(self.index)
        self.rerank_depth = int(params.get("rerank_depth", 0))
        # re-scoring reads candidates' exact vectors from the flat file, mapped, never loaded
        self.flat = read_faiss_index(dense_index_file(index_dir, meta)[0]) if self.rerank_depth else None
        self.docstore = docstore
        if self.index.ntotal != len(docstore):
            raise ValueError(
                f"dense index {path} has {self.index.ntotal} vectors "
                f"but the docstore {len(docstore)} passages"
            )
        self.meta = meta
        self.index_name = dense_index

    def __len__(self) -> int:
        return int(self.index.ntotal)

    def search(self, queries: list[str], k: int) -> list[list[Hit]]:
        if not queries:
            return []
        k = min(k, len(self))
        vectors = self.encoder.encode_queries(queries)
        if self.flat is not None:
            candidates = self.index.search(vectors, max(k, self.rerank_depth))[1]
            scores, rows = exact_rerank(self.flat, vectors, candidates, k)
        elif self.flat_vectors is not None:
            scores, rows = flat_search(self.flat_vectors, vectors, k)
        else:
            scores, rows = self.index.search(vectors, k)
        out: list[list[Hit]] = []
        for srow, rrow in zip(scores, rows, strict=True):
            hits = []
            for s, r in zip(srow, rrow, strict=True):
                if r < 0:  # HNSW and IVF may return fewer than k
                    continue
                p = self.docstore.get(int(r))
                hits.append(Hit(p.id, p.contents, float(s)))
            out.append(hits)
        return out
