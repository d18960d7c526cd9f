"""The sandboxed Python tool's start and per-call times at each isolation level this machine has.

    python -m benchmarks.sandbox_latency [--sessions 40] [--calls 25] [--levels unshare audit]
        [--python PYTHON] [--memory-cgroup auto|off]

For each level (``bwrap`` where bubblewrap is installed, ``unshare`` where namespaces work,
``audit`` always), ``--sessions`` sessions one after another, each making ``--calls`` calls of a
one-line expression. Figures per level, medians and 90th percentiles over the sessions:

* ``start``: the first call, which starts the interpreter (launcher, namespaces, mounts, limits,
  uid drop, the system-call filter, the memory cgroup where one is made) and answers it;
* ``call``: each later call (one frame each way on the interpreter's pipes);
* ``end``: closing the session (the processes killed and reaped, the cgroup removed).

The baseline, measured in the same run: a bare interpreter started and ended (``python -I -c
pass`` as a subprocess, the same Python): the floor under any start. ``start / bare`` is printed
per level. The sessions run one at a time on an otherwise idle tool (the docs' figures are for
that case; under a rollout's concurrency starts queue on the cores).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import tempfile
import time

from agentrl.tools.sandbox.isolation import probe
from agentrl.tools.sandbox.tool import PythonSandboxTool

LEVELS = ("bwrap", "unshare", "audit")


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def bare_start_s(python: str, runs: int) -> list[float]:
    """Seconds to start and end ``python -I -c pass``, ``runs`` times."""
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run([python, "-I", "-c", "pass"], check=True)
        times.append(time.perf_counter() - start)
    return times


async def measure(tool: PythonSandboxTool, sessions: int, calls: int) -> dict[str, list[float]]:
    figures: dict[str, list[float]] = {"start": [], "call": [], "end": []}
    for _ in range(sessions):
        session = await tool.open_session()
        start = time.perf_counter()
        first = await session.call({"code": "1 + 1"})
        figures["start"].append(time.perf_counter() - start)
        assert first.text == "2", first.text
        for _ in range(calls - 1):
            start = time.perf_counter()
            await session.call({"code": "2 + 2"})
            figures["call"].append(time.perf_counter() - start)
        start = time.perf_counter()
        await session.close()
        figures["end"].append(time.perf_counter() - start)
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=40)
    parser.add_argument("--calls", type=int, default=25)
    parser.add_argument("--levels", nargs="*", default=list(LEVELS), choices=LEVELS)
    parser.add_argument("--python", default=None, help="the interpreter the sandbox runs (default: this one)")
    parser.add_argument(
        "--memory-cgroup", default=None, choices=("auto", "off"), help="the tool's memory_cgroup option"
    )
    args = parser.parse_args()
    python = args.python or sys.executable
    bare = bare_start_s(python, args.sessions)
    print(f"bare interpreter start+end ({python} -I -c pass): median {statistics.median(bare) * 1e3:.1f} ms")
    print("level     start p50 / p90 (ms)   start/bare   call p50 / p90 (ms)   end p50 (ms)")
    for level in args.levels:
        reason = probe(level)
        if reason is not None:
            print(f"{level:<9} not available here: {reason}")
            continue
        options = {} if args.memory_cgroup is None else {"memory_cgroup": args.memory_cgroup}
        tool = PythonSandboxTool(isolation=level, python=args.python, work_root=tempfile.mkdtemp(), **options)
        figures = asyncio.run(measure(tool, args.sessions, args.calls))
        start, call, end = (figures[k] for k in ("start", "call", "end"))
        print(
            f"{level:<9} {statistics.median(start) * 1e3:7.1f} / {percentile(start, 0.9) * 1e3:6.1f}"
            f"          {statistics.median(start) / statistics.median(bare):5.2f}"
            f"        {statistics.median(call) * 1e3:6.2f} / {percentile(call, 0.9) * 1e3:5.2f}"
            f"          {statistics.median(end) * 1e3:6.1f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
