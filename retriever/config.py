"""Server options, validated once at start-up so a typo fails fast with the option's name."""

from __future__ import annotations

from dataclasses import dataclass, fields


@dataclass
class ServerConfig:
    """Limits and batching knobs for ``retriever.server``.

    The request limits bound the work one request can cause (``/retrieve``'s queries,
    ``/open_page``'s items and windows; an id or a title is bounded by ``max_query_chars``
    like a query); ``max_pending`` bounds the queued work overall (beyond it the server
    answers 503 + Retry-After instead of letting latency grow without bound);
    ``max_batch_size``/``batch_wait_ms`` shape the micro-batches.
    """

    host: str = "127.0.0.1"
    port: int = 8000
    default_topk: int = 3
    max_topk: int = 100
    max_queries_per_request: int = 512
    max_query_chars: int = 4096
    default_page_words: int = 200  # /open_page: a window's length when a request gives none
    max_page_words: int = 2000  # /open_page: the longest window one item may ask for
    max_pages_per_request: int = 512  # /open_page: items per request
    max_batch_size: int = 64  # queries per backend call
    batch_wait_ms: float = (
        5.0  # wait this long to fill a batch, only when recent load suggests more is coming
    )
    max_pending: int = 4096  # queries queued or running; beyond it -> 503
    retry_after_s: int = 1
    cache_size: int = 20_000  # LRU entries keyed by (query, topk); 0 disables
    access_log: str | None = "-"  # "-" = stderr, a path = append JSON lines there, None = off
    shutdown_timeout_s: float = 10.0
    workers: int = 1  # server processes sharing the port (retriever.workers)

    def __post_init__(self) -> None:
        positive = (
            "default_topk",
            "max_topk",
            "max_queries_per_request",
            "max_query_chars",
            "default_page_words",
            "max_page_words",
            "max_pages_per_request",
            "max_batch_size",
            "max_pending",
            "retry_after_s",
            "workers",
        )
        for name in positive:
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name}: expected an integer >= 1, got {value!r}")
        for name in ("batch_wait_ms", "shutdown_timeout_s", "cache_size"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name}: expected >= 0, got {getattr(self, name)!r}")
        if not 0 <= self.port <= 65535:
            raise ValueError(f"port: expected 0..65535, got {self.port}")
        if self.workers > 1 and self.port == 0:
            raise ValueError(
                "port: 0 lets each process pick its own port; with workers > 1 give the port they share"
            )
        if self.default_topk > self.max_topk:
            raise ValueError(f"default_topk: {self.default_topk} exceeds max_topk {self.max_topk}")
        if self.default_page_words > self.max_page_words:
            raise ValueError(
                f"default_page_words: {self.default_page_words} exceeds max_page_words {self.max_page_words}"
            )

    @classmethod
    def field_names(cls) -> list[str]:
        return [f.name for f in fields(cls)]
