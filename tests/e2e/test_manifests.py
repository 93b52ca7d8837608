"""`kubectl apply -k` of both modes against the real API server, and the operator's RBAC.

Two ways to deploy: `manifests/` (the CRDs and base/, dralloc's own API group) on the plain
testbed, and `manifests/overlays/in-tree` (in-tree mode, resource.k8s.io) on the --dra
testbed, where resource.k8s.io/v1 and its binding check are live. The apply is a server-side
dry run, so the API server validates every object (CRD schemas, the webhook configuration,
the Deployment) without the webhook going live on the shared testbed. The RBAC objects are
then applied for real, and `kubectl auth can-i --as` the operator's ServiceAccount checks
both directions: it may do what the controllers do in that mode, and nothing more (nothing
near Secrets, nothing of the other mode's API group). A copy of each mode's webhook, pointed
at a Service that does not exist, shows which pods the API server would send to it.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import os
import ssl
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from .kube_helpers import REPO_ROOT, JsonObject, Testbed, k8s_minor, unique_name, wait_for
from .operator_fixtures import install_crds

MANIFESTS = REPO_ROOT / "manifests"
NAMESPACE = "dralloc-system"
OPERATOR = "dralloc-operator"
SERVICE_ACCOUNT = f"system:serviceaccount:{NAMESPACE}:{OPERATOR}"
RBAC_KINDS = {
    "Namespace",
    "ServiceAccount",
    "ClusterRole",
    "ClusterRoleBinding",
    "Role",
    "RoleBinding",
}
GROUP = "resource.dralloc.dev"
IN_TREE_GROUP = "resource.k8s.io"

Access = tuple[str, str, str]
"""(verb, resource, namespace or "" for all namespaces / cluster-scoped)."""


def device_access(group: str) -> list[Access]:
    """What the controllers do with the DRA kinds of one API group (either mode)."""
    return [
        # informers of the shared cache (operators/cache): list + watch every input kind
        *[
            (verb, f"{plural}.{group}", "")
            for plural in (
                "deviceclasses",
                "resourceslices",
                "resourceclaims",
                "resourceclaimtemplates",
                "devicetaintrules",
            )
            for verb in ("list", "watch")
        ],
        # claim controller: generate claims from templates, finalizers, delete generated claims
        ("create", f"resourceclaims.{group}", "team-a"),
        ("patch", f"resourceclaims.{group}", "team-a"),
        ("delete", f"resourceclaims.{group}", "team-a"),
        # allocator: allocation and reservedFor (merge patch of the status)
        ("patch", f"resourceclaims.{group}/status", "team-a"),
        # taint controller: rule status
        ("patch", f"devicetaintrules.{group}/status", ""),
    ]


def device_access_denied(group: str) -> list[Access]:
    """Writes to the DRA kinds of one API group that no controller makes."""
    return [
        ("create", f"resourceslices.{group}", ""),
        ("delete", f"deviceclasses.{group}", ""),
        ("update", f"resourceclaimtemplates.{group}", "team-a"),
        ("update", f"resourceclaims.{group}/status", "team-a"),
    ]


def other_group_denied(group: str) -> list[Access]:
    """The other mode's API group: nothing at all."""
    return [
        ("list", f"resourceclaims.{group}", ""),
        ("watch", f"resourceslices.{group}", ""),
        ("create", f"resourceclaims.{group}", "team-a"),
        ("patch", f"resourceclaims.{group}/status", "team-a"),
        ("patch", f"devicetaintrules.{group}/status", ""),
    ]


