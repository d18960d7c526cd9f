"""Prompt tokenization for rollouts: chat messages → the prompt's token ids.

When the tokenizer has a chat template the messages are rendered with
``apply_chat_template(..., add_generation_prompt=True)``, so an instruct model sees the
format it was tuned on; a base model (no template) gets the message contents as plain text.
The Search-R1 instruction itself lives with the data (``agentrl.data.qa.make_prompt``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def encode_messages(tokenizer: Any, messages: list[dict[str, str]], chat: bool = True) -> list[int]:
    """Token ids of a conversation, ending where the assistant starts.

    With ``chat`` and a tokenizer chat template, the template is applied with the
    generation prompt; otherwise the message contents are concatenated as plain text.
    """
    if not messages or not all(isinstance(m, Mapping) and "content" in m for m in messages):
        raise ValueError("messages must be a non-empty list of {'role', 'content'} dicts")
    if chat and getattr(tokenizer, "chat_template", None):
        text = tokenizer.apply_chat_template(list(messages), add_generation_prompt=True, tokenize=False)
        return list(tokenizer.encode(text, add_special_tokens=False))
    text = "\n".join(str(m["content"]) for m in messages)
    return list(tokenizer.encode(text, add_special_tokens=True))
