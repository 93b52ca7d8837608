"""Least privilege and leak-free operation, end to end.

- RBAC: ``kubectl auth can-i --list`` for the operator's ServiceAccount (from manifests/)
  equals the list below, row for row, and Secrets are out of reach; the operator then runs
  with a token of that ServiceAccount and allocates, so the list is also enough.
- Fields: with the shipped policies dralloc-operator-pod-writes and -claim-writes in force,
  that account may change on pods only dralloc's protocol (an image, a label, another
  annotation, the phase, the Ready condition are refused, naming the field; so is deleting a
  pod that asks for no devices), and on claims only its protocol (a user's claim relabelled or
  deleted is refused), and the operator still allocates under them.
- adminAccess in a namespace without the admin-access label is refused, whether the claim
  comes from a template or is written directly.
- The operator's log holds no token and no object bodies (a canary value in a pod and a
  slice must not show up), and tracebacks carry no local variables.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import json
import signal
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

import pytest
import yaml

from operators.kube import PODS, ApiError, KubeClient

from .kube_helpers import REPO_ROOT, Testbed, unique_name, wait_for
from .operator_fixtures import (
    GATE,
    GROUP,
    OperatorProcess,
    claim,
    install_crds,
    make_pool,
    operator,
    pod,
    template,
    wait_bound,
)
from .reliability_helpers import assert_invariants, event_messages

__all__ = ["operator"]

NAMESPACE: Final = "dralloc-system"
ACCOUNT: Final = "dralloc-operator"
AS: Final = f"--as=system:serviceaccount:{NAMESPACE}:{ACCOUNT}"
RBAC_KINDS: Final = {
    "Namespace",
    "ServiceAccount",
    "ClusterRole",
    "ClusterRoleBinding",
    "Role",
    "RoleBinding",
}

# What the controllers need, resource -> verbs (see manifests/base/clusterrole.yaml for who
# needs what). Rows every authenticated user has (self-reviews, discovery URLs) are left out.
NEEDED_EVERYWHERE: Final[dict[str, set[str]]] = {
    **{
        f"{plural}.{GROUP}": {"get", "list", "watch"}
        for plural in (
            "deviceclasses",
            "resourceslices",
            "resourceclaimtemplates",
            "devicetaintrules",
        )
    },
    f"resourceclaims.{GROUP}": {"get", "list", "watch", "create", "patch", "delete"},
    f"resourceclaims.{GROUP}/status": {"patch"},
    f"devicetaintrules.{GROUP}/status": {"patch"},
    f"devicequotas.{GROUP}": {"get", "list", "watch"},
    f"devicequotas.{GROUP}/status": {"patch"},
    "pods": {"get", "list", "watch", "update", "patch", "delete"},
    "pods/status": {"update", "patch"},
    "nodes": {"get", "list", "watch"},
    "namespaces": {"get", "list", "watch"},
    "podgroups.scheduling.k8s.io": {"get", "list", "watch"},
    "poddisruptionbudgets.policy": {"get", "list", "watch"},
    "events": {"create"},
    "customresourcedefinitions.apiextensions.k8s.io": {"list", "watch"},
}
NEEDED_IN_OWN_NAMESPACE: Final[dict[str, set[str]]] = {
    **NEEDED_EVERYWHERE,
    "leases.coordination.k8s.io": {"get", "create", "update"},
}
# An account of the same namespace that no manifest binds: what it may do, every service
# account may (the cluster's default roles: self reviews, and from 1.37 reading
# ClusterTrustBundles), so it is not a grant of ours.
NO_GRANTS: Final = f"--as=system:serviceaccount:{NAMESPACE}:dralloc-e2e-no-grants"


@pytest.fixture(scope="module")
def rbac(testbed: Testbed) -> None:
    install_crds(testbed)
    rendered = testbed.kubectl("kustomize", str(REPO_ROOT / "manifests")).stdout
    objects = [o for o in yaml.safe_load_all(rendered) if o and o["kind"] in RBAC_KINDS]
    assert any(o["kind"] == "ServiceAccount" for o in objects), "manifests/ has no ServiceAccount"
    testbed.apply(*objects)


def can_i_list(testbed: Testbed, who: str, namespace: str) -> dict[str, set[str]]:
    """`kubectl auth can-i --list` as ``who``, as resource -> verbs."""
    out = testbed.kubectl("auth", "can-i", "--list", who, f"--namespace={namespace}").stdout
    rows: dict[str, set[str]] = {}
    for line in out.splitlines()[1:]:
        resource, _, rest = line.partition(" ")
        if not resource or resource.startswith("["):
            continue  # non-resource URLs start the line with whitespace / brackets
        verbs = rest[rest.rfind("[") + 1 : rest.rfind("]")].split()
        rows.setdefault(resource, set()).update(verbs)
    return rows


def granted(testbed: Testbed, namespace: str) -> dict[str, set[str]]:
    """What the operator's account may do beyond what any service account may."""
    default = can_i_list(testbed, NO_GRANTS, namespace)
    assert "selfsubjectaccessreviews.authorization.k8s.io" in default, "baseline read failed"
    return {
        resource: verbs
        for resource, verbs in can_i_list(testbed, AS, namespace).items()
        if not verbs <= default.get(resource, set())
    }