# By the code that needs it; the same in both modes.
COMMON_ALLOWED: list[Access] = [
    # allocator: DeviceQuotas (resource.dralloc.dev in both modes) and their usage in status
    *[(verb, f"devicequotas.{GROUP}", "") for verb in ("list", "watch")],
    ("patch", f"devicequotas.{GROUP}/status", "team-a"),
    *[
        (verb, resource, "")
        for resource in ("pods", "nodes", "namespaces")
        for verb in ("list", "watch")
    ],
    ("get", "pods", "team-a"),
    # allocator: Workload API PodGroups name gangs (where the API server serves them)
    *[(verb, "podgroups.scheduling.k8s.io", "") for verb in ("list", "watch")],
    ("get", "podgroups.scheduling.k8s.io", "team-a"),
    # allocator: PodDisruptionBudgets weigh preemption victims
    *[(verb, "poddisruptionbudgets.policy", "") for verb in ("list", "watch")],
    # allocator: pod annotations, node affinity, lifting the gate; an update of the pod as
    # read while dralloc's gate is on it (cheaper for the API server), a patch otherwise
    ("patch", "pods", "team-a"),
    ("update", "pods", "team-a"),
    # allocator and taint controller: pod conditions (DisruptionTarget before an eviction);
    # the claim controller: claim statuses, an update while the gate is on
    ("patch", "pods/status", "team-a"),
    ("update", "pods/status", "team-a"),
    # taint controller: evictions
    ("delete", "pods", "team-a"),
    # Events where users look
    ("create", "events", "team-a"),
    # leader election, in the operator's namespace only
    ("get", "leases.coordination.k8s.io", NAMESPACE),
    ("create", "leases.coordination.k8s.io", NAMESPACE),
    ("update", "leases.coordination.k8s.io", NAMESPACE),
    # kopf notices CRDs that appear later
    ("list", "customresourcedefinitions.apiextensions.k8s.io", ""),
    ("watch", "customresourcedefinitions.apiextensions.k8s.io", ""),
]

COMMON_DENIED: list[Access] = [
    ("get", "secrets", NAMESPACE),
    ("list", "secrets", NAMESPACE),
    ("list", "secrets", ""),
    ("watch", "secrets", ""),
    ("get", "configmaps", NAMESPACE),
    ("create", "pods", "team-a"),
    ("create", "pods/eviction", "team-a"),
    ("patch", "nodes", ""),
    # PodGroups are read only; nothing else of the Workload API
    ("create", "podgroups.scheduling.k8s.io", "team-a"),
    ("create", "poddisruptionbudgets.policy", "team-a"),
    ("patch", "podgroups.scheduling.k8s.io/status", "team-a"),
    ("list", "workloads.scheduling.k8s.io", ""),
    ("list", "priorityclasses.scheduling.k8s.io", ""),
    ("create", "leases.coordination.k8s.io", "kube-system"),
    ("create", "mutatingwebhookconfigurations.admissionregistration.k8s.io", ""),
    ("create", "clusterrolebindings.rbac.authorization.k8s.io", ""),
    ("impersonate", "serviceaccounts", ""),
]

# In-tree mode, Kubernetes 1.36+: changing allocation or reservedFor also needs the request's
# verb on resourceclaims/binding, checked cluster-wide; the operator only patches.
BINDING = f"resourceclaims.{IN_TREE_GROUP}/binding"


@dataclasses.dataclass(frozen=True)
class Mode:
    """One way to deploy the operator: what to kustomize, and on which testbed."""

    directory: Path  # a kustomization under manifests/
    testbed: str  # the fixture of the testbed it is checked on
    rbac: str  # the fixture that applies its RBAC there
    allowed: list[Access]
    denied: list[Access]
    components: tuple[str, ...] = ()  # components/ added on top (a kustomization of our own)


