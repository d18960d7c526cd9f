"""The /retrieve and /open_page request bodies, checked against the limits, each error naming its field."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from retriever.config import ServerConfig

_REQUEST_FIELDS = ("queries", "topk", "return_scores")
_PAGES_FIELDS = ("pages",)
_PAGE_FIELDS = ("id", "title", "offset", "length")


class RequestError(ValueError):
    """A bad request; ``field`` names the offending part of the body."""

    def __init__(self, field_name: str, message: str, status: int = 400) -> None:
        super().__init__(f"{field_name}: {message}")
        self.field = field_name
        self.message = message
        self.status = status


@dataclass(frozen=True)
class RetrieveRequest:
    queries: list[str]
    topk: int
    return_scores: bool


def parse_retrieve_request(body: Any, config: ServerConfig) -> RetrieveRequest:
    """Validate a decoded /retrieve body against the configured limits."""
    if not isinstance(body, dict):
        raise RequestError("body", f"expected a JSON object, got {type(body).__name__}")
    unknown = sorted(set(body) - set(_REQUEST_FIELDS))
    if unknown:
        raise RequestError(unknown[0], f"unknown field; expected only {list(_REQUEST_FIELDS)}")
    if "queries" not in body:
        raise RequestError("queries", "missing; expected a list of strings")
    queries = body["queries"]
    if not isinstance(queries, list):
        raise RequestError("queries", f"expected a list of strings, got {type(queries).__name__}")
    if not queries:
        raise RequestError("queries", "expected at least one query, got an empty list")
    if len(queries) > config.max_queries_per_request:
        raise RequestError(
            "queries", f"too many queries: {len(queries)} > max {config.max_queries_per_request}", status=413
        )
    for i, q in enumerate(queries):
        if not isinstance(q, str):
            raise RequestError(f"queries[{i}]", f"expected a string, got {type(q).__name__}")
        if not q.strip():
            raise RequestError(f"queries[{i}]", "expected a non-empty string")
        if len(q) > config.max_query_chars:
            raise RequestError(
                f"queries[{i}]", f"too long: {len(q)} characters > max {config.max_query_chars}", status=413
            )
    topk = body.get("topk", config.default_topk)
    if not isinstance(topk, int) or isinstance(topk, bool):
        raise RequestError("topk", f"expected an integer, got {type(topk).__name__}")
    if not 1 <= topk <= config.max_topk:
        raise RequestError("topk", f"expected 1 <= topk <= {config.max_topk}, got {topk}")
    return_scores = body.get("return_scores", False)
    if not isinstance(return_scores, bool):
        raise RequestError("return_scores", f"expected a boolean, got {type(return_scores).__name__}")
    return RetrieveRequest(queries, topk, return_scores)


@dataclass(frozen=True)
class PageRequest:
    """One /open_page item: a page named by a passage ``id`` or by its ``title`` (exactly one),
    and the window of words ``[offset, offset + length)``."""

    id: str | None
    title: str | None
    offset: int
    length: int


def _name(value: Any, where: str, config: ServerConfig) -> str:
    if not isinstance(value, str):
        raise RequestError(where, f"expected a string, got {type(value).__name__}")
    if not value.strip():
        raise RequestError(where, "expected a non-empty string")
    if len(value) > config.max_query_chars:
        raise RequestError(
            where, f"too long: {len(value)} characters > max {config.max_query_chars}", status=413
        )
    return value


def _integer(value: Any, where: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise RequestError(where, f"expected an integer, got {type(value).__name__}")
    return value


def _page_item(item: Any, where: str, config: ServerConfig) -> PageRequest:
    if not isinstance(item, dict):
        raise RequestError(where, f"expected a JSON object, got {type(item).__name__}")
    unknown = sorted(set(item) - set(_PAGE_FIELDS))
    if unknown:
        raise RequestError(f"{where}.{unknown[0]}", f"unknown field; expected only {list(_PAGE_FIELDS)}")
    if ("id" in item) == ("title" in item):
        raise RequestError(where, "expected exactly one of 'id' and 'title'")
    doc_id = _name(item["id"], f"{where}.id", config) if "id" in item else None
    title = _name(item["title"], f"{where}.title", config) if "title" in item else None
    offset = _integer(item.get("offset", 0), f"{where}.offset")
    if offset < 0:
        raise RequestError(f"{where}.offset", f"expected an integer >= 0, got {offset}")
    length = _integer(item.get("length", config.default_page_words), f"{where}.length")
    if not 1 <= length <= config.max_page_words:
        raise RequestError(
            f"{where}.length", f"expected 1 <= length <= {config.max_page_words}, got {length}"
        )
    return PageRequest(doc_id, title, offset, length)


def parse_open_page_request(body: Any, config: ServerConfig) -> list[PageRequest]:
    """Validate a decoded /open_page body (``{"pages": [item, ...]}``) against the configured limits."""
    if not isinstance(body, dict):
        raise RequestError("body", f"expected a JSON object, got {type(body).__name__}")
    unknown = sorted(set(body) - set(_PAGES_FIELDS))
    if unknown:
        raise RequestError(unknown[0], f"unknown field; expected only {list(_PAGES_FIELDS)}")
    if "pages" not in body:
        raise RequestError("pages", "missing; expected a list of {id or title, offset, length} objects")
    items = body["pages"]
    if not isinstance(items, list):
        raise RequestError("pages", f"expected a list of objects, got {type(items).__name__}")
    if not items:
        raise RequestError("pages", "expected at least one item, got an empty list")
    if len(items) > config.max_pages_per_request:
        raise RequestError(
            "pages", f"too many items: {len(items)} > max {config.max_pages_per_request}", status=413
        )
    return [_page_item(item, f"pages[{i}]", config) for i, item in enumerate(items)]
