"""The page reader's index: a title's consecutive corpus chunks read as one page, a window of words at a time.

wiki-18 (DPR's ``psgs_w100``) cuts every article into 100-word chunks stored as consecutive
rows, each ``"Title"\\ntext``. A **page** is a maximal run of consecutive rows with one title;
its text is the chunks' texts (the title line left out) joined by one space, which for
wiki-18 gives back the article's whitespace-collapsed text. A title that occurs in several
runs (a corpus merged from several sources) has several pages: a title opens the first in
corpus order, an id opens the one that holds it.

Windows are counted in **words**, Python's ``str.split`` words (maximal runs of
non-whitespace). The window ``(offset, length)`` is the page's text from the first character
of word ``offset`` up to the first character of word ``offset + length``, or to the page's
end for the last window (and from the page's first character for offset 0). So every window
is a slice of the page, consecutive windows concatenate to the page byte for byte, and a
window inside one chunk is a slice of that chunk's corpus ``contents``.

The index (id -> row, title -> pages) is built once from the document store, reading only
the title lines; a page's word counts are computed when it is first opened and kept in a
bounded LRU, so a window costs the chunks it covers, not the whole page.
"""

from __future__ import annotations

import re
import time
from bisect import bisect_right
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import pyarrow.compute as pc

from retriever.corpus import DocStore

__all__ = ["PageIndex", "PageWindow", "title_key"]

_TITLE_LINE = r"^(?P<line>[^\n]*)"  # RE2, run by Arrow over a whole column at once
_WORD = re.compile(r"\S+")  # the words of str.split: re's \s and str.isspace agree on Unicode


def title_key(title: str) -> str:
    """A title as pages are keyed: ``Passage.title``'s rule (whitespace, then double quotes, stripped)."""
    return title.strip().strip('"')


def _chunk_text(contents: str) -> str:
    """``Passage.text``: the contents after the title line (the whole contents if there is none)."""
    parts = contents.split("\n", 1)
    return parts[1] if len(parts) == 2 else parts[0]


def _word_start(text: str, j: int) -> int:
    """Character index of word ``j`` (0-based) of ``text``; ``text`` has more than ``j`` words."""
    for i, match in enumerate(_WORD.finditer(text)):
        if i == j:
            return match.start()
    raise IndexError(f"word {j} of a text with {len(text.split())} words")


@dataclass(frozen=True)
class PageWindow:
    """One window of one page, as ``POST /open_page`` returns it."""

    title: str
    text: str  # the page's characters from word ``offset`` to word ``offset + words``
    offset: int
    words: int  # words in this window (fewer than asked at the page's end, 0 past it)
    total_words: int
    next_offset: int | None  # where the next window starts; None: this window reaches the end
    chunk_ids: list[str]  # the passages from the window's first word's to its last word's, in order
    id_offset: int | None  # opened by id: the word at which that passage starts; by title: None
    title_pages: int  # how many pages carry this title (a title opens the first)

    def as_json(self) -> dict[str, Any]:
        return {"found": True, **self.__dict__}