MODES = {
    "crd": Mode(
        directory=MANIFESTS,
        testbed="testbed",
        rbac="rbac_applied",
        allowed=[*device_access(GROUP), *COMMON_ALLOWED],
        denied=[
            *COMMON_DENIED,
            *device_access_denied(GROUP),
            *other_group_denied(IN_TREE_GROUP),
            ("patch", BINDING, ""),
        ],
    ),
    "in-tree": Mode(
        directory=MANIFESTS / "overlays" / "in-tree",
        testbed="dra_testbed",
        rbac="in_tree_rbac_applied",
        allowed=[*device_access(IN_TREE_GROUP), ("patch", BINDING, ""), *COMMON_ALLOWED],
        denied=[
            *COMMON_DENIED,
            *device_access_denied(IN_TREE_GROUP),
            *other_group_denied(GROUP),
            ("update", BINDING, ""),
            # status.devices is the drivers' (resourceclaims/driver, per driver name)
            ("patch", f"resourceclaims.{IN_TREE_GROUP}/driver", ""),
        ],
    ),
}
# In-tree mode with gating only in labelled namespaces (components/gate-labelled-namespaces).
LABELLED = dataclasses.replace(MODES["in-tree"], components=("gate-labelled-namespaces",))
# In-tree mode on the cert-manager variant of the base: what the component is for.
IN_TREE_CERT_MANAGER = dataclasses.replace(
    MODES["in-tree"], directory=MANIFESTS / "overlays" / "cert-manager", components=("in-tree",)
)
GATE_LABEL = ("resource.dralloc.dev/allocator", "dralloc")


def render(testbed: Testbed, directory: Path) -> list[dict[str, Any]]:
    result = testbed.kubectl("kustomize", str(directory))
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def render_mode(testbed: Testbed, mode: Mode, scratch: Path) -> list[dict[str, Any]]:
    """The mode's objects; with components, through a kustomization in scratch that adds them
    (kustomize wants relative paths between kustomizations)."""
    if not mode.components:
        return render(testbed, mode.directory)
    scratch.mkdir(parents=True, exist_ok=True)
    components = MANIFESTS / "components"
    kustomization = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": [os.path.relpath(mode.directory, scratch)],
        "components": [os.path.relpath(components / name, scratch) for name in mode.components],
    }
    (scratch / "kustomization.yaml").write_text(yaml.safe_dump(kustomization))
    return render(testbed, scratch)


def container_env(objects: list[dict[str, Any]]) -> dict[str, str | None]:
    deployment = next(o for o in objects if o["kind"] == "Deployment")
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    return {e["name"]: e.get("value") for e in container["env"]}


GATE_WEBHOOK = "scheduling-gate.resource.dralloc.dev"
EXTENDED_WEBHOOK = "extended-resources.resource.dralloc.dev"


def the_webhook(objects: list[dict[str, Any]], name: str = GATE_WEBHOOK) -> dict[str, Any]:
    configuration = next(o for o in objects if o["kind"] == "MutatingWebhookConfiguration")
    (webhook,) = [w for w in configuration["webhooks"] if w["name"] == name]
    return dict(webhook)


def apply_rbac(testbed: Testbed, mode: Mode) -> None:
    objects = [o for o in render(testbed, mode.directory) if o["kind"] in RBAC_KINDS]
    testbed.apply(*objects)


@pytest.fixture(scope="module")
def rbac_applied(testbed: Testbed) -> None:
    install_crds(testbed)  # the CRD mode's cluster serves its kinds
    apply_rbac(testbed, MODES["crd"])


@pytest.fixture(scope="module")
def in_tree_rbac_applied(dra_testbed: Testbed) -> None:
    # No CRDs here: in-tree mode needs none. can_i() names the API group itself, so it also
    # answers for kinds the server does not serve (resource.dralloc.dev; DeviceTaintRules,
    # which 1.36 serves only in a beta version that the testbed leaves off).
    apply_rbac(dra_testbed, MODES["in-tree"])


@pytest.fixture
def deployed(request: pytest.FixtureRequest) -> tuple[Mode, Testbed]:
    """Indirectly parametrized with a mode name: that mode's testbed, with its RBAC applied."""
    mode = MODES[request.param]
    request.getfixturevalue(mode.rbac)
    testbed: Testbed = request.getfixturevalue(mode.testbed)
    return mode, testbed


