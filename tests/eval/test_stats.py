"""Bootstrap confidence intervals of per-question scores."""

from __future__ import annotations

import numpy as np
import pytest

from agentrl.eval.stats import bootstrap_ci, paired_bootstrap


def bernoulli(n: int, p: float, seed: int) -> np.ndarray:
    return (np.random.default_rng(seed).random(n) < p).astype(float)


def test_the_interval_contains_the_mean_and_the_mean_is_the_sample_mean():
    x = bernoulli(300, 0.3, seed=1)
    mean, lo, hi = bootstrap_ci(x)
    assert mean == pytest.approx(x.mean()) and lo < mean < hi
    # about 2 standard errors either side of the mean at 95%
    se = np.sqrt(mean * (1 - mean) / len(x))
    assert hi - lo == pytest.approx(2 * 1.96 * se, rel=0.1)


def test_constant_scores_have_a_point_interval():
    assert bootstrap_ci([1.0] * 50) == (1.0, 1.0, 1.0)
    assert bootstrap_ci([0, 0, 0]) == (0.0, 0.0, 0.0)
    assert paired_bootstrap([1, 0, 1], [1, 0, 1]) == (0.0, 0.0, 0.0)


def test_the_interval_narrows_as_questions_are_added():
    widths = []
    for n in (50, 500, 5000):
        _, lo, hi = bootstrap_ci(bernoulli(n, 0.4, seed=n))
        widths.append(hi - lo)
    assert widths[0] > 2 * widths[1] > 4 * widths[2]


def test_the_same_seed_gives_the_same_interval_and_another_seed_another():
    x = np.random.default_rng(2).random(120)
    assert bootstrap_ci(x, seed=7) == bootstrap_ci(list(x), seed=7)
    assert bootstrap_ci(x, seed=7) != bootstrap_ci(x, seed=8)
    assert paired_bootstrap(x, x[::-1], seed=3) == paired_bootstrap(x, x[::-1], seed=3)


def test_a_wider_level_gives_a_wider_interval():
    x = bernoulli(200, 0.5, seed=3)
    _, lo90, hi90 = bootstrap_ci(x, level=0.9)
    _, lo99, hi99 = bootstrap_ci(x, level=0.99)
    assert lo99 < lo90 < hi90 < hi99


def test_pairing_narrows_the_interval_of_a_difference_between_correlated_systems():
    rng = np.random.default_rng(4)
    a = bernoulli(400, 0.5, seed=5)
    b = a.copy()
    flips = rng.choice(len(a), size=20, replace=False)  # b differs from a on 5% of the questions
    b[flips] = 1 - b[flips]
    diff, lo, hi = paired_bootstrap(a, b)
    assert diff == pytest.approx(a.mean() - b.mean()) and lo <= diff <= hi
    # unpaired: the two systems' intervals treated as independent
    _, alo, ahi = bootstrap_ci(a)
    _, blo, bhi = bootstrap_ci(b)
    unpaired_width = np.hypot(ahi - alo, bhi - blo)
    assert hi - lo < 0.5 * unpaired_width


def test_a_clearly_better_system_has_a_difference_interval_above_zero():
    a = bernoulli(500, 0.6, seed=6)
    b = np.where(bernoulli(500, 0.5, seed=7) == 1, 0.0, a)  # b loses about half of a's right answers
    diff, lo, _ = paired_bootstrap(a, b)
    assert diff > 0.2 and lo > 0


def test_bad_inputs_are_refused_with_their_names():
    with pytest.raises(ValueError, match=r"len\(a\)=3, len\(b\)=2"):
        paired_bootstrap([1, 0, 1], [1, 0])
    with pytest.raises(ValueError, match="values is empty"):
        bootstrap_ci([])
    with pytest.raises(ValueError, match="NaN"):
        bootstrap_ci([1.0, float("nan")])
    with pytest.raises(ValueError, match="level"):
        bootstrap_ci([1.0], level=95)
    with pytest.raises(ValueError, match="n_boot"):
        bootstrap_ci([1.0], n_boot=0)
