"""Confidence intervals for per-question scores (EM, F1, ...): percentile bootstrap of the mean.

For scores ``x_1 … x_n`` of one system on ``n`` questions, one bootstrap replicate draws
``n`` question indices ``i_1 … i_n`` uniformly with replacement and takes
``m* = (1/n) Σ_j x_{i_j}``. Over ``B = n_boot`` replicates the ``level`` interval is
``[q_{(1-level)/2}(m*), q_{(1+level)/2}(m*)]``, the empirical quantiles of the replicates
(``numpy.quantile``, linear interpolation); the point estimate is the sample mean.

Two systems scored on the same questions are compared by resampling the *questions*
jointly: ``d* = (1/n) Σ_j (a_{i_j} - b_{i_j})``. Question difficulty then cancels, so the
interval of the difference is narrower than one built from two independent intervals
whenever the systems' scores are positively correlated (they nearly always are).

Pure numpy; seeded, so the same scores give the same interval.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["bootstrap_ci", "paired_bootstrap"]

# resampled indices held in memory at once (n_boot x n is drawn in blocks of about this many)
_BLOCK_ELEMENTS = 4_000_000


def _scores(values: Sequence[float] | np.ndarray, name: str) -> np.ndarray:
    x = np.asarray(values, dtype=np.float64)
    if x.ndim != 1:
        raise ValueError(f"{name} must be one-dimensional, got shape {x.shape}")
    if x.size == 0:
        raise ValueError(f"{name} is empty: no interval for zero scores")
    if not np.all(np.isfinite(x)):
        raise ValueError(f"{name} holds NaN or infinite scores")
    return x


def _check(level: float, n_boot: int) -> None:
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be in (0, 1), got {level}")
    if n_boot < 1:
        raise ValueError(f"n_boot must be >= 1, got {n_boot}")


def _replicate_means(x: np.ndarray, n_boot: int, seed: int) -> np.ndarray:
    """``n_boot`` means of ``x``, each over ``n`` indices drawn with replacement."""
    rng = np.random.default_rng(seed)
    n = x.shape[0]
    out = np.empty(n_boot)
    block = max(1, _BLOCK_ELEMENTS // n)
    for start in range(0, n_boot, block):
        m = min(block, n_boot - start)
        idx = rng.integers(0, n, size=(m, n))
        out[start : start + m] = x[idx].mean(axis=1)
    return out


def _interval(replicates: np.ndarray, level: float) -> tuple[float, float]:
    lo, hi = np.quantile(replicates, [(1.0 - level) / 2.0, (1.0 + level) / 2.0])
    return float(lo), float(hi)


def bootstrap_ci(
    values: Sequence[float] | np.ndarray, level: float = 0.95, n_boot: int = 10_000, seed: int = 0
) -> tuple[float, float, float]:
    """``(mean, lo, hi)``: the mean of ``values`` and its percentile-bootstrap ``level`` interval.

    ``lo = q_{(1-level)/2}``, ``hi = q_{(1+level)/2}`` of ``m* = mean(values[i*])`` over
    ``n_boot`` index resamples ``i*`` of size ``n`` (module docstring). Raises ValueError for
    empty or non-finite values.
    """
    _check(level, n_boot)
    x = _scores(values, "values")
    lo, hi = _interval(_replicate_means(x, n_boot, seed), level)
    return float(x.mean()), lo, hi


def paired_bootstrap(
    a: Sequence[float] | np.ndarray,
    b: Sequence[float] | np.ndarray,
    level: float = 0.95,
    n_boot: int = 10_000,
    seed: int = 0,
) -> tuple[float, float, float]:
    """``(mean_diff, lo, hi)`` for ``mean(a) - mean(b)``, two systems on the same questions.

    ``a[i]`` and ``b[i]`` must score the same question ``i``. Each replicate resamples question
    indices ``i*`` once for both systems: ``d* = mean(a[i*] - b[i*])``; the interval is
    ``[q_{(1-level)/2}(d*), q_{(1+level)/2}(d*)]``. Raises ValueError naming both lengths
    when they differ.
    """
    _check(level, n_boot)
    xa, xb = _scores(a, "a"), _scores(b, "b")
    if xa.shape != xb.shape:
        raise ValueError(
            f"paired_bootstrap needs a and b scored on the same questions: len(a)={xa.size}, len(b)={xb.size}"
        )
    diff = xa - xb
    lo, hi = _interval(_replicate_means(diff, n_boot, seed), level)
    return float(diff.mean()), lo, hi
