"""Tool-call formats: how the policy calls tools and reads their results, one class per dialect.

``build_format`` makes the one chosen by ``actor.rollout.tool_format`` (``tags``: Search-R1's,
the default; ``hermes``: JSON calls through the chat template; ``qwen3_coder``: Qwen3-Coder's XML
function calls through the chat template), running its start-up checks.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, get_args

from agentrl.agent.formats.base import (
    MALFORMED_REASONS,
    FormatError,
    MalformedReason,
    ParsedCall,
    ToolCallFormat,
    ToolMessage,
    TurnParse,
)
from agentrl.agent.formats.hermes import HermesFormat
from agentrl.agent.formats.qwen3_coder import QWEN3_CODER_TEMPLATE, Qwen3CoderFormat
from agentrl.agent.formats.tags import TagsFormat
from agentrl.agent.formats.templates import HERMES_TEMPLATE
from agentrl.config.schema import RolloutConfig, ToolFormat
from agentrl.tools.spec import ToolSpec

TOOL_FORMATS: tuple[str, ...] = get_args(ToolFormat)

__all__ = [
    "HERMES_TEMPLATE",
    "MALFORMED_REASONS",
    "TOOL_FORMATS",
    "FormatError",
    "HermesFormat",
    "MalformedReason",
    "ParsedCall",
    "QWEN3_CODER_TEMPLATE",
    "Qwen3CoderFormat",
    "TagsFormat",
    "ToolCallFormat",
    "ToolMessage",
    "TurnParse",
    "build_format",
]


# the formats whose calls go through a chat template, and the template each writes of its own
# (chosen by ``chat_template`` set to the format's name; ``model`` takes the tokenizer's)
_TEMPLATED = {
    "hermes": (HermesFormat, HERMES_TEMPLATE),
    "qwen3_coder": (Qwen3CoderFormat, QWEN3_CODER_TEMPLATE),
}


def build_format(
    rollout_config: RolloutConfig,
    tokenizer: Any,
    specs: list[ToolSpec],
    tags: Mapping[str, str] | None = None,
) -> ToolCallFormat:
    """The configured format for this tokenizer and these tools, checked once (``FormatError``).

    ``tags`` maps a tool name to its tag in the ``tags`` format (default: the name).
    """
    cfg = rollout_config
    if cfg.chat_template not in ("model", cfg.tool_format):
        # each template of ours renders one dialect's calls (and is named after it)
        keep = "leave it 'model'" if cfg.tool_format == "tags" else f"use 'model' or '{cfg.tool_format}'"
        raise FormatError(
            f"actor.rollout.chat_template={cfg.chat_template} renders tool calls for "
            f"actor.rollout.tool_format={cfg.chat_template}; with tool_format={cfg.tool_format} {keep}"
        )
    if cfg.tool_format == "tags":
        return TagsFormat(
            tokenizer,
            specs,
            tags=tags,
            enable_thinking=cfg.enable_thinking,
            max_obs_length=cfg.max_obs_length,
        )
    if cfg.tool_format in _TEMPLATED:
        cls, own_template = _TEMPLATED[cfg.tool_format]
        return cls(
            tokenizer,
            specs,
            template=own_template if cfg.chat_template == cfg.tool_format else None,
            keep_thinking=cfg.keep_thinking,
            enable_thinking=cfg.enable_thinking,
            max_obs_length=cfg.max_obs_length,
        )
    raise FormatError(
        f"actor.rollout.tool_format must be one of {list(TOOL_FORMATS)}, got {cfg.tool_format!r}"
    )
