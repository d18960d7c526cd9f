"""An engine that plays planned turns instead of sampling them (demonstrations, tests).

``ScriptedEngine`` is a ``BatchingEngine`` like the others: requests are coalesced and
served through ``_generate_rows``, and each turn ends as a real engine's would: at eos, at
the token that completes a stop string (kept), or at ``max_new_tokens`` (the engine's
stop-string matcher, not a re-tokenization). Only the source of the tokens differs:
``plan(prompt_ids)`` says what to "sample". Log-probs come from ``log_prob_of`` (0 by
default: nothing was sampled).

``ScriptedTurnEngine`` plays fixed turns per prompt: the k-th request for a prompt returns
turn k (how SFT demonstrations are recorded through the real rollout).
"""

from __future__ import annotations

import abc
import threading
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from agentrl.engines.base import FinishReason, GenerationResult, SamplingParams
from agentrl.engines.batching import BatchingEngine
from agentrl.engines.stopping import StopStringMatcher

if TYPE_CHECKING:
    from agentrl.engines.weights import WeightStream


class ScriptedEngine(BatchingEngine):
    """Plays ``plan(prompt_ids)`` token by token, ending the turn as a real engine would."""

    def __init__(self, tokenizer: Any, max_batch_size: int = 64) -> None:
        super().__init__(max_batch_size)
        if tokenizer.eos_token_id is None:
            raise ValueError(f"{type(self).__name__} needs a tokenizer with an eos token")
        self.tokenizer = tokenizer
        self.eos_token_id = int(tokenizer.eos_token_id)

    @abc.abstractmethod
    def plan(self, prompt_ids: list[int]) -> list[int]:
        """The ids this engine "samples" after ``prompt_ids`` (the turn may end before their end)."""

    def log_prob_of(self, token_id: int) -> float:
        return 0.0

    def play(self, planned: Sequence[int], params: SamplingParams) -> GenerationResult:
        """The turn a real engine would return had it sampled ``planned``."""
        matcher = StopStringMatcher(self.tokenizer, params.stop)
        out: list[int] = []
        finish: FinishReason = "length"
        stop_string = None
        for token in planned:
            out.append(token)
            if token == self.eos_token_id:
                finish = "eos"
                break
            stop_string = matcher.push(token)
            if stop_string is not None:
                finish = "stop"
                break
            if len(out) >= params.max_new_tokens:
                break
        return GenerationResult(out, [self.log_prob_of(t) for t in out], finish, stop_string)

    def _generate_rows(
        self, prompts: list[list[int]], params: SamplingParams, seeds: list[int]
    ) -> list[GenerationResult]:
        return [self.play(self.plan(p), params) for p in prompts]

    def update_weights(self, weights: WeightStream) -> None:
        """Nothing to update: the turns are planned, not computed from weights."""

    def sleep(self, release_weights: bool = False) -> int:
        """Nothing to free."""
        return 0

    def wake_up(self) -> None:
        """Nothing to restore."""

    def shutdown(self) -> None:
        self._stop_worker()


class ScriptedTurnEngine(ScriptedEngine):
    """Fixed turns per prompt: the k-th request whose context starts with a script's prompt
    gets that script's turn k, tokenized on its own (the model writes a turn as one unit);
    a request past the end of its script gets eos (the rollout left the script, e.g. an
    earlier turn was cut). Prompts must be distinct: a request is matched by its prefix."""

    def __init__(
        self, tokenizer: Any, scripts: Mapping[tuple[int, ...], Sequence[str]], max_batch_size: int = 64
    ):
        super().__init__(tokenizer, max_batch_size)
        self._turns = {
            key: [list(tokenizer.encode(t, add_special_tokens=False)) for t in turns]
            for key, turns in scripts.items()
        }
        self._lengths = sorted({len(k) for k in self._turns}, reverse=True)
        self._served: dict[tuple[int, ...], int] = dict.fromkeys(self._turns, 0)
        self._lock = threading.Lock()  # rows are served in worker threads

    def _script_of(self, ids: list[int]) -> tuple[int, ...]:
        for length in self._lengths:
            key = tuple(ids[:length])
            if key in self._turns:
                return key
        raise KeyError("ScriptedTurnEngine: a request matches no scripted prompt")

    def plan(self, prompt_ids: list[int]) -> list[int]:
        key = self._script_of(prompt_ids)
        with self._lock:
            k = self._served[key]
            self._served[key] = k + 1
        turns = self._turns[key]
        return list(turns[k]) if k < len(turns) else [self.eos_token_id]
