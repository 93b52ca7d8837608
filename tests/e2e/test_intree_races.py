"""In-tree mode beside kube-scheduler's own allocations: no device ends up in two claims.

dralloc gates (and allocates) only the pods of namespaces with a label here; the pods of the
other namespace bypass the gate, and kube-scheduler's DRA plugin allocates them itself, from
the same devices, at the same time. Neither allocator sees the other's newest writes
(docs/design.md "Upstream references"), so a device can be handed out twice; dralloc's double-allocation
controller must then undo one side with a reason. The robustness suite's recorder watches the
claims and pods from before the first pod: every moment a device was in two claims is an
episode of the history, and each must have ended (no device held twice at the last revision)
with a DoubleAllocation Event naming the device. The end state is checked too: every
allocated device in one claim only, every bound pod's claims allocated and reserved for it,
and the pods dralloc was meant to serve served by it. The number of doubles is printed.

Runs on the DRA testbed (kube-controller-manager's resourceclaim controller on), with dralloc
as allocator only (``--no-claims-controller --no-taints-controller``): coexistence case (b).
"""

from __future__ import annotations

import collections
import json
from pathlib import Path
from typing import Any

from robustness.checker import DEVICE_HELD_TWICE, Violation

from .history_helpers import Recording, judged
from .kube_helpers import Testbed, unique_name, wait_for
from .modes import IN_TREE
from .operator_fixtures import OperatorProcess, ensure_lease_namespace, publish_devices, template

GROUP = "resource.k8s.io"
NODES, DEVICES, PODS_PER_NAMESPACE = 2, 4, 6  # 12 pods want 8 devices


def _pods(
    namespace: str, template_name: str, label: str, owner: dict[str, Any]
) -> list[dict[str, Any]]:
    return [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": f"p{i}",
                "namespace": namespace,
                # A controller owns them, as in real clusters: a double on bound pods is
                # repaired by evicting the later side, which its controller would recreate.
                "ownerReferences": [owner],
            },
            "spec": {
                "nodeSelector": {"e2e-pool": label},
                "resourceClaims": [{"name": "dev", "resourceClaimTemplateName": template_name}],
                "containers": [
                    {
                        "name": "c",
                        "image": "registry.invalid/fake",
                        "resources": {"claims": [{"name": "dev"}], "requests": {"cpu": "100m"}},
                    }
                ],
            },
        }
        for i in range(PODS_PER_NAMESPACE)
    ]


def _owner(testbed: Testbed, namespace: str) -> dict[str, Any]:
    testbed.kubectl("create", "configmap", "owner", f"--namespace={namespace}")
    found = testbed.get("configmap", "owner", f"--namespace={namespace}")
    assert found is not None
    uid = found["metadata"]["uid"]
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "name": "owner",
        "uid": uid,
        "controller": True,
    }


def _double_events(testbed: Testbed, namespaces: list[str]) -> list[dict[str, Any]]:
    return [
        e for ns in namespaces
        for e in (testbed.get("events", f"--namespace={ns}", "--field-selector=reason=DoubleAllocation") or {}).get("items") or []
    ]  # fmt: skip


