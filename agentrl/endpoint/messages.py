"""Chat messages as the endpoint reads them: normalised for the template, compared, refused by name.

``normalise`` makes every message a plain dict the chat template reads (content a string, a
call's arguments a dict) and raises ``EpisodeError`` naming ``messages[i]...`` for what cannot
be read; ``same`` says whether two normalised messages say the same (role, content, and each
call's name and arguments: a call's id and extra keys aside). ``EpisodeError`` is every
refusal of the endpoint, with the HTTP status and the API's error code it answers with.
"""

from __future__ import annotations

import json
from typing import Any

ROLES = ("system", "user", "assistant", "tool")


class EpisodeError(ValueError):
    """A request this episode cannot take; the message names the field and what was expected.
    ``status``: the HTTP status the endpoint answers with."""

    def __init__(self, message: str, status: int = 400, code: str = "invalid_request") -> None:
        super().__init__(message)
        self.status = status
        self.code = code


def normalise(messages: Any) -> list[dict[str, Any]]:
    """Chat messages as plain dicts the template reads: content a string, a call's arguments a
    dict. Raises ``EpisodeError`` naming ``messages[i]...`` for what cannot be read."""
    if not isinstance(messages, list) or not messages:
        raise EpisodeError("'messages' must be a non-empty list of chat messages")
    out = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict):
            raise EpisodeError(f"messages[{i}] must be an object, got {type(m).__name__}")
        role = m.get("role")
        if role not in ROLES:
            raise EpisodeError(f"messages[{i}].role must be one of {list(ROLES)}, got {role!r}")
        message: dict[str, Any] = {"role": role, "content": _text(m.get("content"), f"messages[{i}].content")}
        calls = m.get("tool_calls")
        if calls is not None and not isinstance(calls, list):
            raise EpisodeError(
                f"messages[{i}].tool_calls must be a list of calls, got {type(calls).__name__}"
            )
        if role == "assistant" and calls:
            message["tool_calls"] = [
                _call(c, f"messages[{i}].tool_calls[{k}]") for k, c in enumerate(m["tool_calls"])
            ]
        if role == "tool":
            message["tool_call_id"] = str(m.get("tool_call_id") or "")
            message["name"] = str(m.get("name") or "")
        out.append(message)
    return out


def _text(content: Any, where: str) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # the content-parts form: text parts only
        parts = []
        for k, part in enumerate(content):
            if not isinstance(part, dict) or part.get("type") != "text":
                raise EpisodeError(f"{where}[{k}] must be a text part ({{'type': 'text', 'text': ...}})")
            parts.append(str(part.get("text", "")))
        return "".join(parts)
    raise EpisodeError(f"{where} must be a string or a list of text parts, got {type(content).__name__}")


def _call(call: Any, where: str) -> dict[str, Any]:
    function = call.get("function") if isinstance(call, dict) else None
    if not isinstance(function, dict) or not isinstance(function.get("name"), str):
        raise EpisodeError(f"{where}.function.name must be a string")
    arguments = function.get("arguments", {})
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except json.JSONDecodeError as exc:
            raise EpisodeError(f"{where}.function.arguments is not valid JSON ({exc.msg})") from None
    return {
        "id": str(call.get("id") or ""),
        "type": "function",
        "function": {"name": function["name"], "arguments": arguments},
    }


def same(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Two normalised messages say the same (a call's id and the message's extra keys aside)."""

    def key(m: dict[str, Any]) -> tuple:
        calls = tuple(
            (c["function"]["name"], json.dumps(c["function"]["arguments"], sort_keys=True))
            for c in m.get("tool_calls", ())
        )
        return m["role"], m["content"], calls

    return key(a) == key(b)
