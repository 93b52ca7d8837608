"""The checked-in CRDs are current, and structurally sound as far as can be checked offline.

The real acceptance test is an API server (tests/e2e installs them); here we check the
rules of structural schemas that are easy to get wrong when generating from pydantic.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from operators.api import crdgen

CRD_DIR = Path(__file__).resolve().parents[3] / "crds"
FORBIDDEN_KEYS = {
    "$ref",
    "$defs",
    "patternProperties",
    "propertyNames",
    "default",
    "const",
    "title",
    "allOf",
    "oneOf",
}
# Upstream RawExtension fields: the only places where unknown fields may be kept.
FREE_FORM = re.compile(
    r"(\.opaque\.properties\.parameters|\.status\.properties\.devices\.items\.properties\.data)$"
)


def _crds() -> dict[str, dict[str, Any]]:
    return {name: yaml.safe_load(text) for name, text in crdgen.generate().items()}


def _walk(node: dict[str, Any], path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    yield path, node
    for name, sub in node.get("properties", {}).items():
        yield from _walk(sub, f"{path}.properties.{name}")
    if isinstance(node.get("items"), dict):
        yield from _walk(node["items"], f"{path}.items")
    if isinstance(node.get("additionalProperties"), dict):
        yield from _walk(node["additionalProperties"], f"{path}.additionalProperties")


def _schemas() -> Iterator[tuple[str, dict[str, Any]]]:
    for name, crd in _crds().items():
        yield name, crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


def test_checked_in_crds_match_a_fresh_generation() -> None:
    fresh = crdgen.generate()
    # Only our generated files; crds/ may also hold a hand-written kustomization.yaml.
    on_disk = {p.name: p.read_text() for p in CRD_DIR.glob("resource.dralloc.dev_*.yaml")}
    stale = sorted(name for name in fresh if on_disk.get(name) != fresh[name])
    extra = sorted(set(on_disk) - set(fresh))
    assert not stale and not extra, (
        f"crds/ is out of date (stale: {stale}, unexpected: {extra}); run `make crds`"
    )


def test_one_crd_per_kind_with_names_and_scope() -> None:
    crds = {c["spec"]["names"]["kind"]: c for c in _crds().values()}
    assert set(crds) == {
        "DeviceClass",
        "ResourceClaim",
        "ResourceClaimTemplate",
        "ResourceSlice",
        "DeviceTaintRule",
        "DeviceQuota",
    }
    scopes = {kind: c["spec"]["scope"] for kind, c in crds.items()}
    assert scopes == {
        "DeviceClass": "Cluster",
        "ResourceClaim": "Namespaced",
        "ResourceClaimTemplate": "Namespaced",
        "ResourceSlice": "Cluster",
        "DeviceTaintRule": "Cluster",
        "DeviceQuota": "Namespaced",
    }
    for crd in crds.values():
        names = crd["spec"]["names"]
        assert crd["metadata"]["name"] == f"{names['plural']}.resource.dralloc.dev"
        assert crd["spec"]["group"] == "resource.dralloc.dev"
        assert names["shortNames"] and "dralloc" in names["categories"]
        assert [v["name"] for v in crd["spec"]["versions"]] == ["v1"]
    with_status = {k for k, c in crds.items() if "subresources" in c["spec"]["versions"][0]}
    assert with_status == {"ResourceClaim", "DeviceTaintRule", "DeviceQuota"}


@pytest.mark.parametrize(("crd", "schema"), list(_schemas()))
def test_schema_is_structural(crd: str, schema: dict[str, Any]) -> None:
    for path, node in _walk(schema):
        assert not FORBIDDEN_KEYS & node.keys(), f"{crd}{path}: {FORBIDDEN_KEYS & node.keys()}"
        if node.get("x-kubernetes-int-or-string"):
            assert node["anyOf"] == [{"type": "integer"}, {"type": "string"}], f"{crd}{path}"
            continue
        assert "anyOf" not in node, f"{crd}{path}"
        assert node.get("type") in {"object", "array", "string", "integer", "boolean", "number"}, (
            f"{crd}{path}"
        )
        assert not ("properties" in node and "additionalProperties" in node), f"{crd}{path}"
        if node.get("x-kubernetes-preserve-unknown-fields"):
            assert FREE_FORM.search(path), f"{crd}{path} keeps unknown fields"
        if node["type"] == "array":
            assert "items" in node, f"{crd}{path}"
            list_type = node.get("x-kubernetes-list-type")
            assert list_type in {"atomic", "map"}, f"{crd}{path}"
            if list_type == "map":
                required = set(node["items"].get("required", []))
                assert set(node["x-kubernetes-list-map-keys"]) <= required, f"{crd}{path}"
        for name in node.get("required", []):
            assert name in node.get("properties", {}), f"{crd}{path}: required {name} undefined"


@pytest.mark.parametrize(("crd", "schema"), list(_schemas()))
def test_every_field_has_a_description_for_kubectl_explain(
    crd: str, schema: dict[str, Any]
) -> None:
    missing = [
        path
        for path, node in _walk(schema)
        if path.count(".properties.")
        and not path.endswith(".properties.metadata")
        and not node.get("description")
        and not path.endswith((".items", ".additionalProperties"))
    ]
    assert not missing, f"{crd}: fields without description: {missing[:5]}"


@pytest.mark.parametrize(("crd", "schema"), list(_schemas()))
def test_cel_rules_parse_and_carry_messages(crd: str, schema: dict[str, Any]) -> None:
    celpy = pytest.importorskip("celpy")
    env = celpy.Environment()
    count = 0
    for path, node in _walk(schema):
        for rule in node.get("x-kubernetes-validations", []):
            assert rule.get("message"), f"{crd}{path}: rule without message"
            env.compile(rule["rule"])  # raises CELParseError on a syntax error
            count += 1
            if "oldSelf" in rule["rule"]:
                assert ".items" not in path or "map" in path, (
                    f"{crd}{path}: transition rule under an atomic list"
                )
    assert (
        count
        or crd.endswith("deviceclasses.yaml")
        or crd.endswith("resourceclaimtemplates.yaml") is False
    )


def test_cross_field_rules_are_present_where_the_issue_asks() -> None:
    rules = {
        crd: [
            r["rule"] for _, node in _walk(schema) for r in node.get("x-kubernetes-validations", [])
        ]
        for crd, schema in _schemas()
    }
    claims = " ".join(rules["resource.dralloc.dev_resourceclaims.yaml"])
    assert "has(self.exactly) != (has(self.firstAvailable)" in claims
    assert "has(self.matchAttribute) != has(self.distinctAttribute)" in claims
    taints = " ".join(rules["resource.dralloc.dev_devicetaintrules.yaml"])
    assert "has(self.deviceSelector.driver)" in taints
    slices = " ".join(rules["resource.dralloc.dev_resourceslices.yaml"])
    assert "has(self.perDeviceNodeSelection) && self.perDeviceNodeSelection]" in slices


def _resolve(schema: dict[str, Any], json_path: str) -> bool:
    """Whether a printer column's JSONPath names fields that exist in the schema."""
    node = schema
    cleaned = re.sub(r"\[[^\]]*\]", "[]", json_path)
    for part in cleaned.strip(".").split("."):
        name = part.removesuffix("[]")
        props = node.get("properties", {})
        if name not in props:
            return name in {"creationTimestamp"} and node is schema["properties"]["metadata"]
        node = props[name]
        if part.endswith("[]"):
            node = node.get("items", {})
    return True


