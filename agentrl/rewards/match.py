"""Answer matching for open-domain QA (SQuAD-style normalisation).

These are the comparison functions every QA paper in the Search-R1 line reports
(EM, token F1, "cover EM"), so rewards and evaluation numbers stay comparable with
published tables. They compare *strings*; finding the answer inside a model response
is :mod:`agentrl.rewards.tags`' job.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Sequence

__all__ = [
    "as_gold_list",
    "cover_exact_match",
    "exact_match",
    "f1_score",
    "gold_in_documents",
    "normalize_answer",
]

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT_TABLE = str.maketrans("", "", string.punctuation)


def normalize_answer(s: str) -> str:
    """Lowercase, drop ASCII punctuation and the articles a/an/the, collapse whitespace.

    The order (punctuation before articles) matters: "the-end" becomes "theend", not "end".
    It follows the SQuAD evaluation script so scores match the literature.
    """
    if not isinstance(s, str):
        raise TypeError(f"normalize_answer expects a str, got {type(s).__name__}")
    s = s.lower().translate(_PUNCT_TABLE)
    s = _ARTICLES.sub(" ", s)
    return " ".join(s.split())


def as_gold_list(golds: str | Sequence[str], field: str = "golds") -> list[str]:
    """Accept one gold string or a non-empty sequence of them (lists, tuples, numpy arrays).

    Parquet readers hand back numpy arrays for list columns, so anything iterable of str is
    accepted; a bare string counts as a single answer. An empty list is an error because it
    would silently make every prediction wrong.
    """
    if isinstance(golds, str):
        return [golds]
    try:
        out = list(golds)
    except TypeError:
        raise TypeError(
            f"{field} must be a string or a list of strings, got {type(golds).__name__}"
        ) from None
    if not out:
        raise ValueError(f"{field} must be a non-empty list of strings, got an empty list")
    for i, g in enumerate(out):
        if not isinstance(g, str):
            raise TypeError(f"{field}[{i}] must be a string, got {type(g).__name__}: {g!r}")
    return out


def exact_match(pred: str, golds: str | Sequence[str]) -> float:
    """1.0 when the normalised prediction equals any normalised golden answer, else 0.0."""
    p = normalize_answer(pred)
    return float(any(p == normalize_answer(g) for g in as_gold_list(golds)))


def cover_exact_match(pred: str, golds: str | Sequence[str]) -> float:
    """1.0 when some normalised golden answer is a substring of the normalised prediction.

    More lenient than EM (a verbose answer that contains the gold still counts), and
    therefore never lower than EM for the same inputs.
    """
    p = normalize_answer(pred)
    return float(any(normalize_answer(g) in p for g in as_gold_list(golds)))


def gold_in_documents(texts: Sequence[str], golds: str | Sequence[str]) -> bool:
    """Whether a normalised golden answer occurs on token boundaries in one of ``texts``.

    The retriever's recall rule (``retriever.evaluation.has_answer``, kept apart because the
    retriever imports nothing of agentrl): unlike :func:`cover_exact_match`, a gold "no"
    does not match inside "north".
    """
    padded = [f" {normalize_answer(t)} " for t in texts]
    wanted = [f" {g} " for g in map(normalize_answer, as_gold_list(golds)) if g]
    return any(g in p for g in wanted for p in padded)


def _token_f1(pred_tokens: list[str], gold_tokens: list[str]) -> float:
    if not pred_tokens or not gold_tokens:
        # SQuAD-v2 convention: two empty answers agree; one empty answer scores 0.
        return float(pred_tokens == gold_tokens)
    common = Counter(pred_tokens) & Counter(gold_tokens)
    overlap = sum(common.values())
    if overlap == 0:
        return 0.0
    precision = overlap / len(pred_tokens)
    recall = overlap / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


def f1_score(pred: str, golds: str | Sequence[str]) -> float:
    """Token-level F1 between the normalised prediction and each gold; the max over golds."""
    pred_tokens = normalize_answer(pred).split()
    return max(_token_f1(pred_tokens, normalize_answer(g).split()) for g in as_gold_list(golds))
