"""The LLM judge's disk cache: one small JSON file per judged request, keyed by the request's hash.

A judge asked the same thing twice (the same URL, model, messages, sampling fields and mode) at
temperature 0 answers the same, so a repeat, in this run or a later one, is read from disk
instead of paid for. Only replies that parsed are stored (``rewards/judge.py`` decides), so a
malformed reply is asked again next time rather than remembered.

Files are written atomically (a temporary file in the same directory, then ``os.replace``): a
reader sees a whole entry or none, even with several processes sharing the directory. An entry
that cannot be read (truncated by a crash of an older writer, edited by hand) is a miss.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = ["JudgeCache", "request_key"]


def request_key(url: str, mode: str, body: Mapping[str, Any]) -> str:
    """The cache key of one request: sha256 of its URL, mode and whole JSON body, canonically encoded.

    The body holds the model, the messages and the sampling fields (temperature, max_tokens), so
    any change to what the judge is asked, or how, is a different key.
    """
    canonical = json.dumps(
        {"url": url, "mode": mode, "body": body}, sort_keys=True, ensure_ascii=False, separators=(",", ":")
    )
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


class JudgeCache:
    """A directory of ``<key>.json`` entries (created on first use), each a JSON object."""

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)

    def _path(self, key: str) -> Path:
        # the first two hex digits as a subdirectory keep a long run's directory listable
        return self.directory / key[:2] / f"{key}.json"

    def get(self, key: str) -> dict[str, Any] | None:
        """The entry stored under ``key``; None when there is none or it cannot be read."""
        try:
            entry = json.loads(self._path(key).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        return entry if isinstance(entry, dict) else None

    def put(self, key: str, entry: Mapping[str, Any]) -> None:
        """Store ``entry`` under ``key`` atomically (a concurrent reader sees the old entry or this one)."""
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{key[:8]}-", suffix=".tmp")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                json.dump(dict(entry), handle, ensure_ascii=False)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
