"""The search tool: ``<search> query </search>`` → top-k passages from the retriever.

The retriever is a separate HTTP service (``retriever/``, Search-R1-compatible API)
reached through ``RetrieverClient``. Passages come back as wiki-18 style contents,
``"Title"\\ntext``, and are formatted the way Search-R1 policies were trained to read::

    Doc 1(Title: "Paris") Paris is the capital of France.
    Doc 2(Title: …) …

The manager wraps this text in ``<information>…</information>``.
"""

from __future__ import annotations

from typing import Any

from agentrl.tools.base import ToolResult
from agentrl.tools.retrieval.connection import RetrieverConnection


def format_document(rank: int, contents: str) -> str:
    """``Doc {rank}(Title: {first line}) {rest}`` for contents ``"Title"\\ntext``."""
    title, _, text = contents.partition("\n")
    return f"Doc {rank}(Title: {title.strip()}) {text.strip()}".rstrip()


def format_documents(docs: list[dict[str, Any]]) -> str:
    return "\n".join(format_document(i + 1, str(doc.get("contents", ""))) for i, doc in enumerate(docs))


class SearchTool:
    """Batched retrieval through the HTTP retriever.

    ``timeout_s`` bounds one HTTP attempt and the client retries up to ``max_retries``
    times within ``deadline_s`` (default: every attempt's timeout plus backoff slack).
    The manager's own bound on one call (``self.timeout_s``) is a little longer than the
    deadline, so a dead server surfaces as the client's ``RetrieverUnavailable`` (which
    names the URL) rather than as a bare timeout, and never as a hang.
    """

    name = "search"
    argument = "query"  # the one string parameter of its derived ToolSpec
    description = "Search the passage index for a query and return the best-matching passages."

    def __init__(
        self,
        url: str = "http://127.0.0.1:8000/retrieve",
        topk: int = 3,
        timeout_s: float = 10.0,
        max_retries: int = 2,
        deadline_s: float | None = None,
        tag: str = "search",
    ) -> None:
        if topk < 1:
            raise ValueError(f"topk must be >= 1, got {topk}")
        self.url = url
        self.topk = topk
        self.tag = tag
        self.connection = RetrieverConnection(url, timeout_s, max_retries, deadline_s)
        self.request_timeout_s = timeout_s
        self.max_retries = max_retries
        self.deadline_s = self.connection.deadline_s
        self.timeout_s = self.connection.tool_timeout_s

    async def execute(self, calls: list[str]) -> list[ToolResult]:
        results = await self.connection.client().retrieve(list(calls), self.topk)
        if len(results) != len(calls):
            raise RuntimeError(
                f"retriever at {self.url} returned {len(results)} result lists for {len(calls)} queries"
            )
        return [ToolResult(format_documents(docs), {"docs": float(len(docs))}) for docs in results]

    async def close(self) -> None:
        """Close the HTTP session of the current event loop (the manager calls this after a rollout)."""
        await self.connection.close()
