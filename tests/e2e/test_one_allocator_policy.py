"""One allocator, enforced by the API server: the claim-allocation policy beside kube-scheduler.

The testbed runs kube-scheduler under its own identity (``system:kube-scheduler``, as kubeadm
does) and the operator under one of its own, so the shipped ValidatingAdmissionPolicy
(manifests/base/claim-allocation-policy.yaml) can tell them apart. It is installed with a
binding over this module's namespaces only (``robustness.cluster.claim_allocation_policy``),
so the other modules' kube-scheduler allocations on the same control plane are untouched.

kube-scheduler's own allocation is refused in PreBind; it retries with backoff and binds the
pod once dralloc has allocated its claims, gated or not (a pod that passed the webhook by is
allocated like any other). The race the policy ends is measured by the robustness suite with
its history checker: kube-scheduler's pods and dralloc's on the same devices, the webhook
failing open while the operator is SIGKILLed.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from robustness.cluster import (
    MODES,
    REFUSED,
    Cluster,
    claim_allocation_policy,
    claim_allocation_policy_removal,
    wait_policy_in_force,
)
from robustness.run import Options, Run

from .kube_helpers import Testbed, TestbedRegistry, unique_name, wait_for
from .modes import IN_TREE, TESTBED_DRA_SCHEDULER
from .operator_fixtures import (
    OperatorProcess,
    ensure_lease_namespace,
    publish_devices,
    template,
)

pytestmark = pytest.mark.timeout(900)

GROUP = "resource.k8s.io"
SCHEDULER_USER = "system:kube-scheduler"


@pytest.fixture(scope="module")
def in_tree(testbeds: TestbedRegistry) -> Testbed:
    # kube-controller-manager without its DRA controllers: dralloc's replace them.
    testbed = testbeds.get(TESTBED_DRA_SCHEDULER).in_mode(IN_TREE)
    ensure_lease_namespace(testbed)
    return testbed


@pytest.fixture
def guarded(in_tree: Testbed) -> Iterator[str]:
    """A namespace the policy guards (its own binding and parameters); its name."""
    namespace = unique_name("guarded")
    name = f"{namespace}-allocation"
    in_tree.kubectl("create", "namespace", namespace)
    in_tree.apply(*claim_allocation_policy(name, [namespace], [in_tree.operator_user]))
    try:
        wait_policy_in_force(in_tree.bin, in_tree.kubeconfig, namespace)
        yield namespace
    finally:
        for args in claim_allocation_policy_removal(name):
            in_tree.kubectl(*args, check=False)
        in_tree.kubectl("delete", "namespace", namespace, "--wait=false", check=False)


def _pod(namespace: str, name: str, label: str, claim: str = "") -> dict[str, Any]:
    """A pod with one claim: ``claim`` by name, else one from the template "one"."""
    entry = {"name": "dev"} | (
        {"resourceClaimName": claim} if claim else {"resourceClaimTemplateName": "one"}
    )
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "nodeSelector": {"e2e-pool": label},
            "resourceClaims": [entry],
            "containers": [
                {
                    "name": "c",
                    "image": "registry.invalid/fake",
                    "resources": {"claims": [{"name": "dev"}], "requests": {"cpu": "100m"}},
                }
            ],
        },
    }


def _claim_of(testbed: Testbed, namespace: str, pod: str) -> dict[str, Any]:
    live = testbed.get("pod", pod, f"--namespace={namespace}") or {}
    (entry,) = live["spec"]["resourceClaims"]
    name = entry.get("resourceClaimName")
    if not name:
        (status,) = live["status"]["resourceClaimStatuses"]
        name = status["resourceClaimName"]
    claim = testbed.get(f"resourceclaims.{GROUP}", name, f"--namespace={namespace}")
    assert claim is not None, name
    return claim


def _refusals(testbed: Testbed, namespace: str, pod: str) -> list[str]:
    found = testbed.get(
        "events", f"--namespace={namespace}",
        f"--field-selector=involvedObject.name={pod},reason=FailedScheduling",
    )  # fmt: skip
    return [
        str(e.get("message"))
        for e in (found or {}).get("items") or []
        if REFUSED in str(e.get("message"))
    ]


def test_kube_scheduler_is_refused_and_binds_what_dralloc_allocated(
    in_tree: Testbed, guarded: str, tmp_path: Path
) -> None:
    testbed, namespace = in_tree, guarded
    label = unique_name("policy")
    (node,) = testbed.create_nodes(1, {"e2e-pool": label}, prefix=label, cpu="8", memory="32Gi")
    pool = publish_devices(testbed, label, {node: 2})
    testbed.apply(template(namespace, "one", pool))
    # No operator yet: the pod has no gate, as with a webhook that failed open.
    claim = {
        "apiVersion": f"{GROUP}/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "early-dev", "namespace": namespace},
        "spec": {"devices": {"requests": [{"name": "dev", "exactly": {"deviceClassName": pool.device_class}}]}},
    }  # fmt: skip
    testbed.apply(claim)
    early = _pod(namespace, "early", label, claim="early-dev")
    testbed.kubectl("create", "-f", "-", input=json.dumps(early))
    live = testbed.get("pod", "early", f"--namespace={namespace}")
    assert live is not None and not live["spec"].get("schedulingGates")

    refused = wait_for(
        "kube-scheduler's allocation refused by the policy",
        lambda: _refusals(testbed, namespace, "early"),
        timeout=60,
    )
    assert f'user "{SCHEDULER_USER}" is not the dralloc operator' in refused[0], refused
    # Refused means refused: nothing was allocated, the pod is not bound.
    current = testbed.get(f"resourceclaims.{GROUP}", "early-dev", f"--namespace={namespace}")
    assert current is not None and "allocation" not in (current.get("status") or {})
    live = testbed.get("pod", "early", f"--namespace={namespace}")
    assert live is not None and not live["spec"].get("nodeName")

    operator = OperatorProcess(
        testbed, tmp_path / "operator.log", unique_name("dralloc-policy"), webhook=False
    )
    operator.start()
    try:
        operator.wait_ready()
        # A pod created while the operator runs, without its webhook: no gate either.
        testbed.kubectl("create", "-f", "-", input=json.dumps(_pod(namespace, "later", label)))

        def bound(name: str) -> Callable[[], str]:
            def node_name() -> str:
                found = testbed.get("pod", name, f"--namespace={namespace}") or {}
                return str(found.get("spec", {}).get("nodeName") or "")

            return node_name

        for name in ("early", "later"):
            assert wait_for(f"{name} bound", bound(name), timeout=90) == node
            live = testbed.get("pod", name, f"--namespace={namespace}")
            assert live is not None
            status = _claim_of(testbed, namespace, name)["status"]
            assert [r["uid"] for r in status["reservedFor"]] == [live["metadata"]["uid"]]
            [result] = status["allocation"]["devices"]["results"]
            assert (result["driver"], result["pool"]) == (pool.driver, node)
        devices = {
            _claim_of(testbed, namespace, n)["status"]["allocation"]["devices"]["results"][0][
                "device"
            ]
            for n in ("early", "later")
        }
        assert len(devices) == 2
    finally:
        operator.stop()


def test_kube_scheduler_racing_dralloc_with_the_webhook_failing_open_hands_out_nothing_twice(
    in_tree: Testbed, tmp_path: Path
) -> None:
    """kube-scheduler's pods (never gated) and dralloc's on the same devices, pods relying on
    the webhook (failing open) while the operator is SIGKILLed three times: the whole recorded
    history is checked (no device in two claims at any revision, no pod bound without its
    devices, every pod bound or explained). Without the policy and without dralloc serving
    ungated pods, the same seed held devices twice (bench/results/robustness.md)."""
    if in_tree.state_dir is None:
        pytest.skip("needs a testbed started by this run (the run reads its state directory)")
    cluster = Cluster(in_tree.kubeconfig, in_tree.bin, in_tree.state_dir, MODES["in-tree"])
    # DRA extended-resource pods too, in every namespace (the operator serves them all here):
    # the webhook turns them into claims pods, and one that passed it by is reported (made
    # again where a ReplicaSet owns it); kube-scheduler may allocate none of their claims.
    options = Options(
        mode=cluster.mode, seed=6, duration_s=40, rate=8, nodes=2, scheduler_pods=True,
        gate="webhook", policy=True, faults=("operator-kill",), fault_count=3, settle_s=330,
    )  # fmt: skip
    result = asyncio.run(Run(cluster, options, tmp_path).execute())
    print("[one allocator] " + result.summary().replace("\n", "\n[one allocator] "))
    assert result.traffic["scheduler_pod"] >= 5, result.traffic
    assert result.traffic["served_extended_pod"] >= 5, result.traffic
    assert result.traffic["quota_extended_pod"] >= 1, result.traffic
    assert len(result.fired) == 3, result.fired
    assert result.pods_bound >= 15, result.summary()
    assert result.ok, result.summary()
