"""What dralloc writes, only dralloc can write: the pod-protocol admission policy, live.

The ValidatingAdmissionPolicy of manifests/base is installed as shipped, with its identity
ConfigMap naming the in-cluster ServiceAccount and, as scripts/demo does, the identity the
operator runs as here (the testbed admin). A namespace user (impersonated, with a Role that
may create, update and patch pods, their status and their bindings in one namespace) then
tries each forgery of issue 13; the API server refuses each with the policy's message, and the
operator still allocates, annotates and ungates pods.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import yaml

from .kube_helpers import REPO_ROOT, Testbed, wait_for
from .operator_fixtures import (
    GATE,
    GROUP,
    Pool,
    claims_in,
    install_crds,
    make_pool,
    operator,
    pod,
    template,
    wait_bound,
)

__all__ = ["operator"]

pytestmark = pytest.mark.api_modes

POLICY = "dralloc-pod-protocol"
PARAMS = "dralloc-operator-identity"
NAMESPACE = "dralloc-system"
DEVICES = f"{GROUP}/devices"
STATUSES = f"{GROUP}/claim-statuses"
USER = "e2e-tenant"
TENANTS = "e2e-tenants"
REFUSED_DEVICES = f"annotation {DEVICES}: only the dralloc operator may set, change or remove it"
REFUSED_STATUSES = f"annotation {STATUSES}: only the dralloc operator may set, change or remove it"
REFUSED_GATE = f"scheduling gate {GATE}: only the dralloc operator may remove it"
NOT_OPERATOR = f'user "{USER}" is not the dralloc operator'
FORGED = json.dumps(
    [
        {
            "name": "dev",
            "resourceClaimName": "someone-elses-claim",
            "devices": [{"request": "dev", "driver": "x.example.com", "pool": "n", "device": "d"}],
        }
    ]
)


def whoami(testbed: Testbed) -> str:
    result = testbed.kubectl("auth", "whoami", "-o", "json")
    return str(json.loads(result.stdout)["status"]["userInfo"]["username"])


def shipped(testbed: Testbed) -> list[dict[str, Any]]:
    rendered = testbed.kubectl("kustomize", str(REPO_ROOT / "manifests" / "base")).stdout
    wanted = {
        ("Namespace", NAMESPACE),
        ("ConfigMap", PARAMS),
        ("ValidatingAdmissionPolicy", POLICY),
        ("ValidatingAdmissionPolicyBinding", POLICY),
    }
    docs = [d for d in yaml.safe_load_all(rendered) if d]
    found = [d for d in docs if (d["kind"], d["metadata"]["name"]) in wanted]
    assert len(found) == len(wanted), "manifests/base lacks the pod-protocol policy"
    return found


@pytest.fixture(scope="module")
def policy(testbed: Testbed) -> Iterator[str]:
    """The shipped policy, binding and identity (plus this operator's user); the admin's name."""
    install_crds(testbed)
    admin = whoami(testbed)
    objects = shipped(testbed)
    for obj in objects:
        if obj["kind"] == "ConfigMap":
            # As scripts/demo does for its operator; the admin plays the operator's identity
            # in the tests of what gets past admission.
            obj["data"]["usernames"] += f",{testbed.operator_user},{admin}"
    order = ["Namespace", "ConfigMap", "ValidatingAdmissionPolicy"]
    objects.sort(key=lambda o: order.index(o["kind"]) if o["kind"] in order else len(order))
    testbed.apply(*objects)
    try:
        yield admin
    finally:
        for kind, name, extra in (
            ("validatingadmissionpolicybinding", POLICY, []),
            ("validatingadmissionpolicy", POLICY, []),
            ("configmap", PARAMS, [f"--namespace={NAMESPACE}"]),
        ):
            testbed.kubectl("delete", kind, name, *extra, "--ignore-not-found", check=False)


@pytest.fixture
def tenant(testbed: Testbed, namespace: str, policy: str) -> Callable[..., Any]:
    """kubectl as a namespace user who may write pods (and their status and bindings)."""
    testbed.apply(
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": {"name": "tenant", "namespace": namespace},
            "rules": [
                {
                    "apiGroups": [""],
                    "resources": ["pods"],
                    "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"],
                },
                {
                    "apiGroups": [""],
                    "resources": ["pods/status"],
                    "verbs": ["get", "update", "patch"],
                },
                {"apiGroups": [""], "resources": ["pods/binding"], "verbs": ["create"]},
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": "tenant", "namespace": namespace},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "tenant"},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": USER}],
        },
    )

    def run(*args: str, input: str | None = None) -> subprocess.CompletedProcess[str]:
        return testbed.kubectl(
            f"--as={USER}", f"--as-group={TENANTS}", f"--namespace={namespace}", *args,
            input=input, check=False,
        )  # fmt: skip

    # The API server loads policies, bindings and params through informers: wait until the
    # policy refuses (a server-side dry run changes nothing).
    probe = plain_pod(namespace, "probe", {DEVICES: FORGED})

    def refused() -> bool:
        result = run("create", "--dry-run=server", "-f", "-", input=probe)
        assert "forbidden" in result.stderr or result.returncode == 0, result.stderr
        return result.returncode != 0

    wait_for("the pod-protocol policy to be in force", refused, timeout=30)
    return run


def refusal(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode != 0, f"expected a refusal, got: {result.stdout}"
    assert f"ValidatingAdmissionPolicy '{POLICY}'" in result.stderr, result.stderr
    assert NOT_OPERATOR in result.stderr, result.stderr
    return result.stderr


@pytest.fixture(scope="module")
def pool(testbed: Testbed) -> Pool:
    return make_pool(testbed, 1, 2, prefix="trust")


def plain_pod(namespace: str, name: str, annotations: dict[str, str] | None = None) -> str:
    body: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "annotations": annotations or {}},
        "spec": {
            "containers": [{"name": "c", "image": "registry.invalid/fake"}],
            "nodeSelector": {"e2e": "no-such-node"},
        },
    }
    return json.dumps(body)


def test_forged_devices_annotation_at_create_is_refused(
    testbed: Testbed, namespace: str, tenant: Callable[..., Any], policy: str
) -> None:
    forged = plain_pod(namespace, "forged", {DEVICES: FORGED})
    assert REFUSED_DEVICES in refusal(tenant("create", "-f", "-", input=forged))
    assert testbed.get("pod", "forged", f"--namespace={namespace}") is None
    # The same pod from the operator's identity is admitted.
    testbed.kubectl("create", "-f", "-", input=forged)


def test_forged_claim_statuses_at_create_is_refused(
    namespace: str, tenant: Callable[..., Any]
) -> None:
    statuses = json.dumps([{"name": "dev", "resourceClaimName": "victim-dev-abcde"}])
    forged = plain_pod(namespace, "hijack", {STATUSES: statuses})
    assert REFUSED_STATUSES in refusal(tenant("create", "-f", "-", input=forged))


def test_annotations_added_later_are_refused_through_every_write_path(
    testbed: Testbed, namespace: str, tenant: Callable[..., Any], policy: str
) -> None:
    created = tenant("create", "-f", "-", input=plain_pod(namespace, "later"))
    assert created.returncode == 0, created.stderr
    statuses = json.dumps([{"name": "dev", "resourceClaimName": "victim-dev-abcde"}])
    for key, value, message in (
        (DEVICES, FORGED, REFUSED_DEVICES),
        (STATUSES, statuses, REFUSED_STATUSES),
    ):
        assert message in refusal(tenant("annotate", "pod", "later", f"{key}={value}"))
        patch = json.dumps({"metadata": {"annotations": {key: value}}})
        # The status subresource keeps metadata changes of a pod: it is covered too.
        assert message in refusal(
            tenant("patch", "pod", "later", "--subresource=status", "--type=merge", "-p", patch)
        )
        assert message in refusal(tenant("patch", "pod", "later", "--type=merge", "-p", patch))
    current = testbed.get("pod", "later", f"--namespace={namespace}")
    assert current is not None
    assert not {DEVICES, STATUSES} & set(current["metadata"].get("annotations") or {})
    # Anything else stays the user's own.
    ok = tenant("annotate", "pod", "later", "team=a")
    assert ok.returncode == 0, ok.stderr
    # The operator's identity may write them.
    testbed.kubectl("annotate", f"--namespace={namespace}", "pod", "later", f"{DEVICES}=[]")
    # ... and once written, the user may neither change nor remove them.
    assert REFUSED_DEVICES in refusal(
        tenant("annotate", "--overwrite", "pod", "later", f"{DEVICES}={FORGED}")
    )
    assert REFUSED_DEVICES in refusal(tenant("annotate", "pod", "later", f"{DEVICES}-"))


def test_a_binding_cannot_carry_the_annotations(
    namespace: str, tenant: Callable[..., Any], pool: Pool
) -> None:
    """The annotations of a Binding are copied onto the pod; kube-scheduler's carry none."""
    created = tenant("create", "-f", "-", input=plain_pod(namespace, "bind-me"))
    assert created.returncode == 0, created.stderr
    binding: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": "bind-me", "annotations": {DEVICES: FORGED}},
        "target": {"kind": "Node", "name": pool.nodes[0]},
    }
    path = f"/api/v1/namespaces/{namespace}/pods/bind-me/binding"
    result = tenant("create", "--raw", path, "-f", "-", input=json.dumps(binding))
    assert result.returncode != 0
    assert REFUSED_DEVICES in result.stderr, result.stderr
    binding["metadata"]["annotations"] = {"example.com/placed-by": "tenant"}
    allowed = tenant("create", "--raw", path, "-f", "-", input=json.dumps(binding))
    assert allowed.returncode == 0, allowed.stderr


