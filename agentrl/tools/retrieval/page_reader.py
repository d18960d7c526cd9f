"""The page reader tool: ``open_page`` reads a corpus page, by title or id, a window of words at a time.

A page is what the retriever serves at ``POST /open_page`` (``retriever/pages.py``): the
consecutive 100-word chunks of one title read as one text, as in wiki-18. A search result
shows its title (``Doc 1(Title: "Paris") …``), so the policy opens the page by that title;
a passage id (what ``/retrieve`` returns) opens the page that holds the passage. Windows are
counted in words: ``offset`` is the first word, ``length`` how many, and the observation
says where the next window starts. An unknown title or id, or an offset past the page's
end, is an observation the policy can learn from, not a failure. Each call's metrics,
``open_page/words`` (words read) and ``open_page/not_found``, are prefixed by the tool's name.

Calls that arrive together go to the server as one request (split at
``max_pages_per_request``); the HTTP client is the search tool's (``client``: one
pooled session per event loop, a timeout per attempt, retries with backoff inside a
deadline), so a dead server surfaces as ``RetrieverUnavailable`` naming the URL.
"""

from __future__ import annotations

import asyncio
from typing import Any

from agentrl.tools.base import ToolResult
from agentrl.tools.retrieval.connection import RetrieverConnection
from agentrl.tools.rules import check_tag
from agentrl.tools.spec import ToolSpec

DEFAULT_URL = "http://127.0.0.1:8000/open_page"


def page_reader_spec(name: str, length: int, max_length: int) -> ToolSpec:
    """The tool's schema: exactly one of ``title``/``id``, an ``offset`` >= 0 and a bounded ``length``."""
    return ToolSpec(
        name,
        "Read a page of the corpus (a whole article, assembled from its passages) by its title as a "
        "search result shows it, or by a passage id, a window of words at a time.",
        {
            "type": "object",
            "properties": {
                "title": {"type": "string", "minLength": 1, "description": "the page's title"},
                "id": {"type": "string", "minLength": 1, "description": "a passage id"},
                "offset": {
                    "type": "integer",
                    "minimum": 0,
                    "description": "the first word to read: 0 for the page's start, or the next "
                    "offset your last read of this page gave (default 0)",
                },
                "length": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": max_length,
                    "description": f"how many words to read (default {length})",
                },
            },
            "oneOf": [{"required": ["title"]}, {"required": ["id"]}],
            "additionalProperties": False,
        },
    )


def format_window(window: dict[str, Any]) -> str:
    """The observation for one window: a header line (title, words read, where to go on), then the text."""
    if not window["found"]:
        return f"Error: {window['error']}."
    title, total, offset = window["title"], window["total_words"], window["offset"]
    if window["words"] == 0:
        return f'Page "{title}" has {total} words; offset {offset} is past its end.'
    last = offset + window["words"] - 1
    header = f'Page "{title}", words {offset}-{last} of {total}'
    if window["id_offset"] is not None:
        header += f"; the passage you opened starts at word {window['id_offset']}"
    if window["title_pages"] > 1:
        header += f"; {window['title_pages']} pages have this title, this is the first"
    follow = "end of page" if window["next_offset"] is None else f"next offset: {window['next_offset']}"
    return f"{header} ({follow}).\n{window['text'].strip()}"


class PageReaderTool:
    """``open_page``: a schema tool over the retriever's ``/open_page`` endpoint.

    ``url``: the server's ``/open_page`` endpoint (or its root); ``length``: the window when a
    call gives none; ``max_length``: the largest window the schema allows (at most the server's
    ``--max-page-words``). ``timeout_s``/``max_retries``/``deadline_s`` as ``SearchTool``'s.
    """

    name = "page_reader"

    def __init__(
        self,
        url: str = DEFAULT_URL,
        length: int = 200,
        max_length: int = 1000,
        timeout_s: float = 10.0,
        max_retries: int = 2,
        deadline_s: float | None = None,
        max_pages_per_request: int = 256,
        tag: str = "open_page",
    ) -> None:
        if not 1 <= length <= max_length:
            raise ValueError(f"length must be in 1..max_length ({max_length}), got {length}")
        if max_pages_per_request < 1:
            raise ValueError(f"max_pages_per_request must be >= 1, got {max_pages_per_request}")
        self.url = url
        self.length = length
        self.tag = check_tag(tag, "PageReaderTool")
        self.spec = page_reader_spec(tag, length, max_length)
        self.connection = RetrieverConnection(url, timeout_s, max_retries, deadline_s)
        self.request_timeout_s = timeout_s
        self.max_retries = max_retries
        self.deadline_s = self.connection.deadline_s
        self.timeout_s = self.connection.tool_timeout_s
        self.max_pages_per_request = max_pages_per_request

    def _item(self, arguments: dict[str, Any]) -> dict[str, Any]:
        """The server's item for one call (arguments already checked against the spec)."""
        item: dict[str, Any] = {"id": arguments["id"]} if "id" in arguments else {"title": arguments["title"]}
        item["offset"] = int(arguments.get("offset", 0))  # JSON Schema's integer admits 5.0
        item["length"] = int(arguments.get("length", self.length))
        return item

    async def call(self, arguments: list[dict[str, Any]]) -> list[ToolResult]:
        items = [self._item(a) for a in arguments]
        step = self.max_pages_per_request
        client = self.connection.client()
        parts = await asyncio.gather(
            *(client.open_pages(items[i : i + step]) for i in range(0, len(items), step))
        )
        windows = [w for part in parts for w in part]
        return [
            ToolResult(
                format_window(w),
                {
                    f"{self.spec.name}/words": float(w.get("words", 0)),
                    f"{self.spec.name}/not_found": float(not w["found"]),
                },
            )
            for w in windows
        ]

    async def close(self) -> None:
        """Close the HTTP session of the current event loop (the manager calls this after a rollout)."""
        await self.connection.close()
