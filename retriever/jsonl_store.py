"""A document store that reads passages straight from the user's corpus jsonl through a line-offset table.

Search-R1 users already have ``wiki-18.jsonl`` (21M passages, ~13 GB).  Copying it into
``docs.arrow`` doubles the disk it takes and costs a full pass; instead ``build_offsets``
validates every line once and writes the byte offset where each line starts (``int64``,
``N + 1`` entries, the last one the file's size) as a ``.npy`` file.  At serve time both the
corpus and the table are memory-mapped, so opening the store takes milliseconds, row ``i`` is
the bytes ``offsets[i]:offsets[i+1]`` parsed as one JSON line, and resident memory is the pages
the answered queries touched.

The table records the corpus's size; a corpus that changed since (another size, or sampled
lines that no longer end where the table says) is refused at open, because every row id an
index refers to would silently shift.
"""

from __future__ import annotations

import mmap
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from retriever.corpus import CorpusFormatError, Passage, parse_corpus_line

OFFSETS_FILE = "corpus_offsets.npy"


def build_offsets(
    corpus: str | Path,
    out_path: str | Path,
    validate: bool = True,
    on_progress: Callable[[int], None] | None = None,
    progress_every: int = 65_536,
) -> int:
    """Write the line-start offsets of ``corpus`` to ``out_path``; return the number of passages.

    With ``validate`` each line is parsed as a passage (the same rule as ``iter_corpus``), so a
    malformed line stops the build with its line number instead of being found at serve time.
    """
    corpus = Path(corpus)
    offsets: list[int] = [0]
    pos = 0
    done = 0
    with corpus.open("rb") as fh:
        for line_no, raw in enumerate(fh, start=1):
            if validate:
                if not raw.strip():
                    raise CorpusFormatError(corpus, line_no, "blank line")
                try:
                    text = raw.decode("utf-8")
                except UnicodeDecodeError as exc:
                    raise CorpusFormatError(corpus, line_no, f"not UTF-8 ({exc.reason})") from None
                parse_corpus_line(text, line_no, corpus)
            pos += len(raw)
            offsets.append(pos)
            done += 1
            if on_progress and done % progress_every == 0:
                on_progress(progress_every)
    if on_progress and done % progress_every:
        on_progress(done % progress_every)
    out_path = Path(out_path)
    tmp = out_path.with_name(out_path.name + ".tmp.npy")
    np.save(tmp, np.asarray(offsets, dtype=np.int64))
    tmp.replace(out_path)
    return done


class JsonlDocStore:
    """O(1) row -> passage lookup over a corpus jsonl and its offset table, both memory-mapped."""

    def __init__(self, corpus: str | Path, offsets_path: str | Path) -> None:
        self.corpus = Path(corpus)
        if not self.corpus.is_file():
            raise FileNotFoundError(f"docstore.corpus: {self.corpus} is not a file (moved or deleted?)")
        offsets_path = Path(offsets_path)
        if not offsets_path.is_file():
            raise FileNotFoundError(
                f"docstore.offsets: no offset table at {offsets_path}; run python -m retriever.attach_index"
            )
        self._offsets = np.load(offsets_path, mmap_mode="r")
        size = self.corpus.stat().st_size
        if int(self._offsets[-1]) != size:
            raise ValueError(
                f"docstore.corpus: {self.corpus} is {size} bytes but its offset table ends at "
                f"{int(self._offsets[-1])}: the corpus changed since the table was built; "
                "run python -m retriever.attach_index again"
            )
        self._len = len(self._offsets) - 1
        with self.corpus.open("rb") as fh:
            self._map = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) if size else None
        self._check_boundaries()

    def _check_boundaries(self, samples: int = 64) -> None:
        """Refuse a corpus rewritten at the same size: sampled rows must still end in a newline."""
        if self._map is None or self._len == 0:
            return
        rows = np.unique(np.linspace(0, self._len - 2, min(samples, self._len - 1)).astype(np.int64))
        rows = rows[rows >= 0] if self._len > 1 else np.array([], dtype=np.int64)
        for row in rows.tolist():
            end = int(self._offsets[row + 1])
            if self._map[end - 1 : end] != b"\n":
                raise ValueError(
                    f"docstore.corpus: line {row + 1} of {self.corpus} no longer ends where its offset "
                    "table says: the corpus changed since the table was built; "
                    "run python -m retriever.attach_index again"
                )

    def __len__(self) -> int:
        return self._len

    def get(self, row: int) -> Passage:
        """Return passage ``row`` (0-based, corpus order), parsed from its line."""
        if not 0 <= row < self._len:
            raise IndexError(f"row {row} out of range for a corpus of {self._len} passages")
        assert self._map is not None  # a non-empty store has a map
        start, end = int(self._offsets[row]), int(self._offsets[row + 1])
        line = self._map[start:end].decode("utf-8")
        return parse_corpus_line(line, row + 1, self.corpus)

    def get_many(self, rows: Sequence[int]) -> list[Passage]:
        return [self.get(r) for r in rows]

    def summary(self) -> dict:
        return {"kind": "jsonl", "corpus": str(self.corpus), "passages": self._len}
