"""Retrievability check of the world: how often BM25 ranks each oracle query's gold passage on top."""

from __future__ import annotations

from .generation import World

__all__ = ["oracle_hit_rate"]


def oracle_hit_rate(
    world: World,
    k: int = 3,
    *,
    stemmer_language: str | None = "english",
    stopwords: str = "en",
    k1: float = 0.9,
    b: float = 0.4,
    field: str = "query",
) -> dict[str, float]:
    """Fraction of oracle queries whose gold passage BM25 ranks in the top ``k``.

    ``field``: the step's text the oracle searches with, ``query`` (the tags oracle's keywords)
    or ``need`` (the hermes oracle's phrase, :mod:`.hermes`).

    Uses bm25s with the retriever's defaults (Lucene BM25, k1=0.9, b=0.4, English stemming
    and stopwords) over the world's corpus; returns ``top1`` and ``top{k}`` rates and the
    number of queries checked (every step of every question, train and test).
    """
    import bm25s

    stemmer = None
    if stemmer_language:
        import Stemmer

        stemmer = Stemmer.Stemmer(stemmer_language)
    corpus = [p["contents"] for p in world.passages]
    ids = [p["id"] for p in world.passages]
    model = bm25s.BM25(k1=k1, b=b, method="lucene")
    model.index(
        bm25s.tokenize(corpus, stopwords=stopwords, stemmer=stemmer, show_progress=False), show_progress=False
    )
    steps = [s for q in world.train_questions + world.test_questions for s in q.chain]
    text = {s: getattr(s, field) for s in steps}
    queries = sorted(set(text.values()))
    tokens = bm25s.tokenize(queries, stopwords=stopwords, stemmer=stemmer, show_progress=False)
    rows, _ = model.retrieve(tokens, k=k, show_progress=False, n_threads=1)
    ranked = {q: [ids[int(r)] for r in row] for q, row in zip(queries, rows, strict=True)}
    top1 = sum(ranked[text[s]][0] == s.passage_id for s in steps)
    topk = sum(s.passage_id in ranked[text[s]] for s in steps)
    return {"top1": top1 / len(steps), f"top{k}": topk / len(steps), "queries": float(len(steps))}
