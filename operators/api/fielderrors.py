"""Validation errors that name the field path, Kubernetes style.

pydantic reports a location tuple and a generic message ("String should match pattern
..."); users need `spec.devices[3].name: must be a DNS label ...`. Cross-field validators
raise `field_error(...)` with a path relative to the object they validate; `describe()`
joins it to the location pydantic knows and rewrites pattern errors into the phrase from
limits.PATTERN_DESCRIPTIONS. All of this runs only when validation fails.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError
from pydantic_core import ErrorDetails, PydanticCustomError

from operators.api import limits

ERROR_TYPE = "dralloc"

_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class FieldError:
    """One problem at one field path."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}" if self.path else self.message


class InvalidObjectError(ValueError):
    """An object failed validation; `errors` lists every problem with its field path."""

    def __init__(self, what: str, errors: Sequence[FieldError]) -> None:
        self.what = what
        self.errors = tuple(errors)
        lines = "; ".join(str(e) for e in self.errors)
        super().__init__(f"{what} is invalid: {lines}" if what else lines)


def field_error(path: str, message: str) -> PydanticCustomError:
    """An error for a validator to raise; `path` is relative to the validated model."""
    # Braces in user-provided text would be taken as template fields.
    safe = message.replace("{", "(").replace("}", ")")
    return PydanticCustomError(ERROR_TYPE, safe, {"path": path})


def key_path(field: str, key: str) -> str:
    """Path of a map entry, rendered the way `join_path` renders pydantic locations."""
    return f"{field}.{key}" if _IDENTIFIER.match(key) else f"{field}[{key}]"


def join_path(*parts: str | int) -> str:
    """Render location parts as `spec.devices[3].attributes[example.com/x]`."""
    out = ""
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part == "[key]":
            continue  # pydantic marks errors in a dict key; the key itself follows
        elif _IDENTIFIER.match(part):
            out += f".{part}" if out else part
        else:
            out += f"[{part}]"
    return out


def _loc_parts(loc: Iterable[Any]) -> list[str | int]:
    parts: list[str | int] = []
    for item in loc:
        if isinstance(item, int):
            parts.append(item)
        else:
            text = str(item)
            # Internal validator names pydantic puts into the location of custom types.
            if text.startswith(("function-", "json-or-python", "lax-or-strict")):
                continue
            parts.append(text)
    return parts


def _message(error: ErrorDetails) -> str:
    kind = error["type"]
    ctx = error.get("ctx") or {}
    if kind == "string_pattern_mismatch":
        return limits.describe_pattern(str(ctx.get("pattern", "")))
    if kind == "too_long":
        return f"must have at most {ctx.get('max_length')} items"
    if kind == "string_too_long":
        return f"must be at most {ctx.get('max_length')} characters"
    if kind == "string_too_short":
        return "must not be empty" if ctx.get("min_length") == 1 else error["msg"]
    if kind == "too_short":
        return f"must have at least {ctx.get('min_length')} items"
    if kind in ("model_type", "model_attributes_type", "dict_type"):
        return "must be a JSON object"
    if kind == "missing":
        return "required value"
    if kind == "extra_forbidden":
        return "unknown field"
    if kind == "literal_error":
        return f"unsupported value {error.get('input')!r}: must be {ctx.get('expected')}"
    if kind == "value_error":
        return str(ctx.get("error", error["msg"]))
    return error["msg"]


def describe(exc: ValidationError, prefix: Sequence[str | int] = ()) -> list[FieldError]:
    """Every error of a pydantic ValidationError, as field-path messages."""
    out: list[FieldError] = []
    for error in exc.errors(include_url=False):
        parts = [*prefix, *_loc_parts(error["loc"])]
        path = join_path(*parts)
        ctx = error.get("ctx") or {}
        if error["type"] == ERROR_TYPE and ctx.get("path"):
            relative = str(ctx["path"])
            path = (
                f"{path}.{relative}" if path and not relative.startswith("[") else path + relative
            )
        out.append(FieldError(path, _message(error)))
    return out


def prefixed(error: PydanticCustomError, prefix: str) -> PydanticCustomError:
    """The same error with its relative path under `prefix` (for rules checked in a loop)."""
    ctx = error.context or {}
    relative = str(ctx.get("path", ""))
    if not relative:
        path = prefix
    elif relative.startswith("["):
        path = prefix + relative
    else:
        path = f"{prefix}.{relative}"
    return PydanticCustomError(ERROR_TYPE, error.message_template, {**ctx, "path": path})
