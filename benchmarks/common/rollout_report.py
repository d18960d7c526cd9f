"""What the rollout benchmark reports: each cell's wall time against its bound, the sweep's table and plot.

A cell is one (engine, schedule, tool latency). Its **bound** is what no schedule can beat
on this engine, the larger of

* the **engine's work at full batch**: the decode steps the workload needs, at the seconds a
  decode forward takes when ``max_batch_size`` rows run, divided by those rows; plus the
  tokens it prefills (every turn's context), at the prefill rate of full-batch prefills;
* the **longest trajectory's critical path**: its own decode steps at that same step time,
  its own prefills at that rate, and the tool delays it waited (each turn's slowest call).

Both rates come from the engines' own forward tallies (``engine.stats.forwards``): the fastest
run of the sweep on any engine that keeps them (``full_batch_rates``, ``fastest``); without
them (vLLM) there is no bound. The step time is that of a full batch, the one the work term
assumes, so the bound says how close a schedule gets to keeping full batches busy without
lengthening any trajectory. It leaves out what the engine cannot avoid but a better engine
could (re-prefilling a trajectory's context every turn is counted; a prefix cache would not
need it) and the real tool's own time (milliseconds here).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from statistics import median
from typing import Any

from benchmarks.common.agent_workload import turn_lengths
from benchmarks.common.tool_latency import LatencyModel, trajectory_tool_seconds

Tally = dict[tuple[str, int], list[float]]  # (kind, rows) -> [forwards, seconds, real tokens]


@dataclass
class Run:
    """One timed rollout: its wall time, trajectories, and what the engine and tools did meanwhile."""

    wall: float
    trajectories: list[Any]
    tool_busy: float
    engine_busy: float
    forwards: Tally


@dataclass(frozen=True)
class Rates:
    """An engine's full-batch speed: seconds a decode forward of ``rows`` rows takes, prefill tokens/s."""

    rows: int
    step_s: float
    prefill_tok_s: float


@dataclass
class Cell:
    """One (engine, schedule, latency) of the sweep, summarised from its median run."""

    engine: str
    schedule: str
    latency: float
    wall_s: float
    walls: list[float]
    bound_s: float | None
    binds: str  # "work" or "path": which term of the bound is the larger
    work_s: float | None
    path_s: float | None
    model_tokens: float  # per trajectory
    searches: float  # per trajectory
    tool_busy_s: float
    engine_busy_s: float
    load: float  # the machine's 1-minute load average, the larger of before and after the latency's cells
    profile: dict[str, float] = field(default_factory=dict)


def tally_delta(after: Mapping[tuple[str, int], Any], before: Tally) -> Tally:
    """The forwards between two snapshots of ``engine.stats.forwards``."""
    delta: Tally = {}
    for key, t in after.items():
        old = before.get(key, [0, 0.0, 0])
        if t.count > old[0]:
            delta[key] = [t.count - old[0], t.seconds - old[1], t.tokens - old[2]]
    return delta


def snapshot(forwards: Mapping[tuple[str, int], Any]) -> Tally:
    return {key: [t.count, t.seconds, t.tokens] for key, t in forwards.items()}


def full_batch_rates(runs: Sequence[Run], rows: int, least: int = 20) -> Rates | None:
    """The fastest of ``runs`` (each with ``least`` decode forwards at ``rows`` rows or more): a decode
    forward's mean seconds at ``rows`` rows, and the rate of prefills at ``rows`` rows (of all
    prefills in a run without such). The fastest run, not the mean: on a shared machine every
    other process only ever slows a run down. None without tallies."""
    steps, rates = [], []
    for run in runs:
        decode, full, every = [0, 0.0], [0.0, 0.0], [0.0, 0.0]
        for (kind, n), (count, seconds, tokens) in run.forwards.items():
            if kind == "decode" and n == rows:
                decode[0] += count
                decode[1] += seconds
            elif kind == "prefill":
                every = [every[0] + tokens, every[1] + seconds]
                if n == rows:
                    full = [full[0] + tokens, full[1] + seconds]
        if decode[0] >= least:
            steps.append(decode[1] / decode[0])
        tokens, seconds = full if full[1] > 0 else every
        if seconds > 0:
            rates.append(tokens / seconds)
    if not steps or not rates:
        return None
    return Rates(rows, min(steps), max(rates))


def fastest(rates: Sequence[Rates | None]) -> Rates | None:
    """The best of several engines' rates (their decode step and prefill rate, each the best)."""
    known = [r for r in rates if r is not None]
    if not known:
        return None
    return Rates(known[0].rows, min(r.step_s for r in known), max(r.prefill_tok_s for r in known))


