"""Turning tool output into observation tokens, within a token budget.

Every observation is wrapped as ``\\n\\n<information>…</information>\\n\\n`` (the Search-R1
format, which the reward parser also reads). Observations are the only text the rollout
tokenizes. When one would exceed ``max_obs_length`` tokens, the *inner* text tokens are
cut and the wrapper (and the "answer now" note, if any) is kept whole, so the policy
always sees a closed ``</information>`` and the cut is counted.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

OBS_PREFIX = "\n\n<information>"
OBS_SUFFIX = "</information>\n\n"

INVALID_ACTION_HINT = (
    "My previous action is invalid. To call a tool I must put its input between the tool's "
    "opening and closing tags; to finish I must put the final answer between the answer tags. "
    "Let me try again."
)
FINAL_TURN_NOTE = "No tool calls left: give the final answer now."


@dataclass(frozen=True)
class Observation:
    ids: list[int]
    tokens_cut: int  # inner tokens dropped to fit max_obs_length
    # the tool messages' contents as rendered (cut, the final-turn note added), when the format
    # renders messages: what a re-render of the conversation shows; None: the ids are all there is
    contents: tuple[str, ...] | None = None


def encode_text(tokenizer: Any, text: str) -> list[int]:
    """Token ids of ``text`` with no BOS/EOS added."""
    return list(tokenizer.encode(text, add_special_tokens=False))


class ObservationEncoder:
    """Wraps, tokenizes and truncates observation text for one tokenizer."""

    def __init__(self, tokenizer: Any, max_obs_length: int) -> None:
        self.tokenizer = tokenizer
        self.max_obs_length = max_obs_length
        self._prefix = encode_text(tokenizer, OBS_PREFIX)
        self._suffix = encode_text(tokenizer, OBS_SUFFIX)
        self._final_suffix = encode_text(tokenizer, "\n" + FINAL_TURN_NOTE + OBS_SUFFIX)
        fixed = len(self._prefix) + len(self._final_suffix)
        if max_obs_length <= fixed:
            raise ValueError(
                f"max_obs_length ({max_obs_length}) must exceed the {fixed} tokens of the observation "
                f"wrapper and final-turn note"
            )

    def encode(self, text: str, final_turn: bool = False) -> Observation:
        """``OBS_PREFIX + text [+ note] + OBS_SUFFIX`` as ids, at most ``max_obs_length`` long."""
        note = "\n" + FINAL_TURN_NOTE if final_turn else ""
        whole = encode_text(self.tokenizer, OBS_PREFIX + text + note + OBS_SUFFIX)
        if len(whole) <= self.max_obs_length:
            return Observation(whole, 0)
        suffix = self._final_suffix if final_turn else self._suffix
        inner = encode_text(self.tokenizer, text)
        budget = self.max_obs_length - len(self._prefix) - len(suffix)
        return Observation(self._prefix + inner[:budget] + suffix, max(0, len(inner) - budget))
