"""Bad input, end to end: each gets a visible reason and harms nothing else.

For every kind of bad input a user or a driver can write, with the operator running: the
reason shows where the user looks (the pod's DevicesAllocated condition, Events, or the API
server's refusal naming the field), a bystander pod in the same namespace still gets its
device, the operator keeps running, and the invariant checker finds nothing wrong.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

from .kube_helpers import Testbed, unique_name, wait_for
from .operator_fixtures import (
    CLAIMS_ANNOTATION,
    GROUP,
    OperatorProcess,
    Pool,
    claim,
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


def selecting(expression: str) -> list[dict[str, Any]]:
    return [{"cel": {"expression": expression}}]


@contextlib.contextmanager
def stored_before_the_webhook(testbed: Testbed, operator: OperatorProcess) -> Iterator[None]:
    """Objects created inside are stored as if before dralloc's selector webhook existed
    (an upgrade): its configuration is taken away meanwhile and put back after."""
    name = f"{operator.lease or 'dralloc-operator'}.dralloc.test"
    saved = testbed.get("validatingwebhookconfiguration", name)
    assert saved is not None, f"no ValidatingWebhookConfiguration {name}"
    testbed.kubectl("delete", "validatingwebhookconfiguration", name)
    try:
        yield
    finally:
        for key in ("resourceVersion", "uid", "creationTimestamp", "managedFields", "generation"):
            saved["metadata"].pop(key, None)
        testbed.kubectl("create", "-f", "-", input=json.dumps(saved))


def test_refused_selectors_name_the_field_in_both_modes(
    testbed: Testbed, operator: OperatorProcess, namespace: str
) -> None:
    """What the API server says about resource.k8s.io selectors in-tree, dralloc's webhook
    says about its own kinds: refused at create, with the field path and message."""
    pool = make_pool(testbed, nodes=1, devices=1)
    bomb = 'semver("1.0.0") != semver("2.0.0")'  # estimated ~1.8e18 upstream
    refused = [
        (
            device_class(pool, unique_name("syntax"), f'device.driver == "{pool.driver}" &&'),
            'spec.selectors[0].cel.expression: Invalid value: "device.driver == ',
            "compilation failed: ERROR: <input>:1:",
        ),
        (
            claim(namespace, "typed", pool, selectors=selecting("device.driver == 1")),
            "spec.devices.requests[0].exactly.selectors[0].cel.expression: Invalid value: ",
            "found no matching overload for '_==_' applied to '(string, int)'",
        ),
        (
            template(namespace, "costly", pool, selectors=selecting(bomb)),
            "spec.spec.devices.requests[0].exactly.selectors[0].cel.expression: Forbidden: "
            "too complex, exceeds cost limit",
            "",
        ),
    ]
    # A derived attribute's CEL (alpha, DRADerivedAttributes: on in the testbed's API
    # server) is checked alike, its cost also added up over the claim.
    derived = claim(
        namespace,
        "derived",
        pool,
        derivedAttributes=[{"name": "example.com/d", "expression": bomb}],
    )
    derived["spec"]["devices"]["constraints"] = [{"matchAttribute": "example.com/d"}]
    refused.append(
        (
            derived,
            "spec.devices.requests[0].exactly.derivedAttributes[0].expression: Forbidden: "
            "too complex, exceeds cost limit",
            "spec.devices: Forbidden: too complex, total cost of derived attribute CEL "
            "expressions in the claim exceeds cost limit",
        )
    )
    for manifest, where, what in refused:
        message = _apply_refused(testbed, manifest)
        assert where in message and what in message, message
    good = f'device.driver == "{pool.driver}"'
    testbed.apply(device_class(pool, unique_name("good"), good))
    testbed.apply(claim(namespace, "good-claim", pool, selectors=selecting(good)))


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
    "template at create (exceeds cost limit), so it is never stored",
)
def test_cost_bomb_is_stopped_within_bounded_time(
    testbed: Testbed, operator: OperatorProcess, namespace: str
) -> None:
    pool = make_pool(testbed, nodes=1, devices=2)
    items = "[" + ", ".join(str(i) for i in range(60)) + "]"
    bomb = f"{items}.all(a, {items}.all(b, {items}.all(c, {items}.all(d, a + b + c + d >= 0))))"
    # A claim stored while no webhook checked it: new ones are refused at create, as
    # in-tree (a claim generated from a template too, so the pod names the claim).
    with stored_before_the_webhook(testbed, operator):
        testbed.apply(claim(namespace, "bomb", pool, selectors=selecting(bomb)))
    started = time.monotonic()
    testbed.apply(pod(namespace, "victim", pool, [{"name": "dev", "resourceClaimName": "bomb"}]))
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
    result = testbed.kubectl("apply", "-f", "-", input=json.dumps(manifest), check=False)
    assert result.returncode != 0, f"the API server accepted an invalid {manifest['kind']}"
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


@pytest.mark.only_api_modes("crd", reason=CRD_SCHEMA)
def test_skipped_node_operations_are_refused_as_upstream_refuses_them(testbed: Testbed) -> None:
    """A slice's skipNodeOperations (alpha, DRAOptionalNodeOperations): upstream's three
    values, each once, NodePrepareResources only with NodeUnprepareResources."""
    from .operator_fixtures import install_crds

    install_crds(testbed)
    node = unique_name("skip-node")
    refused = [
        (["Bogus"], "supported values"),
        (["*", "*"], "must be unique"),
        (["NodePrepareResources"], "cannot be skipped unless NodeUnprepareResources"),
    ]
    for operations, what in refused:
        manifest = slice_manifest(f"{node}.example.com", node, 1)
        manifest["spec"]["skipNodeOperations"] = operations
        message = _apply_refused(testbed, manifest)
        assert "skipNodeOperations" in message and what in message, message
    manifest = slice_manifest(f"{node}.example.com", node, 1)
    manifest["spec"]["skipNodeOperations"] = ["NodePrepareResources", "NodeUnprepareResources"]
    testbed.apply(manifest)


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
