"""`helm install` of charts/dralloc on a real API server, in both API modes.

The chart installs for real (not a dry run): the webhook (failurePolicy Fail) and the
admission policy go live and `helm uninstall` deletes the operator's namespace, so this module
runs on a control plane of its own, not on the shared testbeds other modules use (where
dralloc-system holds every operator's Lease). It is started from the same binaries (the
`testbeds` registry's) and stopped at the end of the module. The testbed runs no Deployment or
Job controller: the operator pods are never created, nor is the certificate Job's pod; the
operator running from the chart, on the real node, is tests/e2e/test_real_node_helm.py's.

Per mode: every object `helm template` renders exists after the install; the operator's
ClusterRole is the kustomize directory's; its ServiceAccount may do what that mode's controllers
do and nothing more (the access lists of test_manifests.py); the webhook selects the pods the
manifests' webhook selects; an upgrade adds the monitoring objects (beside stand-in
monitoring.coreos.com CRDs) and pull secrets; `helm uninstall` removes everything but the CRDs
and two inert policies (kept on purpose, helm.sh/resource-policy: keep); an install into a namespace that runs other pods is refused. cert-manager
mode is not installed (no cert-manager here): it is rendered
and linted by tests/unit/packaging/test_helm_chart.py.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from .kube_helpers import (
    REPO_ROOT,
    Testbed,
    TestbedRegistry,
    start_testbed,
    stop_testbed,
    wait_for,
)
from .test_manifests import MODES, can_i, render

CHART = REPO_ROOT / "charts" / "dralloc"
RELEASE = "dralloc"
NAMESPACE = "dralloc-system"
KEEP = "helm.sh/resource-policy"
VALUES = {"crd": [], "in-tree": ["--set", "apiGroup=resource.k8s.io"]}
CLUSTER_SCOPED = {
    "Namespace",
    "CustomResourceDefinition",
    "ClusterRole",
    "ClusterRoleBinding",
    "MutatingWebhookConfiguration",
    "ValidatingWebhookConfiguration",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
}


def helm_binary() -> Path:
    try:
        result = subprocess.run(
            [str(REPO_ROOT / "testbed" / "helm"), "--check"],
            capture_output=True, text=True, check=False, timeout=60,
        )  # fmt: skip
    except OSError as exc:
        pytest.skip(f"helm unavailable: cannot run testbed/helm --check: {exc}")
    lines = result.stdout.strip().splitlines()
    if result.returncode != 0 or not lines:
        pytest.skip(f"helm unavailable: {' '.join(lines) or result.stderr.strip()}")
    return Path(lines[-1])


class Helm:
    def __init__(self, binary: Path, testbed: Testbed, home: Path) -> None:
        self.binary, self.testbed, self.home = binary, testbed, home

    def __call__(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        env = {
            **self.testbed.env(),
            "HELM_CACHE_HOME": str(self.home / "cache"),
            "HELM_CONFIG_HOME": str(self.home / "config"),
            "HELM_DATA_HOME": str(self.home / "data"),
        }
        result = subprocess.run(
            [str(self.binary), f"--kubeconfig={self.testbed.kubeconfig}", "--namespace=default",
             *args],
            capture_output=True, text=True, check=False, env=env, timeout=180,
        )  # fmt: skip
        if check and result.returncode != 0:
            raise AssertionError(
                f"helm {' '.join(args)} exited {result.returncode}: {result.stderr}"
            )
        return result

    def template(self, *values: str) -> list[dict[str, Any]]:
        out = self("template", RELEASE, str(CHART), *values).stdout
        return [doc for doc in yaml.safe_load_all(out) if doc]


@pytest.fixture(scope="module")
def own_testbed(
    testbeds: TestbedRegistry, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Testbed]:
    helm_binary()  # skip before starting a control plane for nothing
    testbed = start_testbed(tmp_path_factory.mktemp("testbed-helm"), testbeds.bin, dra=False)
    try:
        yield testbed
    finally:
        stop_testbed(testbed)


@pytest.fixture(scope="module")
def helm(own_testbed: Testbed, tmp_path_factory: pytest.TempPathFactory) -> Helm:
    return Helm(helm_binary(), own_testbed, tmp_path_factory.mktemp("helm-home"))


def exists(testbed: Testbed, obj: dict[str, Any]) -> bool:
    kind = obj["kind"]
    resource = (
        f"{kind.lower()}.{obj['apiVersion'].split('/')[0]}"
        if "/" in obj["apiVersion"]
        else kind.lower()
    )
    args = ["get", resource, obj["metadata"]["name"], "-o", "name", "--ignore-not-found"]
    if kind not in CLUSTER_SCOPED:
        args.append(f"--namespace={obj['metadata']['namespace']}")
    return bool(testbed.kubectl(*args).stdout.strip())


IN_EVERY_MODE = pytest.mark.parametrize("installed", list(VALUES), indirect=True)
"""Tests that run once per mode (the chart installed in that mode)."""


@pytest.fixture(scope="module")
def installed(
    request: pytest.FixtureRequest, helm: Helm
) -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """The chart installed in the mode the test is parametrized with (indirectly, so the tests
    of one mode run together, in file order); uninstalled afterwards."""
    mode = request.param
    values = VALUES[mode]
    helm("install", RELEASE, str(CHART), *values)
    try:
        yield mode, helm.template(*values)
    finally:
        helm("uninstall", RELEASE, check=False)
        wait_for(
            f"namespace {NAMESPACE} to be gone",
            lambda: helm.testbed.get("namespace", NAMESPACE) is None,
            timeout=120,
        )


@IN_EVERY_MODE
def test_every_rendered_object_exists(
    installed: tuple[str, list[dict[str, Any]]], helm: Helm
) -> None:
    mode, objects = installed
    missing = [
        f"{o['kind']}/{o['metadata']['name']}" for o in objects if not exists(helm.testbed, o)
    ]
    assert not missing
    crds = {o["metadata"]["name"] for o in objects if o["kind"] == "CustomResourceDefinition"}
    # In-tree mode installs only DeviceQuota's CRD: quotas are dralloc's kind in both modes.
    assert (len(crds) > 1) == (mode == "crd")
    assert "devicequotas.resource.dralloc.dev" in crds
    status = json.loads(helm("status", RELEASE, "-o", "json").stdout)
    assert status["info"]["status"] == "deployed"
    namespace = helm.testbed.get("namespace", NAMESPACE)
    assert namespace is not None
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"


@IN_EVERY_MODE
def test_cluster_role_is_the_manifests(
    installed: tuple[str, list[dict[str, Any]]], helm: Helm
) -> None:
    mode, _ = installed
    manifests = render(helm.testbed, MODES[mode].directory)
    (expected,) = [
        o
        for o in manifests
        if o["kind"] == "ClusterRole" and o["metadata"]["name"] == "dralloc-operator"
    ]
    live = helm.testbed.get("clusterrole", "dralloc-operator")
    assert live is not None
    assert live["rules"] == expected["rules"]
    webhook = helm.testbed.get("mutatingwebhookconfiguration", "dralloc")
    expected_hooks = next(o for o in manifests if o["kind"] == "MutatingWebhookConfiguration")[
        "webhooks"
    ]
    assert webhook is not None
    live_hooks = webhook["webhooks"]
    assert [h["name"] for h in live_hooks] == [h["name"] for h in expected_hooks]
    for live_hook, expected_hook in zip(live_hooks, expected_hooks, strict=True):
        assert live_hook["matchConditions"] == expected_hook["matchConditions"]
        assert live_hook["namespaceSelector"] == expected_hook["namespaceSelector"]
        assert live_hook["failurePolicy"] == expected_hook["failurePolicy"]


@IN_EVERY_MODE
def test_service_account_may_do_what_the_controllers_do(
    installed: tuple[str, list[dict[str, Any]]], helm: Helm
) -> None:
    mode, _ = installed
    refused = [a for a in MODES[mode].allowed if not can_i(helm.testbed, *a)]
    assert not refused, f"{mode} mode: the operator may not {refused}"


@IN_EVERY_MODE
def test_service_account_may_not_do_more(
    installed: tuple[str, list[dict[str, Any]]], helm: Helm
) -> None:
    mode, _ = installed
    allowed = [a for a in MODES[mode].denied if can_i(helm.testbed, *a)]
    assert not allowed, f"{mode} mode: the operator may {allowed}"


@IN_EVERY_MODE
def test_upgrade_gates_only_labelled_namespaces(
    installed: tuple[str, list[dict[str, Any]]], helm: Helm
) -> None:
    mode, _ = installed
    helm(
        "upgrade",
        RELEASE,
        str(CHART),
        *VALUES[mode],
        "--set",
        "gateLabelledNamespaces.enabled=true",
    )
    webhook = helm.testbed.get("mutatingwebhookconfiguration", "dralloc")
    assert webhook is not None
    hooks = {h["name"]: h for h in webhook["webhooks"]}
    hook = hooks["scheduling-gate.resource.dralloc.dev"]
    assert hook["namespaceSelector"]["matchLabels"] == {"resource.dralloc.dev/allocator": "dralloc"}
    # In-tree, the extended-resources webhook is called in every served namespace; the
    # operator leaves unlabelled ones be (it fails open and gates nothing there).
    assert set(hooks) == (
        {hook["name"], "extended-resources.resource.dralloc.dev"}
        if mode == "in-tree"
        else {hook["name"]}
    )
    deployment = helm.testbed.get("deployment", "dralloc-operator", f"--namespace={NAMESPACE}")
    assert deployment is not None
    env = {
        e["name"]: e.get("value")
        for e in deployment["spec"]["template"]["spec"]["containers"][0]["env"]
    }
    assert env["DRALLOC_GATE_NAMESPACE_LABEL"] == "resource.dralloc.dev/allocator=dralloc"


STAND_IN_KINDS = (("servicemonitors", "ServiceMonitor"), ("prometheusrules", "PrometheusRule"))


def stand_in_crd(plural: str, kind: str) -> dict[str, Any]:
    """A monitoring.coreos.com kind with no schema of its own: the Prometheus Operator's CRDs
    are not downloaded here, and what is checked is that the chart's objects install and
    keep their content, not the operator's validation of them."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.monitoring.coreos.com"},
        "spec": {
            "group": "monitoring.coreos.com",
            "scope": "Namespaced",
            "names": {"plural": plural, "kind": kind, "singular": kind.lower()},
            "versions": [
                {
                    "name": "v1", "served": True, "storage": True,
                    "schema": {"openAPIV3Schema": {
                        "type": "object", "x-kubernetes-preserve-unknown-fields": True,
                    }},
                }
            ],
        },
    }  # fmt: skip


