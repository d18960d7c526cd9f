"""Corpus reading, validation and the on-disk document store.

The corpus is jsonl in wiki-18 style: one ``{"id": str, "contents": "\\"Title\\"\\ntext"}``
object per line.  Malformed lines are rejected with their line number instead of being
skipped, because a silently shorter corpus shifts every row id an index refers to.

The document store is an Arrow IPC file written in fixed-size record batches and read
through a memory map.  Row ``i`` lives in batch ``i // batch_rows`` at offset
``i % batch_rows``, so a lookup is O(1), zero-copy, and the resident memory is only the
pages actually touched -- the full wiki-18 (21M passages, ~13 GB) is never loaded.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import pyarrow as pa

DOCSTORE_FILE = "docs.arrow"
DEFAULT_BATCH_ROWS = 16_384
_SCHEMA = pa.schema([("id", pa.string()), ("contents", pa.string())])


class CorpusFormatError(ValueError):
    """A corpus line that is not a ``{"id": str, "contents": str}`` JSON object."""

    def __init__(self, path: str | Path, line_no: int, reason: str) -> None:
        super().__init__(f"{path}:{line_no}: {reason}")
        self.path = str(path)
        self.line_no = line_no
        self.reason = reason


@dataclass(frozen=True)
class Passage:
    """One corpus passage; ``contents`` keeps the wiki-18 ``"Title"\\ntext`` layout."""

    id: str
    contents: str

    @property
    def title(self) -> str:
        first = self.contents.split("\n", 1)[0]
        return first.strip().strip('"')

    @property
    def text(self) -> str:
        parts = self.contents.split("\n", 1)
        return parts[1] if len(parts) == 2 else parts[0]


def parse_corpus_line(line: str, line_no: int, path: str | Path = "<corpus>") -> Passage:
    """Parse and validate one jsonl line; raise :class:`CorpusFormatError` naming the problem."""
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as exc:
        raise CorpusFormatError(path, line_no, f"invalid JSON ({exc.msg} at column {exc.colno})") from None
    if not isinstance(obj, dict):
        raise CorpusFormatError(path, line_no, f"expected a JSON object, got {type(obj).__name__}")
    for field in ("id", "contents"):
        if field not in obj:
            raise CorpusFormatError(path, line_no, f"missing field {field!r}")
    doc_id, contents = obj["id"], obj["contents"]
    if isinstance(doc_id, int) and not isinstance(doc_id, bool):
        doc_id = str(doc_id)  # numeric ids (FlashRAG dumps) are fine; we serve them as strings
    if not isinstance(doc_id, str) or not doc_id:
        raise CorpusFormatError(path, line_no, f"field 'id' must be a non-empty string, got {doc_id!r}")
    if not isinstance(contents, str) or not contents.strip():
        raise CorpusFormatError(path, line_no, "field 'contents' must be a non-empty string")
    return Passage(doc_id, contents)


def iter_corpus(path: str | Path) -> Iterator[Passage]:
    """Yield validated passages in file order (row ``i`` of every index is the ``i``-th yield).

    Blank lines are errors too: they usually mean a truncated or concatenated file.
    """
    path = Path(path)
    with path.open("r", encoding="utf-8") as fh:
        for line_no, line in enumerate(fh, start=1):
            if not line.strip():
                raise CorpusFormatError(path, line_no, "blank line")
            yield parse_corpus_line(line, line_no, path)


def contents_in_chunks(passages: Iterable[Passage], size: int) -> Iterator[list[str]]:
    """The passages' ``contents`` in lists of at most ``size``: bounded memory for index builds."""
    chunk: list[str] = []
    for passage in passages:
        chunk.append(passage.contents)
        if len(chunk) >= size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def count_lines(path: str | Path) -> int:
    """Fast line count without parsing: newlines, plus a last line that has none."""
    n = 0
    last = b"\n"
    with Path(path).open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            n += chunk.count(b"\n")
            last = chunk[-1:]
    return n + (last != b"\n")


def write_docstore(
    passages: Iterator[Passage], out_dir: str | Path, batch_rows: int = DEFAULT_BATCH_ROWS
) -> int:
    """Stream passages into ``out_dir/docs.arrow``; return the number written.

    Every record batch except the last has exactly ``batch_rows`` rows; the reader relies on it.
    """
    out = Path(out_dir) / DOCSTORE_FILE
    tmp = out.with_suffix(".arrow.tmp")
    n = 0
    ids: list[str] = []
    contents: list[str] = []
    meta = {b"batch_rows": str(batch_rows).encode()}
    with pa.OSFile(str(tmp), "wb") as sink, pa.ipc.new_file(sink, _SCHEMA.with_metadata(meta)) as writer:
        for p in passages:
            ids.append(p.id)
            contents.append(p.contents)
            if len(ids) == batch_rows:
                writer.write_batch(pa.record_batch([ids, contents], schema=_SCHEMA))
                n += len(ids)
                ids, contents = [], []
        if ids:
            writer.write_batch(pa.record_batch([ids, contents], schema=_SCHEMA))
            n += len(ids)
    tmp.replace(out)
    return n


class DocStoreLike(Protocol):
    """What the backends need of a document store: its size and row -> passage lookups."""

    def __len__(self) -> int: ...

    def get(self, row: int) -> Passage: ...

    def get_many(self, rows: Sequence[int]) -> list[Passage]: ...


class DocStore:
    """Memory-mapped, O(1) row -> passage lookup over ``docs.arrow``."""

    def __init__(self, index_dir: str | Path) -> None:
        path = Path(index_dir) / DOCSTORE_FILE
        if not path.exists():
            raise FileNotFoundError(
                f"no document store at {path}; build the index with retriever.build_index"
            )
        self.path = path
        self._reader = pa.ipc.open_file(pa.memory_map(str(path), "r"))
        meta = self._reader.schema.metadata or {}
        self._batch_rows = int(meta.get(b"batch_rows", DEFAULT_BATCH_ROWS))
        nb = self._reader.num_record_batches
        self._batches = [self._reader.get_batch(i) for i in range(nb)]  # zero-copy views into the map
        self._len = sum(b.num_rows for b in self._batches)
        # Keep column handles so lookups don't re-resolve columns each time.
        self._ids = [b.column(0) for b in self._batches]
        self._contents = [b.column(1) for b in self._batches]

    def __len__(self) -> int:
        return self._len

    def get(self, row: int) -> Passage:
        """Return passage ``row`` (0-based, corpus order)."""
        if not 0 <= row < self._len:
            raise IndexError(f"row {row} out of range for a corpus of {self._len} passages")
        b, off = divmod(int(row), self._batch_rows)
        return Passage(self._ids[b][off].as_py(), self._contents[b][off].as_py())

    def get_many(self, rows: Sequence[int]) -> list[Passage]:
        return [self.get(r) for r in rows]

    def columns(self) -> Iterator[tuple[pa.Array, pa.Array]]:
        """The ``(ids, contents)`` columns batch by batch, in corpus order (zero-copy views)."""
        yield from zip(self._ids, self._contents, strict=True)
