"""The OpenAI-compatible HTTP endpoint in front of one engine: chat completions, models, episodes.

``ChatEndpoint`` serves ``POST /v1/chat/completions`` and ``GET /v1/models`` (``wire.py`` reads
and writes the JSON). A request belongs to an episode when it comes under
``/episodes/<id>/v1/...`` (the base URL an agent's client is given) or carries an
``X-Episode-Id`` header; its prompt and the turn it samples are then recorded in that episode
(``episode.py``), token-exact, and sampled with the run's temperature and top-p (the
log-probs the trainer compares with are the run's; a request asking for others is counted in
``endpoint/sampling_overridden``), one choice. A request outside any episode is inference:
the request's own sampling, ``n`` choices, nothing recorded.

Each turn's ``max_new_tokens`` is the least of the request's ``max_tokens``, the run's per-turn
cap and the episode's room; a request that leaves no room is refused with
``context_length_exceeded`` (the trajectory is marked truncated, as the built-in loop marks it).
Errors are the API's error objects with the field named; none is raised into the server.
"""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any

from aiohttp import web

from agentrl.agent.trajectory import Trajectory
from agentrl.endpoint.episode import Budget, Episode
from agentrl.endpoint.messages import EpisodeError
from agentrl.endpoint.wire import ChatRequest, Choice, completion, error_body, read_request
from agentrl.engines.base import SamplingParams
from agentrl.engines.version import WeightsVersion
from agentrl.seeding import derive_seed

EPISODE_HEADER = "X-Episode-Id"
MAX_CHOICES = 64  # continuations one inference request may ask for (n)


