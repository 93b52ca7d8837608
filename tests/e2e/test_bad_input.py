"""Bad input, end to end: each gets a visible reason and harms nothing else.

For every kind of bad input a user or a driver can write, with the operator running: the
reason shows where the user looks (the pod's DevicesAllocated condition, Events, or the API
server's refusal naming the field), a bystander pod in the same namespace still gets its
device, the operator keeps running, and the invariant checker finds nothing wrong.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from .kube_helpers import Testbed, unique_name, wait_for
from .operator_fixtures import (
    CLAIMS_ANNOTATION,
    GROUP,
    OperatorProcess,
    Pool,
    make_pool,
    operator,
    pod,
    slice_manifest,
    template,
    wait_bound,
)
from .reliability_helpers import assert_invariants, event_messages, pod_condition

__all__ = ["operator"]

pytestmark = pytest.mark.api_modes

CONDITION = f"{GROUP}/DevicesAllocated"
REASON_TIMEOUT_S = 60.0


def reason_of(testbed: Testbed, namespace: str, name: str) -> str:
    """What the user sees about a pod: its DevicesAllocated condition and its Events."""
    found = testbed.get("pod", name, f"--namespace={namespace}")
    condition = pod_condition(found, CONDITION) or {}
    parts = [str(condition.get("message") or "")] if condition.get("status") == "False" else []
    return "\n".join(parts + event_messages(testbed, namespace, name))


def wait_reason(testbed: Testbed, namespace: str, name: str, *needles: str) -> str:
    """Wait until the pod's visible reason mentions one of the needles; return it."""

    def seen() -> str:
        text = reason_of(testbed, namespace, name)
        return text if any(n in text for n in needles) else ""

    reason = str(wait_for(f"reason {needles} on pod {name}", seen, timeout=REASON_TIMEOUT_S))
    print(f"\n[bad input] pod {name}: {reason}")  # the figures of the suite (pytest -s / -rP)
    return reason


def device_class(pool: Pool, name: str, expression: str) -> dict[str, Any]:
    return {
        "apiVersion": pool.mode.api_version,
        "kind": "DeviceClass",
        "metadata": {"name": name},
        "spec": {"selectors": [{"cel": {"expression": expression}}]},
    }


def template_for_class(
    pool: Pool, namespace: str, name: str, class_name: str, **request: Any
) -> dict[str, Any]:
    return {
        "apiVersion": pool.mode.api_version,
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "spec": {
                "devices": {
                    "requests": [
                        {"name": "dev", "exactly": {"deviceClassName": class_name, **request}}
                    ]
                }
            }
        },
    }


def uses(template_name: str) -> list[dict[str, str]]:
    return [{"name": "dev", "resourceClaimTemplateName": template_name}]


def assert_unharmed(
    testbed: Testbed, operator: OperatorProcess, namespace: str, pool: Pool, victim: str
) -> None:
    """A bystander gets its device, the victim did not, the operator lives, invariants hold."""
    testbed.apply(template(namespace, "good", pool))
    testbed.apply(pod(namespace, "bystander", pool, uses("good")))
    wait_bound(testbed, namespace, "bystander")
    found = testbed.get("pod", victim, f"--namespace={namespace}")
    assert found is not None and not found["spec"].get("nodeName"), "the victim must stay pending"
    assert operator.process is not None and operator.process.poll() is None, "operator died"
    assert_invariants(testbed, [namespace])


@pytest.mark.only_api_modes(
    "crd",
    reason="the API server compiles the CEL of resource.k8s.io classes and refuses this one at "
    "create (spec.selectors[0].cel.expression: compilation failed), so dralloc never sees it",
)
def test_invalid_cel_selector_in_a_class_fails_only_its_claims(
    testbed: Testbed, operator: OperatorProcess, namespace: str
) -> None:
    pool = make_pool(testbed, nodes=1, devices=2)
    broken = unique_name("broken-class")
    testbed.apply(device_class(pool, broken, f'device.driver == "{pool.driver}" &&'))
    testbed.apply(template_for_class(pool, namespace, "broken", broken))
    testbed.apply(pod(namespace, "victim", pool, uses("broken")))
    reason = wait_reason(testbed, namespace, "victim", "Syntax error", "compilation failed")
    assert f"class {broken}: selector #0: CEL compile error" in reason, reason
    assert_unharmed(testbed, operator, namespace, pool, "victim")