@IN_EVERY_MODE
def test_upgrade_adds_monitoring_and_pull_secrets(
    installed: tuple[str, list[dict[str, Any]]], helm: Helm
) -> None:
    """The ServiceMonitor, PrometheusRule and dashboard ConfigMap install (beside stand-in
    monitoring.coreos.com CRDs) with manifests/monitoring's content; imagePullSecrets reach
    the operator's pod template."""
    mode, _ = installed
    helm.testbed.apply(*(stand_in_crd(plural, kind) for plural, kind in STAND_IN_KINDS))
    for plural, _kind in STAND_IN_KINDS:
        helm.testbed.wait_established(f"crd/{plural}.monitoring.coreos.com")
    toggles = [
        "--set", "metrics.serviceMonitor.enabled=true",
        "--set", "metrics.prometheusRule.enabled=true",
        "--set", "metrics.grafanaDashboard.enabled=true",
        "--set", "imagePullSecrets[0].name=registry-credentials",
    ]  # fmt: skip
    # A Job's pod template is immutable and the pull secrets change it: the upgrade needs the
    # certificate Job gone, as it is ttlSecondsAfterFinished after it finished. Here it never
    # runs (no Job controller), so it is deleted by hand.
    helm.testbed.kubectl("delete", "job", "dralloc-webhook-cert", f"--namespace={NAMESPACE}")
    helm("upgrade", RELEASE, str(CHART), *VALUES[mode], *toggles)
    rule = helm.testbed.get("prometheusrule.monitoring.coreos.com", "dralloc", f"-n={NAMESPACE}")
    expected = yaml.safe_load((REPO_ROOT / "manifests/monitoring/prometheusrule.yaml").read_text())
    assert rule is not None and rule["spec"] == expected["spec"]
    monitor = helm.testbed.get("servicemonitor.monitoring.coreos.com", "dralloc", f"-n={NAMESPACE}")
    assert monitor is not None
    dashboard = helm.testbed.get("configmap", "dralloc-dashboard", f"-n={NAMESPACE}")
    assert dashboard is not None
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert dashboard["data"]["dralloc-dashboard.json"] == (
        (REPO_ROOT / "manifests/monitoring/dralloc-dashboard.json").read_text()
    )
    deployment = helm.testbed.get("deployment", "dralloc-operator", f"--namespace={NAMESPACE}")
    assert deployment is not None
    pod_spec = deployment["spec"]["template"]["spec"]
    assert pod_spec["imagePullSecrets"] == [{"name": "registry-credentials"}]


