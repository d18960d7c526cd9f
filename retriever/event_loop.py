"""The event loop the retriever's servers and their load generators run on: uvloop when installed."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def run_event_loop(main: Coroutine[Any, Any, T]) -> T:
    """Run ``main`` to completion on uvloop if it imports, else on asyncio's default loop.

    One choice for every server and benchmark, so a server and the client measuring it never
    differ in their loop by accident; uvloop is the optional ``fast-server`` extra.
    """
    try:
        import uvloop
    except ImportError:
        return asyncio.run(main)
    return uvloop.run(main)
