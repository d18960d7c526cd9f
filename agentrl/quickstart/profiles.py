"""The quickstart's profiles: sizes and schedules as data (``profiles/*.yaml``) in a typed ``Profile``.

``FULL`` (``profiles/full.yaml``) is ``make quickstart``; ``SHORT`` (``profiles/short.yaml``)
is ``--short``, the same code path on a tiny world. ``TWO_TOOL`` (``profiles/two_tool.yaml``,
``--profile two_tool``) trains the policy in the ``hermes`` format with search and calculate on
the world with numeric facts (``world: {numbers: true}``) and its arithmetic questions;
``TWO_TOOL_SHORT`` is its smoke-sized twin. All take their PPO config overrides from
``profiles/ppo_common.yaml`` (named by their ``ppo_base`` key) and add their own on top.
They are read by the recipes' one profile loader (``agentrl.recipes.profiles.load_profile``):
a key the ``Profile`` does not have, a missing key or a value of the wrong type fails at
load time with a ``ProfileError`` naming the file and the key.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from agentrl.recipes.profiles import BASE_KEY, load_profile

__all__ = [
    "FULL",
    "PROFILES",
    "PROFILE_DIR",
    "SHORT",
    "TWO_TOOL",
    "TWO_TOOL_SHORT",
    "Profile",
    "profile_record",
]

PROFILE_DIR = Path(__file__).resolve().parent / "profiles"


@dataclass(frozen=True)
class Profile:
    """Everything the quickstart's size and schedule depend on (``FULL`` and ``SHORT`` come from YAML)."""

    name: str
    world: dict[str, Any]  # generate_world keyword arguments (seed excluded)
    vocab_size: int
    hidden_size: int
    layers: int
    heads: int
    kv_heads: int
    intermediate_size: int
    sft_questions: dict[int, int]  # hop -> how many training questions get an oracle demonstration
    sft_skill_steps: int  # stage 1 of SFT: steps on the oracle demonstrations alone
    sft_batch_size: int
    sft_lr: float
    sft_min_lr_ratio: float  # the cosine schedule's floor; 0.1 left the model short of copying answers
    # Shortcut demonstrations (answer from "memory", no search) per oracle one: the warm start
    # then searches only some of the time, like a base model that does not trust its tool.
    sft_shortcuts_per_demo: float
    sft_habit_steps: int  # stage 2 of SFT: steps on oracle + shortcut demonstrations together
    eval_limit: int | None  # held-out questions in the before/after evaluation (None: all)
    # PPO config overrides (user overrides win); ``ppo_base`` names a file of shared ones beside it
    ppo: dict[str, Any] = field(default_factory=dict, metadata={BASE_KEY: "ppo_base"})
    # The tools (``dialects.py``): "tags" is today's search in Search-R1's tags; "hermes" calls
    # them as JSON through the chat template, with the calculator beside search when asked for.
    tool_format: str = "tags"
    calculator: bool = False
    sft_arithmetic: int = 0  # arithmetic training questions that get an oracle demonstration
    # hermes: an arithmetic demonstration makes its two searches in one turn (parallel calls), or
    # one a turn, so that each age is read with one passage in view
    sft_parallel_searches: bool = True
    # hermes: an arithmetic demonstration restates each age as its passage's own sentence
    # ("Rildam is 53 years old."), not as "The age of Bolfar Rildam is 53."
    sft_restate_ages: bool = False


# Fields added after the first profiles: left out of report.json at their defaults, so the
# report of a profile that does not use them stays as it was.
LATER_FIELDS: dict[str, Any] = {
    "tool_format": "tags",
    "calculator": False,
    "sft_arithmetic": 0,
    "sft_parallel_searches": True,
    "sft_restate_ages": False,
}


def profile_record(profile: Profile) -> dict[str, Any]:
    """The profile as report.json shows it (:data:`LATER_FIELDS` only where they are set)."""
    record = asdict(profile)
    return {k: v for k, v in record.items() if k not in LATER_FIELDS or v != LATER_FIELDS[k]}


FULL = load_profile(PROFILE_DIR / "full.yaml", Profile)
SHORT = load_profile(PROFILE_DIR / "short.yaml", Profile)
TWO_TOOL = load_profile(PROFILE_DIR / "two_tool.yaml", Profile)
TWO_TOOL_SHORT = load_profile(PROFILE_DIR / "two_tool_short.yaml", Profile)  # its smoke-sized twin
PROFILES = {p.name: p for p in (FULL, SHORT, TWO_TOOL, TWO_TOOL_SHORT)}