def prefill_tokens(trajectory: Any) -> int:
    """Tokens prefilled for a trajectory: every turn's whole context (prompt and response so far)."""
    from agentrl.agent.trajectory import Segment

    total, offset, previous = 0, len(trajectory.prompt_ids), None
    for segment in trajectory.segments:
        if segment == Segment.MODEL and previous != Segment.MODEL:
            total += offset
        offset += 1
        previous = segment
    return total


def decode_steps(trajectory: Any) -> int:
    """Decode forwards a trajectory needs: its model tokens but each turn's first (the prefill's)."""
    return trajectory.num_model_tokens - len(turn_lengths(trajectory))


def bound(run: Run, rates: Rates, latency: LatencyModel) -> tuple[float, float]:
    """The cell's two bound terms (seconds): the engine's work at full batch, the longest path."""
    trajs = run.trajectories
    work = sum(decode_steps(t) for t in trajs) * rates.step_s / rates.rows
    work += sum(prefill_tokens(t) for t in trajs) / rates.prefill_tok_s
    path = max(
        decode_steps(t) * rates.step_s
        + prefill_tokens(t) / rates.prefill_tok_s
        + trajectory_tool_seconds(t, latency)
        for t in trajs
    )
    return work, path


def median_turn_seconds(runs: Sequence[Run], rates: Rates) -> float:
    """A median turn's generation time at full batch (its decode steps, its prefill)."""
    turns = [n for run in runs for t in run.trajectories for n in turn_lengths(t)]
    contexts = [prefill_tokens(t) / max(len(turn_lengths(t)), 1) for run in runs for t in run.trajectories]
    return (median(turns) - 1) * rates.step_s + median(contexts) / rates.prefill_tok_s


def profile(run: Run, rows: int) -> dict[str, float]:
    """How the engine ran: decode forwards and their mean rows and the mean ms of those at ``rows``
    rows (a full batch), prefills and their mean rows and seconds in all."""
    out = dict.fromkeys(("decode_forwards", "decode_rows", "prefills", "prefill_rows", "prefill_s"), 0.0)
    full = [0, 0.0]
    for (kind, n), (count, seconds, _) in run.forwards.items():
        out["decode_forwards" if kind == "decode" else "prefills"] += count
        out[f"{kind}_rows"] += n * count
        if kind == "prefill":
            out["prefill_s"] += seconds
        elif n == rows:
            full = [full[0] + count, full[1] + seconds]
    out["decode_rows"] /= max(out["decode_forwards"], 1)
    out["prefill_rows"] /= max(out["prefills"], 1)
    out["full_step_ms"] = 1e3 * full[1] / full[0] if full[0] else float("nan")
    return out


