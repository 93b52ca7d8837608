"""The operator end to end: webhook, claim controller, allocator loop, kube-scheduler."""

from __future__ import annotations

import asyncio
import json
import subprocess
from typing import Any

import pytest

from operators.kube import KubeClient, Resource

from .kube_helpers import Testbed, wait_for
from .operator_fixtures import (
    DEVICES_ANNOTATION,
    GATE,
    GROUP,
    OperatorProcess,
    Pool,
    allocated_devices,
    claim,
    claims_in,
    events,
    get,
    make_pool,
    operator,
    pod,
    template,
    wait_bound,
)

__all__ = ["operator"]  # the module-scoped fixture, re-exported for pytest

pytestmark = pytest.mark.api_modes


def test_template_claim_allocated_bound_and_cleaned_up(
    testbed: Testbed, operator: OperatorProcess, namespace: str
) -> None:
    mode = testbed.api_mode
    pool = make_pool(testbed, nodes=2, devices=1)
    testbed.apply(template(namespace, "one", pool))
    testbed.apply(
        pod(namespace, "first", pool, [{"name": "dev", "resourceClaimTemplateName": "one"}])
    )

    node = wait_bound(testbed, namespace, "first")
    obj = get(testbed, "pod", "first", namespace)
    assert obj is not None
    # the webhook gated it, the allocator ungated it, pinned to the node it chose (both modes)
    assert GATE not in [g["name"] for g in obj["spec"].get("schedulingGates") or []]
    required = obj["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]
    pins = [f["values"] for t in required["nodeSelectorTerms"] for f in t.get("matchFields") or []]
    assert pins == [[node]], required
    devices = json.loads(obj["metadata"]["annotations"][DEVICES_ANNOTATION])
    assert devices[0]["name"] == "dev"
    assert devices[0]["devices"][0]["pool"] == node
    statuses = mode.claim_statuses(obj)
    assert statuses, f"no claim statuses in the pod's {mode.claim_statuses_field}"
    claims = claims_in(testbed, namespace)
    assert [c["metadata"]["name"] for c in claims] == [statuses[0]["resourceClaimName"]]
    generated = claims[0]
    assert generated["metadata"]["name"].startswith("first-dev-")
    assert generated["metadata"]["annotations"][mode.pod_claim_name_annotation] == "dev"
    owner = generated["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["name"], owner["controller"], owner["blockOwnerDeletion"]) == (
        "Pod", "first", True, True,
    )  # fmt: skip
    assert generated["status"]["reservedFor"][0]["uid"] == obj["metadata"]["uid"]

    # Fill the other node, then free the first one: its device must be handed out again.
    testbed.apply(
        pod(namespace, "second", pool, [{"name": "dev", "resourceClaimTemplateName": "one"}])
    )
    other = wait_bound(testbed, namespace, "second")
    assert other != node
    testbed.apply(
        pod(namespace, "third", pool, [{"name": "dev", "resourceClaimTemplateName": "one"}])
    )
    testbed.kubectl("delete", "pod", "first", f"--namespace={namespace}", "--wait=false")
    wait_for(
        "the first pod's claim to be deleted",
        lambda: (
            generated["metadata"]["name"]
            not in [c["metadata"]["name"] for c in claims_in(testbed, namespace)]
        ),
        timeout=60,
    )
    assert wait_bound(testbed, namespace, "third") == node
    devices_now = allocated_devices(testbed, namespace)
    assert len(devices_now) == len(set(devices_now)) == 2


# Parameters whose bytes Python's json and Go's encoding/json write differently.
AWKWARD_PARAMETERS: dict[str, Any] = {
    "note": "\u00e9 <b> & \u2028 \U0001f600",
    "fraction": 0.25,
    "whole": 2.0,
    "tiny": 1e-7,
    "huge": 1e21,
}


def test_claims_with_any_parameters_stay_writable_by_go_clients_and_by_dralloc(
    testbed: Testbed, operator: OperatorProcess, namespace: str
) -> None:
    """The API server compares the bytes of opaque parameters stored at creation with the
    bytes of every update. Go clients (kube-controller-manager, kube-scheduler, kubectl)
    write them as Go does; so must dralloc, or the other side's updates are refused as
    changing an immutable spec. Both directions: a claim dralloc made from a template, updated
    by kubectl; a claim kubectl made, updated by dralloc's client."""
    mode = testbed.api_mode
    pool = make_pool(testbed, nodes=1, devices=1)
    config = [{"opaque": {"driver": pool.driver, "parameters": AWKWARD_PARAMETERS}}]
    made = template(namespace, "awkward", pool)
    made["spec"]["spec"]["devices"]["config"] = config
    testbed.apply(made)
    testbed.apply(
        pod(namespace, "p", pool, [{"name": "dev", "resourceClaimTemplateName": "awkward"}])
    )
    wait_bound(testbed, namespace, "p")
    [ours] = claims_in(testbed, namespace)
    assert ours["spec"]["devices"]["config"][0]["opaque"]["parameters"] == AWKWARD_PARAMETERS
    # A Go client's read-modify-write of the claim dralloc made.
    ours["metadata"].setdefault("labels", {})["e2e"] = "kubectl"
    replaced = testbed.kubectl("replace", "-f", "-", input=json.dumps(ours), check=False)
    assert replaced.returncode == 0, replaced.stderr

    theirs = claim(namespace, "theirs", pool)
    theirs["spec"]["devices"]["config"] = config
    testbed.apply(theirs)  # written by kubectl, as Go encodes it
    claims = Resource(mode.group, mode.version, "resourceclaims", "ResourceClaim", True)

    async def update_as_dralloc() -> None:
        client = await KubeClient.connect(str(testbed.kubeconfig), user_agent="dralloc-e2e")
        try:
            read = await client.get(claims, "theirs", namespace)
            read["metadata"].setdefault("labels", {})["e2e"] = "dralloc"
            await client.replace(claims, read)
        finally:
            await client.close()

    asyncio.run(update_as_dralloc())
    updated = get(testbed, mode.resource("resourceclaims"), "theirs", namespace)
    assert updated is not None and updated["metadata"]["labels"]["e2e"] == "dralloc"


class _ClaimWatch:
    """kubectl's watch of a namespace's claims: every change as a JSON event."""

    def __init__(self, testbed: Testbed, namespace: str) -> None:
        self.process = subprocess.Popen(
            [
                str(testbed.bin / "kubectl"), f"--kubeconfig={testbed.kubeconfig}",
                "get", testbed.api_mode.resource("resourceclaims"), f"--namespace={namespace}",
                "--watch", "--output-watch-events", "--output=json",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        # The claims there are come first, an event a line: once one is read, the watch runs.
        assert self.process.stdout is not None
        self.first = self.process.stdout.readline()

    def events(self) -> tuple[list[dict[str, Any]], str]:
        """Every event seen (stopping the watch), and what kubectl said on stderr."""
        self.process.terminate()
        rest, errors = self.process.communicate(timeout=10)
        lines = (self.first + rest).splitlines()
        return [json.loads(line) for line in lines if line.strip()], errors


def _refused_claim_patches(testbed: Testbed) -> float:
    """The API server's count of PATCH requests to ResourceClaims answered 404, all clients."""
    total = 0.0
    for line in testbed.kubectl("get", "--raw", "/metrics").stdout.splitlines():
        if line.startswith("apiserver_request_total{") and all(
            part in line
            for part in (
                'resource="resourceclaims"', 'subresource=""', 'verb="PATCH"', 'code="404"'
            )
        ):  # fmt: skip
            total += float(line.rsplit(" ", 1)[1])
    return total


def test_a_finished_pods_claim_goes_with_its_allocation(
    testbed: Testbed, operator: OperatorProcess, namespace: str
) -> None:
    """The generated claim of a pod that ended, or was deleted, is deleted, then let go (our
    finalizer), with no status write to clear its allocation first: its devices are free once it is gone, and
    an allocated claim never lacks the finalizer on the way."""
    pool = make_pool(testbed, nodes=1, devices=1)
    testbed.apply(template(namespace, "one", pool))
    entry = [{"name": "dev", "resourceClaimTemplateName": "one"}]
    testbed.apply(pod(namespace, "ends", pool, entry))
    wait_bound(testbed, namespace, "ends")
    (generated,) = claims_in(testbed, namespace)
    name = generated["metadata"]["name"]
    refused_before = _refused_claim_patches(testbed)
    watch = _ClaimWatch(testbed, namespace)
    try:
        # The pod ends: the claim controller deletes its generated claim (owner done).
        testbed.kubectl(
            "patch", "pod", "ends", f"--namespace={namespace}", "--subresource=status",
            "--type=merge", "--patch", json.dumps({"status": {"phase": "Succeeded"}}),
        )  # fmt: skip
        wait_for(
            "the ended pod's claim to be deleted",
            lambda: name not in [c["metadata"]["name"] for c in claims_in(testbed, namespace)],
            timeout=60,
        )
        # Its device is handed out again.
        testbed.apply(pod(namespace, "next", pool, entry))
        wait_bound(testbed, namespace, "next")
        (following,) = claims_in(testbed, namespace)
        # A pod deleted: its claim goes the same way.
        testbed.kubectl("delete", "pod", "next", f"--namespace={namespace}", "--wait=false")
        wait_for(
            "the deleted pod's claim to be deleted",
            lambda: not claims_in(testbed, namespace),
            timeout=60,
        )
    finally:
        events, errors = watch.events()
    # The answer to the finalizer's removal says the claim is gone; the watch shows it still
    # held a moment longer. Read from the cache then, it was patched again, for a 404.
    assert _refused_claim_patches(testbed) == refused_before, "a claim patched after it went"
    for claim_name in (name, following["metadata"]["name"]):
        mine = [e for e in events if e["object"]["metadata"]["name"] == claim_name]
        assert mine and mine[-1]["type"] == "DELETED", (mine, errors)
        # From its allocation on (the watch may show it created, not allocated yet).
        first = next(
            i for i, e in enumerate(mine) if (e["object"].get("status") or {}).get("allocation")
        )
        for event in mine[first:]:
            claim_now = event["object"]
            allocated = bool((claim_now.get("status") or {}).get("allocation"))
            assert allocated, f"{event['type']}: allocation cleared before the claim went"
            finalizers = claim_now["metadata"].get("finalizers") or []
            if event["type"] != "DELETED":
                assert testbed.api_mode.finalizer in finalizers, "allocated without finalizer"


def test_shared_claim_used_by_three_pods(
    testbed: Testbed, operator: OperatorProcess, namespace: str
) -> None:
    pool = make_pool(testbed, nodes=2, devices=1)
    testbed.apply(claim(namespace, "shared", pool))
    for name in ("a", "b", "c"):
        testbed.apply(pod(namespace, name, pool, [{"name": "dev", "resourceClaimName": "shared"}]))
    nodes = {wait_bound(testbed, namespace, name) for name in ("a", "b", "c")}
    assert len(nodes) == 1  # all bound where the shared claim's device is
    shared = get(testbed, testbed.api_mode.resource("resourceclaims"), "shared", namespace)
    assert shared is not None
    reserved = sorted(entry["name"] for entry in shared["status"]["reservedFor"])
    assert reserved == ["a", "b", "c"]
    assert shared["status"]["allocation"]["devices"]["results"][0]["pool"] == nodes.pop()


@pytest.mark.only_api_modes("crd", reason="claim status summaries are dralloc's CRD fields")
def test_a_claim_without_requests_is_allocated(
    testbed: Testbed, operator: OperatorProcess, namespace: str
) -> None:
    # Allocated with no results: the allocatedDevices summary must then be absent (an
    # empty one is refused by the CRD's rule, and the pod would stay gated).
    pool = make_pool(testbed, nodes=1, devices=1)
    body = claim(namespace, "nothing", pool)
    body["spec"] = {"devices": {"requests": []}}
    testbed.apply(body)
    testbed.apply(pod(namespace, "p", pool, [{"name": "none", "resourceClaimName": "nothing"}]))
    wait_bound(testbed, namespace, "p")
    stored = get(testbed, testbed.api_mode.resource("resourceclaims"), "nothing", namespace)
    assert stored is not None
    assert stored["status"]["allocation"]["devices"].get("results", []) == []
    assert "allocatedDevices" not in stored["status"]
    assert stored["status"]["reservedForNames"] == "p"


def race_for_the_last_device(testbed: Testbed, namespace: str) -> tuple[str, str]:
    """Two pods for one device: (the one bound, the one told why not)."""
    pool = make_pool(testbed, nodes=1, devices=1)
    testbed.apply(template(namespace, "one", pool))
    entry = [{"name": "dev", "resourceClaimTemplateName": "one"}]
    testbed.apply(pod(namespace, "r1", pool, entry), pod(namespace, "r2", pool, entry))

    def outcome() -> tuple[str, str] | None:
        bound = [
            n
            for n in ("r1", "r2")
            if (get(testbed, "pod", n, namespace) or {}).get("spec", {}).get("nodeName")
        ]
        failed = [n for n in ("r1", "r2") if events(testbed, namespace, n, "FailedAllocation")]
        if len(bound) == 1 and len(failed) == 1 and bound != failed:
            return bound[0], failed[0]
        return None

    winner, loser = wait_for("one pod bound, one explained", outcome, timeout=60)
    return winner, loser


def test_two_pods_racing_for_the_last_device(
    testbed: Testbed, operator: OperatorProcess, namespace: str
) -> None:
    winner, loser = race_for_the_last_device(testbed, namespace)
    message = events(testbed, namespace, loser, "FailedAllocation")[0]["message"]
    assert message.startswith("0/") and "no free device of class" in message, message
    loser_pod = get(testbed, "pod", loser, namespace)
    assert loser_pod is not None
    conditions = {c["type"]: c for c in loser_pod["status"].get("conditions") or []}
    condition = conditions[f"{GROUP}/DevicesAllocated"]
    assert condition["status"] == "False"
    assert message.startswith(condition["message"])  # the Event adds per-node details
    assert GATE in [g["name"] for g in loser_pod["spec"]["schedulingGates"]]
    assert len(allocated_devices(testbed, namespace)) == 1
    winner_pod = get(testbed, "pod", winner, namespace)
    assert winner_pod is not None and DEVICES_ANNOTATION in winner_pod["metadata"]["annotations"]


CLAIM_CONDITIONS = (
    "the claim's Allocated condition is an extension of dralloc's ResourceClaim CRD; "
    "resource.k8s.io/v1 claims have no status.conditions"
)


@pytest.mark.only_api_modes("crd", reason=CLAIM_CONDITIONS)
def test_each_claim_of_a_race_says_whether_it_is_allocated(
    testbed: Testbed, operator: OperatorProcess, namespace: str
) -> None:
    race_for_the_last_device(testbed, namespace)
    by_state = {
        (allocated_condition(c) or {}).get("status"): c for c in claims_in(testbed, namespace)
    }
    assert set(by_state) == {"True", "False"}, "each claim says whether it is allocated"
    assert by_state["True"]["status"].get("allocation")
    assert "no free device" in allocated_condition(by_state["False"])["message"]  # type: ignore[index]


def unsatisfiable_claim(testbed: Testbed, namespace: str) -> tuple[Pool, str, str]:
    """A pod whose claim no node can satisfy; (its pool, the FailedAllocation message, the
    claim's name)."""
    pool = make_pool(testbed, nodes=2, devices=1)
    make_pool(testbed, nodes=1, devices=1)  # a node outside the pod's selector, whatever ran before
    testbed.apply(template(namespace, "three", pool, allocationMode="ExactCount", count=3))
    testbed.apply(
        pod(namespace, "greedy", pool, [{"name": "dev", "resourceClaimTemplateName": "three"}])
    )
    found = wait_for(
        "FailedAllocation event", lambda: events(testbed, namespace, "greedy", "FailedAllocation")
    )
    message = found[0]["message"]
    claim_name = claims_in(testbed, namespace)[0]["metadata"]["name"]
    return pool, message, claim_name


def test_unsatisfiable_claim_is_explained(
    testbed: Testbed, operator: OperatorProcess, namespace: str
) -> None:
    mode = testbed.api_mode
    pool, message, claim_name = unsatisfiable_claim(testbed, namespace)
    # every node of the cluster is counted; ours fail on devices, the rest on the selector
    assert f'2 not enough devices of class "{pool.device_class}" (need 3)' in message, message
    assert "node(s) didn't match Pod's node affinity/selector" in message, message
    assert events(testbed, namespace, claim_name, "FailedAllocation")
    # No allocation write will record the claim on the pod: the claim controller does, once
    # it has left that to the allocation for STATUSES_DEFER seconds.
    recorded = wait_for(
        f"the claim statuses on the waiting pod ({mode.claim_statuses_field})",
        lambda: mode.claim_statuses(get(testbed, "pod", "greedy", namespace)),
        timeout=30,
    )
    assert recorded == [{"name": "dev", "resourceClaimName": claim_name}]
    # The claim was created with our finalizer (no write of its own before an allocation);
    # unallocated, it must still go away with its pod.
    [waiting] = claims_in(testbed, namespace)
    assert waiting["metadata"]["finalizers"] == [mode.finalizer]
    assert not (waiting.get("status") or {}).get("allocation")
    testbed.kubectl("delete", "pod", "greedy", f"--namespace={namespace}", "--wait=false")
    wait_for(
        "the never-allocated claim to be deleted",
        lambda: claims_in(testbed, namespace) == [],
        timeout=60,
    )


@pytest.mark.only_api_modes("crd", reason=CLAIM_CONDITIONS)
def test_unsatisfiable_claim_says_why_in_its_allocated_condition(
    testbed: Testbed, operator: OperatorProcess, namespace: str
) -> None:
    pool, _, claim_name = unsatisfiable_claim(testbed, namespace)
    claim_kind = testbed.api_mode.resource("resourceclaims")
    condition = wait_for(
        "the claim's Allocated condition",
        lambda: allocated_condition(get(testbed, claim_kind, claim_name, namespace)),
    )
    assert (condition["status"], condition["reason"]) == ("False", "Unschedulable"), condition
    assert condition["message"].startswith("0/"), condition
    assert f'2 not enough devices of class "{pool.device_class}" (need 3)' in condition["message"]


def allocated_condition(claim: dict[str, Any] | None) -> dict[str, Any] | None:
    conditions = ((claim or {}).get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c.get("type") == "Allocated"), None)


def test_admin_access_needs_the_namespace_label(
    testbed: Testbed, operator: OperatorProcess, namespace: str
) -> None:
    mode = testbed.api_mode
    pool = make_pool(testbed, nodes=1, devices=1)
    if mode.api_server_checks_admin_access:
        # The API server refuses the template itself without the label: it is created with
        # the label, which then goes, so that the first pod's claim is refused.
        testbed.kubectl("label", "namespace", namespace, f"{mode.admin_access_label}=true")
        testbed.apply(template(namespace, "admin", pool, adminAccess=True))
        testbed.kubectl("label", "namespace", namespace, f"{mode.admin_access_label}-")
    else:
        testbed.apply(template(namespace, "admin", pool, adminAccess=True))
    entry = [{"name": "dev", "resourceClaimTemplateName": "admin"}]
    testbed.apply(pod(namespace, "refused", pool, entry))
    found = wait_for(
        "FailedResourceClaimCreation event",
        lambda: events(testbed, namespace, "refused", "FailedResourceClaimCreation"),
    )
    assert mode.admin_access_label in found[0]["message"], found[0]["message"]
    assert found[0]["type"] == "Warning"
    assert claims_in(testbed, namespace) == []

    testbed.kubectl("label", "namespace", namespace, f"{mode.admin_access_label}=true")
    testbed.apply(pod(namespace, "allowed", pool, entry))
    wait_bound(testbed, namespace, "allowed")
    results = [
        c["status"]["allocation"]["devices"]["results"][0]
        for c in claims_in(testbed, namespace)
        if (c.get("status") or {}).get("allocation")
    ]
    assert results and all(r.get("adminAccess") for r in results)
