"""Load a preset, apply dotted overrides, check everything, and return typed dataclasses.

    cfg = load_config("grpo", ["actor.optim.lr=1e-6", "actor.rollout.n=4"])

Problems are collected into one ``ConfigError`` whose message names each full key and
what was expected, so a typo stops the run before Ray, models or data are touched. One
element of a list is overridden with its index in brackets,
``actor.rollout.tools[1].options.url=http://...`` (an index past the list's end is refused
with the list's length: a new element needs the whole list).
"""

from __future__ import annotations

import difflib
import re
import typing
from collections.abc import Sequence
from dataclasses import fields, is_dataclass
from pathlib import Path
from typing import Any

from omegaconf import ListConfig, OmegaConf
from omegaconf.errors import ConfigKeyError, OmegaConfBaseException, ValidationError

from agentrl.config.checks import ConfigError, check_choice, validate_config
from agentrl.config.moved import current_class_path
from agentrl.config.schema import ExperimentConfig, RolloutConfig

PRESET_DIR = Path(__file__).parent


def available_presets() -> list[str]:
    return sorted(p.stem for p in PRESET_DIR.glob("*.yaml"))


def _list_element(cls: type, name: str) -> type | None:
    """The dataclass a ``list[...]`` field ``name`` of ``cls`` holds, if it holds one."""
    hint = typing.get_type_hints(cls).get(name)
    args = typing.get_args(hint) if typing.get_origin(hint) is list else ()
    return args[0] if args and is_dataclass(args[0]) else None


def _all_keys(node: Any, prefix: str = "") -> list[str]:
    """Every dotted key of a config instance, nested sections included; the fields of a list's
    dataclass elements as ``name[].field``."""
    keys = []
    for f in fields(node):
        full = f"{prefix}{f.name}"
        keys.append(full)
        value = getattr(node, f.name)
        if is_dataclass(value):
            keys.extend(_all_keys(value, f"{full}."))
        element = _list_element(type(node), f.name)
        if element is not None:
            keys.extend(_all_keys(element(), f"{full}[]."))
    return keys


# Keys that moved: the old name gets a message naming the new one.
RENAMED = {
    f"{role}.{old}": f"{role}.update.{new}"
    for role in ("actor", "critic")
    for old, new in (
        ("ppo_mini_batch_size", "mini_batch_size"),
        ("ppo_micro_batch_size", "micro_batch_size"),
        ("ppo_epochs", "epochs"),
        ("shuffle", "shuffle"),
        ("use_dynamic_bsz", "use_dynamic_bsz"),
        ("max_tokens_per_micro_batch", "max_tokens_per_micro_batch"),
    )
} | {f"{role}.dtype": f"{role}.compute_dtype" for role in ("actor", "critic")}


def _suggest(full_key: str) -> str:
    if full_key in RENAMED:
        return f" (it is now '{RENAMED[full_key]}')"
    indices = iter(_INDEX.findall(full_key))
    key = _INDEX.sub("[]", full_key)  # an element's fields are its list's: name[].field
    candidates = _all_keys(ExperimentConfig())
    parent = key.rsplit(".", 1)[0] if "." in key else ""
    siblings = [k for k in candidates if (k.rsplit(".", 1)[0] if "." in k else "") == parent]
    match = difflib.get_close_matches(key, siblings, n=1, cutoff=0.6) or difflib.get_close_matches(
        key, candidates, n=1, cutoff=0.75
    )
    if not match:
        return ""
    suggestion = re.sub(r"\[\]", lambda _: f"[{next(indices, 0)}]", match[0])  # the user's own indices
    return f" (did you mean '{suggestion}'?)"


def _explain(error: OmegaConfBaseException, origin: str) -> str:
    full_key = getattr(error, "full_key", None) or ""
    text = str(error).split("\n")[0]
    if isinstance(error, ConfigKeyError) or "not in" in text:
        return f"{origin}: unknown config key '{full_key}'{_suggest(full_key)}"
    if isinstance(error, ValidationError):
        found = re.match(r"Value '(.*)' of type '(\w+)' could not be converted to (\w+)", text)
        if found:
            value, got, expected = found.groups()
            return f"{origin}: config key '{full_key}' expects {expected.lower()}, got {got} '{value}'"
        found = re.match(r"Invalid value '(.*)', expected one of \[(.*)\]", text)
        if found:  # a Literal field (config/schema.py): the same words as validate_config's
            problems: list[str] = []
            choices = [c.strip().strip("'\"") for c in found.group(2).split(",")]
            check_choice(problems, full_key, found.group(1), choices)
            return f"{origin}: {problems[0]}"
    return f"{origin}: config key '{full_key}': {text}"


_SEGMENT = r"[A-Za-z_]\w*(?:\[\d+\])*"  # a key's part, a list's element by index: tools[1]
_KEY = re.compile(rf"{_SEGMENT}(?:\.{_SEGMENT})*")
_INDEX = re.compile(r"\[(\d+)\]")