def test_runtime_cel_error_is_reported(
    testbed: Testbed, operator: OperatorProcess, namespace: str
) -> None:
    pool = make_pool(testbed, nodes=1, devices=2)
    missing = unique_name("missing-attr")
    expression = f'device.attributes["{pool.driver}"].nosuchattribute == "x"'
    testbed.apply(device_class(pool, missing, expression))
    testbed.apply(template_for_class(pool, namespace, "missing", missing))
    testbed.apply(pod(namespace, "victim", pool, uses("missing")))
    reason = wait_reason(testbed, namespace, "victim", "no such key")
    assert "nosuchattribute" in reason, reason
    assert_unharmed(testbed, operator, namespace, pool, "victim")


@pytest.mark.only_api_modes(
    "crd",
    reason="the API server estimates the cost of resource.k8s.io selectors and refuses this "
    "template at create (exceeds cost limit), so dralloc never sees it",
)
def test_cost_bomb_is_stopped_within_bounded_time(
    testbed: Testbed, operator: OperatorProcess, namespace: str
) -> None:
    pool = make_pool(testbed, nodes=1, devices=2)
    items = "[" + ", ".join(str(i) for i in range(60)) + "]"
    bomb = f"{items}.all(a, {items}.all(b, {items}.all(c, {items}.all(d, a + b + c + d >= 0))))"
    testbed.apply(template(namespace, "bomb", pool, selectors=[{"cel": {"expression": bomb}}]))
    started = time.monotonic()
    testbed.apply(pod(namespace, "victim", pool, uses("bomb")))
    reason = wait_reason(testbed, namespace, "victim", "cost limit")
    elapsed = time.monotonic() - started
    assert elapsed < 30, f"the cost-limit reason took {elapsed:.1f}s"
    assert "actual cost limit exceeded" in reason, reason
    assert_unharmed(testbed, operator, namespace, pool, "victim")


def test_missing_class_is_reported(
    testbed: Testbed, operator: OperatorProcess, namespace: str
) -> None:
    pool = make_pool(testbed, nodes=1, devices=2)
    absent = unique_name("no-such-class")
    testbed.apply(template_for_class(pool, namespace, "absent", absent))
    testbed.apply(pod(namespace, "victim", pool, uses("absent")))
    reason = wait_reason(testbed, namespace, "victim", absent)
    assert f'deviceclass "{absent}" not found' in reason, reason
    assert_unharmed(testbed, operator, namespace, pool, "victim")


@pytest.mark.only_api_modes(
    "crd",
    reason="pods ask for claims in spec.resourceClaims in in-tree mode, which the API server "
    "validates itself; the claims annotation is crd mode's",
)
@pytest.mark.parametrize(
    ("annotation", "problem"),
    [
        (json.dumps([{"name": "dev"}]), "exactly one of resourceClaimName"),
        ("[{name: dev}", "is not valid JSON"),
        (json.dumps({"name": "dev", "resourceClaimName": "x"}), "must be a JSON list"),
    ],
    ids=["neither-name-nor-template", "not-json", "not-a-list"],
)
def test_malformed_claims_annotation_is_reported(
    testbed: Testbed, operator: OperatorProcess, namespace: str, annotation: str, problem: str
) -> None:
    pool = make_pool(testbed, nodes=1, devices=2)
    body = pod(namespace, "victim", pool, [])
    body["metadata"]["annotations"][CLAIMS_ANNOTATION] = annotation
    testbed.apply(body)
    reason = wait_reason(testbed, namespace, "victim", problem)
    assert CLAIMS_ANNOTATION in reason, reason
    assert_unharmed(testbed, operator, namespace, pool, "victim")


