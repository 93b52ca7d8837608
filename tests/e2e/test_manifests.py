"""`kubectl apply -k manifests/` against the real API server, and the operator's RBAC.

The apply is a server-side dry run, so the API server validates every object (CRD schemas,
the webhook configuration, the Deployment) without the webhook going live on the shared
testbed. The RBAC objects are then applied for real, and `kubectl auth can-i --as` the
operator's ServiceAccount checks both directions: it may do what the controllers do, and
nothing near Secrets.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from .kube_helpers import REPO_ROOT, Testbed
from .operator_fixtures import install_crds

MANIFESTS = REPO_ROOT / "manifests"
NAMESPACE = "dralloc-system"
SERVICE_ACCOUNT = f"system:serviceaccount:{NAMESPACE}:dralloc-operator"
RBAC_KINDS = {
    "Namespace",
    "ServiceAccount",
    "ClusterRole",
    "ClusterRoleBinding",
    "Role",
    "RoleBinding",
}
GROUP = "resource.dralloc.dev"

# (verb, resource, namespace or "" for all namespaces / cluster-scoped), by the code that needs it.
ALLOWED = [
    # informers of the shared cache (operators/cache): list + watch every input kind
    *[
        (verb, f"{plural}.{GROUP}", "")
        for plural in (
            "deviceclasses",
            "resourceslices",
            "resourceclaims",
            "resourceclaimtemplates",
            "devicetaintrules",
        )
        for verb in ("list", "watch")
    ],
    *[
        (verb, resource, "")
        for resource in ("pods", "nodes", "namespaces")
        for verb in ("list", "watch")
    ],
    # claim controller: generate claims from templates, finalizers, delete generated claims
    ("create", f"resourceclaims.{GROUP}", "team-a"),
    ("patch", f"resourceclaims.{GROUP}", "team-a"),
    ("delete", f"resourceclaims.{GROUP}", "team-a"),
    ("patch", f"resourceclaims.{GROUP}/status", "team-a"),
    ("get", "pods", "team-a"),
    # allocator: pod annotations, node affinity, lifting the gate
    ("patch", "pods", "team-a"),
    # allocator and taint controller: pod conditions (DisruptionTarget before an eviction)
    ("patch", "pods/status", "team-a"),
    # taint controller: evictions and rule status
    ("delete", "pods", "team-a"),
    ("patch", f"devicetaintrules.{GROUP}/status", ""),
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

DENIED = [
    ("get", "secrets", NAMESPACE),
    ("list", "secrets", NAMESPACE),
    ("list", "secrets", ""),
    ("watch", "secrets", ""),
    ("get", "configmaps", NAMESPACE),
    ("create", "pods", "team-a"),
    ("update", "pods", "team-a"),
    ("update", "pods/status", "team-a"),
    ("create", "pods/eviction", "team-a"),
    ("patch", "nodes", ""),
    ("create", f"resourceslices.{GROUP}", ""),
    ("delete", f"deviceclasses.{GROUP}", ""),
    ("update", f"resourceclaimtemplates.{GROUP}", "team-a"),
    ("update", f"resourceclaims.{GROUP}/status", "team-a"),
    ("create", "leases.coordination.k8s.io", "kube-system"),
    ("create", "mutatingwebhookconfigurations.admissionregistration.k8s.io", ""),
    ("create", "clusterrolebindings.rbac.authorization.k8s.io", ""),
    ("impersonate", "serviceaccounts", ""),
]


def render(testbed: Testbed, directory: Path) -> list[dict[str, Any]]:
    result = testbed.kubectl("kustomize", str(directory))
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


@pytest.fixture(scope="module")
def rbac_applied(testbed: Testbed) -> None:
    install_crds(testbed)  # can-i only resolves resources the server knows
    objects = [o for o in render(testbed, MANIFESTS) if o["kind"] in RBAC_KINDS]
    testbed.apply(*objects)


def test_kustomize_renders_the_operator_and_the_crds(testbed: Testbed) -> None:
    kinds = sorted(o["kind"] for o in render(testbed, MANIFESTS))
    assert kinds.count("CustomResourceDefinition") == 5
    for kind in ("Deployment", "MutatingWebhookConfiguration", "ClusterRole", "Role", "Service"):
        assert kind in kinds


def test_server_side_dry_run_apply_succeeds(testbed: Testbed, rbac_applied: None) -> None:
    # The namespace exists (rbac_applied), so namespaced objects are validated for real.
    result = testbed.kubectl(
        "apply", "-k", str(MANIFESTS), "--server-side", "--dry-run=server",
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
    webhook = next(o for o in objects if o["kind"] == "MutatingWebhookConfiguration")
    assert webhook["metadata"]["annotations"]["cert-manager.io/inject-ca-from"]
    deployment = next(o for o in objects if o["kind"] == "Deployment")
    env = {e["name"] for e in deployment["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert "DRALLOC_WEBHOOK_CERTFILE" in env


def can_i(testbed: Testbed, verb: str, resource: str, namespace: str) -> bool:
    scope = ["-n", namespace] if namespace else ["--all-namespaces"]
    resource, _, subresource = resource.partition("/")
    if subresource:
        scope.append(f"--subresource={subresource}")
    result = testbed.kubectl(
        "auth", "can-i", verb, resource, *scope, f"--as={SERVICE_ACCOUNT}", check=False
    )
    answer = result.stdout.strip()
    if answer not in ("yes", "no"):
        raise AssertionError(f"kubectl auth can-i {verb} {resource}: {result.stderr.strip()}")
    return answer == "yes"


@pytest.mark.parametrize(("verb", "resource", "namespace"), ALLOWED)
def test_service_account_may_do_what_the_controllers_do(
    testbed: Testbed, rbac_applied: None, verb: str, resource: str, namespace: str
) -> None:
    assert can_i(testbed, verb, resource, namespace), f"{verb} {resource} {namespace or '(all)'}"


@pytest.mark.parametrize(("verb", "resource", "namespace"), DENIED)
def test_service_account_may_not_do_more(
    testbed: Testbed, rbac_applied: None, verb: str, resource: str, namespace: str
) -> None:
    assert not can_i(testbed, verb, resource, namespace), (
        f"{verb} {resource} {namespace or '(all)'}"
    )


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