def test_service_account_can_do_exactly_what_the_controllers_need(
    testbed: Testbed, rbac: None
) -> None:
    assert granted(testbed, NAMESPACE) == NEEDED_IN_OWN_NAMESPACE
    assert granted(testbed, unique_name("elsewhere")) == NEEDED_EVERYWHERE


def test_service_account_cannot_read_secrets(testbed: Testbed, rbac: None) -> None:
    name = unique_name("canary")
    testbed.kubectl(
        "create", "secret", "generic", name, f"--namespace={NAMESPACE}", "--from-literal=k=v"
    )
    try:
        for args in (["get", "secret", name, f"--namespace={NAMESPACE}"], ["get", "secrets", "-A"]):
            result = testbed.kubectl(*args, AS, check=False)
            assert result.returncode != 0 and "Forbidden" in result.stderr, result.stderr
        for verb in ("get", "list", "watch"):
            answer = testbed.kubectl("auth", "can-i", verb, "secrets", "-A", AS, check=False)
            assert answer.stdout.strip() == "no", (verb, answer.stdout)
    finally:
        testbed.kubectl("delete", "secret", name, f"--namespace={NAMESPACE}", check=False)


def service_account_kubeconfig(testbed: Testbed, path: Path) -> tuple[Path, str]:
    """A kubeconfig that authenticates with a fresh token of the operator's account."""
    token = testbed.kubectl(
        "create", "token", ACCOUNT, f"--namespace={NAMESPACE}", "--duration=1h"
    ).stdout.strip()
    admin = yaml.safe_load(testbed.kubeconfig.read_text())
    cluster = admin["clusters"][0]["cluster"]
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "testbed", "cluster": cluster}],
        "users": [{"name": ACCOUNT, "user": {"token": token}}],
        "contexts": [{"name": "sa", "context": {"cluster": "testbed", "user": ACCOUNT}}],
        "current-context": "sa",
    }
    path.write_text(yaml.safe_dump(config))
    return path, token


POD_WRITES: Final = "dralloc-operator-pod-writes"
CLAIM_WRITES: Final = "dralloc-operator-claim-writes"
REFUSED_WRITE: Final = "the dralloc operator may change on pods only its protocol"
REFUSED_CLAIM_WRITE: Final = "the dralloc operator may change on ResourceClaims only its protocol"