def _parse_override(text: str) -> tuple[str, str]:
    if "=" not in text:
        raise ConfigError(f"override '{text}' is not of the form key=value (e.g. actor.optim.lr=1e-6)")
    key, value = text.split("=", 1)
    key = key.strip()
    if not _KEY.fullmatch(key):
        bracketed = re.sub(r"\.(\d+)(?=\.|$)", r"[\1]", key)
        hint = f" (a list element takes its index in brackets: '{bracketed}')" if bracketed != key else ""
        raise ConfigError(f"override '{text}': '{key}' is not a dotted config key{hint}")
    return key, value


def _check_indices(cfg: Any, key: str, text: str) -> None:
    """Refuse an index past its list's end (or into a non-list), naming the list and its length."""
    path = ""
    for segment in key.split("."):
        name, *indices = segment.split("[")
        path = f"{path}.{name}" if path else name
        for raw in indices:
            index = int(raw.rstrip("]"))
            node = OmegaConf.select(cfg, path, default=None)
            if node is None:
                return  # an unknown key: the update names it, with a suggestion
            if not isinstance(node, ListConfig):
                raise ConfigError(f"override '{text}': '{path}' is not a list, so [{index}] indexes nothing")
            if index >= len(node):
                raise ConfigError(
                    f"override '{text}': index {index} is out of range: '{path}' has {len(node)} "
                    f"element(s), [0] to [{len(node) - 1}]; to add one, set the whole list: {path}=[...]"
                )
            path = f"{path}[{index}]"


def _apply_override(cfg: Any, key: str, value: str, text: str) -> Any:
    """``cfg`` with ``key=value``; the value is read as YAML, as a dotlist reads it."""
    if "[" not in key:
        return OmegaConf.merge(cfg, OmegaConf.from_dotlist([f"{key}={value}"]))
    _check_indices(cfg, key, text)
    parsed = OmegaConf.to_container(OmegaConf.from_dotlist([f"value={value}"]), resolve=False)["value"]
    OmegaConf.update(cfg, key, parsed, merge=True)
    return cfg


def load_config(
    preset: str | Path | Sequence[str | Path] = "ppo",
    overrides: list[str] | None = None,
    check_files: bool = True,
) -> ExperimentConfig:
    """Schema defaults ← preset YAML(s), in order ← overrides; then type checks and rule checks
    (the data files' existence too, unless ``check_files`` is off: a run's saved config read
    where its data is not, as the serving command reads it).

    A preset is a name from ``agentrl/config/`` (the algorithms ``ppo`` and ``grpo``, the
    scale overlays ``scale_cpu`` and ``scale_gpu``) or a path to a YAML file of the same
    shape; several are merged left to right (``["grpo", "scale_gpu"]``).
    """
    cfg = OmegaConf.structured(ExperimentConfig)
    for name in [preset] if isinstance(preset, (str, Path)) else list(preset):
        preset_path = Path(name) if str(name).endswith((".yaml", ".yml")) else PRESET_DIR / f"{name}.yaml"
        if not preset_path.is_file():
            raise ConfigError(f"config preset '{name}' not found; available: {available_presets()}")
        try:
            cfg = OmegaConf.merge(cfg, OmegaConf.load(preset_path))
        except OmegaConfBaseException as error:
            raise ConfigError(_explain(error, f"preset {preset_path.name}")) from None

    problems = []
    for text in overrides or []:
        key, value = _parse_override(text)
        try:
            cfg = _apply_override(cfg, key, value, text)
        except ConfigError as error:
            problems.append(str(error))
        except OmegaConfBaseException as error:
            problems.append(_explain(error, f"override '{text}'"))
    if problems:
        raise ConfigError("\n".join(problems))

    try:
        typed: ExperimentConfig = OmegaConf.to_object(cfg)  # resolves ${...} interpolations
    except OmegaConfBaseException as error:
        raise ConfigError(_explain(error, "config")) from None
    _current_tool_paths(typed.actor.rollout)
    validate_config(typed, check_files=check_files)
    return typed


def _current_tool_paths(rollout: RolloutConfig) -> None:
    """Each configured tool's class path as it reads now (``moved.py``: a moved module's old path
    is replaced, with a warning naming the key and both paths)."""
    for i, tool in enumerate(rollout.tools):
        tool.class_path = current_class_path(tool.class_path, f"actor.rollout.tools[{i}].class_path")


def load_rollout(path: str | Path) -> RolloutConfig:
    """The ``actor.rollout`` section of a config file (a run's ``config.yaml`` or a preset YAML),
    typed, without the checks of a whole run: its data files and model need not exist here, so
    data preparation and evaluation can read the tools a run trains with."""
    try:
        section = OmegaConf.select(OmegaConf.load(path), "actor.rollout")
        if section is None:
            raise ConfigError(f"{path}: no actor.rollout section")
        # merged at its place in the whole tree, so an error names the full key
        cfg = OmegaConf.merge(OmegaConf.structured(ExperimentConfig), {"actor": {"rollout": section}})
        rollout: RolloutConfig = OmegaConf.to_object(cfg.actor.rollout)
        _current_tool_paths(rollout)
        return rollout
    except OSError as error:
        raise ConfigError(f"{path}: {error}") from None
    except OmegaConfBaseException as error:
        raise ConfigError(_explain(error, str(path))) from None


def to_yaml(cfg: ExperimentConfig) -> str:
    return OmegaConf.to_yaml(OmegaConf.structured(cfg))
