"""The search tool behind a seeded delay per call, named by a run's config: a slow service for a benchmark.

``actor.rollout.tools: [{class_path: benchmarks.common.slow_search.SlowSearchTool, options: {url,
topk, median_s, sigma, latency_seed}}]`` gives every rollout worker (or the actor) the real search
tool, each batch of calls first sleeping its slowest call's delay (``tool_latency.LatencyModel``,
lognormal around ``median_s``): the same delay for the same query in every run of a seed, whichever
role or schedule asks it. A remote retriever cluster or a web API answers in 0.3-2 s; the local
BM25 server in milliseconds.
"""

from __future__ import annotations

from agentrl.tools.retrieval.search import SearchTool
from benchmarks.common.tool_latency import Latency, LatencyModel, _DelayedTagTool


class SlowSearchTool(_DelayedTagTool):
    """``SearchTool(url, topk)`` with a lognormal delay of median ``median_s`` and log-spread ``sigma``
    before every batch of calls, drawn from ``latency_seed`` and each call's query."""

    def __init__(
        self,
        url: str = "http://127.0.0.1:8000/retrieve",
        topk: int = 3,
        median_s: float = 1.0,
        sigma: float = 0.5,
        latency_seed: int = 0,
    ) -> None:
        model = LatencyModel({"search": Latency("lognormal", median_s, sigma)}, latency_seed)
        super().__init__(SearchTool(url=url, topk=topk), model)