@pytest.fixture(scope="module")
def write_policies(testbed: Testbed, rbac: None) -> Iterator[None]:
    """The shipped policies that limit the operator's pod and claim writes to its protocol,
    in force."""
    rendered = testbed.kubectl("kustomize", str(REPO_ROOT / "manifests")).stdout
    names = (POD_WRITES, CLAIM_WRITES)
    objects = [o for o in yaml.safe_load_all(rendered) if o and o["metadata"]["name"] in names]
    assert sorted((o["metadata"]["name"], o["kind"]) for o in objects) == sorted(
        (name, kind)
        for name in names
        for kind in ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")
    ), "manifests/ ships the policies and their bindings"
    testbed.apply(*objects)
    try:
        yield
    finally:
        for o in objects:
            testbed.kubectl(
                "delete", o["kind"].lower(), o["metadata"]["name"], "--ignore-not-found",
                check=False,
            )  # fmt: skip


def bystander(testbed: Testbed, namespace: str, name: str) -> None:
    """A pod that has nothing to do with dralloc (as coredns or a node agent would be)."""
    body = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": {"app": "agent"}},
        "spec": {"containers": [{"name": "c", "image": "registry.example.com/agent:1"}]},
    }  # fmt: skip
    testbed.apply(body)


async def test_the_operators_token_cannot_change_a_pod_beyond_its_protocol(
    testbed: Testbed, namespace: str, write_policies: None, tmp_path: Path
) -> None:
    """A stolen operator token may patch pods cluster-wide (RBAC cannot limit fields); the
    API server refuses every change outside dralloc's protocol, and lets its own through."""
    bystander(testbed, namespace, "agent")
    kubeconfig, _ = service_account_kubeconfig(testbed, tmp_path / "sa.kubeconfig")
    path = PODS.path(namespace, "agent")
    strategic = "application/strategic-merge-patch+json"
    attempts: dict[str, tuple[str, Any]] = {
        "spec.containers": (path, {"spec": {"containers": [{"name": "c", "image": "attacker.example/backdoor:1"}]}}),
        "metadata.labels": (path, {"metadata": {"labels": {"app": "other"}}}),
        "metadata.annotations": (path, {"metadata": {"annotations": {"team": "b"}}}),
        "status.conditions": (path + "/status", {"status": {"conditions": [{"type": "Ready", "status": "False"}]}}),
        "status.phase": (path + "/status", {"status": {"phase": "Failed"}}),
    }  # fmt: skip
    async with await KubeClient.connect(str(kubeconfig)) as client:

        async def refusal(target: str, body: Any) -> str:
            try:
                await client.request("PATCH", target, body=body, content_type=strategic)
            except ApiError as error:
                return error.message
            return ""

        deadline, tries = time.monotonic() + 60, 0
        while REFUSED_WRITE not in (
            first := await refusal(path, {"metadata": {"annotations": {"e2e-probe": str(tries)}}})
        ):  # each probe a real change (one that passed before then changed only itself)
            assert time.monotonic() < deadline, f"the policy is not in force: {first!r}"
            tries += 1
            await asyncio.sleep(0.5)
        print(f"\n[security] {first}")
        for field, (target, body) in attempts.items():
            message = await refusal(target, body)
            assert REFUSED_WRITE in message and field in message, (field, message)
        try:  # a pod that asks for no devices is none of the operator's to delete
            await client.delete(PODS, "agent", namespace=namespace)
            deleted = ""
        except ApiError as error:
            deleted = error.message
        assert "deletion also touches the pod itself" in deleted, deleted
        # Its protocol passes: an annotation of its own, its condition.
        await client.request(
            "PATCH", path, body={"metadata": {"annotations": {f"{GROUP}/probe": "1"}}},
            content_type=strategic,
        )  # fmt: skip
        condition = {"type": f"{GROUP}/DevicesAllocated", "status": "False", "reason": "Probe"}
        await client.request(
            "PATCH", path + "/status", body={"status": {"conditions": [condition]}},
            content_type=strategic,
        )  # fmt: skip
    after = testbed.get("pod", "agent", f"--namespace={namespace}") or {}
    assert after["spec"]["containers"][0]["image"] == "registry.example.com/agent:1"
    assert after["status"].get("phase") != "Failed"


