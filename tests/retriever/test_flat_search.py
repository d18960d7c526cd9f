"""BLAS top-k over a loaded flat index equals FAISS's exact search, across chunk boundaries."""

from __future__ import annotations

import faiss
import numpy as np
import pytest

import retriever.flat_search
from retriever.flat_search import flat_search, flat_vectors


def _index(n: int, d: int, seed: int = 0) -> faiss.IndexFlatIP:
    x = np.random.default_rng(seed).standard_normal((n, d)).astype(np.float32)
    index = faiss.IndexFlatIP(d)
    index.add(x)
    return index


def test_blas_top_k_equals_the_faiss_flat_search_across_chunks(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(retriever.flat_search, "CHUNK_ROWS", 300)  # 1,000 rows: four chunks
    index = _index(1000, 24)
    queries = np.random.default_rng(1).standard_normal((7, 24)).astype(np.float32)
    want_s, want_i = index.search(queries, 10)
    got_s, got_i = flat_search(flat_vectors(index), queries, 10)
    assert (got_i == want_i).all()
    assert np.allclose(got_s, want_s, atol=1e-5)


def test_ties_go_to_the_lower_row_and_k_may_exceed_a_chunk(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(retriever.flat_search, "CHUNK_ROWS", 3)
    index = faiss.IndexFlatIP(2)
    index.add(np.array([[1, 0], [0, 1], [1, 0], [1, 0], [0, 1], [1, 0]], dtype=np.float32))
    scores, rows = flat_search(flat_vectors(index), np.array([[1, 0]], dtype=np.float32), 5)
    assert rows.tolist() == [[0, 2, 3, 5, 1]] and scores[0, :4].tolist() == [1, 1, 1, 1]


def test_only_loaded_inner_product_flat_indexes_take_the_blas_path(tmp_path):
    from retriever.faiss_io import read_faiss_index

    assert flat_vectors(faiss.IndexFlatL2(4)) is None
    assert flat_vectors(faiss.IndexFlatIP(4)) is None  # empty
    faiss.write_index(_index(50, 8), str(tmp_path / "f.faiss"))
    assert flat_vectors(read_faiss_index(tmp_path / "f.faiss", "ram")) is not None
    mapped = read_faiss_index(tmp_path / "f.faiss", "mmap")  # vectors at an odd file offset
    assert flat_vectors(mapped) is None or flat_vectors(mapped).flags.aligned
