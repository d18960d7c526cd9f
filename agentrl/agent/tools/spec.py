"""A tool's schema: its name, description and parameters in the OpenAI function format.

``ToolSpec`` is what a chat template's ``tools=`` receives (``to_openai()``) and what a
call's arguments are checked against before the tool runs (``argument_errors``, with the
maintained ``jsonschema`` library, so the full JSON Schema vocabulary applies).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import jsonschema
from jsonschema.exceptions import best_match


@dataclass(frozen=True)
class ToolSpec:
    """One callable function: ``parameters`` is a JSON Schema for its arguments object."""

    name: str
    description: str
    parameters: dict[str, Any] = field(default_factory=lambda: {"type": "object", "properties": {}})

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.isidentifier():
            raise ValueError(f"tool name must be an identifier like 'search', got {self.name!r}")
        if not isinstance(self.parameters, dict) or self.parameters.get("type") != "object":
            raise ValueError(
                f"tool {self.name!r}: parameters must be a JSON Schema with type 'object', "
                f"got {self.parameters!r}"
            )
        try:
            _validator_class(self.parameters).check_schema(self.parameters)
        except jsonschema.SchemaError as exc:
            raise ValueError(
                f"tool {self.name!r}: parameters are not a valid JSON Schema: {exc.message}"
            ) from None

    def to_openai(self) -> dict[str, Any]:
        """``{"type": "function", "function": {...}}``, the shape chat templates read."""
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": self.parameters},
        }


def _validator_class(schema: dict[str, Any]) -> Any:
    return jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)


def _where(path: Any) -> str:
    parts = [str(p) for p in path]
    return ".".join(parts) if parts else "arguments"


def argument_errors(spec: ToolSpec, arguments: Any) -> str | None:
    """One short reason the arguments do not fit ``spec.parameters`` (naming the field), or None."""
    if not isinstance(arguments, dict):
        return f"arguments of {spec.name!r} must be a JSON object, got {type(arguments).__name__}"
    validator = _validator_class(spec.parameters)(spec.parameters)
    error = best_match(validator.iter_errors(arguments))
    if error is None:
        return None
    return f"{spec.name}: {_where(error.absolute_path)}: {error.message}"
