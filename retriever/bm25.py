"""Embedded BM25 with ``bm25s`` + PyStemmer: no JVM, index memory-mapped at serve time."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from pathlib import Path

import numpy as np

from retriever.base import Hit
from retriever.corpus import DocStoreLike, Passage, contents_in_chunks

BM25_SUBDIR = "bm25"
INLINE_MAX_PASSAGES = 1_000_000  # beyond it a query's score array costs milliseconds


def _stemmer(language: str | None):
    if not language:
        return None
    import Stemmer

    return Stemmer.Stemmer(language)


def build_bm25_index(
    passages: Iterable[Passage],
    out_dir: str | Path,
    k1: float = 0.9,
    b: float = 0.4,
    stemmer_language: str | None = "english",
    stopwords: str = "en",
    chunk_size: int = 8192,
    on_progress: Callable[[int], None] | None = None,
) -> dict:
    """Tokenize in chunks (a growing shared vocabulary), index, and write ``out_dir/bm25/``.

    k1=0.9, b=0.4 are the Anserini/pyserini defaults used for wiki-18 BM25 baselines.
    """
    import bm25s
    from bm25s.tokenization import Tokenized, Tokenizer

    sub = Path(out_dir) / BM25_SUBDIR
    sub.mkdir(parents=True, exist_ok=True)
    tokenizer = Tokenizer(stopwords=stopwords, stemmer=_stemmer(stemmer_language))
    ids: list[list[int]] = []
    for chunk in contents_in_chunks(passages, chunk_size):
        ids.extend(tokenizer.tokenize(chunk, update_vocab=True, return_as="ids", show_progress=False))
        if on_progress:
            on_progress(len(chunk))
    model = bm25s.BM25(k1=k1, b=b, method="lucene")
    model.index(Tokenized(ids=ids, vocab=tokenizer.get_vocab_dict()), show_progress=False)
    model.save(str(sub), show_progress=False)
    meta = {
        "k1": k1,
        "b": b,
        "stemmer_language": stemmer_language,
        "stopwords": stopwords,
        "num_passages": len(ids),
    }
    (sub / "config.json").write_text(json.dumps(meta, indent=2))
    return meta


# bm25s's default token pattern (bm25s.tokenize and bm25s.tokenization.Tokenizer): 2+ word characters
_TOKEN_PATTERN = re.compile(r"(?u)\b\w\w+\b")
_UNSET = -2  # a word not seen yet by QueryTokenizer (-1 = seen, and no vocabulary id)


class QueryTokenizer:
    """A query's vocabulary ids, as ``bm25s.tokenize(..., return_ids=False)`` followed by
    ``BM25.get_tokens_ids`` give them, at a dict lookup per word.

    ``bm25s.tokenize`` rebuilds its stop-word set, two (disabled) progress bars and a fresh
    vocabulary on every call, ~60 µs per query before any scoring; here each lower-cased word
    is stemmed once and its id (or its absence: a stop word, or a stem the corpus lacks) is
    remembered, in a map bounded by ``max_words`` (cleared when full: RL queries bring an
    open-ended stream of rare words).
    """

    def __init__(self, vocab: dict[str, int], stopwords: str, stemmer=None, max_words: int = 500_000) -> None:
        from bm25s.tokenization import Tokenizer

        self._vocab = vocab
        self._stop = frozenset(Tokenizer(stopwords=stopwords).stopwords)  # bm25s's own list
        self._stem = stemmer.stemWord if stemmer is not None else None
        self._ids: dict[str, int] = {}
        self._max_words = max_words

    def ids(self, text: str) -> list[int]:
        """Vocabulary ids of ``text``'s tokens in order, repeats kept, unknown stems left out."""
        known = self._ids
        out = []
        for word in _TOKEN_PATTERN.findall(text.lower()):
            i = known.get(word, _UNSET)
            if i == _UNSET:
                i = self._learn(word)
            if i >= 0:
                out.append(i)
        return out

    def _learn(self, word: str) -> int:
        stem = self._stem(word) if self._stem else word
        i = -1 if word in self._stop else self._vocab.get(stem, -1)  # stop words go before stemming
        if len(self._ids) >= self._max_words:
            self._ids.clear()
        self._ids[word] = i
        return i


