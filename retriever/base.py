"""The contract every search backend implements.

Backends are synchronous and batched on purpose: the server calls them from a worker
thread with a whole micro-batch of queries, so one call = one encode + one index search.

A backend may declare ``inline_ok = True`` when a query costs well under a millisecond of
Python (BM25): the server then runs its batches on the event loop itself, as the hop to the
worker thread and back (a future, a wake-up of the loop, the GIL changing hands) would cost
more than the search.  Absent means False: dense (an encoder forward pass of milliseconds),
hybrid and reranked backends (they contain one) and pyserini (a JVM call) leave it unset.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable


@dataclass(frozen=True)
class Hit:
    """One retrieved passage.  ``doc_id`` is the corpus id, the fusion key for hybrid search."""

    doc_id: str
    contents: str
    score: float

    def as_document(self) -> dict[str, str]:
        return {"id": self.doc_id, "contents": self.contents}


@runtime_checkable
class SearchBackend(Protocol):
    """A batched retriever: ``search(queries, k)[i]`` is the top-``k`` of ``queries[i]``, best first.

    Optional attribute (not part of the structural check): ``inline_ok: bool`` (see above).
    """

    name: str

    def __len__(self) -> int:
        """Number of passages searchable."""
        ...

    def search(self, queries: list[str], k: int) -> list[list[Hit]]: ...
