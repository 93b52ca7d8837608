"""In-tree mode does not pin released pods, so kube-scheduler's fallback can save them.

dralloc allocates a node-local device and removes its gate; in-tree, the claim's
``allocation.nodeSelector`` is what keeps kube-scheduler on that node. If the node no longer
fits when kube-scheduler gets to the pod (here: a pod bound directly takes its cpu while a
second, user-owned gate holds the pod back), every other node fails the DRA plugin's filter
("resourceclaim not available on the node"), so its PostFilter deallocates the claim and the
next attempt allocates it on a node that fits. A pinned pod (the CRD mode's node affinity)
would instead fail NodeResourcesFit on its one node, with nothing deallocated, and wait until
dralloc's release grace undoes it (tests/e2e/test_placement.py covers that path).

The testbed runs kube-controller-manager without its DRA controllers and dralloc with all of
its own (coexistence case (a)), so dralloc's claim controller also puts the pod's devices
annotation right after the scheduler re-allocated the claim.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from robustness.cluster import (
    claim_allocation_policy,
    claim_allocation_policy_removal,
    wait_policy_in_force,
)

from .kube_helpers import Testbed, TestbedRegistry, unique_name, wait_for
from .modes import IN_TREE, TESTBED_DRA_SCHEDULER
from .operator_fixtures import (
    OperatorProcess,
    ensure_lease_namespace,
    publish_devices,
    template,
)

GROUP = "resource.k8s.io"
HOLD = "example.com/hold"


def _claim_of(testbed: Testbed, namespace: str, pod: str) -> dict[str, Any]:
    live = testbed.get("pod", pod, f"--namespace={namespace}")
    assert live is not None
    (status,) = live["status"].get("resourceClaimStatuses") or [{}]
    claim = testbed.get(
        f"resourceclaims.{GROUP}", status["resourceClaimName"], f"--namespace={namespace}"
    )
    assert claim is not None
    return claim


def _allocated_node(claim: dict[str, Any]) -> str:
    allocation = (claim.get("status") or {}).get("allocation") or {}
    terms = (allocation.get("nodeSelector") or {}).get("nodeSelectorTerms") or [{}]
    return str(terms[0].get("matchFields", [{}])[0].get("values", [""])[0])


def _allocation_managers(claim: dict[str, Any]) -> set[str]:
    """Who owns the claim's status.allocation now (its managedFields managers): after the
    fallback cleared it, only the writer of the new allocation."""
    return {
        str(entry.get("manager"))
        for entry in claim["metadata"].get("managedFields") or ()
        if entry.get("subresource") == "status"
        and "f:allocation" in ((entry.get("fieldsV1") or {}).get("f:status") or {})
    }


@pytest.mark.parametrize("guarded", [False, True], ids=["kube-scheduler", "policy"])
def test_a_released_pod_whose_node_stopped_fitting_is_moved(
    testbeds: TestbedRegistry, tmp_path: Path, guarded: bool
) -> None:
    """kube-scheduler's PostFilter deallocates the claim either way; then it allocates the
    claim again itself, or, with the claim-allocation policy refusing it, dralloc does (the
    pod has no gate any more: dralloc serves ungated pods too) and kube-scheduler binds."""
    # kube-controller-manager without its DRA controllers: dralloc's replace them.
    testbed = testbeds.get(TESTBED_DRA_SCHEDULER).in_mode(IN_TREE)
    ensure_lease_namespace(testbed)
    label = unique_name("fallback")
    first, second = (
        testbed.create_nodes(
            1, {"e2e-pool": label}, prefix=f"{label}-{role}", cpu="4", memory="16Gi"
        )[0]
        for role in ("a", "b")
    )
    namespace = unique_name("fallback")
    testbed.kubectl("create", "namespace", namespace)
    policy = f"{namespace}-allocation"
    if guarded:
        testbed.apply(*claim_allocation_policy(policy, [namespace], [testbed.operator_user]))
        wait_policy_in_force(testbed.bin, testbed.kubeconfig, namespace)
    pool = publish_devices(testbed, label, {first: 1, second: 1})
    testbed.apply(template(namespace, "one", pool))
    operator = OperatorProcess(
        testbed,
        tmp_path / "operator.log",
        unique_name("dralloc-fallback"),
        # The release grace far beyond the wait below: only kube-scheduler's fallback (or,
        # guarded, dralloc serving the pod it left ungated) can move the pod in time, never
        # dralloc undoing a release kube-scheduler refused.
        # Unguarded, dralloc leaves ungated pods to kube-scheduler, whose fallback is tested
        # (else dralloc, serving the ungated pod too, might allocate first).
        extra=[
            "--node-policy=first-fit",
            "--release-grace=600",
            *(() if guarded else ("--no-allocate-ungated",)),
        ],  # fmt: skip (the mode adds --api-group)
    )
    operator.start()
    try:
        operator.wait_ready()
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "worker", "namespace": namespace},
            "spec": {
                "schedulingGates": [{"name": HOLD}],  # the user's own gate: held back after release
                "nodeSelector": {"e2e-pool": label},
                "resourceClaims": [{"name": "dev", "resourceClaimTemplateName": "one"}],
                "containers": [
                    {
                        "name": "c",
                        "image": "registry.invalid/fake",
                        "resources": {"claims": [{"name": "dev"}], "requests": {"cpu": "2"}},
                    }
                ],
            },
        }
        testbed.kubectl("create", "-f", "-", input=json.dumps(pod))

        def released() -> bool:
            live = testbed.get("pod", "worker", f"--namespace={namespace}") or {}
            gates = [g["name"] for g in live.get("spec", {}).get("schedulingGates") or ()]
            return gates == [HOLD]

        wait_for("dralloc's gate removed", released, timeout=60)
        live = testbed.get("pod", "worker", f"--namespace={namespace}")
        assert live is not None
        assert "affinity" not in live["spec"], "in-tree mode must not pin the pod"
        assert _allocated_node(_claim_of(testbed, namespace, "worker")) == first

        # The first node fills up behind dralloc's back, then the user lets the pod go.
        filler = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "filler", "namespace": namespace},
            "spec": {
                "nodeName": first,
                "containers": [{"name": "c", "image": "registry.invalid/fake", "resources": {"requests": {"cpu": "3"}}}],
            },
        }  # fmt: skip
        testbed.kubectl("create", "-f", "-", input=json.dumps(filler))
        testbed.kubectl(
            "patch", "pod", "worker", f"--namespace={namespace}", "--type=json",
            "-p", '[{"op": "remove", "path": "/spec/schedulingGates/0"}]',
        )  # fmt: skip

        def bound() -> str:
            live = testbed.get("pod", "worker", f"--namespace={namespace}") or {}
            return str(live.get("spec", {}).get("nodeName") or "")

        node = wait_for("worker bound", bound, timeout=90)
        claim = _claim_of(testbed, namespace, "worker")
        assert node == second
        assert _allocated_node(claim) == second  # re-allocated there
        fields = testbed.get(
            f"resourceclaims.{GROUP}", claim["metadata"]["name"], f"--namespace={namespace}",
            "--show-managed-fields",
        )  # fmt: skip
        assert fields is not None
        # Guarded, dralloc allocated it again (kube-scheduler may only bind); else
        # kube-scheduler's own fallback did.
        expected = "dralloc" if guarded else "kube-scheduler"
        assert _allocation_managers(fields) == {expected}, fields["metadata"]["managedFields"]
        assert claim["metadata"]["finalizers"] == ["resource.kubernetes.io/delete-protection"]
        assert [r["uid"] for r in claim["status"]["reservedFor"]] == [live["metadata"]["uid"]]

        def devices_annotation_follows() -> bool:
            live = testbed.get("pod", "worker", f"--namespace={namespace}") or {}
            text = (live["metadata"].get("annotations") or {}).get("resource.dralloc.dev/devices")
            return isinstance(text, str) and json.loads(text)[0]["devices"][0]["pool"] == second

        wait_for(
            "devices annotation rewritten from the claim", devices_annotation_follows, timeout=30
        )
    finally:
        operator.stop()
        if guarded:
            for args in claim_allocation_policy_removal(policy):
                testbed.kubectl(*args, check=False)
