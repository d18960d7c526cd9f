"""The quickstart's profiles: sizes and schedules as data (``profiles/*.yaml``) in a typed ``Profile``.

``FULL`` (``profiles/full.yaml``) is ``make quickstart``; ``SHORT`` (``profiles/short.yaml``)
is ``--short``, the same code path on a tiny world. Both take their PPO config overrides
from ``profiles/ppo_common.yaml`` (named by their ``ppo_base`` key) and add their own on top.
A key the ``Profile`` does not have, a missing key or a value of the wrong type fails at
load time with a :class:`ProfileError` naming the file and the key.
"""

from __future__ import annotations

import types
import typing
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import yaml

__all__ = ["FULL", "PROFILES", "PROFILE_DIR", "SHORT", "Profile", "ProfileError", "load_profile"]

PROFILE_DIR = Path(__file__).resolve().parent / "profiles"
PPO_BASE_KEY = "ppo_base"  # a profile's file of shared PPO overrides, beside it; its own ``ppo`` wins


class ProfileError(ValueError):
    """A profile file has an unknown or missing key, or a value of the wrong type."""


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
    ppo: dict[str, Any] = field(default_factory=dict)  # PPO config overrides (user overrides win)


def _type_name(annotation: Any) -> str:
    return getattr(annotation, "__name__", None) or str(annotation).replace("typing.", "")


def _typed(value: Any, annotation: Any, where: str) -> Any:
    """``value`` checked against ``annotation`` (ints are accepted, and converted, where floats are)."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if annotation is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        for option in args:
            try:
                return _typed(value, option, where)
            except ProfileError:
                continue
        raise ProfileError(f"{where}: expected {_type_name(annotation)}, got {value!r}")
    if origin is dict:
        if not isinstance(value, dict):
            raise ProfileError(f"{where}: expected a mapping, got {value!r}")
        key_type, value_type = args
        return {
            _typed(k, key_type, f"{where}[{k!r}]"): _typed(v, value_type, f"{where}[{k!r}]")
            for k, v in value.items()
        }
    if annotation is type(None):
        if value is None:
            return None
    elif annotation is float and isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    elif isinstance(value, annotation) and not (isinstance(value, bool) and annotation is not bool):
        return value
    text_float = annotation is float and isinstance(value, str)
    hint = " (YAML reads 3e-3 as text: write 3.0e-3)" if text_float else ""
    raise ProfileError(f"{where}: expected {_type_name(annotation)}, got {value!r}{hint}")


def _read_mapping(path: Path) -> dict[str, Any]:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as error:
        raise ProfileError(f"{path}: cannot read the profile ({error})") from None
    if not isinstance(data, dict):
        raise ProfileError(f"{path}: expected a mapping of profile keys, got {type(data).__name__}")
    return data


def load_profile(path: str | Path) -> Profile:
    """The ``Profile`` in a YAML file; its ``ppo_base`` file (if any) supplies shared PPO overrides."""
    path = Path(path)
    data = _read_mapping(path)
    base_name = data.pop(PPO_BASE_KEY, None)
    known = {f.name: f for f in fields(Profile)}
    unknown = sorted(set(data) - set(known), key=str)
    if unknown:
        keys = ", ".join([*known, PPO_BASE_KEY])
        raise ProfileError(f"{path}: unknown key {unknown[0]!r} (a profile has: {keys})")
    missing = [name for name, f in known.items() if name not in data and f.name != "ppo"]
    if missing:
        raise ProfileError(f"{path}: missing key {missing[0]!r}")
    hints = typing.get_type_hints(Profile)
    values = {name: _typed(value, hints[name], f"{path}: key {name!r}") for name, value in data.items()}
    if base_name is not None:
        base_path = path.parent / str(base_name)
        base = _typed(_read_mapping(base_path), hints["ppo"], str(base_path))
        values["ppo"] = base | values.get("ppo", {})
    return Profile(**values)


FULL = load_profile(PROFILE_DIR / "full.yaml")
SHORT = load_profile(PROFILE_DIR / "short.yaml")
PROFILES = {p.name: p for p in (FULL, SHORT)}
