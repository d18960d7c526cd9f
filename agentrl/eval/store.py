"""The resumable per-question results file.

``predictions.jsonl`` starts with one header line holding the evaluation's settings,
followed by one line per answered question, appended (and flushed to disk) batch by
batch as the evaluation runs. An interrupted evaluation re-opens the file, skips the
``(dataset, id)`` pairs already there and continues; a killed process can leave half a
line at the end, which is cut off on re-open (that question is simply run again).

Resuming with different settings (another model, top-k, decoding, question sample …)
would silently mix two experiments in one table, so it is an error that names every
setting that differs.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

__all__ = ["FORMAT", "PREDICTIONS_FILE", "ResultsStore", "SettingsMismatch", "settings_diff"]

FORMAT = "agentrl.eval/predictions-v1"
PREDICTIONS_FILE = "predictions.jsonl"


class SettingsMismatch(ValueError):
    """An existing results file was made with different settings."""


def settings_diff(old: Mapping[str, Any], new: Mapping[str, Any], ignore: Iterable[str] = ()) -> list[str]:
    """``key: old -> new`` for every top-level setting that differs (``ignore``d keys excepted)."""
    skip = set(ignore)
    keys = sorted((set(old) | set(new)) - skip)
    return [f"{k}: {old.get(k)!r} -> {new.get(k)!r}" for k in keys if old.get(k) != new.get(k)]


class ResultsStore:
    """Append-only per-question records under a settings header (see the module docstring).

    ``ignore``: settings that may change between runs without invalidating the records
    (where the retriever listens, the batch size). ``legacy``: settings added after a file
    may have been written, with the value such a file was made under (filled into its
    header before the comparison, so an old file resumes only under that value).
    """

    def __init__(
        self,
        path: str | Path,
        settings: Mapping[str, Any],
        ignore: Iterable[str] = (),
        legacy: Mapping[str, Any] | None = None,
    ) -> None:
        self.path = Path(path)
        self.settings = dict(settings)
        self.records: list[dict[str, Any]] = []
        if self.path.exists() and self.path.stat().st_size > 0:
            self._load(ignore, dict(legacy or {}))
        else:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            header = {"format": FORMAT, "settings": self.settings}
            self.path.write_text(json.dumps(header, ensure_ascii=False) + "\n", encoding="utf-8")
        self.done = {(r["dataset"], r["id"]) for r in self.records}

    def _load(self, ignore: Iterable[str], legacy: Mapping[str, Any]) -> None:
        raw = self.path.read_bytes()
        lines = raw.split(b"\n")
        complete = len(raw) if raw.endswith(b"\n") else len(raw) - len(lines[-1])
        if complete < len(raw):
            # A process killed mid-write leaves a partial last line: drop it, keep the rest.
            with self.path.open("r+b") as f:
                f.truncate(complete)
            lines = lines[:-1]
        lines = [ln for ln in lines if ln.strip()]
        if not lines:
            raise ValueError(f"{self.path}: no header line; delete the file to start over")
        try:
            header = json.loads(lines[0])
        except json.JSONDecodeError:
            raise ValueError(f"{self.path}:1: header is not JSON; delete the file to start over") from None
        if not isinstance(header, dict) or header.get("format") != FORMAT:
            raise ValueError(
                f"{self.path}:1: not an agentrl evaluation results file (expected format {FORMAT!r})"
            )
        diff = settings_diff(dict(legacy) | (header.get("settings") or {}), self.settings, ignore)
        if diff:
            raise SettingsMismatch(
                f"{self.path} was written with different settings, so its results cannot be resumed:\n  "
                + "\n  ".join(diff)
                + "\nUse another output directory, or delete the file to start over."
            )
        seen: set[tuple[str, str]] = set()
        for lineno, line in enumerate(lines[1:], start=2):
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValueError(
                    f"{self.path}:{lineno}: corrupt record ({exc.msg}); delete the file to start over"
                ) from None
            key = (record.get("dataset"), record.get("id"))
            if None in key:
                raise ValueError(f"{self.path}:{lineno}: record has no 'dataset'/'id'")
            if key in seen:
                raise ValueError(f"{self.path}:{lineno}: duplicate record for {key}")
            seen.add(key)
            self.records.append(record)

    def append(self, records: Iterable[Mapping[str, Any]]) -> None:
        """Write records durably (flush + fsync) so a crash loses at most the batch in flight."""
        new = [dict(r) for r in records]
        for r in new:
            key = (r["dataset"], r["id"])
            if key in self.done:
                raise ValueError(f"{self.path}: record for {key} already written")
            self.done.add(key)
        if not new:
            return
        with self.path.open("a", encoding="utf-8") as f:
            f.write("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in new))
            f.flush()
            os.fsync(f.fileno())
        self.records.extend(new)
