"""Prompts for rollout tests: a question in the Search-R1 training format, tokenized."""

from __future__ import annotations

from typing import Any

from agentrl.agent.prompts import encode_messages
from agentrl.agent.trajectory import PromptSpec
from agentrl.data.qa import make_prompt


def question_prompt(
    tokenizer: Any, question: str, data_source: str = "nq", ground_truth: Any = None, index: Any = None
) -> PromptSpec:
    """``question`` wrapped in the training instruction and tokenized through the chat template,
    with its messages (the rollout's format encodes them again: ``hermes`` adds the tools)."""
    messages = [{"role": "user", "content": make_prompt(question)}]
    ids = encode_messages(tokenizer, messages)
    return PromptSpec(ids, data_source, ground_truth, index, {"question": question}, messages=messages)