class PageIndex:
    """Title and id lookup over a document store, and word windows of its pages."""

    def __init__(self, docs: DocStore, layout_cache_pages: int = 4096) -> None:
        t0 = time.perf_counter()
        self._docs = docs
        self._row_of_id: dict[str, int] = {}
        self._page_start: list[int] = []  # first row of each page, then the corpus size
        self._page_title: list[str] = []
        self._first_page: dict[str, int] = {}
        self._extra_pages: dict[str, int] = {}  # titles with more than one page -> their count
        row, previous = 0, None
        for ids, contents in docs.columns():
            first_lines = pc.extract_regex(contents, _TITLE_LINE).field(0).to_pylist()
            for doc_id, line in zip(ids.to_pylist(), first_lines, strict=True):
                title = title_key(line)
                if title != previous:
                    page = len(self._page_start)
                    self._page_start.append(row)
                    self._page_title.append(title)
                    if title in self._first_page:
                        self._extra_pages[title] = self._extra_pages.get(title, 1) + 1
                    else:
                        self._first_page[title] = page
                    previous = title
                self._row_of_id.setdefault(doc_id, row)  # a repeated id opens its first passage
                row += 1
        self._page_start.append(row)
        self._cache_size = layout_cache_pages
        self._layouts: OrderedDict[int, tuple[list[int], list[int]]] = OrderedDict()
        self.build_s = time.perf_counter() - t0

    def summary(self) -> dict[str, Any]:
        """What ``/health`` and the server's ready event report."""
        return {"pages": self.pages, "titles": self.titles, "build_s": round(self.build_s, 3)}

    @property
    def pages(self) -> int:
        return len(self._page_title)

    @property
    def titles(self) -> int:
        return len(self._first_page)

    def open(self, doc_id: str | None, title: str | None, offset: int, length: int) -> dict[str, Any]:
        """The window as JSON: a :class:`PageWindow`, or ``{"found": false, "error"}`` for an
        unknown id or title (a per-item answer, so one bad item does not fail a batch)."""
        if doc_id is not None:
            row = self._row_of_id.get(doc_id)
            if row is None:
                return {"found": False, "error": f"no passage with id {doc_id!r}"}
            page = bisect_right(self._page_start, row) - 1
        else:
            key = title_key(title or "")
            page = self._first_page.get(key, -1)
            if page < 0:
                return {"found": False, "error": f"no page titled {key!r}"}
            row = None
        return self.window(page, offset, length, row).as_json()

    def window(self, page: int, offset: int, length: int, row: int | None = None) -> PageWindow:
        """Words ``[offset, offset + length)`` of ``page`` (``row``: the passage it was opened by)."""
        if offset < 0 or length < 1:
            raise ValueError(f"offset must be >= 0 and length >= 1, got {offset}, {length}")
        first = self._page_start[page]
        n_chunks = self._page_start[page + 1] - first
        words, chars = self._layout(page)
        total = words[-1]
        title = self._page_title[page]
        id_offset = words[row - first] if row is not None else None
        title_pages = self._extra_pages.get(title, 1)
        if offset >= total:
            return PageWindow(title, "", offset, 0, total, None, [], id_offset, title_pages)
        end = min(offset + length, total)
        k0 = 0 if offset == 0 else bisect_right(words, offset) - 1  # offset 0 keeps leading space
        k1 = n_chunks - 1 if end == total else bisect_right(words, end) - 1
        passages = self._docs.get_many(range(first + k0, first + k1 + 1))
        texts = [_chunk_text(p.contents) for p in passages]
        start = 0 if offset == 0 else chars[k0] + _word_start(texts[0], offset - words[k0])
        stop = chars[-1] - 1 if end == total else chars[k1] + _word_start(texts[-1], end - words[k1])
        joined = " ".join(texts)
        text = joined[start - chars[k0] : stop - chars[k0]]
        k_first, k_last = bisect_right(words, offset) - 1, bisect_right(words, end - 1) - 1
        chunk_ids = [p.id for p in passages[k_first - k0 : k_last - k0 + 1]]  # k0 <= k_first, k_last <= k1
        next_offset = end if end < total else None
        return PageWindow(
            title, text, offset, end - offset, total, next_offset, chunk_ids, id_offset, title_pages
        )

    def _layout(self, page: int) -> tuple[list[int], list[int]]:
        """Cumulative word and character counts of ``page``'s chunks (``chars`` counts each
        chunk's joining space, so the page is ``chars[-1] - 1`` characters long)."""
        cached = self._layouts.get(page)
        if cached is not None:
            self._layouts.move_to_end(page)
            return cached
        words, chars = [0], [0]
        for row in range(self._page_start[page], self._page_start[page + 1]):
            text = _chunk_text(self._docs.get(row).contents)
            words.append(words[-1] + len(text.split()))
            chars.append(chars[-1] + len(text) + 1)
        self._layouts[page] = (words, chars)
        if len(self._layouts) > self._cache_size:
            self._layouts.popitem(last=False)
        return words, chars
