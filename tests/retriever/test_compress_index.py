"""Compressed dense indexes trained from the flat one: recall against flat, the manifest entry, serving."""

from __future__ import annotations

import json
from pathlib import Path

import faiss
import numpy as np
import pytest

from retriever.compress_index import evaluate, pick, recall_at_k, train_and_fill
from retriever.compress_index import main as compress_main
from retriever.exact_rerank import exact_rerank
from retriever.index import BackendOptions, open_backend, read_manifest, write_manifest


def _flat(n: int = 3000, d: int = 32, seed: int = 0, spread: float = 0.3) -> faiss.Index:
    """Clustered unit vectors: neighbours mean something, unlike uniform noise."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((30, d))
    x = centres[rng.integers(0, 30, n)] + spread * rng.standard_normal((n, d))
    x = (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)
    index = faiss.IndexFlatIP(d)
    index.add(x)
    return index


def test_recall_at_k_is_the_share_of_the_exact_top_k_found():
    truth = np.array([[1, 2, 3, 4], [5, 6, 7, 8]])
    found = np.array([[4, 3, 9, 9], [5, 6, 7, 8]])
    assert recall_at_k(truth, found) == pytest.approx((2 / 4 + 1) / 2)


def test_an_ivf_flat_index_probing_every_list_recalls_the_flat_top_k_exactly():
    base = _flat(spread=1.5)  # clusters that overlap, so one probed list is not enough
    ivf = train_and_fill(base, "IVF16,Flat", train_size=2000, seed=0, chunk=700, quiet=True)
    assert ivf.ntotal == base.ntotal
    rows = evaluate(ivf, base, base.reconstruct_n(0, 50), k=5, exclude=np.arange(50), single=5)
    by_probe = {r["value"]: r["recall@5"] for r in rows}
    assert by_probe[16] == 1.0
    assert by_probe[1] < 1.0  # one list of 16 misses neighbours: the sweep measures something
    assert pick(rows, 5, 0.999)["value"] <= 16
    assert pick(rows, 5, 1.01)["recall@5"] == 1.0  # unreachable target: the best row


def _index_dir(tmp_path: Path, base: faiss.Index) -> Path:
    """An index directory with a flat dense index and a matching document store."""
    from retriever.corpus import Passage, write_docstore

    out = tmp_path / "idx"
    (out / "dense").mkdir(parents=True)
    faiss.write_index(base, str(out / "dense" / "index.faiss"))
    write_docstore(iter(Passage(f"d{i}", f'"T{i}"\ntext {i}') for i in range(base.ntotal)), out)
    from retriever.build_index import default_model_path

    meta = {"encoder": {"model_path": default_model_path()}, "dim": base.d, "num_passages": base.ntotal}
    write_manifest(out, {"num_passages": base.ntotal, "backends": {"dense": meta}})
    return out


def test_compress_records_the_index_with_its_recall_bytes_and_chosen_nprobe(tmp_path, capsys):
    base = _flat()
    out = _index_dir(tmp_path, base)
    argv = ["--index", str(out), "--factory", "IVF16,SQ8", "--name", "ivfpq", "--quiet"]
    assert (
        compress_main([*argv, "--train-size", "2000", "--eval-queries", "100", "--target-recall", "0.9"]) == 0
    )
    entry = read_manifest(out)["backends"]["dense"]["compressed"]["ivfpq"]
    assert (out / "dense" / "ivfpq.faiss").stat().st_size == entry["bytes"]
    assert entry["fraction_of_base_bytes"] < 0.5  # 32 code bytes + an 8-byte id against 128 bytes of floats
    chosen = entry["search_params"]["nprobe"]
    row = next(r for r in entry["sweep"] if r["value"] == chosen)
    assert row["recall@5"] >= 0.9 and entry["recall@5"] == row["recall@5"]
    assert all(r["recall@5"] < 0.9 for r in entry["sweep"] if r["value"] < chosen)
    assert "bytes/passage" in capsys.readouterr().out


def test_compress_refuses_the_base_name_and_a_directory_without_a_dense_index(tmp_path, capsys):
    out = _index_dir(tmp_path, _flat(n=300))
    assert compress_main(["--index", str(out), "--factory", "SQ8", "--name", "base"]) == 2
    assert "--name: 'base'" in capsys.readouterr().err
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "manifest.json").write_text(json.dumps({"backends": {}}))
    assert compress_main(["--index", str(empty), "--factory", "SQ8", "--name", "sq"]) == 2
    assert "has no dense index" in capsys.readouterr().err


def test_the_server_backend_serves_a_compressed_index_by_name(tmp_path):
    """Through open_backend with the real MiniLM encoder: the compressed index answers from the
    same document store, with the recorded nprobe applied."""
    base = _flat(n=2000, d=384)
    out = _index_dir(tmp_path, base)
    argv = ["--index", str(out), "--factory", "IVF8,SQ8", "--name", "ivf", "--quiet", "--eval-queries", "50"]
    assert compress_main([*argv, "--train-size", "2000"]) == 0
    recorded = read_manifest(out)["backends"]["dense"]["compressed"]["ivf"]["search_params"]["nprobe"]
    backend = open_backend(out, "dense", BackendOptions(dense_index="ivf"))
    assert faiss.extract_index_ivf(backend.index).nprobe == recorded
    hits = backend.search(["a question"], 3)[0]
    assert len(hits) == 3 and all(h.doc_id.startswith("d") for h in hits)
    forced = open_backend(out, "dense", BackendOptions(dense_index="ivf", nprobe=8))
    assert faiss.extract_index_ivf(forced.index).nprobe == 8


def test_exact_reranking_turns_a_coarse_pq_ranking_back_into_the_flat_one():
    base = _flat(n=3000, d=32, spread=1.0)
    pq = train_and_fill(base, "IVF8,PQ4", train_size=3000, seed=0, quiet=True)
    queries = base.reconstruct_n(0, 40)
    plain = {r["value"]: r["recall@5"] for r in evaluate(pq, base, queries, 5, np.arange(40), single=2)}
    reranked = evaluate(pq, base, queries, 5, np.arange(40), single=2, rerank_depth=200)
    by_probe = {r["value"]: r["recall@5"] for r in reranked}
    assert plain[8] < 0.9  # 4 bytes a vector scramble the order...
    assert by_probe[8] > plain[8] and by_probe[8] >= 0.95  # ...which exact scores of 200 candidates restore
    assert all(r["rerank_depth"] == 200 for r in reranked)


def test_exact_rerank_of_every_row_is_the_flat_search_and_pads_missing_candidates():
    base = _flat(n=500, d=16)
    queries = base.reconstruct_n(10, 4) + 0.01
    want_s, want_i = base.search(queries, 5)
    candidates = np.tile(np.arange(499, -1, -1), (4, 1))
    scores, rows = exact_rerank(base, queries, candidates, 5)
    assert (rows == want_i).all() and np.allclose(scores, want_s, atol=1e-5)
    few = np.array([[3, -1, 7, -1, -1, -1]] * 4)
    scores, rows = exact_rerank(base, queries, few, 3)
    assert (rows[:, 2] == -1).all() and np.isneginf(scores[:, 2]).all()
    assert set(rows[0, :2]) == {3, 7}


def test_the_server_backend_reranks_a_compressed_index_when_it_was_recorded_so(tmp_path):
    base = _flat(n=2000, d=384, spread=1.0)
    out = _index_dir(tmp_path, base)
    argv = ["--index", str(out), "--factory", "IVF8,PQ8", "--name", "pq", "--quiet", "--eval-queries", "50"]
    assert compress_main([*argv, "--train-size", "2000", "--rerank-depth", "2000"]) == 0
    entry = read_manifest(out)["backends"]["dense"]["compressed"]["pq"]
    assert entry["rerank_depth"] == 2000 and entry["sweep_reranked"]
    reranked = open_backend(out, "dense", BackendOptions(dense_index="pq", nprobe=8))
    flat = open_backend(out, "dense")
    assert reranked.flat is not None and flat.flat is None
    questions = ["a question", "another question about rivers", "who wrote it"]
    for a, b in zip(reranked.search(questions, 5), flat.search(questions, 5), strict=True):
        assert [h.doc_id for h in a] == [h.doc_id for h in b]  # every row re-scored: the flat answer
