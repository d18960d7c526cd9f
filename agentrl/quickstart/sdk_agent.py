"""An agent written only against the ``openai`` SDK: the quickstart's search agent as users write them.

``run(task, client)`` is what ``actor.rollout.agent.entry=agentrl.quickstart.sdk_agent:run``
trains through the endpoint (``agentrl/endpoint/agents.py``): it sends the conversation,
keeps each reply as it came, runs the calls with the run's tools (``task.tools``; a real agent
may call its own services instead) and sends their results back as tool messages, in call
order; a call the endpoint could not read or run (``invalid_calls``: malformed, an unknown
tool, arguments off the schema) and a turn that neither called nor answered (``invalid_turn``)
are answered with the message the endpoint gives, as the built-in loop answers them. It stops
at its first turn without a call: it returns the turn's answer as the endpoint read it (the
``answer`` field: the body of a whole ``<answer>…</answer>`` as the built-in loop reads it; one
cut before its closing tag is none), else None; the
endpoint ends the episode after its final turn (``actor.rollout.max_turns``) as the built-in
loop does, so this agent's trajectories are the built-in loop's.
"""

from __future__ import annotations

import json
from typing import Any


async def _result(task: Any, name: str, arguments: str) -> str:
    tool = task.tools.get(name)
    if tool is None:
        return f"Error: no tool {name!r}"
    try:
        return await tool(json.loads(arguments))
    except Exception as exc:  # a failing tool is an observation for the policy, as in the built-in loop
        return f"Error: {exc}"


async def run(task: Any, client: Any) -> str | None:
    """One episode: the question in ``task.messages``, the policy behind ``client``."""
    messages: list[dict[str, Any]] = list(task.messages)
    for _ in range(task.max_turns + 1):
        reply = await client.chat.completions.create(
            model="agentrl", messages=messages, tools=task.tool_schemas
        )
        message = reply.choices[0].message
        messages.append(message.model_dump(exclude_none=True))
        extra = message.model_extra or {}
        answers = {
            call.id: await _result(task, call.function.name, call.function.arguments)
            for call in message.tool_calls or []
        }
        answers |= {call["id"]: call["message"] for call in extra.get("invalid_calls") or []}
        if answers:
            for call_id in sorted(answers, key=lambda i: int(i.rsplit("_", 1)[1])):  # call order
                messages.append({"role": "tool", "tool_call_id": call_id, "content": answers[call_id]})
        elif extra.get("invalid_turn"):
            messages.append({"role": "tool", "content": extra["invalid_turn"]["message"]})
        else:  # a turn that neither called nor was told to go on: its answer, as the loop reads it
            answer = extra.get("answer")
            return None if answer is None else f"<answer>{answer}</answer>"
    return None
