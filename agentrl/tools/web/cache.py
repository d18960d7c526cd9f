"""A persistent on-disk cache of web-search answers (SQLite), shared by threads and processes.

A cached answer never reaches the network, so a question seen in an earlier epoch, by
another trajectory or by another Ray worker costs nothing. An entry is keyed by
``cache_key``: the API's identity (its name and endpoint URL), the normalised query
(``normalise_query``: Unicode NFKC, case-folded, runs of whitespace collapsed) and every
other request parameter that changes the answer (``num``, ...). Entries older than
``ttl_s`` are misses and are overwritten by the next answer (``ttl_s=None``: never stale).

Concurrency: one connection per process (opened lazily, reopened after a fork), guarded
by a lock, used from worker threads (``aget``/``aput``) so a write waiting for another
process's lock never stalls the event loop. The file is in WAL mode, so readers never wait
for a writer, and writers from several processes queue on SQLite's own file lock for up to
``busy_timeout_s``. WAL needs a local file system (not NFS).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import re
import sqlite3
import threading
import time
import unicodedata
from pathlib import Path
from typing import Any

__all__ = ["SearchCache", "cache_key", "normalise_query"]

_SPACES = re.compile(r"\s+")
_SCHEMA = """
CREATE TABLE IF NOT EXISTS answers (
    key TEXT PRIMARY KEY,
    query TEXT NOT NULL,
    created REAL NOT NULL,
    body TEXT NOT NULL
)
"""


def normalise_query(query: str) -> str:
    """The form two queries that ask the same thing share: ``"  Paris\\tFRANCE "`` → ``"paris france"``.

    Punctuation and quotes are kept: a quoted phrase is a different search.
    """
    return _SPACES.sub(" ", unicodedata.normalize("NFKC", query).casefold()).strip()


def cache_key(api: str, endpoint: str, query: str, **params: Any) -> str:
    """A stable digest of the API identity, the normalised query and the other parameters."""
    identity = {"api": api, "endpoint": endpoint, "q": normalise_query(query), **params}
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode("utf-8")).hexdigest()


class SearchCache:
    """``key → JSON value`` in one SQLite file (see the module docstring)."""

    def __init__(
        self, path: str | os.PathLike[str], ttl_s: float | None = None, busy_timeout_s: float = 30.0
    ) -> None:
        if ttl_s is not None and ttl_s <= 0:
            raise ValueError(f"cache ttl_s must be > 0 or None, got {ttl_s}")
        if busy_timeout_s <= 0:
            raise ValueError(f"cache busy_timeout_s must be > 0, got {busy_timeout_s}")
        self.path = Path(path).expanduser()
        self.ttl_s = ttl_s
        self.busy_timeout_s = busy_timeout_s
        self._lock = threading.Lock()
        self._conn: sqlite3.Connection | None = None
        self._pid: int | None = None

    def __repr__(self) -> str:
        return f"SearchCache({str(self.path)!r}, ttl_s={self.ttl_s})"

    def _connection(self) -> sqlite3.Connection:
        # A connection must not cross a fork: a forked child opens its own.
        if self._conn is None or self._pid != os.getpid():
            self.path.parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(
                self.path, timeout=self.busy_timeout_s, isolation_level=None, check_same_thread=False
            )
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute(_SCHEMA)
            self._conn, self._pid = conn, os.getpid()
        return self._conn

    def get(self, key: str) -> Any | None:
        """The value stored under ``key``, or None when absent or older than ``ttl_s``."""
        with self._lock:
            row = (
                self._connection()
                .execute("SELECT created, body FROM answers WHERE key = ?", (key,))
                .fetchone()
            )
        if row is None:
            return None
        created, body = row
        if self.ttl_s is not None and time.time() - created > self.ttl_s:
            return None
        return json.loads(body)

    def put(self, key: str, query: str, value: Any) -> None:
        """Store ``value`` (JSON-serialisable) under ``key``; ``query`` is kept for a reader of the file."""
        body = json.dumps(value, ensure_ascii=False)
        with self._lock:
            self._connection().execute(
                "INSERT OR REPLACE INTO answers (key, query, created, body) VALUES (?, ?, ?, ?)",
                (key, query, time.time(), body),
            )

    def __len__(self) -> int:
        with self._lock:
            return int(self._connection().execute("SELECT COUNT(*) FROM answers").fetchone()[0])

    # A lock wait is bounded by busy_timeout_s, so the default executor's threads always return.
    async def aget(self, key: str) -> Any | None:
        """``get`` on a worker thread."""
        return await asyncio.to_thread(self.get, key)

    async def aput(self, key: str, query: str, value: Any) -> None:
        """``put`` on a worker thread."""
        await asyncio.to_thread(self.put, key, query, value)

    def close(self) -> None:
        """Close this process's connection (a later call reopens it)."""
        with self._lock:
            if self._conn is not None and self._pid == os.getpid():
                self._conn.close()
            self._conn, self._pid = None, None
