"""Atomic, self-describing checkpoints.

A checkpoint is written into ``<run_dir>/checkpoints/.step_N.partial`` and renamed to
``step_N`` only after every role wrote its part and ``COMPLETE`` was written last, so a
process killed mid-save leaves a ``.partial`` directory that resume ignores (and the
next save removes), never a directory that looks complete but is not.

A checkpoint may carry a ``score`` (a validation metric, higher is better) in its ``COMPLETE``
record; pruning then keeps the best-scored one besides the last ``keep_last``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

COMPLETE_MARKER = "COMPLETE"
TRAINER_STATE = "trainer_state.pt"


@dataclass
class TrainerState:
    """What a checkpoint holds of the driver (``trainer_state.pt``): where the run stands."""

    global_step: int
    loader: dict[str, int]  # where a resumed run draws its prompts from
    kl_ctrl: dict[str, Any]
    rng: dict[str, Any]
    train_seconds: float = 0.0  # fit()'s time so far (trainer.time_budget_minutes)
    # what the rollouts drawn ahead keep beyond the loader (group_buffer: the groups already trained)
    ahead: dict[str, Any] = field(default_factory=dict)

    def save(self, directory: Path) -> None:
        torch.save(asdict(self), directory / TRAINER_STATE)

    @classmethod
    def load(cls, directory: Path) -> TrainerState:
        state = torch.load(directory / TRAINER_STATE, weights_only=False)
        # train_seconds is absent in checkpoints written before the time budget existed
        return cls(
            **{key: state[key] for key in ("global_step", "loader", "kl_ctrl", "rng")},
            train_seconds=state.get("train_seconds", 0.0),
            ahead=state.get("ahead", {}),  # absent before trainer.take_groups
        )


_STEP_DIR = re.compile(r"^step_(\d+)$")


def checkpoint_step(path: Path) -> int | None:
    """The step a checkpoint directory (``step_N``) holds; None for any other name."""
    match = _STEP_DIR.match(path.name)
    return int(match.group(1)) if match else None


def rank_score(metrics: dict[str, float], key: str) -> float:
    """A step's value of ``trainer.keep_best_by`` (``key``), the rank of its checkpoint."""
    if key not in metrics:
        found = sorted(k for k in metrics if k.startswith("val/"))
        raise KeyError(f"trainer.keep_best_by='{key}' is not a validation metric; this run has {found}")
    return metrics[key]


class CheckpointManager:
    def __init__(self, run_dir: str | Path, keep_last: int = 2) -> None:
        self.root = Path(run_dir) / "checkpoints"
        self.keep_last = max(1, keep_last)

    def partial_dir(self, step: int) -> Path:
        """A fresh staging directory for step ``step`` (leftovers of a crashed save are removed)."""
        path = self.root / f".step_{step}.partial"
        if path.exists():
            shutil.rmtree(path)
        path.mkdir(parents=True)
        return path

    def commit(self, partial: Path, step: int, info: dict) -> Path:
        """Seal ``partial`` as the checkpoint of ``step`` and prune old ones. ``info["score"]``,
        when present, is what ``best()`` ranks by."""
        (partial / COMPLETE_MARKER).write_text(json.dumps({"step": step, **info}) + "\n")
        _fsync_dir(partial)
        final = self.root / f"step_{step}"
        if final.exists():
            shutil.rmtree(final)
        os.replace(partial, final)
        _fsync_dir(self.root)
        self._prune()
        return final

    def complete_checkpoints(self) -> list[tuple[int, Path]]:
        if not self.root.is_dir():
            return []
        found = []
        for child in self.root.iterdir():
            step = checkpoint_step(child)
            if step is not None and (child / COMPLETE_MARKER).is_file():
                found.append((step, child))
        return sorted(found)

    def latest(self) -> Path | None:
        complete = self.complete_checkpoints()
        return complete[-1][1] if complete else None

    def best(self) -> Path | None:
        """The checkpoint with the highest score (the later one on a tie); None when none has one."""
        scored = [
            (score, step, path)
            for step, path in self.complete_checkpoints()
            if (score := _score(path)) is not None
        ]
        return max(scored)[2] if scored else None

    def _prune(self) -> None:
        best = self.best()
        for _, path in self.complete_checkpoints()[: -self.keep_last]:
            if path != best:
                shutil.rmtree(path, ignore_errors=True)
        for stale in self.root.glob(".step_*.partial"):
            shutil.rmtree(stale, ignore_errors=True)


def _score(checkpoint: Path) -> float | None:
    score = json.loads((checkpoint / COMPLETE_MARKER).read_text()).get("score")
    return None if score is None else float(score)


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