def test_removing_the_gate_is_refused(
    testbed: Testbed, namespace: str, tenant: Callable[..., Any], operator: Any, pool: Pool
) -> None:
    # A claim that does not exist keeps the pod gated for as long as we look; the user's own
    # gate is there to show that the policy minds only ours.
    body = pod(
        namespace, "gated", pool, [{"name": "dev", "resourceClaimName": "missing"}],
        schedulingGates=[{"name": "example.com/mine"}],
    )  # fmt: skip
    created = tenant("create", "-f", "-", input=json.dumps(body))
    assert created.returncode == 0, created.stderr
    found = testbed.get("pod", "gated", f"--namespace={namespace}")
    assert found is not None
    assert [g["name"] for g in found["spec"]["schedulingGates"]] == ["example.com/mine", GATE]
    for patch in (
        '[{"op": "remove", "path": "/spec/schedulingGates"}]',
        '[{"op": "remove", "path": "/spec/schedulingGates/1"}]',
    ):
        assert REFUSED_GATE in refusal(tenant("patch", "pod", "gated", "--type=json", "-p", patch))
    # Lifting one's own gate is fine; the pod keeps ours.
    own = tenant(
        "patch",
        "pod",
        "gated",
        "--type=json",
        "-p",
        '[{"op": "remove", "path": "/spec/schedulingGates/0"}]',
    )
    assert own.returncode == 0, own.stderr
    found = testbed.get("pod", "gated", f"--namespace={namespace}")
    assert found is not None
    assert [g["name"] for g in found["spec"]["schedulingGates"]] == [GATE]


