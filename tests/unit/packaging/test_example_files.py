"""The examples and the CRD kustomization, checked without a cluster.

Every example object must validate against the API models, and everything it refers to
(classes, templates, claims, the tainted device, namespaces) must exist among the examples,
so that `kubectl apply -k manifests/examples` is self-contained.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from operators.api import parse_object
from operators.api.annotations import ADMIN_ACCESS_LABEL, CLAIMS_ANNOTATION, parse_pod_claims

REPO = Path(__file__).resolve().parents[3]
EXAMPLES = REPO / "manifests" / "examples"
# Applied on their own, after the rest (see manifests/README.md).
OPTIONAL = (EXAMPLES / "device-taint" / "rule", EXAMPLES / "device-taint" / "budget")
PACKING_DRIVER = "mig.example.com"
PACKING_NS = "dralloc-packing-example"
DRA_KINDS = {
    "DeviceClass",
    "ResourceClaim",
    "ResourceClaimTemplate",
    "ResourceSlice",
    "DeviceTaintRule",
}


def kustomize_files(directory: Path) -> list[Path]:
    """Files a kustomization includes, following sub-directories."""
    listed = yaml.safe_load((directory / "kustomization.yaml").read_text())["resources"]
    files: list[Path] = []
    for entry in listed:
        path = (directory / entry).resolve()
        files.extend(kustomize_files(path) if path.is_dir() else [path])
    return files


def objects(files: list[Path]) -> list[dict[str, Any]]:
    return [doc for f in files for doc in yaml.safe_load_all(f.read_text()) if doc]


@pytest.fixture(scope="module")
def examples() -> list[dict[str, Any]]:
    return objects([f for d in (EXAMPLES, *OPTIONAL) for f in kustomize_files(d)])


def test_every_example_yaml_is_reachable_from_a_kustomization() -> None:
    included = {f for d in (EXAMPLES, *OPTIONAL) for f in kustomize_files(d)}
    on_disk = {p.resolve() for p in EXAMPLES.rglob("*.yaml") if p.name != "kustomization.yaml"}
    assert on_disk == included


def test_dra_objects_validate(examples: list[dict[str, Any]]) -> None:
    for obj in examples:
        if obj["kind"] in DRA_KINDS:
            assert obj["apiVersion"] == "resource.dralloc.dev/v1"
            parse_object(obj)  # raises with the field path on failure


def test_references_resolve(examples: list[dict[str, Any]]) -> None:
    def names(kind: str) -> set[str]:
        return {
            f"{o['metadata'].get('namespace', '')}/{o['metadata']['name']}"
            for o in examples
            if o["kind"] == kind
        }

    classes = {n.lstrip("/") for n in names("DeviceClass")}
    namespaces = {n.lstrip("/") for n in names("Namespace")}
    for template in (
        o for o in examples if o["kind"] in ("ResourceClaimTemplate", "ResourceClaim")
    ):
        spec = template["spec"].get("spec", template["spec"])
        for request in spec["devices"]["requests"]:
            alternatives = request.get("firstAvailable") or [request["exactly"]]
            for alternative in alternatives:
                assert alternative["deviceClassName"] in classes, template["metadata"]["name"]
    pods = [o for o in examples if o["kind"] == "Pod"]
    assert len(pods) >= 6
    for pod in pods:
        namespace = pod["metadata"]["namespace"]
        assert namespace in namespaces
        for entry in parse_pod_claims(pod["metadata"]["annotations"][CLAIMS_ANNOTATION]):
            if entry.resource_claim_template_name:
                assert f"{namespace}/{entry.resource_claim_template_name}" in names(
                    "ResourceClaimTemplate"
                )
            else:
                assert f"{namespace}/{entry.resource_claim_name}" in names("ResourceClaim")


def test_admin_access_only_in_the_labelled_namespace(examples: list[dict[str, Any]]) -> None:
    labelled = {
        o["metadata"]["name"]
        for o in examples
        if o["kind"] == "Namespace"
        and (o["metadata"].get("labels") or {}).get(ADMIN_ACCESS_LABEL) == "true"
    }
    admin_templates = [
        o
        for o in examples
        if o["kind"] == "ResourceClaimTemplate"
        and any(
            r.get("exactly", {}).get("adminAccess")
            for r in o["spec"]["spec"]["devices"]["requests"]
        )
    ]
    assert admin_templates, "the admin-access example is missing"
    for template in admin_templates:
        assert template["metadata"]["namespace"] in labelled


def test_fake_driver_publishes_eight_gpus_per_node(examples: list[dict[str, Any]]) -> None:
    slices = [
        o
        for o in examples
        if o["kind"] == "ResourceSlice" and o["spec"]["driver"] == "gpu.example.com"
    ]
    assert len(slices) >= 2
    uuids: set[str] = set()
    for slice_ in slices:
        devices = slice_["spec"]["devices"]
        assert len(devices) == 8
        for device in devices:
            assert {"uuid", "model", "numa", "pcieRoot"} <= set(device["attributes"])
            assert "memory" in device["capacity"]
            uuids.add(device["attributes"]["uuid"]["string"])
    assert len(uuids) == 8 * len(slices), "uuids must be unique"


def test_taint_rule_selects_the_pinned_device(examples: list[dict[str, Any]]) -> None:
    (rule,) = [o for o in examples if o["kind"] == "DeviceTaintRule"]
    selector = rule["spec"]["deviceSelector"]
    assert rule["spec"]["taint"]["effect"] == "NoExecute"
    matches = [
        device
        for s in examples
        if s["kind"] == "ResourceSlice"
        and s["spec"]["driver"] == selector["driver"]
        and s["spec"]["pool"]["name"] == selector["pool"]
        for device in s["spec"]["devices"]
        if device["name"] == selector["device"]
    ]
    assert len(matches) == 1
    pinned = next(
        o
        for o in examples
        if o["kind"] == "ResourceClaimTemplate" and o["metadata"]["name"] == "pinned-gpu"
    )
    expression = pinned["spec"]["spec"]["devices"]["requests"][0]["exactly"]["selectors"][0]["cel"][
        "expression"
    ]
    assert matches[0]["attributes"]["uuid"]["string"] in expression


def test_crd_kustomization_lists_every_crd_file() -> None:
    crds = REPO / "crds"
    listed = yaml.safe_load((crds / "kustomization.yaml").read_text())["resources"]
    on_disk = sorted(p.name for p in crds.glob("*.yaml") if p.name != "kustomization.yaml")
    assert sorted(listed) == on_disk
    assert on_disk, "crds/ is empty: run make crds"


def test_the_budget_example_covers_the_pod_the_taint_rule_evicts(
    examples: list[dict[str, Any]],
) -> None:
    [budget] = [o for o in examples if o["kind"] == "PodDisruptionBudget"]
    [rule] = [o for o in examples if o["kind"] == "DeviceTaintRule"]
    assert rule["spec"]["taint"]["effect"] == "NoExecute"
    wanted = budget["spec"]["selector"]["matchLabels"]
    covered = [
        o["metadata"]["name"]
        for o in examples
        if o["kind"] == "Pod"
        and o["metadata"]["namespace"] == budget["metadata"]["namespace"]
        and wanted.items() <= (o["metadata"].get("labels") or {}).items()
    ]
    assert covered == ["pinned-gpu"]
    assert budget["spec"]["maxUnavailable"] == 0


def test_packing_example_partitions_cover_their_gpus(examples: list[dict[str, Any]]) -> None:
    """packing/: per node two GPUs of eight memory slices, each cut into 1g/2g/4g/whole
    partitions at aligned positions; a partition consumes the slices it covers."""
    slices = [
        o
        for o in examples
        if o["kind"] == "ResourceSlice" and o["spec"]["driver"] == PACKING_DRIVER
    ]
    pools: dict[str, dict[str, Any]] = {}
    for slice_ in slices:
        spec = slice_["spec"]
        assert spec["pool"]["resourceSliceCount"] == 2
        pool = pools.setdefault(spec["pool"]["name"], {"counters": {}, "devices": []})
        for counter_set in spec.get("sharedCounters", []):
            pool["counters"][counter_set["name"]] = set(counter_set["counters"])
        pool["devices"] += spec.get("devices", [])
    assert sorted(pools) == ["kwok-node-0", "kwok-node-1"]
    sizes = {"1g": 1, "2g": 2, "4g": 4, "whole": 8}
    for pool in pools.values():
        assert pool["counters"] == {f"gpu-{g}": {f"s{k}" for k in range(8)} for g in range(2)}
        # 8 + 4 + 2 + 1 partitions per GPU.
        assert len(pool["devices"]) == 2 * 15
        for device in pool["devices"]:
            profile = device["attributes"]["profile"]["string"]
            (consumed,) = device["consumesCounters"]
            assert consumed["counterSet"] == f"gpu-{device['attributes']['gpu']['int']}"
            positions = sorted(int(name[1:]) for name in consumed["counters"])
            size = sizes[profile]
            assert len(positions) == size and positions[0] % size == 0
            assert positions == list(range(positions[0], positions[0] + size))


def test_packing_example_keeps_to_its_own_driver_class_and_namespace(
    examples: list[dict[str, Any]],
) -> None:
    """So that applying it next to the other examples changes none of their outcomes."""
    classes = {
        o["metadata"]["name"]: o["spec"]["selectors"][0]["cel"]["expression"]
        for o in examples
        if o["kind"] == "DeviceClass"
    }
    assert classes[PACKING_DRIVER] == f'device.driver == "{PACKING_DRIVER}"'
    # Every other class names its driver, so none of them selects the partitions.
    for name, expression in classes.items():
        if name != PACKING_DRIVER:
            assert expression.startswith('device.driver == "gpu.example.com"'), name
    users = {
        o["metadata"]["namespace"]
        for o in examples
        if o["kind"] in ("ResourceClaimTemplate", "ResourceClaim")
        and any(
            alternative["deviceClassName"] == PACKING_DRIVER
            for request in o["spec"].get("spec", o["spec"])["devices"]["requests"]
            for alternative in request.get("firstAvailable") or [request["exactly"]]
        )
    }
    assert users == {PACKING_NS}
