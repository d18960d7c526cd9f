"""The connection of a tool served by the retriever server: its timing options and its lazy HTTP client.

``SearchTool`` and ``PageReaderTool`` both call the retriever server through one
``RetrieverClient`` (``client.py``). :class:`RetrieverConnection` holds what they share:
the per-request timeout, the retries, the client's deadline over every attempt and its backoff
(by default ``timeout_s * (max_retries + 1) + 2 * max_retries``), the dispatcher's bound a
little longer than that deadline (so a dead server is named, not reported as a timeout), and
the client, built on the first call (inside the worker, never on the driver). aiohttp is
imported with the client, not with this module.
"""

from __future__ import annotations

from typing import Any

__all__ = ["RetrieverConnection"]


class RetrieverConnection:
    """A retriever tool's URL, timing and client (see the module docstring); raises ValueError
    naming the option for a timeout, retry count or deadline out of range."""

    def __init__(self, url: str, timeout_s: float, max_retries: int, deadline_s: float | None) -> None:
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
        if max_retries < 0:
            raise ValueError(f"max_retries must be >= 0, got {max_retries}")
        if deadline_s is not None and deadline_s <= 0:
            raise ValueError(f"deadline_s must be > 0, got {deadline_s}")
        self.url = url
        self.request_timeout_s = timeout_s
        self.max_retries = max_retries
        self.deadline_s = (
            deadline_s if deadline_s is not None else timeout_s * (max_retries + 1) + 2.0 * max_retries
        )
        self.tool_timeout_s = self.deadline_s + 5.0  # the dispatcher's bound of one call
        self._client: Any = None

    def client(self) -> Any:
        """The ``RetrieverClient``, built on first use."""
        if self._client is None:
            from agentrl.tools.retrieval.client import RetrieverClient

            self._client = RetrieverClient(
                self.url,
                timeout_s=self.request_timeout_s,
                deadline_s=self.deadline_s,
                max_attempts=self.max_retries + 1,
            )
        return self._client

    async def close(self) -> None:
        """Close the client's HTTP session of the current event loop (idempotent)."""
        if self._client is not None:
            await self._client.close()