class BM25Backend:
    """Batched BM25 search over a saved bm25s index (memory-mapped).

    ``inline_ok``: on a corpus of up to ``INLINE_MAX_PASSAGES`` a query costs ~0.1 ms, not much
    more than the hop to a worker thread and back, so the server may run this backend's batches on
    its event loop (``retriever.base``); a wiki-18-sized corpus (a score array of 21M floats a
    query) keeps the worker thread, so a batch never stalls the loop for seconds.
    """

    name = "bm25"
    inline_ok = True  # per instance: False past INLINE_MAX_PASSAGES (set in __init__)

    def __init__(self, index_dir: str | Path, docstore: DocStoreLike, n_threads: int = 0) -> None:
        import bm25s

        sub = Path(index_dir) / BM25_SUBDIR
        self.meta = json.loads((sub / "config.json").read_text())
        self._model = bm25s.BM25.load(str(sub), mmap=True, show_progress=False)
        self._stem = _stemmer(self.meta["stemmer_language"])
        self._tokenizer = QueryTokenizer(self._model.vocab_dict, self.meta["stopwords"], self._stem)
        # Plain ndarray views of the memory-mapped CSR arrays: slicing a np.memmap costs ~1 µs
        # of subclass bookkeeping per slice, and a query slices twice per token.
        scores = self._model.scores
        self._data, self._indices = np.asarray(scores["data"]), np.asarray(scores["indices"])
        self._indptr = np.asarray(scores["indptr"])
        self._n_threads = n_threads
        self.docstore = docstore
        self.inline_ok = int(self.meta["num_passages"]) <= INLINE_MAX_PASSAGES
        if self.meta["num_passages"] != len(docstore):
            raise ValueError(
                f"bm25 index has {self.meta['num_passages']} passages but the docstore {len(docstore)}"
            )

    def __len__(self) -> int:
        return int(self.meta["num_passages"])

    def _scores(self, ids: list[int]) -> np.ndarray:
        """``BM25.get_scores_from_ids(ids)``, bit for bit: the same ``np.add.at`` float32
        additions in the same order, on plain views of the memory map.  Variants with a
        non-occurrence term (bm25l, bm25+) go through bm25s."""
        if self._model.nonoccurrence_array is not None:
            return self._model.get_scores_from_ids(ids)
        scores = np.zeros(len(self), dtype=self._data.dtype)
        indptr, indices, data = self._indptr, self._indices, self._data
        for n, t in enumerate(ids):
            start, end = indptr[t], indptr[t + 1]
            if n == 0:  # 0 + x is x exactly: the first token's postings are copied, not added
                scores[indices[start:end]] = data[start:end]
            else:
                np.add.at(scores, indices[start:end], data[start:end])
        return scores

    def search(self, queries: list[str], k: int) -> list[list[Hit]]:
        if not queries:
            return []
        k = min(k, len(self))
        out: list[list[Hit]] = []
        for query in queries:
            scores = self._scores(self._tokenizer.ids(query))
            out.append([Hit(*self._doc(int(r)), float(scores[r])) for r in top_k_rows(scores, k)])
        return out

    def _doc(self, row: int) -> tuple[str, str]:
        p = self.docstore.get(row)
        return p.id, p.contents


def top_k_rows(scores: np.ndarray, k: int) -> np.ndarray:
    """Rows of the ``k`` best scores, best first, ties by row; pads with zero-score rows.

    Selects among the rows at or above a threshold only: numpy's argpartition degrades ~20x
    on arrays that are mostly equal (a BM25 score vector is mostly zeros), which made
    bm25s's own top-k the bottleneck (9 ms of a 10 ms query on the 34k corpus), and listing
    every non-zero row (a quarter of the corpus for a common word) costs more than the
    scoring.  The threshold is the ``k``-th best score of a strided sample of the rows: the
    sample's ``k`` best reach it, so the ``k`` best of all rows, and every row tied with the
    ``k``-th of them, reach it too.  The cut keeps every row tied with the ``k``-th best score,
    so ties go to the lowest rows (a partition alone picks among them arbitrarily).
    """
    threshold = 0.0
    step = len(scores) // max(1024, 64 * k)
    if step > 1:
        sample = scores[::step]
        threshold = float(np.partition(sample, len(sample) - k)[len(sample) - k])
    nz = np.flatnonzero(scores >= threshold) if threshold > 0 else np.flatnonzero(scores > 0)
    if len(nz) > k:
        values = scores[nz]
        kth = np.partition(values, len(values) - k)[len(values) - k]
        nz = nz[values >= kth]
    top = nz[np.lexsort((nz, -scores[nz]))][:k]
    if len(top) < k:
        taken = set(top.tolist())
        pad = [r for r in range(min(len(scores), k + len(top))) if r not in taken][: k - len(top)]
        top = np.concatenate([top, np.asarray(pad, dtype=top.dtype)])
    return top
