"""Load the cel-spec conformance cases (JSON converted from cel-spec's textproto files).

The data lives in the repository, ``tests/conformance/data/cel-spec`` (with cel-spec's
Apache-2.0 LICENSE), so every clone runs the suite; ``DRALLOC_CEL_SPEC_DIR`` points elsewhere
(another cel-spec version, say).
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from operators.cel.values import CelType, UInt

IN_REPO = Path(__file__).resolve().parent / "data" / "cel-spec"


def data_dir() -> Path:
    configured = os.environ.get("DRALLOC_CEL_SPEC_DIR")
    return Path(configured) if configured else IN_REPO


@dataclass(frozen=True)
class Case:
    file: str
    section: str
    name: str
    data: dict[str, Any]

    @property
    def id(self) -> str:
        return f"{self.file}::{self.section}::{self.name}"

    @property
    def expr(self) -> str:
        return str(self.data["expr"][0])

    def first(self, key: str) -> Any:
        values = self.data.get(key)
        return values[0] if values else None


def load_cases() -> list[Case]:
    directory = data_dir()
    cases: list[Case] = []
    for path in sorted(directory.glob("*.json")):
        document = json.loads(path.read_text())
        for section in document.get("section", []):
            for test in section.get("test", []):
                cases.append(Case(path.stem, section["name"][0], test["name"][0], test))
    return cases


class Unsupported(Exception):
    """The expected value needs something outside this implementation (protobuf messages)."""


def decode_value(value: dict[str, Any]) -> Any:
    """Turn a cel-spec ``Value`` (as converted to JSON) into our runtime representation."""
    ((kind, payload),) = value.items()
    item = payload[0] if isinstance(payload, list) and payload else payload
    if kind == "int64_value":
        return int(item)
    if kind == "uint64_value":
        return UInt(int(item))
    if kind == "double_value":
        if isinstance(item, dict):
            return {"inf": math.inf, "-inf": -math.inf, "nan": math.nan}[item["__float__"]]
        return float(item)
    if kind == "string_value":
        return str(item)
    if kind == "bytes_value":
        if isinstance(item, dict):
            return bytes.fromhex(item["__bytes_hex__"])
        return str(item).encode("utf-8")
    if kind == "bool_value":
        return bool(item)
    if kind == "null_value":
        return None
    if kind == "list_value":
        return [decode_value(v) for v in (item or {}).get("values", [])]
    if kind == "map_value":
        result: dict[Any, Any] = {}
        for entry in (item or {}).get("entries", []):
            result[decode_value(entry["key"][0])] = decode_value(entry["value"][0])
        return result
    if kind == "type_value":
        return CelType(str(item))
    raise Unsupported(kind)


def same(actual: Any, expected: Any) -> bool:
    """Strict equality that tells int, uint, double and bool apart (NaN equals NaN)."""
    if type(actual) is not type(expected):
        if isinstance(actual, (list, tuple)) and isinstance(expected, (list, tuple)):
            pass
        else:
            return False
    if isinstance(expected, float):
        if math.isnan(expected):
            return math.isnan(actual)
        return bool(actual == expected) and math.copysign(1, actual) == math.copysign(1, expected)
    if isinstance(expected, (list, tuple)):
        return len(actual) == len(expected) and all(
            same(a, e) for a, e in zip(actual, expected, strict=True)
        )
    if isinstance(expected, dict):
        if len(actual) != len(expected):
            return False
        for key, value in expected.items():
            matches = [k for k in actual if same(k, key)]
            if len(matches) != 1 or not same(actual[matches[0]], value):
                return False
        return True
    return bool(actual == expected)
