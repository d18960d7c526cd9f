"""A bare aiohttp server speaking the retriever's API with a fixed answer: HTTP and JSON alone.

    python -m benchmarks.common.echo_server --port PORT [any retriever.server flag, ignored]

``/retrieve`` parses the request's JSON and answers every query with the same ``topk`` passages
(real passage-sized text), ``/health`` says ready. It searches nothing, so the CPU it spends per
request is the floor of what a server costs on this machine before any search: the figure a
BM25 server's, whose search costs less than the HTTP around it, is read beside.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys

from aiohttp import web
from orjson import dumps

from retriever.event_loop import run_event_loop

PASSAGE = {"id": "0", "contents": '"Echo" ' + "a passage of about a hundred words of text " * 12}


async def retrieve(request: web.Request) -> web.Response:
    body = await request.json(loads=json.loads)
    hits = [PASSAGE] * int(body.get("topk", 3))
    return web.Response(
        body=dumps({"result": [hits for _ in body["queries"]]}), content_type="application/json"
    )


async def health(request: web.Request) -> web.Response:
    return web.json_response({"ready": True, "status": "ready", "batching": {"mean_recent_size": 1.0}})


async def serve(port: int) -> None:
    app = web.Application()
    app.router.add_post("/retrieve", retrieve)
    app.router.add_get("/health", health)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port, backlog=1024).start()
    await asyncio.Event().wait()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--port", type=int, required=True)
    args, _ = p.parse_known_args()
    run_event_loop(serve(args.port))
    return 0


if __name__ == "__main__":
    sys.exit(main())
