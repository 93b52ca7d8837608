"""DRA extended resources served by dralloc (in-tree): ``example.com/gpu: 1`` becomes an
ordinary claim of the pod at admission, allocated by dralloc alone.

kube-scheduler takes no extended-resource claim made by anyone else (its Filter fails such a
pod, its PostFilter deletes the claim), so the webhook turns the request into a claim the pod
names in ``spec.resourceClaims`` and the claim controller creates it. Tested here with the
claim-allocation policy guarding the module's namespaces, as shipped: kube-scheduler may not
allocate, it only binds. Mixed with template-claim pods on the same devices, under a
DeviceQuota of the extended class, refused at admission when no claim can hold the request,
and passing the webhook by (the class made after the pod): explained on a bare pod, made
again through the ReplicaSet of an owned one.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
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
    Pool,
    ensure_lease_namespace,
    make_pool,
    running_operator,
    template,
)

pytestmark = pytest.mark.timeout(600)

GROUP = "resource.k8s.io"
ENTRY = "dralloc-extended-resources"


@pytest.fixture(scope="module")
def in_tree(testbeds: TestbedRegistry) -> Testbed:
    testbed = testbeds.get(TESTBED_DRA_SCHEDULER).in_mode(IN_TREE)
    ensure_lease_namespace(testbed)
    return testbed


@pytest.fixture(scope="module")
def operator(
    in_tree: Testbed, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[OperatorProcess]:
    yield from running_operator(in_tree, tmp_path_factory)


@pytest.fixture
def namespace(in_tree: Testbed, operator: OperatorProcess) -> Iterator[str]:
    """A namespace the claim-allocation policy guards (kube-scheduler may only bind)."""
    name = unique_name("extended")
    policy = f"{name}-allocation"
    in_tree.kubectl("create", "namespace", name)
    in_tree.apply(*claim_allocation_policy(policy, [name], [in_tree.operator_user]))
    try:
        wait_policy_in_force(in_tree.bin, in_tree.kubeconfig, name)
        yield name
    finally:
        for args in claim_allocation_policy_removal(policy):
            in_tree.kubectl(*args, check=False)
        in_tree.kubectl("delete", "namespace", name, "--wait=false", check=False)


def extended_class(testbed: Testbed, pool: Pool, name: str, resource: str | None) -> str:
    spec: dict[str, Any] = {
        "selectors": [{"cel": {"expression": f'device.driver == "{pool.driver}"'}}]
    }
    if resource:
        spec["extendedResourceName"] = resource
    testbed.apply(
        {"apiVersion": f"{GROUP}/v1", "kind": "DeviceClass", "metadata": {"name": name},
         "spec": spec}
    )  # fmt: skip
    return name


def asking(
    namespace: str, name: str, pool: Pool, resource: str, count: str = "1"
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "nodeSelector": pool.node_selector,
            "terminationGracePeriodSeconds": 0,
            "containers": [
                {
                    "name": "main",
                    "image": "registry.invalid/fake",
                    "resources": {
                        "requests": {"cpu": "100m", resource: count},
                        "limits": {resource: count},
                    },
                }
            ],
        },
    }


def template_pod(namespace: str, name: str, pool: Pool) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "nodeSelector": pool.node_selector,
            "terminationGracePeriodSeconds": 0,
            "resourceClaims": [{"name": "dev", "resourceClaimTemplateName": "one"}],
            "containers": [
                {
                    "name": "main",
                    "image": "registry.invalid/fake",
                    "resources": {"claims": [{"name": "dev"}], "requests": {"cpu": "100m"}},
                }
            ],
        },
    }


def create(testbed: Testbed, body: dict[str, Any], check: bool = True) -> Any:
    return testbed.kubectl("create", "-f", "-", input=json.dumps(body), check=check)


def pods(testbed: Testbed, namespace: str) -> list[dict[str, Any]]:
    return list((testbed.get("pods", f"--namespace={namespace}") or {}).get("items") or [])


def claims(testbed: Testbed, namespace: str) -> dict[str, dict[str, Any]]:
    found = testbed.get(f"resourceclaims.{GROUP}", f"--namespace={namespace}") or {}
    return {c["metadata"]["name"]: c for c in found.get("items") or []}


def held(claim: dict[str, Any]) -> list[tuple[str, str, str]]:
    allocation = (claim.get("status") or {}).get("allocation") or {}
    return [
        (r["driver"], r["pool"], r["device"])
        for r in (allocation.get("devices") or {}).get("results") or []
    ]


def extended_claim_name(pod: dict[str, Any]) -> str:
    entries = {e["name"]: e for e in pod["spec"].get("resourceClaims") or []}
    return str(entries[ENTRY]["resourceClaimName"])


def test_extended_resource_pods_are_claims_pods_beside_template_pods(
    in_tree: Testbed, namespace: str, operator: OperatorProcess
) -> None:
    """3 extended-resource pods (one asking for 2) and 2 template pods over 5 devices: the
    pods' containers no longer ask for the extended resource, each names its own claim,
    dralloc allocates every claim (kube-scheduler only binds), no device is held twice, and
    the pod that does not fit waits with the reason."""
    testbed = in_tree
    pool = make_pool(testbed, 1, 5, prefix="ext")
    resource = f"{pool.label}.example.com/gpu"
    ext = extended_class(testbed, pool, f"{pool.label}-ext", resource)
    testbed.apply(template(namespace, "one", pool))
    for i, count in enumerate(("1", "2", "1")):
        create(testbed, asking(namespace, f"x{i}", pool, resource, count))
    for i in range(2):
        create(testbed, template_pod(namespace, f"t{i}", pool))

    def settled() -> list[dict[str, Any]] | None:
        listed = pods(testbed, namespace)
        bound = [p for p in listed if p["spec"].get("nodeName")]
        waiting = [p for p in listed if not p["spec"].get("nodeName")]
        explained = all(
            any(str(c.get("type")).endswith("DevicesAllocated") and c.get("status") == "False"
                for c in (p.get("status") or {}).get("conditions") or ())
            for p in waiting
        )  # fmt: skip
        return listed if len(bound) == 4 and len(waiting) == 1 and explained else None

    try:
        listed = wait_for("4 pods bound, 1 explained", settled, timeout=120)
    except AssertionError:
        for p in pods(testbed, namespace):
            print(
                p["metadata"]["name"],
                p["spec"].get("nodeName"),
                p["spec"].get("schedulingGates"),
                p["spec"].get("resourceClaims"),
                p["spec"]["containers"][0]["resources"],
                (p.get("status") or {}).get("conditions"),
            )
        for c in claims(testbed, namespace).values():
            print(c["metadata"]["name"], c.get("status"))
        print(operator.log()[-6000:])
        raise
    by_name = {p["metadata"]["name"]: p for p in listed}
    all_claims = claims(testbed, namespace)
    devices: list[tuple[str, str, str]] = []
    for name in ("x0", "x1", "x2"):
        pod = by_name[name]
        main = pod["spec"]["containers"][0]["resources"]
        assert resource not in (main.get("requests") or {}), main
        assert resource not in (main.get("limits") or {}), main
        claim_name = extended_claim_name(pod)
        claim = all_claims[claim_name]
        (owner,) = claim["metadata"]["ownerReferences"]
        assert owner["uid"] == pod["metadata"]["uid"] and owner["controller"]
        (request,) = claim["spec"]["devices"]["requests"]
        assert request["exactly"]["deviceClassName"] == ext
        assert main["claims"] == [{"name": ENTRY, "request": request["name"]}]
        if pod["spec"].get("nodeName"):
            status = claim["status"]
            assert [r["uid"] for r in status["reservedFor"]] == [pod["metadata"]["uid"]]
            assert len(held(claim)) == int(request["exactly"]["count"])
            assert {r[1] for r in held(claim)} == {pod["spec"]["nodeName"]}
    for claim in all_claims.values():
        devices += held(claim)
    assert len(devices) == len(set(devices)) == 5, devices


def test_the_device_quota_of_the_class_counts_them(in_tree: Testbed, namespace: str) -> None:
    testbed = in_tree
    pool = make_pool(testbed, 1, 4, prefix="extq")
    resource = f"{pool.label}.example.com/gpu"
    ext = extended_class(testbed, pool, f"{pool.label}-ext", resource)
    testbed.apply(
        {"apiVersion": "resource.dralloc.dev/v1", "kind": "DeviceQuota",
         "metadata": {"name": "gpus", "namespace": namespace},
         "spec": {"deviceClassName": ext, "hard": {"devices": 2}}}
    )  # fmt: skip
    for i in range(3):
        create(testbed, asking(namespace, f"q{i}", pool, resource))

    def over_quota_explained() -> str:
        listed = pods(testbed, namespace)
        if sum(bool(p["spec"].get("nodeName")) for p in listed) != 2:
            return ""
        for p in listed:
            for c in (p.get("status") or {}).get("conditions") or ():
                if (
                    str(c.get("type")).endswith("DevicesAllocated")
                    and "quota" in str(c.get("message")).lower()
                ):
                    return str(c["message"])
        return ""

    message = wait_for("2 bound, 1 held back by the quota", over_quota_explained, timeout=90)
    assert "gpus" in message, message
    allocated = [c for c in claims(testbed, namespace).values() if held(c)]
    assert sum(len(held(c)) for c in allocated) == 2


def test_what_no_claim_can_hold_is_refused_at_creation(in_tree: Testbed, namespace: str) -> None:
    testbed = in_tree
    pool = make_pool(testbed, 1, 1, prefix="extr")
    resource = f"{pool.label}.example.com/gpu"
    extended_class(testbed, pool, f"{pool.label}-ext", resource)
    result = create(testbed, asking(namespace, "huge", pool, resource, "40"), check=False)
    assert result.returncode != 0
    assert "one claim holds at most 32" in result.stderr, result.stderr
    assert testbed.get("pod", "huge", f"--namespace={namespace}") is None


def test_pods_that_passed_the_translation_by_are_explained_or_made_again(
    in_tree: Testbed, namespace: str
) -> None:
    """Pods asking for a class's implicit extended resource before the class exists pass
    the webhook untranslated. Once it exists: the bare pod is told why it waits (and
    kube-scheduler's own allocation stays refused), the ReplicaSet's pod is deleted for its
    controller to make again, and a pod made again is translated and runs. (No ReplicaSet
    controller runs in this testbed: the test makes the next pod as it would.)"""
    testbed = in_tree
    pool = make_pool(testbed, 1, 2, prefix="extl")
    class_name = f"{pool.label}-late"
    resource = f"deviceclass.resource.kubernetes.io/{class_name}"
    create(testbed, asking(namespace, "bare", pool, resource))
    replica_set = {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {"name": "owned", "namespace": namespace},
        "spec": {
            "replicas": 0,
            "selector": {"matchLabels": {"app": "owned"}},
            "template": {
                "metadata": {"labels": {"app": "owned"}},
                "spec": asking(namespace, "unused", pool, resource)["spec"],
            },
        },
    }
    create(testbed, replica_set)
    owner = testbed.get("replicaset", "owned", f"--namespace={namespace}") or {}

    def owned_pod(name: str) -> dict[str, Any]:
        body = asking(namespace, name, pool, resource)
        body["metadata"]["labels"] = {"app": "owned"}
        body["metadata"]["ownerReferences"] = [
            {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "owned",
             "uid": owner["metadata"]["uid"], "controller": True}
        ]  # fmt: skip
        return body

    create(testbed, owned_pod("owned-1"))
    first = testbed.get("pod", "owned-1", f"--namespace={namespace}") or {}
    assert not first["spec"].get("resourceClaims")  # untranslated: no class yet
    extended_class(testbed, pool, class_name, None)

    wait_for(
        "the ReplicaSet's untranslated pod deleted",
        lambda: testbed.get("pod", "owned-1", f"--namespace={namespace}") is None,
        timeout=60,
    )
    events = testbed.get(
        "events", f"--namespace={namespace}",
        "--field-selector=involvedObject.name=owned-1,reason=ExtendedResourcesNotServed",
    ) or {}  # fmt: skip
    messages = [str(e.get("message")) for e in events.get("items") or []]
    assert any("ReplicaSet/owned creates it again" in m for m in messages), messages
    create(testbed, owned_pod("owned-2"))

    def bound() -> dict[str, Any] | None:
        pod = testbed.get("pod", "owned-2", f"--namespace={namespace}") or {}
        return pod if pod.get("spec", {}).get("nodeName") else None

    replacement = wait_for("the next pod, translated and bound", bound, timeout=60)
    claim = claims(testbed, namespace)[extended_claim_name(replacement)]
    assert held(claim) and held(claim)[0][1] == replacement["spec"]["nodeName"]

    def bare_explained() -> str:
        pod = testbed.get("pod", "bare", f"--namespace={namespace}") or {}
        for c in (pod.get("status") or {}).get("conditions") or ():
            if c.get("reason") == "ExtendedResourcesNotServed":
                return str(c.get("message"))
        return ""

    message = wait_for("the bare pod explained", bare_explained, timeout=60)
    assert resource in message and "delete the pod" in message, message
    bare = testbed.get("pod", "bare", f"--namespace={namespace}") or {}
    assert not bare["spec"].get("nodeName")  # kube-scheduler's own allocation is refused
    events = testbed.get(
        "events", f"--namespace={namespace}",
        "--field-selector=involvedObject.name=bare,reason=ExtendedResourcesNotServed",
    ) or {}  # fmt: skip
    assert events.get("items"), events


def test_init_containers_sidecars_and_several_containers(in_tree: Testbed, namespace: str) -> None:
    """The API server takes the webhook's patch of a pod with an init container, a sidecar
    and two containers (one without the resource): one request each, each container pointed
    at its own, and the pod runs with one device per request."""
    testbed = in_tree
    pool = make_pool(testbed, 1, 4, prefix="extm")
    resource = f"{pool.label}.example.com/gpu"
    extended_class(testbed, pool, f"{pool.label}-ext", resource)
    body = asking(namespace, "multi", pool, resource)
    main = body["spec"]["containers"][0]
    init = {**main, "name": "setup"}
    sidecar = {**main, "name": "proxy", "restartPolicy": "Always"}
    plain = {"name": "plain", "image": "registry.invalid/fake"}
    body["spec"]["initContainers"] = [init, sidecar]
    body["spec"]["containers"] = [main, plain]
    create(testbed, body)

    def bound() -> dict[str, Any] | None:
        pod = testbed.get("pod", "multi", f"--namespace={namespace}") or {}
        return pod if pod.get("spec", {}).get("nodeName") else None

    pod = wait_for("the pod bound", bound, timeout=60)
    claim = claims(testbed, namespace)[extended_claim_name(pod)]
    requests = [r["name"] for r in claim["spec"]["devices"]["requests"]]
    assert requests == ["container-0-request-1", "container-1-request-1", "container-2-request-1"]
    spec = pod["spec"]
    pointed = [c["resources"].get("claims") for c in [*spec["initContainers"], *spec["containers"]]]
    assert pointed == [
        [{"name": ENTRY, "request": "container-0-request-1"}],
        [{"name": ENTRY, "request": "container-1-request-1"}],
        [{"name": ENTRY, "request": "container-2-request-1"}],
        None,
    ]
    assert len(set(held(claim))) == 3