def mode_accesses(kind: str) -> list[Any]:
    """(mode, verb, resource, namespace) for every mode's allowed or denied list."""
    return [
        pytest.param(name, *access, id=f"{name}-{'-'.join(filter(None, access))}")
        for name, mode in MODES.items()
        for access in getattr(mode, kind)
    ]


def test_kustomize_renders_the_operator_and_the_crds(testbed: Testbed) -> None:
    kinds = sorted(o["kind"] for o in render(testbed, MANIFESTS))
    assert kinds.count("CustomResourceDefinition") == 6
    for kind in ("Deployment", "MutatingWebhookConfiguration", "ClusterRole", "Role", "Service"):
        assert kind in kinds
    # The selector webhooks of dralloc's three kinds with CEL selectors.
    (selectors,) = [
        o for o in render(testbed, MANIFESTS) if o["kind"] == "ValidatingWebhookConfiguration"
    ]
    rules = [rule for hook in selectors["webhooks"] for rule in hook["rules"]]
    assert sorted(r for rule in rules for r in rule["resources"]) == [
        "deviceclasses",
        "resourceclaims",
        "resourceclaimtemplates",
    ]


@pytest.mark.parametrize("deployed", list(MODES), indirect=True)
def test_server_side_dry_run_apply_succeeds(deployed: tuple[Mode, Testbed]) -> None:
    mode, testbed = deployed
    # The namespace exists (RBAC applied), so namespaced objects are validated for real.
    result = testbed.kubectl(
        "apply", "-k", str(mode.directory), "--server-side", "--dry-run=server",
        "--field-manager=dralloc-e2e", "--force-conflicts", check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    applied = result.stdout
    assert "deployment.apps/dralloc-operator serverside-applied (server dry run)" in applied
    assert "mutatingwebhookconfiguration.admissionregistration.k8s.io/dralloc" in applied
    # Dry run: the webhook must not have gone live on the shared testbed.
    assert testbed.get("mutatingwebhookconfiguration", "dralloc") is None


def test_cert_manager_overlay_renders(testbed: Testbed) -> None:
    objects = render(testbed, MANIFESTS / "overlays" / "cert-manager")
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        webhook = next(o for o in objects if o["kind"] == kind)
        assert webhook["metadata"]["annotations"]["cert-manager.io/inject-ca-from"], kind
    deployment = next(o for o in objects if o["kind"] == "Deployment")
    env = {e["name"] for e in deployment["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert "DRALLOC_WEBHOOK_CERTFILE" in env


def test_in_tree_overlay_renders(dra_testbed: Testbed, tmp_path: Path) -> None:
    objects = render_mode(dra_testbed, MODES["in-tree"], tmp_path)
    kinds = [o["kind"] for o in objects]
    crds = [o["metadata"]["name"] for o in objects if o["kind"] == "CustomResourceDefinition"]
    assert crds == [f"devicequotas.{GROUP}"]  # quotas are dralloc's kind in both modes
    for kind in ("Deployment", "MutatingWebhookConfiguration", "ValidatingAdmissionPolicy"):
        assert kind in kinds
    # In-tree the API server validates selectors itself.
    assert "ValidatingWebhookConfiguration" not in kinds
    env = container_env(objects)
    assert env["DRALLOC_API_GROUP"] == IN_TREE_GROUP
    assert "DRALLOC_GATE_NAMESPACE_LABEL" not in env  # every namespace unless asked
    # The base's ClusterRole is replaced, not added to: no rule of the CRD mode is left.
    role = next(
        o for o in objects if o["kind"] == "ClusterRole" and o["metadata"]["name"] == OPERATOR
    )
    groups = {group for rule in role["rules"] for group in rule["apiGroups"]}
    assert IN_TREE_GROUP in groups, groups
    ours = {r for rule in role["rules"] if GROUP in rule["apiGroups"] for r in rule["resources"]}
    assert ours == {"devicequotas", "devicequotas/status"}, ours
    (condition,) = the_webhook(objects)["matchConditions"]
    assert "spec.resourceClaims" in condition["expression"]

    labelled = render_mode(dra_testbed, LABELLED, tmp_path / "labelled")
    # The operator's setting and the webhook's selector name the same label.
    assert container_env(labelled)["DRALLOC_GATE_NAMESPACE_LABEL"] == "=".join(GATE_LABEL)
    selector = the_webhook(labelled)["namespaceSelector"]
    assert selector["matchLabels"] == dict([GATE_LABEL])
    assert selector["matchExpressions"]  # the base's exclusions stay
    assert container_env(labelled)["DRALLOC_API_GROUP"] == IN_TREE_GROUP

    with_cert_manager = render_mode(dra_testbed, IN_TREE_CERT_MANAGER, tmp_path / "cm")
    assert container_env(with_cert_manager)["DRALLOC_API_GROUP"] == IN_TREE_GROUP
    webhook = next(o for o in with_cert_manager if o["kind"] == "MutatingWebhookConfiguration")
    assert webhook["metadata"]["annotations"]["cert-manager.io/inject-ca-from"]
    assert "Job" not in [o["kind"] for o in with_cert_manager]


def can_i(testbed: Testbed, verb: str, resource: str, namespace: str) -> bool:
    """What `kubectl auth can-i --as` the operator's ServiceAccount answers, with the API group
    spelled out: can-i itself sends a kind the server does not serve (the other mode's CRDs,
    DeviceTaintRules on 1.36) as a core resource named "plural.group", which is always "no"."""
    resource, _, subresource = resource.partition("/")
    plural, _, group = resource.partition(".")
    review = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SelfSubjectAccessReview",
        "spec": {
            "resourceAttributes": {
                "verb": verb,
                "group": group,
                "resource": plural,
                "subresource": subresource,
                "namespace": namespace,
            }
        },
    }
    result = testbed.kubectl(
        "create", "--validate=false", "-f", "-", "-o", "json", f"--as={SERVICE_ACCOUNT}",
        input=json.dumps(review), check=False,
    )  # fmt: skip
    if result.returncode != 0:
        raise AssertionError(f"access review {verb} {resource}: {result.stderr.strip()}")
    allowed: bool = json.loads(result.stdout)["status"]["allowed"]
    return allowed


@pytest.mark.parametrize(
    ("deployed", "verb", "resource", "namespace"), mode_accesses("allowed"), indirect=["deployed"]
)
def test_service_account_may_do_what_the_controllers_do(
    deployed: tuple[Mode, Testbed], verb: str, resource: str, namespace: str
) -> None:
    _, testbed = deployed
    assert can_i(testbed, verb, resource, namespace), f"{verb} {resource} {namespace or '(all)'}"


@pytest.mark.parametrize(
    ("deployed", "verb", "resource", "namespace"), mode_accesses("denied"), indirect=["deployed"]
)
def test_service_account_may_not_do_more(
    deployed: tuple[Mode, Testbed], verb: str, resource: str, namespace: str
) -> None:
    _, testbed = deployed
    assert not can_i(testbed, verb, resource, namespace), (
        f"{verb} {resource} {namespace or '(all)'}"
    )


def merge_patch_as(
    testbed: Testbed, user: str, path: str, body: JsonObject, scratch: Path
) -> tuple[int, str]:
    """PATCH (merge) path as user, impersonated by the admin: the one request the operator
    makes (kubectl patch would first GET, which the operator's role does not allow)."""
    config = json.loads(testbed.kubeconfig.read_text())  # the testbed writes it as JSON
    cluster, user_entry = config["clusters"][0]["cluster"], config["users"][0]["user"]
    scratch.mkdir(parents=True, exist_ok=True)
    files = {}
    for name, key in (
        ("ca.crt", cluster["certificate-authority-data"]),
        ("admin.crt", user_entry["client-certificate-data"]),
        ("admin.key", user_entry["client-key-data"]),
    ):
        files[name] = scratch / name
        files[name].write_bytes(base64.b64decode(key))
    context = ssl.create_default_context(cafile=str(files["ca.crt"]))
    context.load_cert_chain(str(files["admin.crt"]), str(files["admin.key"]))
    request = urllib.request.Request(
        cluster["server"] + path,
        data=json.dumps(body).encode(),
        method="PATCH",
        headers={"Content-Type": "application/merge-patch+json", "Impersonate-User": user},
    )
    try:
        with urllib.request.urlopen(request, timeout=30, context=context) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def test_in_tree_account_writes_an_allocation_that_needs_the_binding_rule(
    dra_testbed: Testbed, in_tree_rbac_applied: None, tmp_path: Path
) -> None:
    """A real write, not only can-i: the API server's own check of resourceclaims/binding lets
    the operator's merge patch through, and refuses it to a user with resourceclaims/status
    alone (so the rule is what makes the write work)."""
    tb = dra_testbed
    minor = k8s_minor(tb.bin)
    if minor < 36:
        pytest.skip(
            f"Kubernetes 1.{minor} has no resourceclaims/binding check (the "
            "DRAResourceClaimGranularStatusAuthorization gate is on by default from 1.36)"
        )
    namespace = unique_name("e2e-binding")
    no_binding = f"e2e-{namespace}"  # a user name, impersonated; bound to status patch only
    tb.kubectl("create", "namespace", namespace)
    request = {"name": "gpu", "exactly": {"deviceClassName": "gpu.e2e.dralloc.test"}}
    claims = [
        {
            "apiVersion": f"{IN_TREE_GROUP}/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"devices": {"requests": [request]}},
        }
        for name in ("by-operator", "by-other")
    ]
    status_only = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": no_binding},
        "rules": [
            {
                "apiGroups": [IN_TREE_GROUP],
                "resources": ["resourceclaims/status"],
                "verbs": ["patch"],
            }
        ],
    }
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": no_binding},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                    "name": no_binding},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User",
                      "name": no_binding}],
    }  # fmt: skip
    tb.apply(*claims, status_only, binding)
    allocation = {
        "status": {
            "allocation": {
                "devices": {
                    "results": [
                        {
                            "request": "gpu",
                            "driver": "gpu.e2e.dralloc.test",
                            "pool": "kwok-node-0",
                            "device": "gpu-0",
                        }
                    ]
                }
            },
            "reservedFor": [
                {"resource": "pods", "name": "p", "uid": "00000000-0000-0000-0000-000000000001"}
            ],
        }
    }

    def patch_as(user: str, claim: str) -> tuple[int, str]:
        path = f"/apis/{IN_TREE_GROUP}/v1/namespaces/{namespace}/resourceclaims/{claim}/status"
        return merge_patch_as(tb, user, path, allocation, tmp_path)

    try:
        status, answer = patch_as(SERVICE_ACCOUNT, "by-operator")
        assert status == 200, answer
        stored = tb.get("resourceclaim", "by-operator", "-n", namespace)
        assert stored is not None and stored["status"]["allocation"]["devices"]["results"]
        refused = wait_for(
            "the status-only user to be refused for want of resourceclaims/binding",
            lambda: _refused_for_binding(patch_as(no_binding, "by-other")),
            timeout=30,
        )
        assert 'resource="resourceclaims/binding"' in refused
    finally:
        tb.kubectl("delete", "namespace", namespace, "--wait=false", check=False)
        tb.kubectl("delete", "clusterrolebinding,clusterrole", no_binding, check=False)


