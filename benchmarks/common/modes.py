"""One process per measured mode: run a benchmark module once per mode and collect what each reports."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Sequence
from typing import Any

RESULT = "RESULT "  # the line a mode's process reports its figures on


def report_figures(figures: dict[str, Any]) -> None:
    """What a mode's process prints last, for :func:`run_modes` to read."""
    print(RESULT + json.dumps(figures), flush=True)


def run_modes(module: str, modes: Sequence[tuple[str, Sequence[str]]]) -> dict[str, dict[str, Any]]:
    """Run ``python -m module`` once per mode, each in a fresh process (so its memory figures are
    its own), with that mode's arguments; echo what it prints and return each mode's figures."""
    figures = {}
    for name, args in modes:
        command = [sys.executable, "-m", module, *args]
        done = subprocess.run(command, stdout=subprocess.PIPE, text=True, check=True)
        for line in done.stdout.splitlines():
            if line.startswith(RESULT):
                figures[name] = json.loads(line[len(RESULT) :])
            else:
                print(line, flush=True)
    return figures
