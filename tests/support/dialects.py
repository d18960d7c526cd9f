"""The two tool-call formats as a scripted policy writes and reads them, so one rollout test runs in both.

A ``Dialect`` knows how a policy writes a call and an answer in its format, how many tool
results a context already holds, and the rollout config keys that choose the format
(``hermes`` on the tiny tokenizer takes the project's Hermes-style template:
``chat_template=hermes``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

ASSISTANT_START = "<|im_start|>assistant\n"


@dataclass(frozen=True)
class Dialect:
    name: str  # "tags" | "hermes"

    @property
    def config(self) -> dict[str, Any]:
        """The ``RolloutConfig`` fields that choose this format."""
        if self.name == "tags":
            return {}
        return {"tool_format": "hermes", "chat_template": "hermes"}

    @property
    def result_open(self) -> str:
        """What opens one tool result in the response."""
        return "<information>" if self.name == "tags" else "<tool_response>\n"

    def call(self, tool: str, argument: str = "query", value: str = "") -> str:
        """One call of ``tool`` with one string argument, as a policy writes it."""
        if self.name == "tags":
            return f"<{tool}> {value} </{tool}>"
        body = json.dumps({"name": tool, "arguments": {argument: value}})
        return f"<tool_call>\n{body}\n</tool_call>"

    def response(self, context: str) -> str:
        """The response part of a decoded context: everything after the prompt's assistant header."""
        return context.split(ASSISTANT_START, 1)[1] if ASSISTANT_START in context else context

    def results_seen(self, context: str) -> int:
        """Tool results (and hints) the rollout has inserted into ``context`` so far."""
        response = self.response(context)
        if self.name == "tags":
            return response.count("<information>")
        return response.count(ASSISTANT_START)  # every observation ends with the next assistant header


DIALECTS = [Dialect("tags"), Dialect("hermes")]