def _state(
    testbed: Testbed, namespaces: list[str]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    claims: list[dict[str, Any]] = []
    pods: list[dict[str, Any]] = []
    for namespace in namespaces:
        claims += (testbed.get(f"resourceclaims.{GROUP}", f"--namespace={namespace}") or {}).get(
            "items"
        ) or []
        pods += (testbed.get("pods", f"--namespace={namespace}") or {}).get("items") or []
    return claims, pods


def _holders(claims: list[dict[str, Any]]) -> dict[tuple[str, str, str], list[str]]:
    holders: dict[tuple[str, str, str], list[str]] = collections.defaultdict(list)
    for item in claims:
        allocation = (item.get("status") or {}).get("allocation") or {}
        for result in (allocation.get("devices") or {}).get("results") or ():
            device = (result["driver"], result["pool"], result["device"])
            holders[device].append(f"{item['metadata']['namespace']}/{item['metadata']['name']}")
    return holders


def test_kube_scheduler_and_dralloc_allocating_the_same_devices_never_share_one(
    dra_testbed: Testbed, tmp_path: Path
) -> None:
    testbed = dra_testbed
    ensure_lease_namespace(testbed)
    label = unique_name("race")
    names = testbed.create_nodes(NODES, {"e2e-pool": label}, prefix=label, cpu="8", memory="32Gi")
    gate_label = f"dralloc-e2e/{label}"
    served, bypassing = unique_name("race-dralloc"), unique_name("race-scheduler")
    testbed.kubectl("create", "namespace", served)
    testbed.kubectl("create", "namespace", bypassing)
    testbed.kubectl("label", "namespace", served, f"{gate_label}=on")
    in_tree = testbed.in_mode(IN_TREE)
    pool = publish_devices(in_tree, label, dict.fromkeys(names, DEVICES))
    in_tree.apply(*[template(namespace, "one", pool) for namespace in (served, bypassing)])
    lease = unique_name("dralloc-race")
    operator = OperatorProcess(
        testbed,
        tmp_path / "operator.log",
        lease,
        extra=[
            f"--api-group={GROUP}",
            "--no-claims-controller",
            "--no-taints-controller",
            f"--gate-namespace-label={gate_label}=on",
        ],
    )
    recorder = Recording(in_tree, [served, bypassing], marks=unique_name("race-marks"))
    operator.start()
    try:
        recorder.start()
        operator.wait_ready()
        pods = _pods(served, "one", label, _owner(testbed, served))
        pods += _pods(bypassing, "one", label, _owner(testbed, bypassing))
        # Interleaved, in one request burst: both allocators work at the same moment.
        pods = [
            p
            for pair in zip(pods[:PODS_PER_NAMESPACE], pods[PODS_PER_NAMESPACE:], strict=True)
            for p in pair
        ]
        testbed.kubectl(
            "create",
            "-f",
            "-",
            input=json.dumps({"apiVersion": "v1", "kind": "List", "items": pods}),
        )

        def settled() -> bool:
            claims, live = _state(testbed, [served, bypassing])
            holders = _holders(claims)
            # Evicted pods are not recreated here (their "controller" is a ConfigMap).
            remaining = [p for p in live if not p["metadata"].get("deletionTimestamp")]
            bound = sum(1 for p in remaining if p["spec"].get("nodeName"))
            return bound == min(NODES * DEVICES, len(remaining)) and all(
                len(h) == 1 for h in holders.values()
            )

        try:
            wait_for("every device used by one bound pod", settled, timeout=120, interval=1.0)
        except AssertionError:
            claims, live = _state(testbed, [served, bypassing])
            summary = {
                p["metadata"]["namespace"][:12] + "/" + p["metadata"]["name"]: (
                    p["spec"].get("nodeName", ""),
                    [g["name"] for g in p["spec"].get("schedulingGates") or ()],
                    [c.get("message", "")[:160] for c in p["status"].get("conditions") or () if c.get("status") == "False"],
                )
                for p in live
            }  # fmt: skip
            raise AssertionError(
                f"not settled: pods {json.dumps(summary, indent=1)}\nholders {dict(_holders(claims))}"
                f"\noperator log tail:\n{operator.log()[-3000:]}"
            ) from None

        def every_double_ended_and_told() -> tuple[list[Violation], list[dict[str, Any]]] | None:
            report = judged(recorder.history())
            episodes = [v for v in report.violations if v.rule == DEVICE_HELD_TWICE]
            if any(v.end_rv is None for v in episodes):
                return None
            told = _double_events(testbed, [served, bypassing])
            said = [e["message"] for e in told if e["involvedObject"]["kind"] == "ResourceClaim"]
            if any(not any(f"device {v.subject} " in m for m in said) for v in episodes):
                return None  # an undo whose Event is still on its way
            return episodes, told

        # Polled on the history, not slept on: a double kube-scheduler made late is seen,
        # and each one's Event is waited for; a double never undone, or undone without an
        # Event, times out.
        episodes, doubles = wait_for(
            "every double in the history ended, each with its DoubleAllocation Event",
            every_double_ended_and_told, timeout=60, interval=2.0,
        )  # fmt: skip
        claims, live = _state(testbed, [served, bypassing])
    finally:
        recorder.stop()
        operator.stop()

    outcomes = collections.Counter(
        "cleared"
        if "was cleared" in e["message"]
        else "evicted"
        if "evicted" in e["message"]
        else "other"
        for e in doubles
        if e["involvedObject"]["kind"] == "ResourceClaim"
    )
    print(
        f"\nin-tree race over {2 * PODS_PER_NAMESPACE} pods: {len(episodes)} double(s) in the "
        f"history (longest {max((v.duration(0) for v in episodes), default=0):.1f} s), "
        f"repaired {dict(outcomes)}"
    )
    assert outcomes["other"] == 0, outcomes  # owned pods: cleared or evicted, never only told
    holders = _holders(claims)
    shared = {device: h for device, h in holders.items() if len(h) > 1}
    assert not shared, f"devices in two claims at the end: {shared}"
    remaining = [p for p in live if not p["metadata"].get("deletionTimestamp")]
    assert len(holders) == min(NODES * DEVICES, len(remaining))
    by_name = {(c["metadata"]["namespace"], c["metadata"]["name"]): c for c in claims}
    for pod in live:
        if not pod["spec"].get("nodeName"):
            continue
        namespace = pod["metadata"]["namespace"]
        (status,) = pod["status"]["resourceClaimStatuses"]
        claim = by_name[(namespace, status["resourceClaimName"])]
        reserved = {r["uid"] for r in claim["status"].get("reservedFor") or ()}
        assert pod["metadata"]["uid"] in reserved, pod["metadata"]["name"]
        node_terms = claim["status"]["allocation"]["nodeSelector"]["nodeSelectorTerms"]
        assert node_terms[0]["matchFields"][0]["values"] == [pod["spec"]["nodeName"]]
        annotations = pod["metadata"].get("annotations") or {}
        gated_by_dralloc = "resource.dralloc.dev/allocated-by" in annotations
        # The namespace label decides who allocates: dralloc in its namespace only.
        assert gated_by_dralloc == (namespace == served), (namespace, pod["metadata"]["name"])
