"""The OpenAI chat-completions JSON: a request read into what the engine needs, a reply written back.

Read (``read_request``): ``messages``, ``tools`` (checked against the run's tools by name),
``tool_choice`` (``auto`` only: the policy decides whether to call; ``none``, ``required`` and
a named function would each need constrained decoding, and are refused), ``temperature``,
``top_p``, ``max_tokens`` (or ``max_completion_tokens``), ``stop`` (a string or a list),
``seed``, ``n``, ``logprobs`` and ``top_logprobs`` (the sampled token's log-prob is returned;
alternatives are not, so ``top_logprobs`` above 0 is refused). ``stream`` is refused. Every refusal is an
``EpisodeError`` naming the field and what was expected.

Written (``completion``): one choice per continuation, its assistant message with
``tool_calls`` (arguments as a JSON string, as the API has them), ``finish_reason``
(``tool_calls``, ``stop`` or ``length``), the log-probs when asked, and ``usage``.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass
from typing import Any

from agentrl.endpoint.messages import EpisodeError

TOOL_CHOICES = ("auto",)


@dataclass(frozen=True)
class ChatRequest:
    """A chat-completions request, read and checked."""

    messages: list[dict[str, Any]]
    tool_names: tuple[str, ...] | None  # None: the request sent no tools
    temperature: float | None
    top_p: float | None
    max_tokens: int | None
    stop: tuple[str, ...]
    seed: int | None
    n: int
    logprobs: bool


def _number(body: dict[str, Any], key: str, low: float, high: float) -> float | None:
    value = body.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not low <= value <= high:
        raise EpisodeError(f"'{key}' must be a number in [{low}, {high}], got {value!r}")
    return float(value)


def _count(body: dict[str, Any], key: str) -> int | None:
    value = body.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise EpisodeError(f"'{key}' must be an integer >= 1, got {value!r}")
    return value


def _tool_names(tools: Any) -> tuple[str, ...] | None:
    if tools is None:
        return None
    if not isinstance(tools, list):
        raise EpisodeError("'tools' must be a list of {'type': 'function', 'function': {...}} objects")
    names = []
    for k, tool in enumerate(tools):
        function = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise EpisodeError(f"tools[{k}].function.name must be a string")
        names.append(function["name"])
    return tuple(names)


def read_request(body: Any) -> ChatRequest:  # long: one check per field of the API
    """The request's fields, checked (module docstring); raises ``EpisodeError``."""
    if not isinstance(body, dict):
        raise EpisodeError("the request body must be a JSON object")
    if body.get("stream"):
        raise EpisodeError("'stream' is not supported: ask for the whole completion (stream false)")
    choice = body.get("tool_choice", "auto")
    if choice not in TOOL_CHOICES:
        raise EpisodeError(
            f"'tool_choice' must be one of {list(TOOL_CHOICES)} (the policy decides whether to call: "
            f"forcing or forbidding calls needs constrained decoding, which the engine does not do), "
            f"got {choice!r}"
        )
    if body.get("top_logprobs"):
        raise EpisodeError("'top_logprobs' must be 0 or absent: only the sampled token's log-prob is kept")
    stop = body.get("stop")
    if stop is None:
        stops: tuple[str, ...] = ()
    elif isinstance(stop, str) and stop:
        stops = (stop,)
    elif isinstance(stop, list) and all(isinstance(s, str) and s for s in stop):
        stops = tuple(stop)
    else:
        raise EpisodeError(f"'stop' must be a string or a list of non-empty strings, got {stop!r}")
    seed = body.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise EpisodeError(f"'seed' must be an integer, got {seed!r}")
    if "messages" not in body:
        raise EpisodeError("'messages' is required: the conversation so far")
    max_tokens = _count(body, "max_completion_tokens") or _count(body, "max_tokens")
    return ChatRequest(
        messages=body["messages"],
        tool_names=_tool_names(body.get("tools")),
        temperature=_number(body, "temperature", 0.0, 2.0),
        top_p=_number(body, "top_p", 0.0, 1.0),
        max_tokens=max_tokens,
        stop=stops,
        seed=seed,
        n=_count(body, "n") or 1,
        logprobs=bool(body.get("logprobs")),
    )


@dataclass(frozen=True)
class Choice:
    """One continuation as the reply carries it."""

    message: dict[str, Any]  # role, content, and tool_calls with arguments as dicts
    finish_reason: str  # the engine's: stop | eos | length
    token_ids: list[int]
    log_probs: list[float]


def _wire_message(message: dict[str, Any]) -> dict[str, Any]:
    calls = message.get("tool_calls") or []
    out: dict[str, Any] = {"role": "assistant", "content": message.get("content") or None}
    if calls:
        out["tool_calls"] = [
            {
                "id": c["id"],
                "type": "function",
                "function": {
                    "name": c["function"]["name"],
                    "arguments": json.dumps(c["function"]["arguments"], ensure_ascii=False),
                },
            }
            for c in calls
        ]
    elif out["content"] is None:
        out["content"] = ""
    for extra in ("invalid_calls", "invalid_turn", "answer"):  # ours, beside the API's fields (episode.reply)
        if extra in message:
            out[extra] = message[extra]
    return out


def _logprobs(tokenizer: Any, choice: Choice) -> dict[str, Any]:
    content = []
    for token_id, log_prob in zip(choice.token_ids, choice.log_probs, strict=True):
        token = tokenizer.decode([token_id], skip_special_tokens=False)
        content.append(
            {"token": token, "logprob": log_prob, "bytes": list(token.encode("utf-8")), "top_logprobs": []}
        )
    return {"content": content}


def completion(
    model: str, prompt_tokens: int, choices: list[Choice], tokenizer: Any, logprobs: bool
) -> dict[str, Any]:
    """The chat-completion JSON for these continuations of one prompt."""
    out = []
    for index, choice in enumerate(choices):
        message = _wire_message(choice.message)
        if choice.finish_reason == "length":
            finish = "length"
        else:
            finish = "tool_calls" if "tool_calls" in message else "stop"
        out.append(
            {
                "index": index,
                "message": message,
                "finish_reason": finish,
                "logprobs": _logprobs(tokenizer, choice) if logprobs else None,
            }
        )
    completion_tokens = sum(len(c.token_ids) for c in choices)
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": out,
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }


def error_body(error: EpisodeError, kind: str = "invalid_request_error") -> dict[str, Any]:
    """The API's error object."""
    return {"error": {"message": str(error), "type": kind, "param": None, "code": error.code}}
