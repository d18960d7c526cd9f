"""Answer normalisation and matching, on hand-computed cases and properties."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentrl.rewards import cover_exact_match, exact_match, f1_score, gold_in_documents, normalize_answer


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("The Beatles", "beatles"),
        ("  An   apple,  a day!! ", "apple day"),
        ("Wilhelm Conrad Röntgen", "wilhelm conrad röntgen"),
        ("the-end", "theend"),  # punctuation goes before articles are removed
        ("Theatre", "theatre"),  # 'the' only as a whole word
        ("U.S.A.", "usa"),
        ("", ""),
    ],
)
def test_normalize_answer(raw: str, expected: str) -> None:
    assert normalize_answer(raw) == expected


def test_exact_match_any_gold() -> None:
    assert exact_match("the Beatles.", ["Rolling Stones", "Beatles"]) == 1.0
    assert exact_match("Beatles band", ["Beatles"]) == 0.0
    assert exact_match("beijing", "Beijing") == 1.0  # a single gold string is accepted


def test_golds_as_numpy_array_from_parquet() -> None:
    assert exact_match("Paris", np.array(["paris", "Paris, France"], dtype=object)) == 1.0


def test_cover_exact_match() -> None:
    assert cover_exact_match("It is the city of Beijing.", ["Beijing"]) == 1.0
    assert cover_exact_match("Bei jing", ["Beijing"]) == 0.0
    assert exact_match("It is the city of Beijing.", ["Beijing"]) == 0.0


def test_f1_hand_computed() -> None:
    # pred tokens: [barack, obama, jr]; gold: [barack, obama] -> P=2/3, R=1, F1=0.8
    assert f1_score("Barack Obama Jr.", ["Barack Obama"]) == pytest.approx(0.8)
    # max over golds: second gold shares 1 of 2 tokens each way -> 0.5
    assert f1_score("new york", ["Boston", "York City"]) == pytest.approx(0.5)
    # repeated tokens are counted with multiplicity: common = min(2, 1) = 1
    assert f1_score("the cat cat", ["cat"]) == pytest.approx(2 * 0.5 * 1 / 1.5)
    assert f1_score("", ["the"]) == 1.0  # both normalise to empty: agree (SQuAD v2)
    assert f1_score("", ["x"]) == 0.0


def test_bad_golds_are_named() -> None:
    with pytest.raises(ValueError, match="non-empty"):
        exact_match("x", [])
    with pytest.raises(TypeError, match=r"golds\[1\] must be a string"):
        exact_match("x", ["a", 3])


text = st.text(alphabet=st.sampled_from(list("abtheAN .,!-'é\tx")), max_size=25)


@given(text)
def test_normalize_is_idempotent(s: str) -> None:
    once = normalize_answer(s)
    assert normalize_answer(once) == once


@given(st.text(max_size=30))
def test_normalize_is_idempotent_on_any_unicode(s: str) -> None:
    assert normalize_answer(normalize_answer(s)) == normalize_answer(s)


@given(text, st.lists(text, min_size=1, max_size=3))
def test_metric_ordering(pred: str, golds: list[str]) -> None:
    em, f1, cover = exact_match(pred, golds), f1_score(pred, golds), cover_exact_match(pred, golds)
    assert 0.0 <= f1 <= 1.0
    assert em in (0.0, 1.0) and cover in (0.0, 1.0)
    if em == 1.0:  # an exact match is a perfect F1 and is covered
        assert f1 == 1.0 and cover == 1.0
    if f1 == 1.0 and normalize_answer(pred):  # same token multiset, non-empty
        assert sorted(normalize_answer(pred).split()) in [sorted(normalize_answer(g).split()) for g in golds]


@given(text, text)
def test_f1_is_symmetric(a: str, b: str) -> None:
    assert f1_score(a, [b]) == pytest.approx(f1_score(b, [a]))


@given(text, text, text)
def test_cover_em_finds_gold_inside_longer_answer(prefix: str, gold: str, suffix: str) -> None:
    assert cover_exact_match(f"{prefix} {gold} {suffix}", [gold]) == 1.0


def test_gold_in_documents_matches_on_token_boundaries():
    assert gold_in_documents(["The answer is: No."], ["no"])
    assert not gold_in_documents(["It lies north of the river, known for snow."], ["no"])  # "no" inside words
    assert gold_in_documents(["x", "Paris is on the Seine, a river."], ["the Seine"])  # articles normalised
    assert not gold_in_documents([], ["Paris"]) and not gold_in_documents(["Paris"], [""])
