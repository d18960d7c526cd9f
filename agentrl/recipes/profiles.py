"""The recipes' profiles: a YAML file of sizes and schedules, read into a typed dataclass by one loader.

A profile is a frozen dataclass (the quickstart's ``Profile``, the search-QA recipe's
``RecipeProfile``) and each of its instances is a YAML file beside the code. :func:`load_profile`
reads a file into its dataclass: a key the dataclass does not have, a missing key (one without a
default) or a value of the wrong type fails at load time with a :class:`ProfileError` naming the
file and the key. A mapping field whose metadata names a ``base_key`` (the quickstart's ``ppo``:
``ppo_base``) may start from a shared file: that key names a YAML mapping beside the profile, and
the profile's own entries win over it.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from pathlib import Path
from typing import Any, TypeVar

import yaml

__all__ = ["BASE_KEY", "ProfileError", "load_profile"]

BASE_KEY = "base_key"  # a field's metadata entry: the profile key naming its shared base file
P = TypeVar("P")


class ProfileError(ValueError):
    """A profile file has an unknown or missing key, or a value of the wrong type."""


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


def _required(f: dataclasses.Field) -> bool:
    return f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING


def load_profile(path: str | Path, kind: type[P]) -> P:
    """The ``kind`` (a dataclass) in the YAML file ``path``, checked key by key against its fields."""
    path = Path(path)
    data = _read_mapping(path)
    known = {f.name: f for f in dataclasses.fields(kind)}  # type: ignore[arg-type]
    bases = {f.metadata[BASE_KEY]: name for name, f in known.items() if BASE_KEY in f.metadata}
    base_files = {bases[key]: data.pop(key) for key in list(data) if key in bases}
    unknown = sorted(set(data) - set(known), key=str)
    if unknown:
        keys = ", ".join([*known, *bases])
        raise ProfileError(f"{path}: unknown key {unknown[0]!r} (a profile has: {keys})")
    missing = [name for name, f in known.items() if name not in data and _required(f)]
    if missing:
        raise ProfileError(f"{path}: missing key {missing[0]!r}")
    hints = typing.get_type_hints(kind)
    values = {name: _typed(value, hints[name], f"{path}: key {name!r}") for name, value in data.items()}
    for name, base_name in base_files.items():
        base_path = path.parent / str(base_name)
        base = _typed(_read_mapping(base_path), hints[name], str(base_path))
        values[name] = base | values.get(name, {})
    return kind(**values)
