"""The rules every tool set keeps, each checked in one place: options, tags, timeouts, unique names.

* **Options.** A tool's ``options`` (``ToolConfig.options``, passed as keyword arguments) are the
  keywords its constructor takes, or, for a tool that gathers them in an options dataclass and
  says so with a class attribute ``options_class`` (``PythonSandboxTool``: ``SandboxOptions``),
  that dataclass's fields. ``check_options`` refuses a name the tool does not take, with the
  closest one it does (``did_you_mean``), and a required one that is missing;
  ``check_option_types`` checks an options dataclass's values against its annotations.
* **Tags and timeouts.** A tag is an identifier other than the protocol's own tags
  (``RESERVED_TAGS``); a timeout is a number > 0.
* **Unique tags and names.** ``Claims`` records which tool holds each tag and each name, so
  that two tools never share one; each caller words the clash in its own terms.

Callers: the registry (``registry.py``), the driver's pre-flight check (``check.py``) and the
tools' own constructors. This module imports nothing of the project, so anything that builds or
runs tools may import it.
"""

from __future__ import annotations

import dataclasses
import difflib
import inspect
import types
import typing
from collections.abc import Iterable, Mapping
from typing import Any, Generic, NamedTuple, TypeVar

__all__ = [
    "RESERVED_TAGS",
    "Claims",
    "Clash",
    "OptionNames",
    "check_option_types",
    "check_options",
    "check_tag",
    "check_timeout",
    "did_you_mean",
    "option_names",
]

RESERVED_TAGS = frozenset({"answer", "think", "information"})

H = TypeVar("H")


def did_you_mean(name: str, choices: Iterable[str], *, for_name: bool = False) -> str:
    """`` (did you mean 'x'?)`` for the choice closest to ``name``, or ``""`` where none is close.

    ``for_name`` adds which name it is for (`` (did you mean 'x' for 'y'?)``), for messages that
    list several unknown names before their hints."""
    match = difflib.get_close_matches(name, list(choices), n=1, cutoff=0.6)
    if not match:
        return ""
    return f" (did you mean {match[0]!r} for {name!r}?)" if for_name else f" (did you mean {match[0]!r}?)"


def check_tag(tag: object, where: str) -> str:
    """A tool's tag: an identifier that is not one of the reserved tags."""
    if not isinstance(tag, str) or not tag.isidentifier():
        raise ValueError(f"{where}: tool tag must be an identifier like 'search', got {tag!r}")
    if tag in RESERVED_TAGS:
        raise ValueError(f"{where}: tool tag {tag!r} is reserved (reserved: {sorted(RESERVED_TAGS)})")
    return tag


def check_timeout(timeout: object, where: str) -> float:
    """A tool's ``timeout_s``: a number > 0."""
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0:
        raise ValueError(f"{where}: tool timeout_s must be > 0, got {timeout!r}")
    return float(timeout)


# --- options ---------------------------------------------------------------------------------


class OptionNames(NamedTuple):
    """The option names a tool takes, and those of them it cannot do without."""

    accepted: frozenset[str]
    required: frozenset[str]


def option_names(cls: Any) -> OptionNames | None:
    """The options ``cls`` takes: its ``options_class``'s fields where it declares one, else its
    constructor's keywords (a dataclass's ``InitVar`` included); None where they cannot be known (a
    builtin without a signature, a constructor that takes any keyword)."""
    options_class = getattr(cls, "options_class", None)
    if options_class is not None:
        if not _is_dataclass_type(options_class):
            raise TypeError(f"{cls.__name__}.options_class must be a dataclass, got {options_class!r}")
        fields = [f for f in dataclasses.fields(options_class) if f.init]
        no_default = dataclasses.MISSING
        return OptionNames(
            frozenset(f.name for f in fields),
            frozenset(f.name for f in fields if f.default is no_default and f.default_factory is no_default),
        )
    try:
        params = inspect.signature(cls).parameters
    except (TypeError, ValueError):  # builtins without a signature: let the call decide
        return None
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return None
    named = {n: p for n, p in params.items() if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    return OptionNames(
        frozenset(named), frozenset(n for n, p in named.items() if p.default is inspect.Parameter.empty)
    )


def check_options(cls: Any, options: Mapping[str, Any], where: str) -> None:
    """Every option is one ``cls`` takes (a typo gets the closest name) and no required one is missing."""
    names = option_names(cls)
    if names is None:
        return
    accepted = sorted(names.accepted)
    unknown = sorted(set(options) - names.accepted)
    if unknown:
        named = ", ".join(f"'{name}'{did_you_mean(name, accepted)}" for name in unknown)
        raise ValueError(
            f"{where}: unknown option(s) {unknown}: {cls.__name__} takes no option {named}; "
            f"its options are {accepted}"
        )
    missing = sorted(names.required - set(options))
    if missing:
        raise ValueError(f"{where}: missing required option(s) {missing}")


_WORDS: dict[Any, str] = {
    bool: "true or false",
    int: "an integer",
    float: "a number",
    str: "a string",
    type(None): "null",
}


def _fits(value: Any, kind: Any) -> bool:
    if kind is bool:
        return isinstance(value, bool)
    if isinstance(value, bool):  # True is an int to Python, not to a config
        return False
    return isinstance(value, (int, float)) if kind is float else isinstance(value, kind)


def check_option_types(options: Any, where: str) -> None:
    """Each field of the options dataclass ``options`` holds a value of its annotated type.

    Checked are fields annotated with ``bool``, ``int``, ``float`` (an integer is a number too),
    ``str`` or unions of them with ``None``; other annotations are the dataclass's to check.
    """
    hints = typing.get_type_hints(type(options))
    for field in dataclasses.fields(options):
        hint = hints.get(field.name)
        union = typing.get_origin(hint) in (typing.Union, types.UnionType)
        kinds = typing.get_args(hint) if union else (hint,)
        if not field.init or not all(kind in _WORDS for kind in kinds):
            continue
        value = getattr(options, field.name)
        if not any(_fits(value, kind) for kind in kinds):
            expected = " or ".join(_WORDS[kind] for kind in kinds)
            raise ValueError(f"{where}: option {field.name!r} must be {expected}, got {value!r}")


def _is_dataclass_type(obj: Any) -> bool:
    return isinstance(obj, type) and dataclasses.is_dataclass(obj)


# --- unique tags and names -------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Clash(Generic[H]):
    """A tag or a name (``kind``, ``value``) that ``holder`` already has."""

    kind: str
    value: str
    holder: H


class Claims(Generic[H]):
    """Which holder has each tool tag and each tool name so far (see the module docstring)."""

    def __init__(self) -> None:
        self._holders: dict[tuple[str, str], H] = {}

    def claim(self, holder: H, **keys: str) -> Clash[H] | None:
        """Give ``holder`` every ``kind=value`` of ``keys``; where one is held already, the first
        such in the order given comes back as a ``Clash`` and nothing is claimed, else None."""
        for kind, value in keys.items():
            if (kind, value) in self._holders:
                return Clash(kind, value, self._holders[kind, value])
        for kind, value in keys.items():
            self._holders[kind, value] = holder
        return None