def _refused_for_binding(result: tuple[int, str]) -> str | None:
    status, answer = result
    assert status != 200, "patched the allocation without resourceclaims/binding"
    message: str = json.loads(answer).get("message", "")
    # Until the new role is in the authorizer's cache, the refusal is for the status itself.
    return message if "resourceclaims/binding" in message else None


def plain_pod(name: str, namespace: str) -> JsonObject:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"containers": [{"name": "main", "image": "registry.invalid/none"}]},
    }


def pod_with_claims_annotation(name: str, namespace: str) -> JsonObject:
    pod = plain_pod(name, namespace)
    claims = [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}]
    pod["metadata"]["annotations"] = {"resource.dralloc.dev/claims": json.dumps(claims)}
    return pod


def pod_with_spec_claims(name: str, namespace: str) -> JsonObject:
    pod = plain_pod(name, namespace)
    pod["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}]
    return pod


def pod_with_extended_resource(name: str, namespace: str) -> JsonObject:
    pod = plain_pod(name, namespace)
    pod["spec"]["containers"][0]["resources"] = {"limits": {"example.com/gpu": "1"}}
    return pod


# Per mode: the pod that asks for devices the mode's way, and one that asks the other way.
ASKING: dict[str, tuple[Callable[[str, str], JsonObject], Callable[[str, str], JsonObject]]] = {
    "crd": (pod_with_claims_annotation, pod_with_spec_claims),
    "in-tree": (pod_with_spec_claims, pod_with_claims_annotation),
    "in-tree-labelled": (pod_with_spec_claims, pod_with_claims_annotation),
    # The in-tree mode's second webhook: pods without claims with a limit with a domain.
    "in-tree-extended": (pod_with_extended_resource, pod_with_spec_claims),
}


@pytest.mark.parametrize("name", list(ASKING))
def test_webhook_is_called_only_for_pods_that_ask_for_devices(
    request: pytest.FixtureRequest, tmp_path: Path, name: str
) -> None:
    """The mode's webhook, renamed and pointed at a Service that does not exist, on the real
    API server: with failurePolicy Fail, a pod it is called for is refused, any other pod is
    admitted (server-side dry runs; the copy only applies to this test's namespaces)."""
    mode = LABELLED if name == "in-tree-labelled" else MODES[name.removesuffix("-extended")]
    tb: Testbed = request.getfixturevalue(mode.testbed)
    asking, other_way = ASKING[name]
    which = EXTENDED_WEBHOOK if name.endswith("-extended") else GATE_WEBHOOK
    webhook = the_webhook(render_mode(tb, mode, tmp_path), which)
    webhook["failurePolicy"] = "Fail"  # the extended one fails open: a call shows as a refusal
    gated = unique_name("e2e-gate")
    outside = f"{gated}-unlabelled"
    namespaces = [gated, outside] if mode.components else [gated]
    for namespace in namespaces:
        tb.kubectl("create", "namespace", namespace)
    if mode.components:
        tb.kubectl("label", "namespace", gated, "=".join(GATE_LABEL))
    configuration = f"{gated}.dralloc.test"
    webhook["name"] = f"gate.{configuration}"
    webhook["clientConfig"] = {"service": {"name": "absent", "namespace": gated, "port": 443}}
    webhook["namespaceSelector"].setdefault("matchExpressions", []).append(
        {"key": "kubernetes.io/metadata.name", "operator": "In", "values": namespaces}
    )
    tb.apply(
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingWebhookConfiguration",
            "metadata": {"name": configuration},
            "webhooks": [webhook],
        }
    )

    def create(pod: JsonObject) -> subprocess.CompletedProcess[str]:
        return tb.kubectl("create", "--dry-run=server", "-f", "-", input=json.dumps(pod),
                          check=False)  # fmt: skip

    def refused(pod: JsonObject) -> str | None:
        result = create(pod)
        return result.stderr if result.returncode != 0 else None

    try:
        # Refused once the API server has picked the configuration up.
        message = wait_for(
            "the webhook to be called for a pod that asks for devices",
            lambda: refused(asking("asks", gated)),
            timeout=30,
        )
        assert f"gate.{configuration}" in message, message
        for pod in (plain_pod("plain", gated), other_way("other-way", gated)):
            result = create(pod)
            assert result.returncode == 0, (pod["metadata"]["name"], result.stderr)
        if mode.components:  # gating only where the label is
            result = create(asking("asks", outside))
            assert result.returncode == 0, result.stderr
    finally:
        tb.kubectl("delete", "mutatingwebhookconfiguration", configuration, check=False)
        for namespace in namespaces:
            tb.kubectl("delete", "namespace", namespace, "--wait=false", check=False)