async def test_the_operators_token_cannot_change_a_claim_beyond_its_protocol(
    testbed: Testbed, namespace: str, write_policies: None, tmp_path: Path
) -> None:
    """The operator's role patches and deletes claims cluster-wide; the API server refuses a
    user's claim relabelled, re-annotated or deleted with its token, naming what."""
    pool = make_pool(testbed, nodes=1, devices=1)
    users = claim(namespace, "users", pool)
    users["metadata"]["labels"] = {"team": "a"}
    testbed.apply(users)
    kubeconfig, _ = service_account_kubeconfig(testbed, tmp_path / "sa.kubeconfig")
    mode = testbed.api_mode
    path = f"/apis/{mode.api_version}/namespaces/{namespace}/resourceclaims/users"
    merge = "application/merge-patch+json"
    async with await KubeClient.connect(str(kubeconfig)) as client:

        async def refusal(method: str, body: Any = None) -> str:
            try:
                await client.request(method, path, body=body, content_type=merge)
            except ApiError as error:
                return error.message
            return ""

        deadline, tries = time.monotonic() + 60, 0
        while REFUSED_CLAIM_WRITE not in (
            first := await refusal("PATCH", {"metadata": {"labels": {"team": f"b{tries}"}}})
        ):
            assert time.monotonic() < deadline, f"the policy is not in force: {first!r}"
            tries += 1
            await asyncio.sleep(0.5)
        print(f"\n[security] {first}")
        assert "metadata.labels" in first, first
        annotated = await refusal("PATCH", {"metadata": {"annotations": {"note": "x"}}})
        assert REFUSED_CLAIM_WRITE in annotated and "metadata.annotations" in annotated
        deleted = await refusal("DELETE")
        assert "deletion also touches the claim itself" in deleted, deleted
    after = testbed.get(mode.resource("resourceclaims"), "users", f"--namespace={namespace}")
    assert after is not None and after["metadata"]["labels"] == {"team": "a"}


@pytest.fixture
def operator_as_service_account(
    testbed: Testbed, rbac: None, write_policies: None, tmp_path: Path
) -> Iterator[tuple[OperatorProcess, str]]:
    kubeconfig, token = service_account_kubeconfig(testbed, tmp_path / "sa.kubeconfig")
    as_account = dataclasses.replace(testbed, kubeconfig=kubeconfig)
    proc = OperatorProcess(
        as_account,
        tmp_path / "operator.log",
        unique_name("dralloc-sa"),
        webhook=False,
        extra=[f"--lease-namespace={NAMESPACE}", "--log-format=json"],
    ).start()
    try:
        proc.wait_until("controllers starting")
        yield proc, token
    finally:
        proc.stop(signal.SIGTERM)


