"""An actor whose rollout engine plays a scripted hermes policy, for trainer tests through Ray.

``ScriptedActorWorker`` is the real ``ActorWorker`` (its model, log-probs, loss, update and
checkpoint) whose ``LLMGenerationManager`` is built exactly as the actor builds it (its
``actor.rollout`` section: tools, tool-call format, budgets) around a scripted engine instead of
the model's sampling: a random tiny model never writes a ``<tool_call>``, and a test of what
happens to a call needs one. Its ``script`` is :func:`every_tool`. The class is importable
by path so Ray workers load it (``tests/`` is on the workers' ``PYTHONPATH``:
``agentrl.cluster.runtime_env.worker_runtime_env``).
"""

from __future__ import annotations

import json
import re

from agentrl.agent import LLMGenerationManager
from agentrl.workers.actor import ActorWorker
from support.dialects import Dialect
from support.scripted_engine import ScriptedEngine

HERMES = Dialect("hermes")
LOOKUP_KEY = "zorvia"
PYTHON_CALLS = ("x = 6 * 7", "print('x is', x)")  # the second reads the first's variable
PAGE_WORDS = 12  # the window every_tool asks open_page for


def question_of(context: str) -> str:
    """The question of a decoded prompt written by ``agentrl.data.qa.make_prompt``."""
    return context.split("Question:", 1)[1].split("<|im_end|>", 1)[0].strip()


def call(name: str, arguments: dict) -> str:
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}) + "\n</tool_call>"


def every_tool(context: str) -> str:
    """Turn 1: the user's ``lookup``, ``search`` of the question and ``python`` setting a variable
    (three calls, run concurrently); turn 2: ``open_page`` of the first result's title and
    ``python`` printing the variable (the same trajectory's interpreter); turn 3: an answer."""
    seen = HERMES.results_seen(context)
    if seen == 0:
        lookup = call("lookup", {"key": LOOKUP_KEY})
        search = call("search", {"query": question_of(context)})
        return "\n".join([lookup, search, call("python", {"code": PYTHON_CALLS[0]})])
    if seen == 1:
        title = re.search(r'Title: "?([^"()]+)', HERMES.response(context)).group(1).strip()
        page = call("open_page", {"title": title, "length": PAGE_WORDS})
        return page + "\n" + call("python", {"code": PYTHON_CALLS[1]})
    return "<answer> 42 </answer>"  # not a tool message: those stay out of the model's text


class ScriptedActorWorker(ActorWorker):
    """The actor with ``script`` (:func:`every_tool`) as its rollout's engine (module docstring)."""

    script = staticmethod(every_tool)

    @property
    def rollout(self) -> LLMGenerationManager:
        if self._rollout is None:
            self._rollout = LLMGenerationManager(
                ScriptedEngine(self.tokenizer, self.script),
                self.tokenizer,
                self.actor.rollout,
                max_prompt_length=self.context.max_prompt_length,
                max_response_length=self.context.max_response_length,
            )
        return self._rollout
