"""Generate the CustomResourceDefinitions in crds/ from the models.

Run `python -m operators.api.crdgen crds/` (or `make crds`). The models are the single
source: their field docstrings become descriptions (`kubectl explain`), their pydantic
constraints become maxItems/maxLength/pattern/enum, and the `x-kubernetes-*` extras they
declare (CEL rules for cross-field checks, list types, immutability) are carried over.
pydantic's JSON schema is turned into a structural OpenAPI v3 schema: references inlined,
nullable unions collapsed, defaults and titles dropped (the API server must not default
anything upstream does not), free-form JSON only where upstream has RawExtension.
"""

from __future__ import annotations

import argparse
import copy
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import yaml

from operators.api.models import (
    GROUP,
    VERSION,
    DeviceClass,
    DeviceQuota,
    DeviceTaintRule,
    ResourceClaim,
    ResourceClaimTemplate,
    ResourceSlice,
)

CATEGORY: Final = "dralloc"
_DROP_KEYS: Final = frozenset({"title", "default", "propertyNames", "examples"})


@dataclass(frozen=True)
class KindInfo:
    """What a CRD needs beyond the schema."""

    model: type[Any]
    plural: str
    scope: str
    short_names: tuple[str, ...]
    columns: tuple[dict[str, Any], ...] = ()
    status: bool = False
    extra_categories: tuple[str, ...] = field(default=())

    @property
    def kind(self) -> str:
        return str(self.model.__name__)


def _column(name: str, json_path: str, type_: str = "string", **extra: Any) -> dict[str, Any]:
    return {"name": name, "type": type_, "jsonPath": json_path, **extra}


_AGE: Final = _column("Age", ".metadata.creationTimestamp", "date")

KINDS: Final[tuple[KindInfo, ...]] = (
    KindInfo(
        DeviceClass,
        "deviceclasses",
        "Cluster",
        ("drclass",),
        columns=(_AGE,),
    ),
    KindInfo(
        ResourceClaim,
        "resourceclaims",
        "Namespaced",
        ("drclaim",),
        status=True,
        columns=(
            # JSONPath cannot compute "allocated,reserved"; the allocation time (empty while
            # pending) and the consumers say the same.
            _column(
                "Allocated",
                ".status.allocation.allocationTimestamp",
                "date",
                description="When the claim was allocated; empty while pending.",
            ),
            # The API server's printer shows only the first value of a JSONPath (a shared
            # claim showed its first pod, a claim of many devices its first device): the
            # operator writes all names in one string, which a CEL rule ties to the lists.
            _column(
                "Reserved For",
                ".status.reservedForNames",
                description="Pods using the claim (dralloc extension, comma-separated).",
            ),
            _column(
                "Node",
                ".status.allocation.nodeSelector.nodeSelectorTerms[*].matchFields[?(@.key=='metadata.name')].values[*]",
                description="Node the allocated devices are bound to, if any.",
            ),
            _column(
                "Devices",
                ".status.allocatedDevices",
                description="Allocated devices (dralloc extension, comma-separated).",
            ),
            _column(
                "Reason",
                ".status.conditions[?(@.type=='Allocated')].reason",
                description="Why the claim is (not yet) allocated (dralloc extension).",
                priority=1,
            ),
            _AGE,
        ),
    ),
    KindInfo(
        ResourceClaimTemplate,
        "resourceclaimtemplates",
        "Namespaced",
        ("drtemplate",),
        columns=(_AGE,),
    ),
    KindInfo(
        ResourceSlice,
        "resourceslices",
        "Cluster",
        ("drslice",),
        columns=(
            _column("Driver", ".spec.driver"),
            _column("Node", ".spec.nodeName"),
            _column("Pool", ".spec.pool.name"),
            _column("Devices", ".spec.devices[*].name", priority=1),
            _AGE,
        ),
    ),
    KindInfo(
        DeviceTaintRule,
        "devicetaintrules",
        "Cluster",
        ("drtaint",),
        status=True,
        columns=(
            _column("Effect", ".spec.taint.effect"),
            _column("Driver", ".spec.deviceSelector.driver"),
            _column("Pool", ".spec.deviceSelector.pool"),
            _column("Device", ".spec.deviceSelector.device"),
            _column(
                "Evicting",
                ".status.conditions[?(@.type=='EvictionInProgress')].status",
                description="Whether pods using the tainted devices are being evicted.",
            ),
            _AGE,
        ),
    ),
    KindInfo(
        DeviceQuota,
        "devicequotas",
        "Namespaced",
        ("drquota",),
        status=True,
        columns=(
            _column("Class", ".spec.deviceClassName"),
            _column("Devices", ".status.used.devices", "integer", description="Devices counted."),
            _column(
                "Max Devices", ".spec.hard.devices", "integer", description="The device limit."
            ),
            _column(
                "Claims", ".status.used.claims", "integer", description="Allocated claims counted."
            ),
            _column("Max Claims", ".spec.hard.claims", "integer", priority=1),
            _column(
                "Valid",
                ".status.conditions[?(@.type=='Valid')].status",
                description="Whether the quota can be enforced (class exists, selectors compile).",
            ),
            _AGE,
        ),
    ),
)


