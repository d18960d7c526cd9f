"""Exact inner-product top-k over a flat index's vectors by BLAS matrix products, chunk by chunk.

FAISS's CPU flat search runs its own kernels; on the 2-core machines measured here a batch of
28 queries over 34,624 x 384 loaded vectors took 64 ms in FAISS and 14 ms as ``numpy`` matrix
products (OpenBLAS sgemm), with the same exact scores.  The vectors are read in place from the
index, ``CHUNK_ROWS`` rows at a time, so the score matrix stays ``batch x CHUNK_ROWS`` however
large the corpus.  Only vectors aligned for BLAS qualify: a memory-mapped FAISS file's vectors
start at an odd byte offset, and numpy would copy every chunk to align it, so those stay with
FAISS (``flat_vectors`` returns None).

    s_ij = <q_i, x_j>,   top_k(i) = the k rows j of largest s_ij (ties: lower row first)
"""

from __future__ import annotations

import faiss
import numpy as np

CHUNK_ROWS = 262_144


def flat_vectors(index: faiss.Index) -> np.ndarray | None:
    """The ``(ntotal, d)`` float32 vectors of an inner-product ``IndexFlat`` as an aligned view;
    None for any other index, an empty one, or vectors not aligned for BLAS."""
    if not isinstance(index, faiss.IndexFlat) or index.metric_type != faiss.METRIC_INNER_PRODUCT:
        return None
    if index.ntotal == 0:
        return None
    view = faiss.rev_swig_ptr(index.get_xb(), index.ntotal * index.d).reshape(index.ntotal, index.d)
    return view if view.flags.aligned else None


def flat_search(vectors: np.ndarray, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """``(scores, rows)`` of the ``k`` best rows of ``vectors`` for each query, best first."""
    n = len(queries)
    best_s = np.full((n, 0), -np.inf, dtype=np.float32)
    best_i = np.zeros((n, 0), dtype=np.int64)
    for start in range(0, len(vectors), CHUNK_ROWS):
        # rows x queries, then transposed: the faster of the two sgemm layouts here (14 vs 25 ms)
        scores = (vectors[start : start + CHUNK_ROWS] @ queries.T).T
        take = min(k, scores.shape[1])
        part = np.argpartition(-scores, take - 1, axis=1)[:, :take]
        s = np.concatenate([best_s, np.take_along_axis(scores, part, 1)], axis=1)
        i = np.concatenate([best_i, part + start], axis=1)
        order = np.lexsort((i, -s), axis=1)[:, :k] if s.shape[1] > k else np.lexsort((i, -s), axis=1)
        best_s, best_i = np.take_along_axis(s, order, 1), np.take_along_axis(i, order, 1)
    return best_s, best_i