def test_install_refuses_a_namespace_that_runs_other_pods(helm: Helm) -> None:
    """The operator's namespace is left out of the gate and the admission policies: put in a
    namespace of user pods it would leave them unguarded, so the install says so and stops."""
    shared = "team-shared"
    helm.testbed.kubectl("create", "namespace", shared)
    try:
        helm.testbed.apply({
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "app", "namespace": shared},
            "spec": {"containers": [{"name": "c", "image": "registry.invalid/app"}]},
        })  # fmt: skip
        refused = helm(
            "install", "dralloc-shared", str(CHART), f"--set=namespace.name={shared}",
            "--set=namespace.create=false", check=False,
        )  # fmt: skip
        assert refused.returncode != 0, refused.stdout
        assert f"namespace.name={shared}: the namespace runs pods that are not dralloc's (app)" in (
            refused.stderr
        ), refused.stderr
        assert helm("list", "--all-namespaces", "-q").stdout.split().count("dralloc-shared") == 0
    finally:
        helm.testbed.kubectl("delete", "namespace", shared, "--wait=false", check=False)


def test_cert_manager_mode_is_rendered_not_installed() -> None:
    pytest.skip(
        "webhook.certificate.mode=certManager is rendered and linted only "
        "(tests/unit/packaging/test_helm_chart.py: the objects of manifests/overlays/"
        "cert-manager, helm lint --strict): its Issuer and Certificate need cert-manager's "
        "CRDs and controller, which this testbed does not have (nothing is downloaded from a "
        "registry), and stand-in CRDs would not show cert-manager writing the Secret and "
        "injecting the caBundle"
    )


@IN_EVERY_MODE
def test_uninstall_removes_everything_but_the_crds(
    installed: tuple[str, list[dict[str, Any]]], helm: Helm
) -> None:
    """Last in the module's order: the fixture's own uninstall then finds nothing to do."""
    _, objects = installed
    helm("uninstall", RELEASE, "--wait")
    left = [f"{o['kind']}/{o['metadata']['name']}" for o in objects if exists(helm.testbed, o)]
    # helm.sh/resource-policy: keep on the CRDs and on the two inert policies (with their
    # bindings) that keep kube-apiserver watching policy parameters; and the namespace may
    # still be terminating.
    kept = [o for o in objects if (o["metadata"].get("annotations") or {}).get(KEEP) == "keep"]
    expected = {f"{o['kind']}/{o['metadata']['name']}" for o in kept}
    assert {o["kind"] for o in kept} == {
        "CustomResourceDefinition",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
    }
    assert set(left) - {f"Namespace/{NAMESPACE}"} == expected