class _Structural:
    """Turns one model's pydantic JSON schema into a structural CRD schema."""

    def __init__(self, schema: dict[str, Any]) -> None:
        self.defs: dict[str, Any] = schema.get("$defs", {})

    def convert(self, node: dict[str, Any]) -> dict[str, Any]:
        node = dict(node)
        ref = node.pop("$ref", None)
        if ref is not None:
            target = self.defs[ref.rsplit("/", 1)[-1]]
            merged = copy.deepcopy(target)
            # The referencing field's description and extras win over the type's.
            merged.update({k: v for k, v in node.items() if k not in _DROP_KEYS})
            node = merged
        if "allOf" in node and len(node["allOf"]) == 1:
            inner = node.pop("allOf")[0]
            node = {**inner, **node}
            return self.convert(node)
        if "anyOf" in node and not node.get("x-kubernetes-int-or-string"):
            options = [o for o in node.pop("anyOf") if o.get("type") != "null"]
            if len(options) != 1:
                raise ValueError(f"cannot express union {options!r} in a structural schema")
            inner = options[0]
            outer = {k: v for k, v in node.items() if k not in _DROP_KEYS}
            merged = {**inner, **outer} if "$ref" not in inner else {**outer, "$ref": inner["$ref"]}
            if "$ref" in inner:
                merged = self.convert(merged)
                return merged
            return self.convert(merged)
        out: dict[str, Any] = {}
        if "description" in node:
            out["description"] = node["description"]
        if "const" in node:
            node.setdefault("enum", [node.pop("const")])
        for key, value in node.items():
            if key in _DROP_KEYS or key in ("description", "$defs", "required"):
                continue
            if key == "properties":
                out["properties"] = {name: self.convert(sub) for name, sub in value.items()}
            elif key == "items":
                out["items"] = self.convert(value)
            elif key == "patternProperties":
                # Structural schemas cannot constrain map keys; the operator checks them.
                (value_schema,) = value.values()
                out["additionalProperties"] = self.convert(value_schema)
            elif key == "additionalProperties":
                if value is True or value == {}:
                    out["x-kubernetes-preserve-unknown-fields"] = True
                elif isinstance(value, dict):
                    out["additionalProperties"] = self.convert(value)
            elif key == "exclusiveMinimum":
                out["minimum"] = value + 1  # only integers use it here
            elif key == "exclusiveMaximum":
                out["maximum"] = value - 1
            else:
                out[key] = value
        if node.get("required"):
            out["required"] = list(node["required"])
        if out.get("type") == "array":
            out.setdefault("x-kubernetes-list-type", "atomic")
        if "type" not in out and not out.get("x-kubernetes-int-or-string"):
            # Any JSON (upstream RawExtension): the only place unknown fields are kept.
            out["type"] = "object"
            out["x-kubernetes-preserve-unknown-fields"] = True
        return out


def _order(schema: dict[str, Any]) -> dict[str, Any]:
    """Stable, readable key order: description and type first."""
    first = ("description", "type")
    ordered = {k: schema[k] for k in first if k in schema}
    for key, value in schema.items():
        if key in ordered:
            continue
        if key == "properties":
            value = {name: _order(sub) for name, sub in value.items()}
        elif key in ("items", "additionalProperties") and isinstance(value, dict):
            value = _order(value)
        ordered[key] = value
    return ordered


def kind_schema(info: KindInfo) -> dict[str, Any]:
    raw = info.model.model_json_schema(by_alias=True, mode="validation")
    schema = _Structural(raw).convert(raw)
    props = schema["properties"]
    props["apiVersion"] = {
        "description": "APIVersion defines the versioned schema of this representation of an object.",
        "type": "string",
    }
    props["kind"] = {
        "description": "Kind is a string value representing the REST resource this object represents.",
        "type": "string",
    }
    props["metadata"] = {"type": "object"}
    required = [name for name in schema.get("required", []) if name not in ("metadata",)]
    if required:
        schema["required"] = required
    return _order(schema)


def crd(info: KindInfo) -> dict[str, Any]:
    version: dict[str, Any] = {
        "name": VERSION,
        "served": True,
        "storage": True,
        "schema": {"openAPIV3Schema": kind_schema(info)},
    }
    if info.status:
        version["subresources"] = {"status": {}}
    if info.columns:
        version["additionalPrinterColumns"] = [dict(c) for c in info.columns]
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": f"{info.plural}.{GROUP}",
            "labels": {"app.kubernetes.io/part-of": "dralloc"},
        },
        "spec": {
            "group": GROUP,
            "scope": info.scope,
            "names": {
                "kind": info.kind,
                "listKind": f"{info.kind}List",
                "plural": info.plural,
                "singular": info.kind.lower(),
                "shortNames": list(info.short_names),
                "categories": [CATEGORY, *info.extra_categories],
            },
            "versions": [version],
        },
    }


class _Dumper(yaml.SafeDumper):
    """Block style, no aliases, long strings kept on one line."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def render(info: KindInfo) -> str:
    header = (
        "# Generated by `python -m operators.api.crdgen crds/` from operators/api; do not edit.\n"
    )
    body = yaml.dump(crd(info), Dumper=_Dumper, sort_keys=False, width=1 << 16)
    return header + body


def file_name(info: KindInfo) -> str:
    return f"{GROUP}_{info.plural}.yaml"


def generate() -> dict[str, str]:
    """File name -> YAML text for every CRD."""
    return {file_name(info): render(info) for info in KINDS}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("directory", type=Path, help="where to write the CRD files (crds/)")
    parser.add_argument(
        "--check", action="store_true", help="exit 1 if the files differ instead of writing"
    )
    args = parser.parse_args(argv)
    files = generate()
    stale = []
    for name, text in files.items():
        path = args.directory / name
        current = path.read_text() if path.exists() else None
        if current == text:
            continue
        stale.append(name)
        if not args.check:
            args.directory.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
    if args.check and stale:
        print(f"out of date: {', '.join(stale)}", file=sys.stderr)
        return 1
    for name in stale:
        print(f"wrote {args.directory / name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
