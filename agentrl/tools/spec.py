"""A tool's schema: its name, description and parameters in the OpenAI function format.

``ToolSpec`` is what a chat template's ``tools=`` receives (``to_openai()``) and what a
call's arguments are checked against before the tool runs (``argument_errors``, with the
maintained ``jsonschema`` library, so the full JSON Schema vocabulary applies). A schema's
validator is built once per process and reused (``validator_for``), kept in a bounded cache
keyed by the schema's JSON text rather than on ``ToolSpec``, which must stay a plain picklable
value (Ray sends it to the workers): the spec holds only that text, written once when it is made.
"""

from __future__ import annotations

import functools
import json
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
    # ``parameters`` as JSON text, written once here: its validator's key (``validator_for``). Not
    # a per-call ``json.dumps``, which costs as much as building the validator it would look up.
    schema_json: str = field(init=False, repr=False, compare=False)

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
        try:
            object.__setattr__(self, "schema_json", json.dumps(self.parameters))  # frozen: set once
        except (TypeError, ValueError) as exc:
            raise ValueError(f"tool {self.name!r}: parameters are not JSON: {exc}") from None

    def to_openai(self) -> dict[str, Any]:
        """``{"type": "function", "function": {...}}``, the shape chat templates read."""
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": self.parameters},
        }


def _validator_class(schema: dict[str, Any]) -> Any:
    return jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)


@functools.lru_cache(maxsize=256)  # bounded: one entry per distinct schema a process checks against
def _validator_of(schema_json: str) -> Any:
    schema = json.loads(schema_json)  # a private copy: a caller's later edit of its dict cannot reach it
    return _validator_class(schema)(schema)


def validator_for(spec: ToolSpec) -> Any:
    """The validator of ``spec.parameters``, shared by every spec with the same schema (keyed by
    ``spec.schema_json``): a rollout checks the arguments of every call against it.

    The text keeps the schema's key order (no ``sort_keys``): the validator reports errors in
    that order, and ``best_match`` breaks ties by it, so sorted keys would change which reason a
    malformed call is told (``additionalProperties`` before ``required``)."""
    return _validator_of(spec.schema_json)


def _where(path: Any) -> str:
    parts = [str(p) for p in path]
    return ".".join(parts) if parts else "arguments"


def argument_errors(spec: ToolSpec, arguments: Any) -> str | None:
    """One short reason the arguments do not fit ``spec.parameters`` (naming the field), or None."""
    if not isinstance(arguments, dict):
        return f"arguments of {spec.name!r} must be a JSON object, got {type(arguments).__name__}"
    error = best_match(validator_for(spec).iter_errors(arguments))
    if error is None:
        return None
    return f"{spec.name}: {_where(error.absolute_path)}: {error.message}"