def test_the_operator_still_allocates_annotates_and_ungates(
    testbed: Testbed, namespace: str, tenant: Callable[..., Any], operator: Any, pool: Pool
) -> None:
    testbed.apply(template(namespace, "one", pool))
    body = pod(namespace, "honest", pool, [{"name": "dev", "resourceClaimTemplateName": "one"}])
    created = tenant("create", "-f", "-", input=json.dumps(body))
    assert created.returncode == 0, created.stderr
    wait_bound(testbed, namespace, "honest")
    found = testbed.get("pod", "honest", f"--namespace={namespace}")
    assert found is not None
    annotations = found["metadata"]["annotations"]
    (claim,) = claims_in(testbed, namespace)
    devices = json.loads(annotations[DEVICES])
    assert devices[0]["resourceClaimName"] == claim["metadata"]["name"]
    statuses = testbed.api_mode.claim_statuses(found)
    assert statuses, f"no claim statuses in {testbed.api_mode.claim_statuses_field}"
    assert statuses[0]["resourceClaimName"] == claim["metadata"]["name"]
    assert not found["spec"].get("schedulingGates")
    # The user cannot swap the real devices for others afterwards.
    assert REFUSED_DEVICES in refusal(
        tenant("annotate", "--overwrite", "pod", "honest", f"{DEVICES}={FORGED}")
    )


def test_kube_scheduler_binds_ungated_pods_of_a_namespace_user(
    testbed: Testbed, namespace: str, tenant: Callable[..., Any], pool: Pool
) -> None:
    body = pod(namespace, "plain", pool, [])
    del body["metadata"]["annotations"]
    created = tenant("create", "-f", "-", input=json.dumps(body))
    assert created.returncode == 0, created.stderr
    assert wait_bound(testbed, namespace, "plain") in pool.nodes


