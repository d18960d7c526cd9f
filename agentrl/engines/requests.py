"""Request checks and row seeding shared by every engine.

Seeds: every row has its own generator, so a seeded request gives the same tokens however
it was batched. ``generate`` seeds its row with ``params.seed``; ``generate_batch`` seeds
row ``i`` with ``seeds[i]`` when given (the rollout passes one seed per row and turn),
else with ``derive_seed(params.seed, i)`` so that repeated prompts in one batch (GRPO
groups) still get different samples. Without a seed, every row gets a fresh random seed.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from dataclasses import replace

from agentrl.engines.base import SamplingParams
from agentrl.seeding import derive_seed


def check_prompt_fits(
    prompt_ids: Sequence[int], vocab_size: int | None, context_limit: int | None, limit_name: str
) -> None:
    """Every id inside the vocabulary, and room left to generate within ``context_limit``
    (``limit_name`` says which limit, for the error); ``None`` skips a check."""
    if vocab_size is not None:
        bad = [t for t in prompt_ids if not 0 <= t < vocab_size]
        if bad:
            raise ValueError(f"prompt_ids contains ids outside [0, {vocab_size}): {bad[:5]}")
    if context_limit is not None and len(prompt_ids) >= context_limit:
        raise ValueError(
            f"prompt_ids has {len(prompt_ids)} tokens; {limit_name} is {context_limit}, "
            "leaving no room to generate"
        )


class RequestChecks:
    """Validation of prompts and parameters before they reach a batch (and fail its neighbours)."""

    def _validate_prompt(self, prompt_ids: Sequence[int]) -> None:
        if len(prompt_ids) == 0:
            raise ValueError("prompt_ids must contain at least one token id, got an empty list")
        if not all(isinstance(t, int) and not isinstance(t, bool) for t in prompt_ids):
            raise TypeError("prompt_ids must be a list of int token ids")

    @staticmethod
    def _check_params(params: object) -> None:
        if not isinstance(params, SamplingParams):
            raise TypeError(f"params must be SamplingParams, got {type(params).__name__}")

    @staticmethod
    def _row_seeds(params: SamplingParams, n: int) -> list[int]:
        if params.seed is None:
            return [secrets.randbits(63) for _ in range(n)]
        return [derive_seed(params.seed, i) for i in range(n)]

    def _checked_batch(
        self, prompts: list[list[int]], params: SamplingParams, seeds: Sequence[int] | None
    ) -> list[int]:
        """Validate a ``generate_batch`` call; one seed per row (module docstring)."""
        self._check_params(params)
        for p in prompts:
            self._validate_prompt(p)
        if seeds is None:
            return self._row_seeds(params, len(prompts))
        if len(seeds) != len(prompts):
            raise ValueError(f"seeds has {len(seeds)} entries for {len(prompts)} prompts")
        return [int(s) for s in seeds]

    def _checked_request(self, prompt_ids: list[int], params: SamplingParams) -> tuple[SamplingParams, int]:
        """Validate one ``generate`` request; its parameters without the seed, and the seed.

        Coalescing engines group requests by the seedless parameters (the seed travels with
        the request), so seeded requests still share batches."""
        self._check_params(params)
        self._validate_prompt(prompt_ids)
        seed = params.seed if params.seed is not None else self._row_seeds(params, 1)[0]
        return replace(params, seed=None), seed