def test_operator_works_with_its_service_account_and_leaks_nothing(
    testbed: Testbed, namespace: str, operator_as_service_account: tuple[OperatorProcess, str]
) -> None:
    proc, token = operator_as_service_account
    canary = f"canary-{uuid.uuid4().hex}"
    pool = make_pool(testbed, nodes=1, devices=2)
    testbed.kubectl(
        "annotate",
        f"resourceslices.{GROUP}",
        "--all",
        f"e2e.dralloc.dev/canary={canary}",
        "--overwrite",
    )
    testbed.apply(template(namespace, "one", pool))
    good = pod(namespace, "good", pool, [{"name": "dev", "resourceClaimTemplateName": "one"}])
    good["metadata"]["annotations"]["e2e.dralloc.dev/canary"] = canary
    good["spec"]["schedulingGates"] = [{"name": GATE}]
    testbed.apply(good)
    wait_bound(testbed, namespace, "good")
    # An error path too: a malformed annotation whose text carries the canary.
    bad = pod(namespace, "bad", pool, [])
    bad["metadata"]["annotations"][f"{GROUP}/claims"] = json.dumps([{"name": canary}])
    bad["spec"]["schedulingGates"] = [{"name": GATE}]
    testbed.apply(bad)
    wait_for("the bad pod's Event", lambda: event_messages(testbed, namespace, "bad"))
    assert_invariants(testbed, [namespace])

    log = proc.log()
    assert "pod allocated" in log
    for forbidden in ("Forbidden", " 403"):
        assert forbidden not in log, (
            f"the operator was refused something:\n{_lines_with(log, forbidden)}"
        )
    assert token not in log and token[:40] not in log, "the token is in the log"
    assert "Bearer" not in log and "Authorization" not in log
    assert canary not in log, f"an object body reached the log:\n{_lines_with(log, canary)}"
    assert '"locals"' not in log and "locals=" not in log
    assert base64.b64encode(token.encode()).decode()[:40] not in log


def _lines_with(log: str, needle: str) -> str:
    return "\n".join(line[:400] for line in log.splitlines() if needle in line)[:3000]


ADMIN_LABEL: Final = f"{GROUP}/admin-access"


def admin_refusal(testbed: Testbed, namespace: str, pod_name: str) -> str:
    found = wait_for(
        f"a reason naming the {ADMIN_LABEL} label on {pod_name}",
        lambda: [m for m in event_messages(testbed, namespace, pod_name) if ADMIN_LABEL in m],
        timeout=60,
    )
    print(f"\n[security] {pod_name}: {found[0]}")
    return str(found[0])


def assert_still_pending(testbed: Testbed, namespace: str, pod_name: str) -> None:
    obj: dict[str, Any] | None = testbed.get("pod", pod_name, f"--namespace={namespace}")
    assert obj is not None and not obj["spec"].get("nodeName"), f"{pod_name} was bound"


def test_admin_access_template_in_an_unlabeled_namespace_is_refused(
    testbed: Testbed, operator: OperatorProcess, namespace: str
) -> None:
    pool = make_pool(testbed, nodes=1, devices=1)
    testbed.apply(template(namespace, "admin", pool, adminAccess=True))
    entry = [{"name": "dev", "resourceClaimTemplateName": "admin"}]
    testbed.apply(pod(namespace, "via-template", pool, entry))
    assert "does not have the label" in admin_refusal(testbed, namespace, "via-template")
    assert_still_pending(testbed, namespace, "via-template")
    assert testbed.get(f"resourceclaims.{GROUP}", f"--namespace={namespace}") == {
        "apiVersion": "v1", "items": [], "kind": "List", "metadata": {"resourceVersion": ""},
    }  # fmt: skip
    assert_invariants(testbed, [namespace])


def test_admin_access_claim_written_directly_in_an_unlabeled_namespace_is_refused(
    testbed: Testbed, operator: OperatorProcess, namespace: str
) -> None:
    pool = make_pool(testbed, nodes=1, devices=1)
    testbed.apply(claim(namespace, "direct", pool, adminAccess=True))
    entry = [{"name": "dev", "resourceClaimName": "direct"}]
    testbed.apply(pod(namespace, "via-claim", pool, entry))

    def outcome() -> str:
        found = testbed.get(f"resourceclaims.{GROUP}", "direct", f"--namespace={namespace}")
        if ((found or {}).get("status") or {}).get("allocation"):
            return "allocated"
        messages = event_messages(testbed, namespace, "via-claim")
        return "refused" if any(ADMIN_LABEL in m for m in messages) else ""

    result = wait_for("the admin claim refused or allocated", outcome, timeout=60)
    assert result == "refused", "an adminAccess claim was allocated without the namespace label"
    assert_still_pending(testbed, namespace, "via-claim")
    assert_invariants(testbed, [namespace])
