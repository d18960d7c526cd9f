"""Where the benchmarks find the checkout and the shared QA data and corpus beside it."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SHARED_DATA = REPO.parent / "shared" / "data"  # ../shared/data beside the checkout