def _apply_refused(testbed: Testbed, manifest: dict[str, Any]) -> str:
    result = testbed.kubectl("create", "-f", "-", input=json.dumps(manifest), check=False)
    assert result.returncode != 0, "the API server accepted an invalid slice"
    print(f"\n[bad input] refused: {result.stderr.strip()[:400]}")
    return result.stderr


CRD_SCHEMA = (
    "this is dralloc's CRD schema; in in-tree mode resource.k8s.io objects are validated by "
    "the API server itself"
)


@pytest.mark.only_api_modes("crd", reason=CRD_SCHEMA)
def test_slice_over_the_device_limit_is_refused_naming_the_field(testbed: Testbed) -> None:
    from .operator_fixtures import install_crds

    install_crds(testbed)
    node = unique_name("limit-node")
    too_many = slice_manifest(f"{node}.example.com", node, 129)
    message = _apply_refused(testbed, too_many)
    assert "spec.devices" in message and "128" in message, message

    tainted = slice_manifest(f"{node}.example.com", node, 65)
    for device in tainted["spec"]["devices"]:
        device["taints"] = [{"key": "k", "effect": "NoSchedule"}]
    message = _apply_refused(testbed, tainted)
    assert "spec.devices" in message and "64" in message, message


@pytest.mark.only_api_modes("crd", reason=CRD_SCHEMA)
def test_duplicate_device_names_in_one_slice_are_refused(testbed: Testbed) -> None:
    from .operator_fixtures import install_crds

    install_crds(testbed)
    node = unique_name("dup-node")
    manifest = slice_manifest(f"{node}.example.com", node, 2)
    manifest["spec"]["devices"][1]["name"] = manifest["spec"]["devices"][0]["name"]
    message = _apply_refused(testbed, manifest)
    assert "spec.devices" in message and "unique" in message, message


def _split_pool(
    testbed: Testbed, namespace: str, *, counts: tuple[int, int], duplicate: bool
) -> tuple[Pool, Pool]:
    """A one-node pool published as two slices (bad in the given way), plus a good pool."""
    bad = make_pool(testbed, nodes=1, devices=0, prefix="split")
    node = bad.nodes[0]
    for index, count in enumerate(counts):
        manifest = slice_manifest(bad.driver, node, 2, mode=bad.mode)
        manifest["metadata"]["name"] = f"{node}-part-{index}"
        manifest["spec"]["pool"]["resourceSliceCount"] = count
        if not duplicate:
            for device in manifest["spec"]["devices"]:
                device["name"] = f"{device['name']}-{index}"
        testbed.apply(manifest)
    empty = slice_manifest(bad.driver, node, 0, mode=bad.mode)["metadata"]["name"]
    testbed.kubectl("delete", testbed.api_mode.resource("resourceslices"), empty)
    testbed.apply(template(namespace, "split", bad))
    return bad, make_pool(testbed, nodes=1, devices=2)


def test_duplicate_device_names_across_slices_of_a_pool_are_reported(
    testbed: Testbed, operator: OperatorProcess, namespace: str
) -> None:
    bad, good = _split_pool(testbed, namespace, counts=(2, 2), duplicate=True)
    testbed.apply(pod(namespace, "victim", bad, uses("split")))
    reason = wait_reason(testbed, namespace, "victim", "duplicate device name", "invalid")
    assert "invalid resource pools" in reason and "duplicate device name dev-0" in reason, reason
    assert_unharmed(testbed, operator, namespace, good, "victim")


def test_slices_disagreeing_on_resource_slice_count_are_reported(
    testbed: Testbed, operator: OperatorProcess, namespace: str
) -> None:
    bad, good = _split_pool(testbed, namespace, counts=(2, 3), duplicate=False)
    testbed.apply(pod(namespace, "victim", bad, uses("split")))
    reason = wait_reason(testbed, namespace, "victim", "resourceSliceCount", "incomplete")
    assert "invalid resource pools" in reason and "(2, 3)" in reason, reason
    assert_unharmed(testbed, operator, namespace, good, "victim")
