"""The LLM judge's counters, and the ``judge/...`` metrics they make (``rewards/judge.py``)."""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field

__all__ = ["FAILURE_REASONS", "JudgeMetrics"]

# Why an attempt failed, each counted as judge/failures/<reason>; an HTTP error is http_<code>.
FAILURE_REASONS: tuple[str, ...] = ("timeout", "connection", "malformed")


@dataclass
class JudgeMetrics:
    """The judge's counters since it was made or its metrics were last reset."""

    requests: int = 0
    cache_hits: int = 0
    duplicates: int = 0
    fallbacks: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    latencies_s: list[float] = field(default_factory=list)
    failures: Counter[str] = field(default_factory=Counter)

    def as_dict(self, price_in_per_mtok: float, price_out_per_mtok: float) -> dict[str, float]:
        """The ``judge/...`` metrics (``rewards/judge.py`` says what each counts); the cost at these prices
        per million tokens."""
        latencies = sorted(self.latencies_s)
        # nearest-rank percentile: a latency some attempt really had
        p95 = latencies[math.ceil(0.95 * len(latencies)) - 1] if latencies else 0.0
        cost = (self.prompt_tokens * price_in_per_mtok + self.completion_tokens * price_out_per_mtok) / 1e6
        out = {
            "judge/requests": float(self.requests),
            "judge/cache_hits": float(self.cache_hits),
            "judge/duplicates": float(self.duplicates),
            "judge/latency_mean_s": sum(latencies) / len(latencies) if latencies else 0.0,
            "judge/latency_p95_s": p95,
            "judge/fallbacks": float(self.fallbacks),
            "judge/prompt_tokens": float(self.prompt_tokens),
            "judge/completion_tokens": float(self.completion_tokens),
            "judge/cost_usd": cost,
        }
        for reason in sorted(set(FAILURE_REASONS) | set(self.failures)):
            out[f"judge/failures/{reason}"] = float(self.failures[reason])
        return out
