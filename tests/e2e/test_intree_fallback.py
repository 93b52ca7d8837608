"""In-tree, a pod that passed dralloc's gate by is saved by kube-scheduler's fallback.

dralloc pins every pod it releases (PodProtocol.pins_node), so kube-scheduler's DRA plugin
never judges those pods' claims off their node and never clears them. A pod that passed the
gate by (no webhook, pods older than the operator, here: created without dralloc's gate and
held by the user's own) cannot be pinned: its affinity may change only while it is gated. For
it, dralloc allocates a node-local device and the claim's ``allocation.nodeSelector`` alone
keeps kube-scheduler on that node. If the node no longer fits when kube-scheduler gets to the
pod (a pod bound directly takes its cpu while the user's gate holds the pod back), every other
node fails the DRA plugin's filter ("resourceclaim not available on the node"), its PostFilter
deallocates the claim, and, with the claim-allocation policy refusing kube-scheduler's own
allocation, dralloc allocates it again on a node that fits.

The testbed runs kube-controller-manager without its DRA controllers and dralloc with all of
its own (coexistence case (a)), so dralloc's claim controller also puts the pod's devices
annotation right after the claim was allocated again.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

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


def test_an_ungated_pod_whose_node_stopped_fitting_is_moved(
    testbeds: TestbedRegistry, tmp_path: Path
) -> None:
    """kube-scheduler's PostFilter deallocates the claim; the claim-allocation policy refuses
    its own allocation, so dralloc allocates it again (it serves ungated pods too) and
    kube-scheduler binds."""
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
    testbed.apply(*claim_allocation_policy(policy, [namespace], [testbed.operator_user]))
    wait_policy_in_force(testbed.bin, testbed.kubeconfig, namespace)
    pool = publish_devices(testbed, label, {first: 1, second: 1})
    testbed.apply(template(namespace, "one", pool))
    operator = OperatorProcess(
        testbed,
        tmp_path / "operator.log",
        unique_name("dralloc-fallback"),
        # The release grace far beyond the wait below: only kube-scheduler's fallback and
        # dralloc serving the pod it left ungated can move the pod in time, never dralloc
        # undoing a release kube-scheduler refused.
        extra=["--node-policy=first-fit", "--release-grace=600"],  # the mode adds --api-group
        webhook=False,  # nothing puts dralloc's gate on the pod: it passes the gate by
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

        def allocated() -> bool:
            live = testbed.get("pod", "worker", f"--namespace={namespace}") or {}
            names = (live.get("status") or {}).get("resourceClaimStatuses") or ()
            if not names:
                return False
            return bool(_claim_of(testbed, namespace, "worker")["status"].get("allocation"))

        wait_for("dralloc to allocate the ungated pod's claim", allocated, timeout=60)
        live = testbed.get("pod", "worker", f"--namespace={namespace}")
        assert live is not None
        gates = [g["name"] for g in live["spec"].get("schedulingGates") or ()]
        assert gates == [HOLD], "the pod never had dralloc's gate"
        assert "affinity" not in live["spec"], "a pod that passed the gate by cannot be pinned"
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
        # dralloc allocated it again (the policy lets kube-scheduler only clear and bind).
        assert _allocation_managers(fields) == {"dralloc"}, fields["metadata"]["managedFields"]
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
        for args in claim_allocation_policy_removal(policy):
            testbed.kubectl(*args, check=False)