CERT_ACCOUNT = f"system:serviceaccount:{NAMESPACE}:dralloc-webhook-cert"


@pytest.mark.parametrize(
    ("verb", "resource", "name", "expected"),
    [
        ("create", "secrets", "", True),
        ("get", "secrets", "dralloc-webhook-tls", True),
        ("update", "secrets", "dralloc-webhook-tls", True),
        ("get", "secrets", "someone-elses", False),
        ("list", "secrets", "", False),
        ("patch", "mutatingwebhookconfigurations.admissionregistration.k8s.io", "dralloc", True),
        ("patch", "mutatingwebhookconfigurations.admissionregistration.k8s.io", "other", False),
        ("patch", "validatingwebhookconfigurations.admissionregistration.k8s.io", "dralloc", True),
        ("patch", "validatingwebhookconfigurations.admissionregistration.k8s.io", "other", False),
        ("list", "pods", "", False),
    ],
)
def test_certificate_job_account_is_confined(
    testbed: Testbed, rbac_applied: None, verb: str, resource: str, name: str, expected: bool
) -> None:
    target = f"{resource}/{name}" if name else resource
    result = testbed.kubectl(
        "auth", "can-i", verb, target, "-n", NAMESPACE, f"--as={CERT_ACCOUNT}", check=False
    )
    assert result.stdout.strip() == ("yes" if expected else "no"), (verb, target, result.stderr)


