"""The scheduling gate set by the API server (components/gate-by-policy), in each API mode.

The component's MutatingAdmissionPolicy, rendered as kustomize renders it with the mode's
components, is installed under a name of this test's own, bound to the test's namespace
only (so no other test on the shared control plane is gated by it). No operator runs at
first: the gate must not depend on one. Then an operator without any webhook allocates the
gated pod. Pod creation through the policy and through the operator's webhook is timed side
by side (printed with ``-rP``; a figure, not a bound).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from .kube_helpers import REPO_ROOT, Testbed, unique_name
from .operator_fixtures import (
    GATE,
    OperatorProcess,
    ensure_lease_namespace,
    install_crds,
    make_pool,
    pod,
    template,
    wait_bound,
)

pytestmark = pytest.mark.api_modes

COMPONENTS = REPO_ROOT / "manifests" / "components"
TIMED_PODS = 20


def served(testbed: Testbed) -> bool:
    found = testbed.kubectl(
        "api-resources", "--api-group=admissionregistration.k8s.io", "-o", "name", check=False
    )
    return "mutatingadmissionpolicies.admissionregistration.k8s.io" in found.stdout.split()


def rendered_policy(testbed: Testbed, scratch: Path) -> list[dict[str, Any]]:
    """The component's policy and binding, as kustomize renders them in this mode."""
    scratch.mkdir(parents=True, exist_ok=True)
    in_tree = not testbed.api_mode.claims_in_annotation
    components = ["gate-by-policy", *(["in-tree"] if in_tree else [])]
    kustomization = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": [os.path.relpath(REPO_ROOT / "manifests" / "base", scratch)],
        "components": [os.path.relpath(COMPONENTS / name, scratch) for name in components],
    }
    (scratch / "kustomization.yaml").write_text(yaml.safe_dump(kustomization))
    objects = [
        d for d in yaml.safe_load_all(testbed.kubectl("kustomize", str(scratch)).stdout) if d
    ]
    assert not [o for o in objects if o["kind"] == "MutatingWebhookConfiguration"], (
        "the component keeps the gate webhook"
    )
    return [o for o in objects if o["kind"].startswith("MutatingAdmissionPolicy")]


@pytest.fixture
def gated_by_policy(testbed: Testbed, namespace: str, tmp_path: Path) -> Iterator[str]:
    """The component's policy, bound to ``namespace`` only; its name."""
    if not served(testbed):
        pytest.skip("MutatingAdmissionPolicy (admissionregistration.k8s.io/v1) is not served here")
    name = f"{namespace}-gate"
    policy, binding = sorted(rendered_policy(testbed, tmp_path), key=lambda o: o["kind"])
    policy["metadata"]["name"] = name
    binding["metadata"]["name"] = name
    binding["spec"]["policyName"] = name
    binding["spec"]["matchResources"]["namespaceSelector"] = {
        "matchLabels": {"kubernetes.io/metadata.name": namespace}
    }
    testbed.apply(policy, binding)
    try:
        _wait_in_force(testbed, namespace)
        yield name
    finally:
        for kind in ("mutatingadmissionpolicybinding", "mutatingadmissionpolicy"):
            testbed.kubectl("delete", kind, name, "--ignore-not-found", check=False)


def _wait_in_force(testbed: Testbed, namespace: str) -> None:
    """A new policy takes a moment to be in force: probe pods are created (and deleted) until
    one comes out gated."""
    deadline = time.monotonic() + 30
    attempt = 0
    while True:
        attempt += 1
        probe: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": f"probe-{attempt}", "namespace": namespace, "annotations": {}},
            "spec": {"containers": [{"name": "c", "image": "registry.invalid/fake"}]},
        }
        testbed.api_mode.set_pod_claims(probe, [{"name": "dev", "resourceClaimTemplateName": "x"}])
        testbed.kubectl("create", "-f", "-", input=json.dumps(probe))
        gated = gates(testbed, namespace, f"probe-{attempt}") == [GATE]
        testbed.kubectl(
            "delete", "pod", f"probe-{attempt}", f"--namespace={namespace}", "--wait=false"
        )
        if gated:
            return
        assert time.monotonic() < deadline, "the policy never gated a pod"
        time.sleep(0.5)


