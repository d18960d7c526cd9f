"""Hybrid search by reciprocal-rank fusion (RRF) of several backends (typically dense + BM25).

RRF is used rather than score interpolation because BM25 and cosine scores live on
unrelated scales; ranks need no calibration.  score(d) = sum_b 1 / (rrf_k + rank_b(d)).
"""

from __future__ import annotations

from collections.abc import Sequence

from retriever.base import Hit, SearchBackend


def reciprocal_rank_fusion(rankings: Sequence[Sequence[Hit]], k: int, rrf_k: float = 60.0) -> list[Hit]:
    """Fuse several ranked lists for one query into the top-``k`` by RRF (ties: first seen wins)."""
    fused: dict[str, float] = {}
    first: dict[str, Hit] = {}
    for ranking in rankings:
        for rank, hit in enumerate(ranking, start=1):
            fused[hit.doc_id] = fused.get(hit.doc_id, 0.0) + 1.0 / (rrf_k + rank)
            first.setdefault(hit.doc_id, hit)
    order = sorted(fused, key=lambda d: -fused[d])  # stable: insertion order breaks ties
    return [Hit(d, first[d].contents, fused[d]) for d in order[:k]]


class HybridBackend:
    """Runs each sub-backend on the same batch with a deeper candidate list, then fuses by RRF."""

    name = "hybrid"

    def __init__(self, backends: Sequence[SearchBackend], rrf_k: float = 60.0, depth: int = 50) -> None:
        if len(backends) < 2:
            raise ValueError(f"backends: hybrid needs at least 2, got {len(backends)}")
        self.backends = list(backends)
        self.rrf_k = rrf_k
        self.depth = depth

    def __len__(self) -> int:
        return len(self.backends[0])

    def search(self, queries: list[str], k: int) -> list[list[Hit]]:
        depth = max(k, self.depth)
        per_backend = [b.search(queries, depth) for b in self.backends]
        return [
            reciprocal_rank_fusion([res[i] for res in per_backend], k, self.rrf_k)
            for i in range(len(queries))
        ]
