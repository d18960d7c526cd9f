"""The /retrieve request body, validated against the server's limits, each error naming its field."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from retriever.config import ServerConfig

_REQUEST_FIELDS = ("queries", "topk", "return_scores")


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
