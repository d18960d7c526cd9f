"""Opening FAISS index files, memory-mapped where the file's format lets FAISS map it.

A flat wiki-18 index (21M x 768 fp32) is 64 GB: read into memory it takes minutes and all of
that RAM before the first query.  FAISS can instead map the codes of every ``IndexFlatCodes``
(flat, scalar-quantised, PQ; also an HNSW index's storage) with ``IO_FLAG_MMAP_IFC`` and the
inverted lists of an IVF index with ``IO_FLAG_MMAP``; the two flags cannot be combined on an
IVF file, so the file's four-byte type tag picks one.  A mapped index opens in milliseconds and
its resident memory is the pages that searches have touched (for a flat index, every page on
the first query: exhaustive search reads all vectors, from the page cache when warm).
"""

from __future__ import annotations

import contextlib
import logging
from pathlib import Path
from typing import Literal, get_args

import faiss

log = logging.getLogger(__name__)

IndexLoad = Literal["mmap", "ram"]
INDEX_LOAD_MODES: tuple[str, ...] = get_args(IndexLoad)


def _type_tag(path: Path) -> bytes:
    with path.open("rb") as fh:
        return fh.read(4)


def read_faiss_index(path: str | Path, load: str = "mmap") -> faiss.Index:
    """Open the index file at ``path``: ``mmap`` maps what FAISS can map, ``ram`` reads it all."""
    if load not in INDEX_LOAD_MODES:
        raise ValueError(f"index_load: expected one of {INDEX_LOAD_MODES}, got {load!r}")
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"faiss index: {path} is not a file")
    if load == "ram":
        return faiss.read_index(str(path))
    # IVF files ("Iw..") map their inverted lists; the others their flat code storage
    if _type_tag(path).startswith(b"Iw"):
        return faiss.read_index(str(path), faiss.IO_FLAG_MMAP | faiss.IO_FLAG_READ_ONLY)
    ifc = getattr(faiss, "IO_FLAG_MMAP_IFC", None)  # faiss >= 1.11; older ones read into memory
    if ifc is None:
        log.warning("faiss %s cannot map %s's vectors; reading it into memory", faiss.__version__, path)
        return faiss.read_index(str(path))
    return faiss.read_index(str(path), ifc | faiss.IO_FLAG_READ_ONLY)


def metric_name(index: faiss.Index) -> str:
    """``"inner_product"`` or ``"l2"`` (the two metrics the dense backend can rank by)."""
    if index.metric_type == faiss.METRIC_INNER_PRODUCT:
        return "inner_product"
    if index.metric_type == faiss.METRIC_L2:
        return "l2"
    return f"faiss metric {index.metric_type}"


def set_search_params(index: faiss.Index, nprobe: int | None = None, ef_search: int | None = None) -> None:
    """Apply the search-time knobs that apply to ``index`` (IVF ``nprobe``, HNSW ``efSearch``)."""
    if nprobe is not None:
        with contextlib.suppress(RuntimeError):  # not an IVF index: nprobe does not apply
            faiss.extract_index_ivf(index).nprobe = nprobe
    if ef_search is not None:
        hnsw = find_hnsw(index)
        if hnsw is not None:
            hnsw.hnsw.efSearch = ef_search


def find_hnsw(index: faiss.Index) -> faiss.IndexHNSW | None:
    index = faiss.downcast_index(index)
    if isinstance(index, faiss.IndexHNSW):
        return index
    if isinstance(index, faiss.IndexPreTransform):
        return find_hnsw(index.index)
    return None


def index_bytes(path: str | Path) -> int:
    return Path(path).stat().st_size
