"""Tool latency for the rollout benchmark: a seeded delay per call, slept for real before the tool runs.

Tools are rarely as fast as a local BM25 index: a shared retriever cluster answers in
50-300 ms, a web API in 0.5-2 s, a sandbox in 0.1-1 s. ``LatencyModel`` gives each call of a
tool a delay, ``fixed`` or ``lognormal`` (a median and a spread ``sigma``, the log's standard
deviation, clipped at ``median * exp(4 sigma)``); ``with_latency`` wraps a tool so that every
batch of calls first sleeps (``asyncio.sleep``, so the event loop keeps serving the engine and
the other trajectories) and then runs the real tool. A batch's calls run side by side at the
remote service, so the batch waits for its slowest call, as a batched request does.

A call's delay is a function of the seed, the tool and the call's arguments, never of the
order calls arrive in: both schedules, and every engine, play a seeded workload with the very
same delays, and ``LatencyModel.delay`` recomputes them afterwards from a trajectory's calls
(the benchmark's bound on each cell needs each trajectory's tool time).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

KINDS = ("fixed", "lognormal")
DEFAULT_SIGMA = 0.5  # lognormal spread: p10-p90 at 0.53x-1.9x the median


@dataclass(frozen=True)
class Latency:
    """One tool's delay distribution: ``fixed`` at ``median`` seconds, or ``lognormal`` with that
    median and log-spread ``sigma``."""

    kind: str = "lognormal"
    median: float = 0.0
    sigma: float = DEFAULT_SIGMA

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"latency kind must be one of {KINDS}, got {self.kind!r}")
        if self.median < 0 or self.sigma < 0:
            raise ValueError(f"latency median and sigma must be >= 0, got {self.median}, {self.sigma}")

    def quantile(self, u: float) -> float:
        """The delay at uniform draw ``u`` in (0, 1)."""
        if self.kind == "fixed" or self.median == 0 or self.sigma == 0:
            return self.median
        z = max(-4.0, min(4.0, _normal_quantile(u)))
        return self.median * math.exp(self.sigma * z)

    def describe(self) -> str:
        if self.kind == "fixed" or self.sigma == 0:
            return f"fixed {self.median:g} s"
        return f"lognormal median {self.median:g} s, sigma {self.sigma:g}"


def _normal_quantile(u: float) -> float:
    from statistics import NormalDist

    return NormalDist().inv_cdf(min(max(u, 1e-12), 1 - 1e-12))


def parse_latency(text: str) -> tuple[str, Latency]:
    """``"search=lognormal:0.3:0.5"`` or ``"search=fixed:0.3"`` → ``("search", Latency(...))``."""
    name, sep, spec = text.partition("=")
    parts = spec.split(":")
    try:
        if not sep or not name or parts[0] not in KINDS or len(parts) > 3:
            raise ValueError
        numbers = [float(p) for p in parts[1:]]
        latency = Latency(parts[0], *numbers)
    except (ValueError, TypeError):
        raise SystemExit(
            f"--tool-latency: expected TOOL=fixed:MEDIAN or TOOL=lognormal:MEDIAN[:SIGMA], got {text!r}"
        ) from None
    return name, latency


class LatencyModel:
    """The delay of every call, per tool (tools without an entry: none), seeded."""

    def __init__(self, per_tool: Mapping[str, Latency], seed: int = 0) -> None:
        self.per_tool = dict(per_tool)
        self.seed = seed

    def with_median(self, median: float) -> LatencyModel:
        """Every tool's distribution at ``median`` seconds (its kind and spread kept): a sweep's point."""
        return LatencyModel({k: replace(v, median=median) for k, v in self.per_tool.items()}, self.seed)

    def delay(self, tool: str, arguments: Mapping[str, Any]) -> float:
        """Seconds a call of ``tool`` with ``arguments`` waits before the tool runs."""
        latency = self.per_tool.get(tool)
        if latency is None or latency.median == 0:
            return 0.0
        key = json.dumps([self.seed, tool, dict(arguments)], sort_keys=True, ensure_ascii=False)
        digest = hashlib.blake2b(key.encode(), digest_size=8).digest()
        return latency.quantile(random.Random(digest).random())

    def ceiling(self, tool: str) -> float:
        """The longest delay a call of ``tool`` can get (the draws are clipped at 4 sigma)."""
        latency = self.per_tool.get(tool)
        return 0.0 if latency is None else latency.quantile(1.0)

    def describe(self) -> str:
        return ", ".join(f"{k}: {v.describe()}" for k, v in self.per_tool.items()) or "none"


class _Delayed:
    """What both wrappers share: the tool inside, the model, and closing the tool."""

    def __init__(self, tool: Any, model: LatencyModel, key: str) -> None:
        self.inner = tool
        self.model = model
        self.key = key  # the name the rollout knows the tool by (a tag tool's: its tag)
        self.timeout_s = tool.timeout_s + model.ceiling(key)

    async def _slowest(self, arguments: Sequence[Mapping[str, Any]]) -> None:
        await asyncio.sleep(max((self.model.delay(self.key, a) for a in arguments), default=0.0))

    async def close(self) -> None:
        close = getattr(self.inner, "close", None)
        if close is not None:
            result = close()
            if asyncio.iscoroutine(result):
                await result


class _DelayedTagTool(_Delayed):
    """A tag tool (``execute(list[str])``) whose every batch first sleeps its slowest call's delay."""

    def __init__(self, tool: Any, model: LatencyModel) -> None:
        super().__init__(tool, model, tool.tag)
        self.name, self.tag = tool.name, tool.tag
        self.argument = getattr(tool, "argument", "query")
        self.description = getattr(tool, "description", "")

    async def execute(self, calls: list[str]) -> list[Any]:
        await self._slowest([{self.argument: c} for c in calls])
        result = self.inner.execute(calls)
        return await result if asyncio.iscoroutine(result) else result


class _DelayedSchemaTool(_Delayed):
    """A stateless schema tool (``call(list[dict])``): every batch first sleeps its slowest delay."""

    def __init__(self, tool: Any, model: LatencyModel) -> None:
        super().__init__(tool, model, tool.spec.name)
        self.name, self.spec = tool.spec.name, tool.spec
        self.tag = getattr(tool, "tag", tool.spec.name)

    async def call(self, arguments: list[dict[str, Any]]) -> list[Any]:
        await self._slowest(arguments)
        result = self.inner.call(arguments)
        return await result if asyncio.iscoroutine(result) else result


def with_latency(tools: Sequence[Any], model: LatencyModel) -> list[Any]:
    """``tools`` with ``model``'s delay before every call (tools it has no entry for are unchanged)."""
    wrapped = []
    for tool in tools:
        name = tool.spec.name if hasattr(tool, "spec") else tool.tag  # as the rollout names it
        if name not in model.per_tool:
            wrapped.append(tool)
        elif hasattr(tool, "spec"):
            if hasattr(tool, "open_session"):
                raise ValueError(f"{name}: a stateful tool's latency is not modelled here")
            wrapped.append(_DelayedSchemaTool(tool, model))
        else:
            wrapped.append(_DelayedTagTool(tool, model))
    return wrapped


def trajectory_tool_seconds(trajectory: Any, model: LatencyModel) -> float:
    """The injected delay a trajectory waited in all: each turn's slowest call, summed over turns
    (a turn's calls run side by side); calls that never ran wait nothing."""
    by_turn: dict[int, float] = {}
    for call in trajectory.calls:
        if call.status in ("ok", "failed"):
            by_turn[call.turn] = max(by_turn.get(call.turn, 0.0), model.delay(call.name, call.arguments))
    return sum(by_turn.values())