def test_without_the_identity_configmap_the_policy_fails_closed(
    testbed: Testbed, namespace: str, tenant: Callable[..., Any], policy: str
) -> None:
    """A lost ConfigMap refuses pod writes in bound namespaces rather than open the protocol."""
    saved = testbed.get("configmap", PARAMS, f"--namespace={NAMESPACE}")
    assert saved is not None
    testbed.kubectl("delete", "configmap", PARAMS, f"--namespace={NAMESPACE}")
    try:

        def closed() -> str:
            result = tenant(
                "create", "--dry-run=server", "-f", "-", input=plain_pod(namespace, "x")
            )
            return result.stderr if result.returncode != 0 else ""

        message = wait_for("pod writes refused without params", closed, timeout=30)
        assert "no params found" in message, message
    finally:
        for key in ("resourceVersion", "uid", "creationTimestamp", "managedFields"):
            saved["metadata"].pop(key, None)
        testbed.apply(saved)
    wait_for(
        "pod writes admitted again",
        lambda: (
            tenant(
                "create", "--dry-run=server", "-f", "-", input=plain_pod(namespace, "x")
            ).returncode
            == 0
        ),
        timeout=30,
    )


# --- truth lives in claims: an annotation that got past admission changes nothing ----------
# (written here by the testbed admin, whom the policy trusts as the operator's identity: the
# case of a misconfigured identity, or of a cluster without the policy)


def pod_devices(testbed: Testbed, namespace: str, name: str) -> str | None:
    found = testbed.get("pod", name, f"--namespace={namespace}") or {}
    return ((found.get("metadata") or {}).get("annotations") or {}).get(DEVICES)


def corrected(testbed: Testbed, namespace: str, name: str) -> list[str]:
    found = testbed.get(
        "events", f"--namespace={namespace}",
        f"--field-selector=involvedObject.name={name},reason=DevicesAnnotationCorrected",
    )  # fmt: skip
    return [str(e.get("message")) for e in (found or {}).get("items") or []]


def test_a_forged_annotation_on_a_bound_pod_is_rewritten_from_its_claims(
    testbed: Testbed, namespace: str, operator: Any, pool: Pool
) -> None:
    testbed.apply(template(namespace, "one", pool))
    body = pod(
        namespace, "forger", pool, [{"name": "dev", "resourceClaimTemplateName": "one"}],
        nodeName=pool.nodes[0],
    )  # fmt: skip
    body["metadata"]["annotations"][DEVICES] = FORGED
    testbed.kubectl("create", "-f", "-", input=json.dumps(body))

    def truthful() -> list[dict[str, Any]] | None:
        raw = pod_devices(testbed, namespace, "forger")
        entries = json.loads(raw) if raw else []
        return (
            entries
            if entries and entries[0]["resourceClaimName"] != "someone-elses-claim"
            else None
        )

    (entry,) = wait_for("the devices annotation rewritten from the claim", truthful, timeout=60)
    (generated,) = claims_in(testbed, namespace)
    assert entry["resourceClaimName"] == generated["metadata"]["name"]
    result = generated["status"]["allocation"]["devices"]["results"][0]
    assert entry["devices"][0]["device"] == result["device"]
    # Whoever comes first says so: the claim controller removes the forgery while the claim
    # is not allocated yet, or the allocation (or the claim controller) rewrites it.
    messages = wait_for(
        "a Warning about the forgery", lambda: corrected(testbed, namespace, "forger")
    )
    assert any(
        "did not match the pod's ResourceClaims" in m or "is not allocated" in m for m in messages
    ), messages


def test_a_forged_annotation_without_devices_behind_it_is_removed(
    testbed: Testbed, namespace: str, operator: Any
) -> None:
    # A node of its own with no devices at all: nothing can be allocated for the pod there.
    bare = make_pool(testbed, 1, 0, prefix="bare")
    testbed.apply(template(namespace, "one", bare))
    body = pod(
        namespace, "forger", bare, [{"name": "dev", "resourceClaimTemplateName": "one"}],
        nodeName=bare.nodes[0],
    )  # fmt: skip
    body["metadata"]["annotations"][DEVICES] = FORGED
    testbed.kubectl("create", "-f", "-", input=json.dumps(body))
    wait_for(
        "the forged devices annotation removed",
        lambda: pod_devices(testbed, namespace, "forger") is None,
        timeout=60,
    )
    messages = wait_for(
        "a Warning about the removal", lambda: corrected(testbed, namespace, "forger")
    )
    assert any("removed" in m and "is not allocated" in m for m in messages), messages
