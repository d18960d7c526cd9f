"""The three evaluation modes' prompts.

* ``agent``: the prepared training prompt of the row (``agentrl.data.qa.make_prompt``,
  the Search-R1 instruction), so a trained policy is evaluated on exactly what it saw.
* ``direct``: the same answer format, but no tools offered: the model must answer from
  its parameters. This is the "Direct inference" row of the Search-R1 table.
* ``rag``: the top-k documents retrieved with the question are placed in the prompt and
  the model answers once ("RAG" row). Documents are rendered as the search tool renders
  them (``Doc 1(Title: …) …``), so the only difference from the agent's view is who
  chose the query and when.

All three ask for ``<answer> … </answer>`` because the scorer reads only that tag.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from agentrl.agent.prompts import encode_messages
from agentrl.agent.trajectory import PromptSpec
from agentrl.eval.datasets import EvalQuestion
from agentrl.tools.retrieval.search import format_documents

__all__ = ["DIRECT_TEMPLATE", "MODES", "RAG_TEMPLATE", "build_prompt", "render_user_message"]

MODES = ("direct", "rag", "agent")

DIRECT_TEMPLATE = (
    "Answer the question below from your own knowledge. Give only the final answer inside <answer> and "
    "</answer>, without explanation. For example, <answer> Beijing </answer>. Question: {question}\n"
)

RAG_TEMPLATE = (
    "Answer the question below. The documents may help. Give only the final answer inside <answer> and "
    "</answer>, without explanation. For example, <answer> Beijing </answer>.\n"
    "Documents:\n{documents}\n"
    "Question: {question}\n"
)


def _question(q: EvalQuestion) -> str:
    text = q.question.strip()
    return text if text.endswith("?") else text + "?"


def render_user_message(
    mode: str, q: EvalQuestion, documents: Sequence[Mapping[str, Any]] | None = None
) -> list[dict[str, str]]:
    """The chat messages of one question in ``mode`` (``documents`` only for rag)."""
    if mode == "agent":
        if not q.messages:
            raise ValueError(f"{q.dataset}/{q.id}: agent mode needs the row's prompt messages")
        return [dict(m) for m in q.messages]
    if mode == "direct":
        return [{"role": "user", "content": DIRECT_TEMPLATE.format(question=_question(q))}]
    if mode == "rag":
        if documents is None:
            raise ValueError(f"{q.dataset}/{q.id}: rag mode needs the retrieved documents")
        text = RAG_TEMPLATE.format(documents=format_documents(list(documents)), question=_question(q))
        return [{"role": "user", "content": text}]
    raise ValueError(f"mode must be one of {MODES}, got {mode!r}")


def build_prompt(
    tokenizer: Any, mode: str, q: EvalQuestion, documents: Sequence[Mapping[str, Any]] | None = None
) -> PromptSpec:
    """Tokenize one question's prompt (through the chat template when the tokenizer has one)."""
    messages = render_user_message(mode, q, documents)
    return PromptSpec(
        prompt_ids=encode_messages(tokenizer, messages),
        data_source=q.data_source,
        ground_truth={"target": list(q.golden_answers)},
        index=q.id,
        extra_info={"dataset": q.dataset, "question": q.question},
        messages=messages,  # the rollout's tool-call format encodes them (hermes: with the tools)
    )