def test_webhook_cert_command_creates_the_secret_and_the_ca_bundle(
    testbed: Testbed, namespace: str
) -> None:
    """`dralloc webhook-cert` (the Job's command) against the real API server."""
    configuration = f"{namespace}.dralloc.test"
    testbed.apply(
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingWebhookConfiguration",
            "metadata": {"name": configuration},
            "webhooks": [
                {
                    "name": f"noop.{configuration}",
                    "admissionReviewVersions": ["v1"],
                    "sideEffects": "None",
                    "failurePolicy": "Ignore",
                    "clientConfig": {
                        "service": {"name": "dralloc-webhook", "namespace": namespace}
                    },
                    "rules": [
                        {
                            "apiGroups": ["example.invalid"],
                            "apiVersions": ["v1"],
                            "operations": ["CREATE"],
                            "resources": ["nothing"],
                        }
                    ],
                }
            ],
        }
    )
    args = [
        sys.executable, "-m", "operators.cli", "webhook-cert", f"--namespace={namespace}",
        f"--webhook-configuration={configuration}", f"--kubeconfig={testbed.kubeconfig}",
    ]  # fmt: skip
    try:
        first = subprocess.run(args, capture_output=True, text=True, timeout=60, check=False)
        assert first.returncode == 0, first.stderr
        assert "created" in first.stdout and "updated in 1 webhook" in first.stdout
        secret = testbed.get("secret", "dralloc-webhook-tls", "-n", namespace)
        webhook = testbed.get("mutatingwebhookconfiguration", configuration)
        assert secret is not None and webhook is not None
        assert secret["type"] == "kubernetes.io/tls"
        ca_bundle = webhook["webhooks"][0]["clientConfig"]["caBundle"]
        assert ca_bundle == secret["data"]["ca.crt"]
        second = subprocess.run(args, capture_output=True, text=True, timeout=60, check=False)
        assert second.returncode == 0, second.stderr
        assert "kept" in second.stdout and "updated in 0 webhook" in second.stdout
    finally:
        testbed.kubectl("delete", "mutatingwebhookconfiguration", configuration, check=False)