def gates(testbed: Testbed, namespace: str, name: str) -> list[str]:
    live = testbed.get("pod", name, f"--namespace={namespace}")
    assert live is not None
    return [g["name"] for g in live["spec"].get("schedulingGates") or ()]


def test_the_api_server_gates_pods_that_ask_for_devices_with_no_operator_running(
    testbed: Testbed, namespace: str, gated_by_policy: str, tmp_path: Path
) -> None:
    install_crds(testbed)
    ensure_lease_namespace(testbed)
    pool = make_pool(testbed, nodes=1, devices=4)  # one for each pod that asks
    testbed.apply(template(namespace, "one", pool))
    entry = [{"name": "dev", "resourceClaimTemplateName": "one"}]
    testbed.kubectl("create", "-f", "-", input=json.dumps(pod(namespace, "asks", pool, entry)))
    assert gates(testbed, namespace, "asks") == [GATE]
    asking = "asks"
    # A gate of the pod's own stays, and dralloc's is added once.
    own = pod(namespace, "own-gate", pool, entry, schedulingGates=[{"name": "example.com/hold"}])
    testbed.kubectl("create", "-f", "-", input=json.dumps(own))
    assert gates(testbed, namespace, "own-gate") == ["example.com/hold", GATE]
    twice = pod(namespace, "gated-already", pool, entry, schedulingGates=[{"name": GATE}])
    testbed.kubectl("create", "-f", "-", input=json.dumps(twice))
    assert gates(testbed, namespace, "gated-already") == [GATE]
    # Pods that ask for nothing, and bound pods, are left alone.
    plain = pod(namespace, "plain", pool, [])
    testbed.kubectl("create", "-f", "-", input=json.dumps(plain))
    assert gates(testbed, namespace, "plain") == []
    bound = pod(namespace, "bound", pool, entry, nodeName=pool.nodes[0])
    testbed.kubectl("create", "-f", "-", input=json.dumps(bound))
    assert gates(testbed, namespace, "bound") == []

    # An operator with no webhook at all allocates the gated pod and lifts the gate.
    operator = OperatorProcess(
        testbed, tmp_path / "operator.log", unique_name("dralloc-gate-policy"), webhook=False
    )
    operator.start()
    try:
        operator.wait_ready()
        wait_bound(testbed, namespace, asking, timeout=60)
        assert GATE not in gates(testbed, namespace, asking)
    finally:
        operator.stop()


def _create_seconds(testbed: Testbed, bodies: list[dict[str, Any]]) -> float:
    started = time.perf_counter()
    for body in bodies:
        testbed.kubectl("create", "-f", "-", input=json.dumps(body))
    return (time.perf_counter() - started) / len(bodies)


def test_pod_creation_through_the_policy_and_through_the_webhook(
    testbed: Testbed, namespace: str, gated_by_policy: str, tmp_path: Path
) -> None:
    """Each pod created with kubectl (a process per pod, as a user would): the mean seconds
    per pod through the policy, then through the operator's webhook in another namespace."""
    install_crds(testbed)
    ensure_lease_namespace(testbed)
    pool = make_pool(testbed, nodes=1, devices=1)
    # No template "one": the claims are never made, so the pods keep their gate to be seen.
    entry = [{"name": "dev", "resourceClaimTemplateName": "one"}]
    via_policy = _create_seconds(
        testbed, [pod(namespace, f"p{i}", pool, entry) for i in range(TIMED_PODS)]
    )
    assert all(gates(testbed, namespace, f"p{i}") == [GATE] for i in range(TIMED_PODS))
    other = unique_name("gate-webhook")
    testbed.kubectl("create", "namespace", other)
    operator = OperatorProcess(testbed, tmp_path / "operator.log", unique_name("dralloc-gate-hook"))
    operator.start()
    try:
        operator.wait_ready()
        via_webhook = _create_seconds(
            testbed, [pod(other, f"w{i}", pool, entry) for i in range(TIMED_PODS)]
        )
        assert all(gates(testbed, other, f"w{i}") == [GATE] for i in range(TIMED_PODS))
    finally:
        operator.stop()
        testbed.kubectl("delete", "namespace", other, "--wait=false", check=False)
    print(
        f"\n[gate] {testbed.api_mode.name}: {via_policy * 1000:.0f} ms per pod through the "
        f"policy, {via_webhook * 1000:.0f} ms through the webhook ({TIMED_PODS} pods each)"
    )
