"""What the retriever's server wraps every request in: errors answered as JSON, and the access log.

Every error answer has one shape, ``{"error", "field"}`` (``error_response``), aiohttp's own
(404, 405, 413) included (``json_errors_middleware``). The access log writes one JSON line a
request (``access_log_middleware``), with the queries and cache hits a handler recorded under
``N_QUERIES_KEY`` and ``CACHE_HITS_KEY``; ``configure_logging`` sends it where the server's
``--access-log`` says.
"""

from __future__ import annotations

import json
import logging
import sys
import time

from aiohttp import web

__all__ = [
    "CACHE_HITS_KEY",
    "N_QUERIES_KEY",
    "access_log_middleware",
    "configure_logging",
    "error_response",
    "json_errors_middleware",
]

access_log = logging.getLogger("retriever.access")

# per-request values the access log reports
N_QUERIES_KEY = web.RequestKey("n_queries", int)
CACHE_HITS_KEY = web.RequestKey("cache_hits", int)


def error_response(status: int, field_name: str, message: str, headers: dict | None = None) -> web.Response:
    """An error answer, the one shape of every error the server gives: ``{"error", "field"}``."""
    return web.json_response({"error": message, "field": field_name}, status=status, headers=headers)


def access_log_middleware():
    """One JSON line a request to the access log: its path, status, time, queries and cache hits."""

    @web.middleware
    async def middleware(request: web.Request, handler):
        t0 = time.perf_counter()
        status = 500
        try:
            response = await handler(request)
            status = response.status
            return response
        except web.HTTPException as exc:
            status = exc.status
            raise
        finally:
            if access_log.isEnabledFor(logging.INFO):
                access_log.info(
                    json.dumps(
                        {
                            "ts": round(time.time(), 3),
                            "remote": request.remote,
                            "method": request.method,
                            "path": request.path,
                            "status": status,
                            "ms": round((time.perf_counter() - t0) * 1000, 2),
                            "queries": request.get(N_QUERIES_KEY),
                            "cache_hits": request.get(CACHE_HITS_KEY),
                        }
                    )
                )

    return middleware


@web.middleware
async def json_errors_middleware(request: web.Request, handler):
    """Turn aiohttp's own HTTP errors (404, 405, 413 body too large) into JSON errors."""
    try:
        return await handler(request)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        field_name = "body" if exc.status == 413 else "path"
        return error_response(exc.status, field_name, exc.reason)


def configure_logging(access_log_target: str | None) -> None:
    """The server's log on stderr, and the access log to ``access_log_target`` (``-``: stderr, a
    path: appended there, None: off)."""
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    access_log.propagate = False
    access_log.handlers.clear()
    if access_log_target is None:
        access_log.setLevel(logging.WARNING)
        return
    handler: logging.Handler = (
        logging.StreamHandler(sys.stderr)
        if access_log_target == "-"
        else logging.FileHandler(access_log_target)
    )
    handler.setFormatter(logging.Formatter("%(message)s"))
    access_log.addHandler(handler)
    access_log.setLevel(logging.INFO)
