"""Context policies: what a conversation that outgrows its budget loses before its next turn.

``actor.rollout.context`` (``ContextConfig``) names one. Before a turn whose prompt (the
conversation so far) would be longer than ``max_tokens``:

* ``keep_last``: every observation but the last ``keep`` has its tool results replaced by
  ``marker`` (the calls the policy made stay, so it still sees what it asked);
* ``drop_turns``: every turn but the last ``keep`` leaves the conversation with its
  observation (the question stays).

What was compacted stays compacted. Each firing continues the trajectory as a new step
(``history.py``); the trajectory counts its firings (``Trajectory.context_compactions``,
``rollout/context/compactions``). ``none``, the default, never fires: a trajectory ends at the
context window as before.
"""

from __future__ import annotations

from typing import get_args

from agentrl.agent.history import History
from agentrl.config.schema import ContextConfig, ContextPolicy

CONTEXT_POLICIES: tuple[str, ...] = get_args(ContextPolicy)


def check_context_config(config: ContextConfig, window: int) -> None:
    """Refuse a policy that could never fire or would keep nothing, naming the key. ``window``:
    the context window a step's prompt and response share."""
    if config.policy not in CONTEXT_POLICIES:
        raise ValueError(
            f"actor.rollout.context.policy must be one of {list(CONTEXT_POLICIES)}, got {config.policy!r}"
        )
    if config.policy == "none":
        return
    if config.max_tokens is None or config.max_tokens < 1:
        raise ValueError(
            f"actor.rollout.context.max_tokens must be a positive token count with "
            f"context.policy={config.policy}, got {config.max_tokens!r}"
        )
    if config.keep < 1:
        raise ValueError(
            f"actor.rollout.context.keep must be >= 1 (the last result, or turn, the policy acts on), "
            f"got {config.keep}"
        )
    if not config.marker:
        raise ValueError("actor.rollout.context.marker must be a non-empty text")
    if config.max_tokens >= window:
        raise ValueError(
            f"actor.rollout.context.max_tokens ({config.max_tokens}) must be below the context window "
            f"data.max_prompt_length + data.max_response_length ({window}), or the policy never fires"
        )


def compact(config: ContextConfig, history: History, prompt_length: int) -> bool:
    """Apply the policy to ``history`` when ``prompt_length`` is over budget; True when it
    changed the conversation (it fired)."""
    if config.policy == "none" or config.max_tokens is None or prompt_length <= config.max_tokens:
        return False
    if config.policy == "keep_last":
        answered = [t for t in history.turns if not t.dropped and t.observation_ids is not None]
        older = answered[: max(0, len(answered) - config.keep)]
        fresh = [t for t in older if not t.compacted]
        for turn in fresh:
            turn.compacted = True
        return bool(fresh)
    kept = [t for t in history.turns if not t.dropped]
    older = kept[: max(0, len(kept) - config.keep)]
    for turn in older:
        turn.dropped = True
    return bool(older)