def summarise(
    engine: str,
    schedule: str,
    latency: float,
    runs: Sequence[Run],
    rates: Rates | None,
    model: LatencyModel,
    load: float,
) -> Cell:
    """The cell of the median run (by wall time) with its bound."""
    run = sorted(runs, key=lambda r: r.wall)[len(runs) // 2]
    trajs = run.trajectories
    work = path = None
    if rates is not None:
        work, path = bound(run, rates, model)
    return Cell(
        engine=engine,
        schedule=schedule,
        latency=latency,
        wall_s=run.wall,
        walls=[r.wall for r in runs],
        bound_s=None if work is None else max(work, path),  # type: ignore[type-var]
        binds="" if work is None else ("work" if work >= path else "path"),  # type: ignore[operator]
        work_s=work,
        path_s=path,
        model_tokens=sum(t.num_model_tokens for t in trajs) / len(trajs),
        searches=sum(t.num_tool_calls for t in trajs) / len(trajs),
        tool_busy_s=run.tool_busy,
        engine_busy_s=run.engine_busy,
        load=load,
        profile=profile(run, rates.rows if rates else 0),
    )


def best(cells: Sequence[Cell], schedule: str, latency: float) -> Cell | None:
    found = [c for c in cells if c.schedule == schedule and c.latency == latency]
    return min(found, key=lambda c: c.wall_s) if found else None


def print_latency(cells: Sequence[Cell], latency: float) -> None:
    """One latency's cells: wall, bound and how the engine batched; then best against best."""
    load = max(c.load for c in cells if c.latency == latency)
    print(f"(the machine's 1-minute load average while these ran: up to {load:.1f})")
    print(
        f"{'engine':<15}{'schedule':<12}{'wall s':>8}{'bound s':>9}{'binds':>6}{'bound/wall':>11}"
        f"{'busy s':>7}{'tok/traj':>9}{'search':>7}{'decodes':>8}{'rows':>6}{'full ms':>8}{'prefills':>9}"
        f"{'rows':>6}   runs"
    )
    for c in (c for c in cells if c.latency == latency):
        p = c.profile
        if c.bound_s:
            b = f"{c.bound_s:>9.2f}{c.binds:>6}{c.bound_s / c.wall_s:>11.0%}"
        else:
            b = f"{'—':>9}{'':>6}{'—':>11}"
        print(
            f"{c.engine:<15}{c.schedule:<12}{c.wall_s:>8.2f}{b}{c.engine_busy_s:>7.2f}{c.model_tokens:>9.1f}"
            f"{c.searches:>7.2f}{p['decode_forwards']:>8.0f}{p['decode_rows']:>6.2f}{p['full_step_ms']:>8.2f}"
            f"{p['prefills']:>9.0f}{p['prefill_rows']:>6.2f}   {', '.join(f'{w:.2f}' for w in c.walls)}"
        )
    lock, conc = best(cells, "lockstep", latency), best(cells, "concurrent", latency)
    if lock and conc:
        print(
            f"best concurrent ({conc.engine} {conc.wall_s:.2f} s) vs best lockstep "
            f"({lock.engine} {lock.wall_s:.2f} s): {lock.wall_s / conc.wall_s:.2f}x"
        )


def markdown_table(cells: Sequence[Cell], engines: Sequence[str]) -> str:
    """The sweep as one markdown table: per latency, each engine's two schedules and bound, best vs best."""
    head = "| tool latency (median) |"
    rule = "|---|"
    for e in engines:
        head += f" `{e}` lockstep s | `{e}` concurrent s |"
        rule += "---:|---:|"
    head += " bound s (binds) | best concurrent / best lockstep | load (1 min) |"
    rule += "---:|---:|---:|"
    lines = [head, rule]
    for latency in sorted({c.latency for c in cells}):
        row = f"| {latency:g} s |"
        at = {(c.engine, c.schedule): c for c in cells if c.latency == latency}
        for e in engines:
            for s in ("lockstep", "concurrent"):
                c = at.get((e, s))
                row += f" {c.wall_s:.2f} |" if c else " — |"
        bounds = [c for c in at.values() if c.bound_s is not None]
        low = min(bounds, key=lambda c: c.bound_s) if bounds else None  # type: ignore[arg-type, return-value]
        row += f" {low.bound_s:.2f} ({low.binds}) |" if low else " — |"
        lock, conc = best(cells, "lockstep", latency), best(cells, "concurrent", latency)
        row += f" **{lock.wall_s / conc.wall_s:.2f}x** |" if lock and conc else " — |"
        row += f" {max(c.load for c in at.values()):.1f} |"
        lines.append(row)
    return "\n".join(lines)


def plot(cells: Sequence[Cell], path: Path, title: str) -> None:
    """Wall time against tool latency, each engine and schedule, with the bound; and best vs best."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    latencies = sorted({c.latency for c in cells})
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    for engine in dict.fromkeys(c.engine for c in cells):
        for schedule, style in (("lockstep", "--"), ("concurrent", "-")):
            pts = sorted(
                (c.latency, c.wall_s) for c in cells if c.engine == engine and c.schedule == schedule
            )
            if pts:
                left.plot(*zip(*pts, strict=True), style, marker="o", label=f"{engine} {schedule}")
    bounds = []
    for latency in latencies:
        found = [c.bound_s for c in cells if c.latency == latency and c.bound_s is not None]
        if found:
            bounds.append((latency, min(found)))
    if bounds:
        left.plot(*zip(*bounds, strict=True), ":", color="black", label="bound")
    left.set_xlabel("tool latency, median (s)")
    left.set_ylabel("rollout wall time (s)")
    left.legend(fontsize=8)
    ratios = []
    for latency in latencies:
        lock, conc = best(cells, "lockstep", latency), best(cells, "concurrent", latency)
        if lock and conc:
            ratios.append((latency, lock.wall_s / conc.wall_s))
    if ratios:
        right.plot(*zip(*ratios, strict=True), marker="o")
    right.axhline(1.0, color="grey", linewidth=0.8)
    right.set_xlabel("tool latency, median (s)")
    right.set_ylabel("best lockstep wall / best concurrent wall")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_json(cells: Sequence[Cell], path: Path, meta: Mapping[str, Any]) -> None:
    path.write_text(json.dumps({"meta": dict(meta), "cells": [asdict(c) for c in cells]}, indent=1))
