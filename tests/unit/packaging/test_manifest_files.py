"""Static checks of manifests/base: the security posture and the wiring between objects.

These run without a cluster. What the API server thinks of the manifests (schema, RBAC
through impersonation) is checked in tests/e2e/test_manifests.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[3]
BASE = REPO / "manifests" / "base"
NAMESPACE = "dralloc-system"
OPERATOR = "dralloc-operator"
CERT_JOB = "dralloc-webhook-cert"


def load_dir(directory: Path) -> list[dict[str, Any]]:
    kustomization = yaml.safe_load((directory / "kustomization.yaml").read_text())
    objects: list[dict[str, Any]] = []
    for name in kustomization["resources"]:
        path = directory / name
        if path.is_dir():
            continue
        objects.extend(doc for doc in yaml.safe_load_all(path.read_text()) if doc)
    return objects


@pytest.fixture(scope="module")
def base() -> list[dict[str, Any]]:
    return load_dir(BASE)


def only(objects: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    found = [
        o for o in objects if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)
    ]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


def test_every_base_file_is_listed_in_the_kustomization() -> None:
    listed = set(yaml.safe_load((BASE / "kustomization.yaml").read_text())["resources"])
    on_disk = {p.name for p in BASE.glob("*.yaml")} - {"kustomization.yaml"}
    assert on_disk == listed


def test_namespaced_objects_live_in_the_operator_namespace(base: list[dict[str, Any]]) -> None:
    cluster_scoped = {
        "Namespace",
        "ClusterRole",
        "ClusterRoleBinding",
        "MutatingWebhookConfiguration",
        "ValidatingWebhookConfiguration",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
    }
    for obj in base:
        if obj["kind"] not in cluster_scoped:
            assert obj["metadata"].get("namespace") == NAMESPACE, obj["metadata"]["name"]


def test_deployment_is_hardened(base: list[dict[str, Any]]) -> None:
    deployment = only(base, "Deployment")
    assert deployment["spec"]["replicas"] == 2
    pod = deployment["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == OPERATOR
    only(base, "ServiceAccount", OPERATOR)
    assert_hardened(pod)


def assert_hardened(pod: dict[str, Any]) -> None:
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"
    for container in pod["containers"]:
        security = container["securityContext"]
        assert security["allowPrivilegeEscalation"] is False
        assert security["readOnlyRootFilesystem"] is True
        assert security["capabilities"]["drop"] == ["ALL"]
        assert "add" not in security["capabilities"]
        assert security.get("privileged", False) is False
        assert container["resources"]["requests"]["cpu"]
        assert container["resources"]["limits"]["memory"]
        if pod.get("restartPolicy", "Always") == "Always":
            assert container["livenessProbe"] and container["readinessProbe"]


def test_probe_and_service_ports_point_at_what_the_operator_serves(
    base: list[dict[str, Any]],
) -> None:
    container = only(base, "Deployment")["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e.get("value") for e in container["env"]}
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports["probes"] == int(env["DRALLOC_PROBE_PORT"])
    assert ports["metrics"] == int(env["DRALLOC_METRICS_PORT"])
    assert ports["webhook"] == int(env["DRALLOC_WEBHOOK_PORT"])
    for probe in ("livenessProbe", "readinessProbe"):
        assert container[probe]["httpGet"]["port"] in ports
    pod_labels = only(base, "Deployment")["spec"]["template"]["metadata"]["labels"]
    for service in (o for o in base if o["kind"] == "Service"):
        selector = service["spec"]["selector"]
        assert selector.items() <= pod_labels.items(), service["metadata"]["name"]
        for port in service["spec"]["ports"]:
            assert port["targetPort"] in ports, port


def test_selector_webhooks_call_the_service_at_their_handlers_paths(
    base: list[dict[str, Any]],
) -> None:
    from operators.webhooks import SELECTOR_WEBHOOK_IDS

    configuration = only(base, "ValidatingWebhookConfiguration")
    for webhook in configuration["webhooks"]:
        (rule,) = webhook["rules"]
        (plural,) = rule["resources"]
        service_ref = webhook["clientConfig"]["service"]
        assert service_ref["path"] == "/" + SELECTOR_WEBHOOK_IDS[plural]  # kopf's handler id
        assert (
            only(base, "Service", service_ref["name"])["metadata"]["namespace"]
            == (service_ref["namespace"])
        )
        assert rule["apiGroups"] == ["resource.dralloc.dev"]
        assert webhook["failurePolicy"] == "Fail" and webhook["sideEffects"] == "None"
    assert sorted(SELECTOR_WEBHOOK_IDS) == sorted(
        r for w in configuration["webhooks"] for r in w["rules"][0]["resources"]
    )


def test_webhook_calls_the_service_and_only_for_opted_in_pods(base: list[dict[str, Any]]) -> None:
    configuration = only(base, "MutatingWebhookConfiguration")
    container = only(base, "Deployment")["spec"]["template"]["spec"]["containers"][0]
    host = next(e["value"] for e in container["env"] if e["name"] == "DRALLOC_WEBHOOK_HOST")
    for webhook in configuration["webhooks"]:
        service_ref = webhook["clientConfig"]["service"]
        service = only(base, "Service", service_ref["name"])
        assert service["metadata"]["namespace"] == service_ref["namespace"]
        assert service_ref["port"] in [p["port"] for p in service["spec"]["ports"]]
        # The generated certificate is issued for the name the API server dials.
        assert host == f"{service_ref['name']}.{service_ref['namespace']}.svc"
        assert webhook["rules"][0]["resources"] == ["pods"]
        assert webhook["sideEffects"] == "None"
        conditions = " ".join(c["expression"] for c in webhook.get("matchConditions", []))
        assert "resource.dralloc.dev/claims" in conditions
        excluded = webhook["namespaceSelector"]["matchExpressions"][0]
        assert excluded["operator"] == "NotIn"
        assert {"kube-system", NAMESPACE} <= set(excluded["values"])


def test_roles_have_no_wildcards_or_escalation(base: list[dict[str, Any]]) -> None:
    for role in (o for o in base if o["kind"] in ("ClusterRole", "Role")):
        for rule in role["rules"]:
            for field in ("apiGroups", "resources", "verbs"):
                assert "*" not in rule[field], f"{role['metadata']['name']}: wildcard {field}"
            assert not {"escalate", "bind", "impersonate"} & set(rule["verbs"])


def bound_rules(base: list[dict[str, Any]], account: str) -> list[dict[str, Any]]:
    roles = {(o["kind"], o["metadata"]["name"]): o for o in base if o["kind"].endswith("Role")}
    rules: list[dict[str, Any]] = []
    for binding in (o for o in base if o["kind"].endswith("RoleBinding")):
        if any(s["name"] == account for s in binding["subjects"]):
            ref = binding["roleRef"]
            rules.extend(roles[(ref["kind"], ref["name"])]["rules"])
    return rules


def test_operator_account_has_no_secrets_or_webhook_configurations(
    base: list[dict[str, Any]],
) -> None:
    rules = bound_rules(base, OPERATOR)
    assert rules
    resources = {r for rule in rules for r in rule["resources"]}
    assert not {"secrets", "configmaps", "mutatingwebhookconfigurations"} & resources


def test_cert_job_account_touches_one_secret_and_one_webhook(base: list[dict[str, Any]]) -> None:
    job = only(base, "Job", CERT_JOB)
    pod = job["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == CERT_JOB
    assert_hardened(pod)
    args = dict(a.removeprefix("--").split("=", 1) for a in pod["containers"][0]["command"][2:])
    deployment = only(base, "Deployment")["spec"]["template"]["spec"]
    mounted = next(v["secret"]["secretName"] for v in deployment["volumes"] if "secret" in v)
    assert args["secret"] == mounted
    assert (
        args["webhook-configuration"]
        == only(base, "MutatingWebhookConfiguration")["metadata"]["name"]
    )
    for rule in bound_rules(base, CERT_JOB):
        if "create" in rule["verbs"]:
            assert rule["verbs"] == ["create"] and rule["resources"] == ["secrets"]
        else:
            assert rule["resourceNames"] in ([args["secret"]], [args["webhook-configuration"]])


def test_cert_manager_overlay_writes_the_mounted_secret(base: list[dict[str, Any]]) -> None:
    overlay = REPO / "manifests" / "overlays" / "cert-manager"
    certificate = next(
        doc
        for doc in yaml.safe_load_all((overlay / "certificate.yaml").read_text())
        if doc["kind"] == "Certificate"
    )
    deployment = only(base, "Deployment")["spec"]["template"]["spec"]
    mounted = next(v["secret"]["secretName"] for v in deployment["volumes"] if "secret" in v)
    assert certificate["spec"]["secretName"] == mounted
    injected = list(yaml.safe_load_all((overlay / "webhook-inject-ca.yaml").read_text()))
    assert sorted(doc["kind"] for doc in injected) == [
        "MutatingWebhookConfiguration",
        "ValidatingWebhookConfiguration",
    ]
    for inject in injected:
        ref = inject["metadata"]["annotations"]["cert-manager.io/inject-ca-from"]
        assert ref == f"{certificate['metadata']['namespace']}/{certificate['metadata']['name']}"
    assert f"dralloc-webhook.{NAMESPACE}.svc" in certificate["spec"]["dnsNames"]
    deleted = [
        doc["metadata"]["name"]
        for doc in yaml.safe_load_all((overlay / "without-webhook-cert-job.yaml").read_text())
    ]
    assert set(deleted) == {CERT_JOB}


KUSTOMIZE_DIRS = sorted(
    path.parent
    for pattern in ("overlays/*/kustomization.yaml", "components/*/kustomization.yaml")
    for path in (REPO / "manifests").glob(pattern)
)


@pytest.mark.parametrize(
    "directory", KUSTOMIZE_DIRS, ids=lambda path: f"{path.parent.name}/{path.name}"
)
def test_every_overlay_and_component_file_is_used(directory: Path) -> None:
    kustomization = yaml.safe_load((directory / "kustomization.yaml").read_text())
    named = set(kustomization.get("resources", []))
    named |= {patch["path"] for patch in kustomization.get("patches", []) if "path" in patch}
    on_disk = {p.name for p in directory.glob("*.yaml")} - {"kustomization.yaml"}
    assert on_disk <= named, on_disk - named


def flat_rules(rules: list[dict[str, Any]], rename: dict[str, str]) -> set[tuple[str, str, str]]:
    return {
        (rename.get(group, group), resource, verb)
        for rule in rules
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


def test_in_tree_role_is_the_base_role_on_the_in_tree_group(base: list[dict[str, Any]]) -> None:
    """components/in-tree replaces the operator's ClusterRole: it must keep every grant of the
    base (on resource.k8s.io instead of resource.dralloc.dev, but DeviceQuotas) and add only the binding check
    of Kubernetes 1.36+, so that a rule added to the base is not forgotten here."""
    path = REPO / "manifests" / "components" / "in-tree" / "clusterrole.yaml"
    in_tree = yaml.safe_load(path.read_text())
    assert in_tree["metadata"]["name"] == only(base, "ClusterRole", OPERATOR)["metadata"]["name"]
    for rule in in_tree["rules"]:
        for field in ("apiGroups", "resources", "verbs"):
            assert "*" not in rule[field]
        assert not {"escalate", "bind", "impersonate"} & set(rule["verbs"])
    base_rules = only(base, "ClusterRole", OPERATOR)["rules"]
    # DeviceQuotas stay resource.dralloc.dev in both modes.
    quota_rules = [r for r in base_rules if r["resources"][0].startswith("devicequotas")]
    other_rules = [r for r in base_rules if r not in quota_rules]
    expected = flat_rules(other_rules, {"resource.dralloc.dev": "resource.k8s.io"})
    expected |= flat_rules(quota_rules, {})
    expected.add(("resource.k8s.io", "resourceclaims/binding", "patch"))
    assert flat_rules(in_tree["rules"], {}) == expected
