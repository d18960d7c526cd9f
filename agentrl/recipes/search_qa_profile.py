"""The search-QA recipe's profiles: the sizes of one run, a YAML file each beside this module."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentrl.recipes.profiles import load_profile

__all__ = ["FULL", "PROFILES", "PROFILE_DIR", "TINY", "RecipeProfile"]

PROFILE_DIR = Path(__file__).resolve().parent / "profiles" / "search_qa"


@dataclass(frozen=True)
class RecipeProfile:
    """Sizes of one run of the recipe (``full`` makes ``docs/results.md``; ``tiny`` is its test),
    each a YAML file in ``PROFILE_DIR``."""

    name: str
    heldout_limit: int  # questions per held-out dataset
    val_per_dataset: int
    demo_candidates: dict[str, int]  # training questions tried as demonstrations, per dataset
    sft_demos: int  # at most this many demonstrations are trained on (~80 s a step of 8 here)
    sft_epochs: int
    sft_batch_size: int
    sft_lr: float
    sft_compute_dtype: str
    rl_data_limit: int | None  # RL questions checked for a search answer (``rl_data``); None: all
    pool_candidates: int  # RL questions the warm start is sampled on (``rl_pool``)
    pool_min: int  # fewer solved than this: the RL phase could not learn, stop
    dense: bool  # build the dense index too (the RAG-dense baseline)
    eval_options: dict[str, Any]  # keyword arguments of ``evaluate_cells`` and ``solved_once``
    rl_overrides: dict[str, Any]  # win over config/search_qa.yaml
    lora_overrides: dict[str, Any]  # rl_lora's, on top of ``rl_overrides``
    dynamic_overrides: dict[str, Any]  # rl_dyn's, on top of ``rl_overrides``
    # rl_turn's, on top of rl_dyn's: rl_dyn with rewards per turn; None: the profile has no rl_turn
    turn_overrides: dict[str, Any] | None = None


FULL = load_profile(PROFILE_DIR / "full.yaml", RecipeProfile)
TINY = load_profile(PROFILE_DIR / "tiny.yaml", RecipeProfile)
PROFILES = {p.name: p for p in (FULL, TINY)}
