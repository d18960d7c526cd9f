"""The token-in/token-out generation interface every engine implements.

An engine receives prompt token ids and returns the token ids it sampled, exactly as
sampled, with the log-probability of each under the distribution it sampled from.
Nothing is decoded and re-tokenized on the way: the rollout keeps these ids as the
trajectory's model tokens ("token in, token out").

Log-prob convention (shared by every engine and by the trainer's recomputation, so
that ``rollout/logprob_diff`` compares like with like)::

    log_prob_t = log_softmax(logits_t / temperature)[sampled_id_t]

i.e. temperature-scaled, *before* any top-k / top-p truncation. Greedy decoding uses
temperature 1 for the log-prob.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal, Protocol, runtime_checkable

if TYPE_CHECKING:
    from agentrl.engines.weights import WeightStream

FinishReason = Literal["stop", "eos", "length"]


@dataclass(frozen=True)
class SamplingParams:
    """How to sample one turn.

    ``stop`` strings end the turn when the decoded continuation contains one; the
    token that completes the stop string is kept (it is a model token and is trained).
    """

    max_new_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0  # 0 disables top-k
    greedy: bool = False
    stop: tuple[str, ...] = ()
    seed: int | None = None

    def __post_init__(self) -> None:
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if not self.greedy and self.temperature <= 0:
            raise ValueError(f"temperature must be > 0 unless greedy, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.top_k < 0:
            raise ValueError(f"top_k must be >= 0, got {self.top_k}")


@dataclass
class GenerationResult:
    """One continuation: the sampled ids, their log-probs, and why it ended."""

    token_ids: list[int]
    log_probs: list[float]
    finish_reason: FinishReason
    stop_string: str | None = None  # which stop string ended it, when finish_reason == "stop"
    metrics: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if len(self.token_ids) != len(self.log_probs):
            raise ValueError(
                f"token_ids ({len(self.token_ids)}) and log_probs ({len(self.log_probs)}) differ in length"
            )


@runtime_checkable
class Engine(Protocol):
    """An async token-in/token-out generator.

    ``generate`` may be awaited by many coroutines at once; an engine coalesces the
    concurrent requests into batches. ``generate_batch`` is the synchronous-batch
    path (every prompt of a lockstep turn at once).
    """

    async def generate(self, prompt_ids: list[int], params: SamplingParams) -> GenerationResult: ...

    async def generate_batch(
        self, prompts: list[list[int]], params: SamplingParams, seeds: Sequence[int] | None = None
    ) -> list[GenerationResult]:
        """One continuation per prompt; row i seeded with ``seeds[i]`` when given (else derived
        from ``params.seed`` and i, or random without a seed)."""
        ...

    def update_weights(self, weights: WeightStream) -> None:
        """Load new policy weights in place (no reload from disk) from a state dict or a stream
        of ``(name, tensor)`` pairs, holding at most one bucket of them at a time (``weights.py``)."""
        ...

    def sleep(self, release_weights: bool = False) -> int:
        """Free what can be freed between rollouts (KV cache; the engine's own weight copy too
        when ``release_weights``: the caller then resends the weights after ``wake_up``).
        Returns the bytes freed (0 where nothing could be)."""
        ...

    def wake_up(self) -> None:
        """Take back what ``sleep`` freed (released weights come back through ``update_weights``)."""
        ...

    def shutdown(self) -> None: ...