class ChatEndpoint:
    """An OpenAI-compatible server over ``engine`` with the run's tool-call format (module docstring)."""

    def __init__(
        self,
        engine: Any,
        fmt: Any,
        tokenizer: Any,
        budget: Budget,
        base: SamplingParams,
        model: str = "agentrl",
        infer: Callable[[ChatEndpoint, ChatRequest], Awaitable[dict[str, Any]]] | None = None,
        weights: WeightsVersion | None = None,
    ) -> None:
        """``infer``: what answers a request outside an episode instead of one sampled turn (the
        serving command's server-side tool loop); ``weights``: the engine's weights version, which
        each recorded turn reads when it is asked for (``engines/version.py``)."""
        if infer is None and not hasattr(fmt, "render_conversation"):
            raise ValueError(
                "the endpoint speaks chat messages with tool_calls: actor.rollout.tool_format must be a "
                f"chat-template format (hermes or qwen3_coder), not {getattr(fmt, 'name', fmt)!r}"
            )
        self.engine, self.format, self.tokenizer = engine, fmt, tokenizer
        self.budget, self.base, self.model = budget, base, model
        self.episodes: dict[str, Episode] = {}
        self.seeds: dict[str, int | None] = {}
        self.in_flight: dict[str, set[asyncio.Task]] = {}  # each open episode's request handlers
        self.metrics: dict[str, float] = {}
        self.custom_infer = infer
        self.weights = weights or WeightsVersion()
        self._runner: web.AppRunner | None = None
        self.url: str | None = None

    # --- episodes -------------------------------------------------------------------

    def open_episode(
        self, uid: str, group_id: str, task: dict[str, Any] | None = None, seed: int | None = None
    ) -> str:
        """Start recording episode ``uid``; returns the base URL its agent's client is given."""
        if uid in self.episodes:
            raise ValueError(f"episode {uid!r} is already open")
        self.episodes[uid] = Episode(
            self.format, self.tokenizer, self.budget, uid=uid, group_id=group_id, task=task
        )
        self.seeds[uid] = seed
        self.in_flight[uid] = set()
        return f"{self.url}/episodes/{uid}/v1"

    def close_episode(self, uid: str) -> Trajectory | None:
        """Stop recording ``uid`` and cancel its requests in flight (an agent that timed out
        leaves its last request behind: its turn is never recorded); its trajectory (None when
        it never asked for a turn)."""
        self.seeds.pop(uid, None)
        for task in self.in_flight.pop(uid, ()):
            task.cancel()
        episode = self.episodes.pop(uid)
        episode.closed = True
        return episode.trajectory

    # --- the app --------------------------------------------------------------------

    def app(self) -> web.Application:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_get("/v1/models", self._models)
        app.router.add_post("/episodes/{episode}/v1/chat/completions", self._chat)
        app.router.add_get("/episodes/{episode}/v1/models", self._models)
        return app

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> str:
        """Serve on ``host:port`` (0: a port the kernel picks, read back here); returns the URL."""
        runner = web.AppRunner(self.app(), access_log=None)
        await runner.setup()
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        site = web.SockSite(runner, sock)
        await site.start()
        self._runner = runner
        self.url = f"http://{host}:{sock.getsockname()[1]}"
        return self.url

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _models(self, request: web.Request) -> web.Response:
        body = {"object": "list", "data": [{"id": self.model, "object": "model", "owned_by": "agentrl"}]}
        return web.json_response(body)

    async def _chat(self, request: web.Request) -> web.Response:
        self._count("endpoint/requests")
        try:
            try:
                body = await request.json()
            except json.JSONDecodeError as exc:
                raise EpisodeError(f"the request body is not JSON ({exc.msg})") from None
            chat = read_request(body)
            uid = request.match_info.get("episode") or request.headers.get(EPISODE_HEADER)
            if uid is None:
                reply = await (self.custom_infer(self, chat) if self.custom_infer else self._infer(chat))
            else:
                reply = await self._turn(uid, chat)
        except EpisodeError as error:
            self._count(f"endpoint/errors/{error.code}")
            return web.json_response(error_body(error), status=error.status)
        except Exception as exc:  # the engine's or ours: an API error object, never a bare 500
            self._count("endpoint/errors/server_error")
            error = EpisodeError(f"{type(exc).__name__}: {exc}", status=500, code="server_error")
            return web.json_response(error_body(error, "server_error"), status=500)
        return web.json_response(reply, dumps=lambda obj: json.dumps(obj, ensure_ascii=False))

    def _count(self, name: str) -> None:
        self.metrics[name] = self.metrics.get(name, 0.0) + 1.0

    def check_tools(self, chat: ChatRequest) -> None:
        """A request's ``tools``, when given, must name the run's tools."""
        names = getattr(self.format, "tool_names", None)  # None: a format that lists none (tags)
        if chat.tool_names is not None and names is not None and set(chat.tool_names) != set(names):
            raise EpisodeError(
                f"'tools' must name the run's tools {sorted(names)}, got "
                f"{sorted(chat.tool_names)} (the run renders its own tools' schemas into the prompt)"
            )

    def sampling_for(self, chat: ChatRequest, room: int, episode: bool) -> SamplingParams:
        """The request's sampling: the run's temperature and top-p in an ``episode`` (a request
        for others is counted), the request's own outside one; at most ``room`` new tokens."""
        cap = min(self.base.max_new_tokens, room, chat.max_tokens or room)
        stop = tuple(dict.fromkeys((*self.base.stop, *chat.stop, *self.format.turn_stops(False))))
        params = replace(self.base, max_new_tokens=cap, stop=stop, seed=chat.seed)
        asked = (chat.temperature, chat.top_p)
        if episode:
            if (
                asked[0] is not None
                and asked[0] != self.base.temperature
                or asked[1] not in (None, self.base.top_p)
            ):
                self._count("endpoint/sampling_overridden")
            return params
        greedy = chat.temperature == 0.0
        return replace(
            params,
            greedy=greedy or self.base.greedy,
            temperature=self.base.temperature if greedy or chat.temperature is None else chat.temperature,
            top_p=self.base.top_p if chat.top_p is None else max(chat.top_p, 1e-6),
        )

    async def _turn(self, uid: str, chat: ChatRequest) -> dict[str, Any]:
        episode = self.episodes.get(uid)
        if episode is None:
            raise EpisodeError(f"no open episode {uid!r}", status=404, code="episode_not_found")
        if chat.n != 1:
            raise EpisodeError(f"'n' must be 1 in an episode (it records one trajectory), got {chat.n}")
        self.check_tools(chat)
        task = asyncio.current_task()
        handlers = self.in_flight[uid]
        handlers.add(task)  # type: ignore[arg-type]
        try:
            async with episode.lock:  # one request of an episode at a time, read to recorded
                pending = episode.prompt_for(chat.messages)
                params = self.sampling_for(chat, pending.room, episode=True)
                seed = self.seeds.get(uid)
                if seed is not None:
                    turn = episode.trajectory.num_turns if episode.trajectory is not None else 0
                    params = replace(params, seed=derive_seed(seed, turn))
                version = self.weights.value  # when the turn is asked for (engines/version.py)
                result = await self.engine.generate(pending.ids, params)
                # the turn's own cap (the run's, or the agent's lower max_tokens) set it, not the budget
                cap_binding = (
                    min(self.base.max_new_tokens, chat.max_tokens or self.base.max_new_tokens) <= pending.room
                )
                message, _ = episode.record(pending, chat.messages, result, cap_binding, version)
        finally:
            handlers.discard(task)  # type: ignore[arg-type]
        choice = Choice(message, result.finish_reason, list(result.token_ids), list(result.log_probs))
        return completion(self.model, len(pending.ids), [choice], self.tokenizer, chat.logprobs)

    async def _infer(self, chat: ChatRequest) -> dict[str, Any]:
        self.check_tools(chat)
        if chat.n > MAX_CHOICES:
            raise EpisodeError(f"'n' must be at most {MAX_CHOICES}, got {chat.n}")
        scratch = Episode(self.format, self.tokenizer, self.budget, uid="inference", group_id="inference")
        pending = scratch.prompt_for(chat.messages)
        ids = pending.ids
        params = self.sampling_for(chat, pending.room, episode=False)
        seeds = [None if chat.seed is None else derive_seed(chat.seed, k) for k in range(chat.n)]
        results = await asyncio.gather(*(self.engine.generate(ids, replace(params, seed=s)) for s in seeds))
        choices = []
        for k, result in enumerate(results):
            text = self.tokenizer.decode(list(result.token_ids), skip_special_tokens=False)
            parse = self.format.parse(text, result.finish_reason, False)
            message = self.format.assistant_message(text, parse)
            calls = message.get("tool_calls") or []
            message["tool_calls"] = [{**c, "id": f"call_{k}_{i}"} for i, c in enumerate(calls)]
            if not calls:
                message.pop("tool_calls")
            choices.append(
                Choice(message, result.finish_reason, list(result.token_ids), list(result.log_probs))
            )
        return completion(self.model, len(ids), choices, self.tokenizer, chat.logprobs)