def test_printer_columns_point_at_real_fields() -> None:
    columns = {}
    for crd in _crds().values():
        version = crd["spec"]["versions"][0]
        schema = version["schema"]["openAPIV3Schema"]
        kind = crd["spec"]["names"]["kind"]
        columns[kind] = [c["name"] for c in version.get("additionalPrinterColumns", [])]
        for column in version.get("additionalPrinterColumns", []):
            assert _resolve(schema, column["jsonPath"]), f"{kind}: {column}"
    assert columns["ResourceSlice"][:3] == ["Driver", "Node", "Pool"]
    assert {"Node", "Devices", "Age"} <= set(columns["ResourceClaim"])
    assert "Effect" in columns["DeviceTaintRule"]
    assert columns["DeviceClass"] == ["Age"]


def test_limits_reach_the_schema() -> None:
    schema = dict(_schemas())["resource.dralloc.dev_resourceslices.yaml"]
    spec = schema["properties"]["spec"]
    assert spec["properties"]["devices"]["maxItems"] == 128
    assert spec["properties"]["driver"]["maxLength"] == 63
    device = spec["properties"]["devices"]["items"]
    assert device["properties"]["taints"]["maxItems"] == 16
    assert device["properties"]["taints"]["items"]["properties"]["effect"]["enum"] == [
        "NoSchedule",
        "NoExecute",
        "None",
    ]
    assert device["properties"]["name"]["pattern"].startswith("^")


def test_main_check_mode_reports_stale_files(tmp_path: Path) -> None:
    assert crdgen.main([str(tmp_path), "--check"]) == 1
    assert crdgen.main([str(tmp_path)]) == 0
    assert crdgen.main([str(tmp_path), "--check"]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(crdgen.generate())


def test_claim_conditions_are_a_list_map_keyed_by_type() -> None:
    schema = dict(_schemas())["resource.dralloc.dev_resourceclaims.yaml"]
    conditions = schema["properties"]["status"]["properties"]["conditions"]
    assert conditions["x-kubernetes-list-type"] == "map"
    assert conditions["x-kubernetes-list-map-keys"] == ["type"]
    assert conditions["maxItems"] == 8
    item = conditions["items"]
    assert set(item["required"]) == {"type", "status", "reason", "lastTransitionTime"}
    assert {"message", "observedGeneration"} <= set(item["properties"])
    assert "dralloc extension" in conditions["description"]
