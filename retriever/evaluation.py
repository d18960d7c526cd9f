"""Answer recall for retrieval: does a golden answer appear in the top-k passages?

Answers and passages are normalised SQuAD-style (lowercase, drop punctuation and the
articles a/an/the, collapse whitespace) and matched as whole token sequences, so "1901"
does not match "19012" and "the Beatles" matches "beatles".
"""

from __future__ import annotations

import json
import random
import re
import string
from collections.abc import Sequence
from pathlib import Path

from retriever.base import Hit

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = str.maketrans("", "", string.punctuation)


def normalize_answer(text: str) -> str:
    text = text.lower().translate(_PUNCT)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def has_answer(passage: str, answers: Sequence[str]) -> bool:
    """True when a normalised answer occurs in the normalised passage on token boundaries."""
    hay = f" {normalize_answer(passage)} "
    for ans in answers:
        norm = normalize_answer(ans)
        if norm and f" {norm} " in hay:
            return True
    return False


def first_hit_rank(hits: Sequence[Hit], answers: Sequence[str]) -> int | None:
    """1-based rank of the first passage containing an answer, or None."""
    for rank, hit in enumerate(hits, start=1):
        if has_answer(hit.contents, answers):
            return rank
    return None


def recall_at_k(ranks: Sequence[int | None], ks: Sequence[int]) -> dict[int, float]:
    n = len(ranks)
    return {k: (sum(1 for r in ranks if r is not None and r <= k) / n if n else 0.0) for k in ks}


def load_questions(
    path: str | Path, require: str | None = None, sample: int | None = None, seed: int = 0
) -> list[dict]:
    """Read a QA jsonl; keep rows whose ``require`` field is truthy; optionally a seeded sample."""
    rows = []
    with Path(path).open(encoding="utf-8") as fh:
        for line in fh:
            row = json.loads(line)
            if require is None or row.get(require):
                rows.append(row)
    if sample is not None and sample < len(rows):
        rows = random.Random(seed).sample(rows, sample)
    return rows
