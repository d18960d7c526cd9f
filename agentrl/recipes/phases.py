"""A recipe's phase runner: each phase run in order, timed, printed as it starts and ends, resumable.

``PhaseRunner(phases).run(name, what, fn, *args)`` runs ``fn(*args)`` as phase ``name``, prints
``[k/N] name: what ...`` when it starts and its wall time when it ends, keeps that time in
``seconds`` (``total`` is the wall time since the runner was made) and returns what ``fn``
returned. Both recipes run on it: the quickstart (``agentrl.quickstart.pipeline``, every phase
every time) and the real-data recipe (``agentrl.recipes.search_qa``, resumable).

Resumable, with a ``markers`` directory: a phase's ``fn`` returns a JSON mapping, and when the
phase ends that mapping plus the ``seconds`` it took (rounded to 0.1 s) is written to
``<markers>/<name>.json`` and returned. A later run returns the recorded mapping instead of
running the phase again; deleting a marker redoes that phase (and, by hand, the ones after it).
``only`` (when not empty) limits which phases may run now: any other phase returns its record
if it has one, else None, without running. A name in ``groups`` stands for several phases in ``only``
(``--only eval`` for every ``eval-<cell>``). :func:`phase_time_table` is the markdown table of
the ``seconds`` a report shows.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO, TypeVar

__all__ = ["PhaseRunner", "phase_time_table"]

T = TypeVar("T")
SUMMARY_CHARS = 300  # of a recorded phase's outputs, printed when it ends


class PhaseRunner:
    """Runs named phases in order: each timed and printed, and run once when it keeps ``markers``."""

    def __init__(
        self,
        phases: Sequence[str],
        *,
        markers: str | Path | None = None,
        only: Sequence[str] | None = None,
        groups: Mapping[str, Sequence[str]] | None = None,
        stream: TextIO | None = None,
    ) -> None:
        self.phases = list(phases)
        self.markers = Path(markers) if markers is not None else None
        if self.markers is not None:
            self.markers.mkdir(parents=True, exist_ok=True)
        self.only = self._expand(only, groups or {}) if only else None  # empty: every phase
        self.seconds: dict[str, float] = {}  # wall time of each phase run by this runner
        self.stream = stream
        self._start = time.perf_counter()

    def _expand(self, only: Sequence[str], groups: Mapping[str, Sequence[str]]) -> set[str]:
        names: set[str] = set()
        for name in only:
            members = groups.get(name, [name])
            for member in members:
                self._position(member)  # an unknown name fails here, before anything runs
            names.update(members)
        return names

    def _position(self, name: str) -> str:
        if name not in self.phases:
            raise KeyError(f"unknown phase {name!r}; phases are {self.phases}")
        return f"[{self.phases.index(name) + 1}/{len(self.phases)}] {name}"

    def _print(self, text: str) -> None:
        # resolved at each print, so a stream swapped in later (a test's capture) is used
        print(text, file=self.stream or sys.stdout, flush=True)

    def marker(self, name: str) -> Path | None:
        """The file that records phase ``name`` once it has ended (None: the run is not resumable)."""
        return None if self.markers is None else self.markers / f"{name}.json"

    def run(self, name: str, what: str, fn: Callable[..., T], *args: Any) -> T | None:
        """``fn(*args)`` as phase ``name``: its recorded outputs if it has a marker, None when
        ``only`` leaves it out, else what it returns (plus ``seconds`` when it is recorded)."""
        position, marker = self._position(name), self.marker(name)
        if marker is not None and marker.is_file():
            self._print(f"{position}: done earlier ({marker})")
            return json.loads(marker.read_text())
        if self.only is not None and name not in self.only:
            return None
        self._print(f"\n{position}: {what} ...")
        start = time.perf_counter()
        try:
            result = fn(*args)
        except BaseException:
            self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - start
            self._print(f"{position}: failed after {_duration(self.seconds[name])}")
            raise
        self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - start
        if marker is None:
            self._print(f"{position}: {_duration(self.seconds[name])}")
            return result
        if not isinstance(result, Mapping):
            raise TypeError(
                f"phase {name!r} returned {type(result).__name__}: a recorded phase returns a mapping"
            )
        recorded = dict(result) | {"seconds": round(self.seconds[name], 1)}
        marker.write_text(json.dumps(recorded, indent=2) + "\n")
        summary = json.dumps(recorded)[:SUMMARY_CHARS]
        self._print(f"{position}: {_duration(self.seconds[name])}: {summary}")
        return recorded  # type: ignore[return-value]

    @property
    def total(self) -> float:
        """Wall time since the runner was made, in seconds."""
        return time.perf_counter() - self._start


def _duration(seconds: float) -> str:
    """``12.3 s`` or, from ten minutes on, ``75.4 min``."""
    return f"{seconds:.1f} s" if seconds < 600 else f"{seconds / 60:.1f} min"


def phase_time_table(seconds: Mapping[str, float], total: float, total_label: str = "**total**") -> str:
    """Markdown: one row per phase with its wall time in seconds, then ``total_label`` and the total."""
    return "\n".join(
        ["| phase | wall time (s) |", "|---|---:|"]
        + [f"| {name} | {sec:.1f} |" for name, sec in seconds.items()]
        + [f"| {total_label} | **{total:.1f}** |"]
    )
