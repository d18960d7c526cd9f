"""An actor whose rollout engine plays a scripted hermes policy, for trainer tests through Ray.

``ScriptedActorWorker`` is the real ``ActorWorker`` (its model, log-probs, loss, update and
checkpoint) whose ``LLMGenerationManager`` is built exactly as the actor builds it (its
``actor.rollout`` section: tools, tool-call format, budgets) around a scripted engine instead of
the model's sampling: a random tiny model never writes a ``<tool_call>``, and a test of what
happens to a call needs one. Its ``script`` is :func:`lookup_and_search`;
``ThreeToolsActorWorker`` plays :func:`search_read_compute` instead. The classes are importable
by path so Ray workers load them (``tests/`` is on the workers' ``PYTHONPATH``:
``agentrl.cluster.group.worker_runtime_env``).
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
PAGE_WORDS = 12  # the window search_read_compute asks open_page for


def question_of(context: str) -> str:
    """The question of a decoded prompt written by ``agentrl.data.qa.make_prompt``."""
    return context.split("Question:", 1)[1].split("<|im_end|>", 1)[0].strip()


def call(name: str, arguments: dict) -> str:
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}) + "\n</tool_call>"


def lookup_and_search(context: str) -> str:
    """Turn 1: the user's ``lookup`` and ``search`` in one turn (two calls, run concurrently);
    turn 2: an answer."""
    if HERMES.results_seen(context) == 0:
        return call("lookup", {"key": LOOKUP_KEY}) + "\n" + call("search", {"query": question_of(context)})
    return "<answer> Quenby </answer>"


def search_read_compute(context: str) -> str:
    """Turn 1: ``search`` the question and ``python`` sets a variable; turn 2: ``open_page`` the
    first result's title and ``python`` prints the variable (the same trajectory's interpreter);
    turn 3: an answer."""
    seen = HERMES.results_seen(context)
    if seen == 0:
        search = call("search", {"query": question_of(context)})
        return search + "\n" + call("python", {"code": PYTHON_CALLS[0]})
    if seen == 1:
        title = re.search(r'Title: "?([^"()]+)', HERMES.response(context)).group(1).strip()
        page = call("open_page", {"title": title, "length": PAGE_WORDS})
        return page + "\n" + call("python", {"code": PYTHON_CALLS[1]})
    return "<answer> 42 </answer>"


class ScriptedActorWorker(ActorWorker):
    """The actor with ``script`` (:func:`lookup_and_search`) as its rollout's engine (module docstring)."""

    script = staticmethod(lookup_and_search)

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


class ThreeToolsActorWorker(ScriptedActorWorker):
    """The actor with :func:`search_read_compute` as its rollout's engine."""

    script = staticmethod(search_read_compute)
