"""Answer-recall floors on real data, so a retrieval regression fails CI.

Floors sit a little below what was measured (docs/retrieval.md has the full-set table):
BM25 over the full corpus on a seeded 300-question NQ sample, and dense/hybrid on the
subset corpus of the session fixture (gold passages of 120 seeded NQ questions + each
question's top-3 BM25 passages from the full corpus as hard negatives + 200 seeded random
passages, ~650 in all) -- much smaller than the full corpus, hence the higher dense floor.
"""

from __future__ import annotations

import pytest

from retriever.base import Hit
from retriever.evaluation import first_hit_rank, has_answer, load_questions, normalize_answer, recall_at_k
from retriever.index import open_backend

# measured: BM25 full corpus, NQ seeded 300 -> r@1 0.543, r@3 0.640, r@5 0.690
BM25_NQ300_FLOORS = {1: 0.51, 5: 0.66}
# measured on the subset setup (120 questions, 591 passages):
#   dense  r@1 0.875, r@3 0.958, r@5 1.000;  hybrid r@1 0.800, r@3 0.950, r@5 0.992
# r@5 saturates on this small corpus, so r@1 carries most of the regression signal.
DENSE_SUBSET_FLOORS = {1: 0.83, 5: 0.96}
HYBRID_SUBSET_FLOORS = {1: 0.75, 5: 0.95}


def test_normalize_and_match() -> None:
    assert normalize_answer("  The  Beatles!! ") == "beatles"
    assert has_answer('"Band"\nThey were the Beatles, a band.', ["The Beatles"])
    assert not has_answer("in 19012 something", ["1901"])  # token boundaries, not substrings
    assert has_answer("In 1901, Röntgen won.", ["Wilhelm Conrad Röntgen", "röntgen"])
    assert first_hit_rank([Hit("a", "nothing", 1.0), Hit("b", "Paris, France", 0.5)], ["paris"]) == 2
    assert recall_at_k([1, 3, None, 6], [1, 3, 5]) == {1: 0.25, 3: 0.5, 5: 0.5}


def _recall(backend, questions: list[dict]) -> dict[int, float]:
    results = backend.search([q["question"] for q in questions], 5)
    ranks = [first_hit_rank(hits, q["golden_answers"]) for hits, q in zip(results, questions, strict=True)]
    return recall_at_k(ranks, [1, 3, 5])


@pytest.mark.slow  # indexes or serves the shared 34k-passage corpus
def test_bm25_recall_floor_nq_sample(bm25_index, shared_data) -> None:
    questions = load_questions(shared_data / "nq" / "test.jsonl", sample=300, seed=0)
    r = _recall(open_backend(bm25_index, "bm25"), questions)
    assert r[1] >= BM25_NQ300_FLOORS[1] and r[5] >= BM25_NQ300_FLOORS[5], r
    assert r[1] <= r[3] <= r[5]


@pytest.mark.parametrize(
    ("backend", "floors"), [("dense", DENSE_SUBSET_FLOORS), ("hybrid", HYBRID_SUBSET_FLOORS)]
)
@pytest.mark.slow  # indexes or serves the shared 34k-passage corpus
def test_dense_and_hybrid_recall_floor_on_subset(
    subset_index, backend: str, floors: dict[int, float]
) -> None:
    r = _recall(open_backend(subset_index.index_dir, backend), subset_index.questions)
    assert all(r[k] >= floor for k, floor in floors.items()), r
