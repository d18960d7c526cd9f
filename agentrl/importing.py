"""Import the object an import path names (``pkg.module:attr`` or ``pkg.module.attr``).

Configs name user code by import path (tools, scorers); this is the one loader behind
them. Every failure names the path, what it was for (``what``) and what was expected, so a
typo in a config fails with the config's own words instead of a bare ``ImportError``.
"""

from __future__ import annotations

import importlib
from typing import Any

_FORMS = "'pkg.module:name' or 'pkg.module.name'"


def _split(path: str, what: str) -> tuple[str, str]:
    """``(module, attribute)`` of an import path: before and after the colon, or else the last
    dot. The attribute may itself be dotted after a colon (``pkg.module:Class.method``)."""
    if not isinstance(path, str) or not path.strip():
        raise ValueError(f"{what} must be a non-empty import path like {_FORMS}, got {path!r}")
    if ":" in path:
        module_name, _, attr = path.partition(":")
    else:
        module_name, _, attr = path.rpartition(".")
    if not module_name or not attr:
        raise ValueError(f"{what} {path!r} must look like {_FORMS}")
    return module_name, attr


def import_object(path: str, what: str = "import path") -> Any:
    """The object ``path`` names, imported; ``what`` says what it is for in the error messages.

    An error raised while importing the module (not only ``ImportError``: a user module can
    fail with anything) comes back as an ``ImportError`` that names the path."""
    module_name, attr = _split(path, what)
    try:
        obj: Any = importlib.import_module(module_name)
    except Exception as exc:
        raise ImportError(f"{what} {path!r}: cannot import module {module_name!r}: {exc}") from exc
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise ImportError(f"{what} {path!r}: module {module_name!r} has no attribute {attr!r}") from None
    return obj
