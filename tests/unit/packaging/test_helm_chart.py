"""charts/dralloc against manifests/: `helm template` gives the objects `kubectl kustomize` gives.

No cluster. helm comes from `testbed/helm --check`, kubectl from `testbed/build --check`; where
either is missing the tests skip with the script's reason. The comparison is of whole objects,
not only names: the only difference allowed is the CRDs' `helm.sh/resource-policy: keep`
(values.yaml `crds.keep`). The CRD copies in the chart must equal crds/, and its copies of the
PrometheusRule and the dashboard must equal manifests/monitoring's.
"""

from __future__ import annotations

import copy
import functools
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from .admission import admit
from .test_claim_allocation_fencing import fenced, identities
from .test_operator_claim_writes import users_claim
from .test_operator_pod_writes import bound_pod

REPO = Path(__file__).resolve().parents[3]
CHART = REPO / "charts" / "dralloc"
MANIFESTS = REPO / "manifests"
IN_TREE = ["--set", "apiGroup=resource.k8s.io"]
TIMEOUT_S = 120

Object = dict[str, Any]
Key = tuple[str, str, str]


def _check(script: str) -> Path | str:
    """The last stdout line of `testbed/<script> --check`, or why it is unavailable."""
    try:
        result = subprocess.run(
            [str(REPO / "testbed" / script), "--check"],
            capture_output=True, text=True, check=False, timeout=TIMEOUT_S,
        )  # fmt: skip
    except OSError as exc:
        return f"cannot run testbed/{script} --check: {exc}"
    lines = result.stdout.strip().splitlines()
    if result.returncode != 0 or not lines:
        return f"testbed/{script} --check: {' '.join(lines) or result.stderr.strip()}"
    return Path(lines[-1])


@functools.cache
def helm() -> Path:
    found = _check("helm")
    if isinstance(found, str):
        pytest.skip(f"helm unavailable: {found}")
    return found


@functools.cache
def kubectl() -> Path:
    found = _check("build")
    if isinstance(found, str):
        pytest.skip(f"kubectl unavailable: {found}")
    return found / "kubectl"


def run(*args: str | Path) -> subprocess.CompletedProcess[str]:
    # HOME-independent helm state: nothing of the user's repositories or plugins is read.
    env = {**os.environ, "HELM_CACHE_HOME": "/nonexistent", "HELM_CONFIG_HOME": "/nonexistent"}
    return subprocess.run(
        [str(a) for a in args], capture_output=True, text=True, check=False, env=env,
        timeout=TIMEOUT_S,
    )  # fmt: skip


def parse(text: str) -> list[Object]:
    return [doc for doc in yaml.safe_load_all(text) if doc]


def template(*values: str) -> list[Object]:
    result = run(helm(), "template", "dralloc", CHART, *values)
    assert result.returncode == 0, result.stderr
    return parse(result.stdout)


def kustomize(directory: Path) -> list[Object]:
    result = run(kubectl(), "kustomize", directory)
    assert result.returncode == 0, result.stderr
    return parse(result.stdout)


def kustomize_with(tmp_path: Path, resource: Path, *components: str) -> list[Object]:
    """resource plus components/<name>, through a kustomization of our own."""
    kustomization = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": [os.path.relpath(resource, tmp_path)],
        "components": [os.path.relpath(MANIFESTS / "components" / c, tmp_path) for c in components],
    }
    (tmp_path / "kustomization.yaml").write_text(yaml.safe_dump(kustomization))
    return kustomize(tmp_path)


def key(obj: Object) -> Key:
    return obj["kind"], obj["metadata"].get("namespace", ""), obj["metadata"]["name"]


def by_key(objects: list[Object]) -> dict[Key, Object]:
    keyed = {key(o): o for o in objects}
    assert len(keyed) == len(objects), "duplicate objects"
    return keyed


def without_keep(obj: Object) -> Object:
    """The object as kustomize has it: a CRD, or a policy labelled to be kept on uninstall,
    without helm's resource policy."""
    obj = copy.deepcopy(obj)
    annotations = obj["metadata"].get("annotations", {})
    kept = obj["metadata"].get("labels", {}).get("resource.dralloc.dev/on-uninstall") == "keep"
    if obj["kind"] == "CustomResourceDefinition" or kept:
        assert annotations.pop("helm.sh/resource-policy") == "keep"
        if not annotations:
            obj["metadata"].pop("annotations")
    return obj


def without_empty_lines(value: Any) -> Any:
    """value with the empty lines of its multi-line strings removed. kustomize's YAML library
    reads a folded scalar (`>-`) with the line break before a more-indented line as an empty
    line (the admission policy's CEL); helm keeps the text as written. Whitespace in CEL."""
    if isinstance(value, dict):
        return {k: without_empty_lines(v) for k, v in value.items()}
    if isinstance(value, list):
        return [without_empty_lines(v) for v in value]
    if isinstance(value, str) and "\n" in value:
        return "\n".join(line for line in value.split("\n") if line.strip())
    return value


def env_by_name(objects: list[Object]) -> dict[str, Any]:
    (deployment,) = [o for o in objects if o["kind"] == "Deployment"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    env = container["env"]
    assert len({e["name"] for e in env}) == len(env), "duplicate env names"
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in env}


def only(objects: list[Object], kind: str, name: str) -> Object:
    (found,) = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    return found


def assert_same(chart: list[Object], manifests: list[Object]) -> None:
    ours = by_key([without_empty_lines(without_keep(o)) for o in chart])
    theirs = by_key([without_empty_lines(o) for o in manifests])
    assert sorted(ours) == sorted(theirs)
    # The fields that decide what the operator may do and which pods it sees, by name first
    # (clearer failures), then every object as a whole.
    assert env_by_name(chart) == env_by_name(manifests)
    assert (
        only(chart, "ClusterRole", "dralloc-operator")["rules"]
        == (only(manifests, "ClusterRole", "dralloc-operator")["rules"])
    )
    ours_hooks = only(chart, "MutatingWebhookConfiguration", "dralloc")["webhooks"]
    their_hooks = only(manifests, "MutatingWebhookConfiguration", "dralloc")["webhooks"]
    assert [h["name"] for h in ours_hooks] == [h["name"] for h in their_hooks]
    for ours_hook, their_hook in zip(ours_hooks, their_hooks, strict=True):
        assert ours_hook["matchConditions"] == their_hook["matchConditions"]
        assert ours_hook["namespaceSelector"] == their_hook["namespaceSelector"]
    for k in sorted(theirs):
        assert ours[k] == theirs[k], f"{k} differs"


# --- lint ------------------------------------------------------------------------------------


CERT_MANAGER = ["--set", "webhook.certificate.mode=certManager"]
EVERYTHING_ON = [
    "--set", "metrics.serviceMonitor.enabled=true",
    "--set", "metrics.prometheusRule.enabled=true",
    "--set", "metrics.grafanaDashboard.enabled=true",
    "--set", "imagePullSecrets[0].name=registry-credentials",
]  # fmt: skip


@pytest.mark.parametrize("strict", [False, True], ids=["lint", "lint-strict"])
@pytest.mark.parametrize(
    "values",
    [[], IN_TREE, CERT_MANAGER, [*IN_TREE, *CERT_MANAGER], EVERYTHING_ON],
    ids=["crd", "in-tree", "cert-manager", "in-tree-cert-manager", "monitoring"],
)
def test_helm_lint_passes(strict: bool, values: list[str]) -> None:
    result = run(helm(), "lint", CHART, *values, *(["--strict"] if strict else []))
    assert result.returncode == 0, result.stdout + result.stderr


def test_chart_app_version_is_the_manifests_image_tag() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    kustomization = yaml.safe_load((MANIFESTS / "base" / "kustomization.yaml").read_text())
    (image,) = [i for i in kustomization["images"] if i["name"] == "dralloc"]
    assert chart["appVersion"] == image["newTag"]


def test_chart_crds_are_the_repositorys() -> None:
    ours = sorted(p.name for p in (CHART / "files" / "crds").glob("*.yaml"))
    theirs = sorted(
        p.name for p in (REPO / "crds").glob("*.yaml") if p.name != "kustomization.yaml"
    )
    assert ours == theirs, "run `make crds`"
    for name in theirs:
        text = (CHART / "files" / "crds" / name).read_text()
        assert text == (REPO / "crds" / name).read_text(), f"{name} differs: run `make crds`"


MONITORING_FILES = ("prometheusrule.yaml", "dralloc-dashboard.json")


def test_chart_monitoring_files_are_manifests_monitoring() -> None:
    for name in MONITORING_FILES:
        ours = (CHART / "files" / "monitoring" / name).read_text()
        theirs = (MANIFESTS / "monitoring" / name).read_text()
        assert ours == theirs, f"{name} differs from manifests/monitoring: run `make chart-files`"


def value_lines() -> dict[str, tuple[int, list[str]]]:
    """Dotted path of every key in values.yaml -> (line number, the comment lines above it)."""
    found: dict[str, tuple[int, list[str]]] = {}
    stack: list[tuple[int, str]] = []  # (indent, key) of the enclosing keys
    comments: list[str] = []
    for number, line in enumerate((CHART / "values.yaml").read_text().splitlines()):
        stripped = line.strip()
        if stripped.startswith("#"):
            comments.append(stripped)
            continue
        if not stripped or stripped.startswith("-") or ":" not in stripped:
            comments = []
            continue
        indent = len(line) - len(line.lstrip())
        while stack and stack[-1][0] >= indent:
            stack.pop()
        stack.append((indent, stripped.split(":", 1)[0]))
        found[".".join(k for _, k in stack)] = (number, comments)
        comments = []
    return found


def documented_values() -> list[str]:
    """The value paths of the chart README's table (first column, `a.b` or `a.b.c` / `.d`)."""
    paths = []
    for line in (CHART / "README.md").read_text().splitlines():
        if line.startswith("| `"):
            first = line.split("|")[1].strip()
            names = [n.strip().strip("`") for n in first.split("/")]
            paths.append(names[0])
            prefix = names[0].rsplit(".", 1)[0]
            paths.extend(prefix + n for n in names[1:] if n.startswith("."))
    return paths


def test_every_value_is_documented() -> None:
    """Every value is in the README's table and has a comment in values.yaml (on it or on
    the key it belongs to); every leaf of values.yaml is covered by a row of the table."""
    lines = value_lines()
    table = documented_values()
    for path in table:
        assert path in lines, f"README names {path}, values.yaml has no such key"
        parts = path.split(".")
        commented = [".".join(parts[:n]) for n in range(len(parts), 0, -1)]
        assert any(lines[p][1] for p in commented), f"{path}: no comment in values.yaml"
    values = yaml.safe_load((CHART / "values.yaml").read_text())

    def leaves(tree: dict[str, Any], prefix: str) -> list[str]:
        out = []
        for name, value in tree.items():
            path = prefix + name
            if path in table:
                continue
            if isinstance(value, dict) and value:
                out.extend(leaves(value, path + "."))
            else:
                out.append(path)
        return out

    assert leaves(values, "") == [], "values missing from charts/dralloc/README.md"


# --- equivalence with manifests/ -------------------------------------------------------------


def test_defaults_are_manifests() -> None:
    assert_same(template(), kustomize(MANIFESTS))


def test_in_tree_is_the_in_tree_overlay() -> None:
    chart = template(*IN_TREE)
    crds = [o["metadata"]["name"] for o in chart if o["kind"] == "CustomResourceDefinition"]
    assert crds == ["devicequotas.resource.dralloc.dev"]  # dralloc's own kind in both modes
    assert env_by_name(chart)["DRALLOC_API_GROUP"] == "resource.k8s.io"
    assert_same(chart, kustomize(MANIFESTS / "overlays" / "in-tree"))


def test_cert_manager_is_the_cert_manager_overlay() -> None:
    chart = template("--set", "webhook.certificate.mode=certManager", "--set", "crds.install=false")
    assert_same(chart, kustomize(MANIFESTS / "overlays" / "cert-manager"))


def test_in_tree_with_cert_manager_is_the_component_on_that_overlay(tmp_path: Path) -> None:
    # The cert-manager overlay leaves every CRD to `kubectl apply -k crds/` (or, in-tree, its
    # DeviceQuota file), like the chart with crds.install=false.
    chart = template(
        *IN_TREE, "--set", "webhook.certificate.mode=certManager", "--set", "crds.install=false"
    )
    overlay = MANIFESTS / "overlays" / "cert-manager"
    assert_same(chart, kustomize_with(tmp_path, overlay, "in-tree"))


def test_evict_mode_is_the_component(tmp_path: Path) -> None:
    chart = template("--set", "evictionMode=evict")
    assert env_by_name(chart)["DRALLOC_EVICTION_MODE"] == "evict"
    assert_same(chart, kustomize_with(tmp_path, MANIFESTS, "evict-with-budgets"))


def test_gate_labelled_namespaces_is_the_component(tmp_path: Path) -> None:
    chart = template(*IN_TREE, "--set", "gateLabelledNamespaces.enabled=true")
    overlay = MANIFESTS / "overlays" / "in-tree"
    manifests = kustomize_with(tmp_path, overlay, "gate-labelled-namespaces")
    assert (
        env_by_name(chart)["DRALLOC_GATE_NAMESPACE_LABEL"]
        == "resource.dralloc.dev/allocator=dralloc"
    )
    assert_same(chart, manifests)


# --- the options -----------------------------------------------------------------------------


def test_image_replicas_resources_and_scheduling(tmp_path: Path) -> None:
    resources = {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"memory": "2Gi"}}
    values = {
        "image": {
            "repository": "registry.example.com/dralloc",
            "tag": "9.9",
            "pullPolicy": "Always",
        },
        "replicas": 3,
        "resources": resources,
        "nodeSelector": {"kubernetes.io/os": "linux"},
        "tolerations": [{"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}],
        "affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": []}},
        "podAnnotations": {"example.com/team": "infra"},
    }
    objects = template_with(tmp_path, values)
    deployment = only(objects, "Deployment", "dralloc-operator")
    assert deployment["spec"]["replicas"] == 3
    pod = deployment["spec"]["template"]
    assert pod["metadata"]["annotations"] == {"example.com/team": "infra"}
    assert pod["spec"]["nodeSelector"] == {"kubernetes.io/os": "linux"}
    assert pod["spec"]["tolerations"][0]["key"] == "dedicated"
    assert pod["spec"]["affinity"] == values["affinity"]  # replaced, not merged
    (container,) = pod["spec"]["containers"]
    assert container["image"] == "registry.example.com/dralloc:9.9"
    assert container["imagePullPolicy"] == "Always"
    assert container["resources"] == resources
    (job_container,) = only(objects, "Job", "dralloc-webhook-cert")["spec"]["template"]["spec"][
        "containers"
    ]
    assert job_container["image"] == "registry.example.com/dralloc:9.9"


def template_with(tmp_path: Path, values: dict[str, Any]) -> list[Object]:
    path = tmp_path / "values.yaml"
    path.write_text(yaml.safe_dump(values))
    return template("-f", str(path))


def test_extra_env_adds_and_replaces(tmp_path: Path) -> None:
    env = env_by_name(
        template_with(
            tmp_path,
            {
                "extraEnv": [
                    {"name": "DRALLOC_CLAIMS_CONTROLLER", "value": "false"},
                    {"name": "DRALLOC_LOG_FORMAT", "value": "text"},
                ]
            },
        )
    )
    assert env["DRALLOC_CLAIMS_CONTROLLER"] == "false"
    assert env["DRALLOC_LOG_FORMAT"] == "text"


def test_extra_env_may_not_split_the_operator_from_its_fencing_policy(tmp_path: Path) -> None:
    """The fencing policy is bound to the chart's Lease and compares its holder with the pod's
    name: another Lease or identity by extraEnv would have every allocation refused."""
    for name in (
        "DRALLOC_LEASE_NAME",
        "DRALLOC_LEASE_NAMESPACE",
        "DRALLOC_IDENTITY",
        "DRALLOC_API_GROUP",
    ):
        path = tmp_path / "values.yaml"
        path.write_text(yaml.safe_dump({"extraEnv": [{"name": name, "value": "x"}]}))
        refused = run(helm(), "template", "dralloc", CHART, "-f", str(path))
        assert refused.returncode != 0 and f"extraEnv may not set {name}" in refused.stderr, name


def test_secret_mode_has_no_job_and_mounts_the_users_secret() -> None:
    objects = template(
        "--set", "webhook.certificate.mode=secret", "--set", "webhook.certificate.secretName=mine",
        "--set", "webhook.certificate.caBundle=Q0E=",
    )  # fmt: skip
    kinds = {(o["kind"], o["metadata"]["name"]) for o in objects}
    assert ("Job", "dralloc-webhook-cert") not in kinds
    assert not any(name == "dralloc-webhook-cert" for _, name in kinds)
    assert "Certificate" not in {kind for kind, _ in kinds}
    deployment = only(objects, "Deployment", "dralloc-operator")
    volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
    assert volumes["webhook-tls"]["secret"]["secretName"] == "mine"
    (hook,) = only(objects, "MutatingWebhookConfiguration", "dralloc")["webhooks"]
    assert hook["clientConfig"]["caBundle"] == "Q0E="


def test_metrics_service_and_service_monitor() -> None:
    default = {key(o) for o in template()}
    assert ("Service", "dralloc-system", "dralloc-metrics") in default
    assert not any(k[0] == "ServiceMonitor" for k in default)

    without = {key(o) for o in template("--set", "metrics.service.enabled=false")}
    assert ("Service", "dralloc-system", "dralloc-metrics") not in without

    objects = template("--set", "metrics.serviceMonitor.enabled=true")
    monitor = only(objects, "ServiceMonitor", "dralloc")
    (expected,) = [o for o in kustomize(MANIFESTS / "monitoring") if o["kind"] == "ServiceMonitor"]
    assert monitor == expected  # manifests/monitoring's
    service = only(objects, "Service", "dralloc-metrics")
    selector = monitor["spec"]["selector"]["matchLabels"]
    assert selector.items() <= service["metadata"]["labels"].items()
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["port"] == service["spec"]["ports"][0]["name"]
    labelled = template(
        "--set", "metrics.serviceMonitor.enabled=true",
        "--set", "metrics.serviceMonitor.labels.release=kube-prometheus-stack",
    )  # fmt: skip
    labels = only(labelled, "ServiceMonitor", "dralloc")["metadata"]["labels"]
    assert labels["release"] == "kube-prometheus-stack"

    refused = run(
        helm(), "template", "dralloc", CHART,
        "--set", "metrics.serviceMonitor.enabled=true", "--set", "metrics.service.enabled=false",
    )  # fmt: skip
    assert refused.returncode != 0 and "metrics.service.enabled" in refused.stderr


def test_prometheus_rule_and_dashboard_are_manifests_monitorings() -> None:
    default = {k[0] for k in map(key, template())}
    assert "PrometheusRule" not in default
    assert ("ConfigMap", "dralloc-system", "dralloc-dashboard") not in set(map(key, template()))
    on = ["--set", "metrics.prometheusRule.enabled=true"]
    on += ["--set", "metrics.grafanaDashboard.enabled=true"]
    objects = template(*on)
    monitoring = kustomize(MANIFESTS / "monitoring")
    for kind, name in [("PrometheusRule", "dralloc"), ("ConfigMap", "dralloc-dashboard")]:
        assert only(objects, kind, name) == only(monitoring, kind, name), f"{kind} differs"

    moved = template(
        *on, "--set", "namespace.name=dra",
        "--set", "metrics.grafanaDashboard.namespace=grafana",
        "--set", "metrics.grafanaDashboard.folder=platform",
        "--set", "metrics.grafanaDashboard.labels.team=infra",
        "--set", "metrics.prometheusRule.labels.release=kube-prometheus-stack",
    )  # fmt: skip
    rule = only(moved, "PrometheusRule", "dralloc")
    assert rule["metadata"]["namespace"] == "dra"
    assert rule["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert rule["spec"] == only(monitoring, "PrometheusRule", "dralloc")["spec"]
    dashboard = only(moved, "ConfigMap", "dralloc-dashboard")
    assert dashboard["metadata"]["namespace"] == "grafana"
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert dashboard["metadata"]["labels"]["team"] == "infra"
    assert dashboard["metadata"]["annotations"] == {"grafana_folder": "platform"}


def test_image_pull_secrets_reach_every_pod() -> None:
    assert "imagePullSecrets" not in yaml.safe_dump(template())
    objects = template("--set", "imagePullSecrets[0].name=registry-credentials")
    pods = [o["spec"]["template"]["spec"] for o in objects if o["kind"] in ("Deployment", "Job")]
    assert len(pods) == 2  # the operator and the certificate Job
    for spec in pods:
        assert spec["imagePullSecrets"] == [{"name": "registry-credentials"}]


def test_another_namespace_moves_everything_and_the_lease() -> None:
    objects = template("--set", "namespace.name=dra")
    namespaces = {o["metadata"].get("namespace") for o in objects} - {None}
    assert namespaces == {"dra"}
    env = env_by_name(objects)
    assert env["DRALLOC_LEASE_NAMESPACE"] == "dra"
    assert env["DRALLOC_WEBHOOK_HOST"] == "dralloc-webhook.dra.svc"
    identity = only(objects, "ConfigMap", "dralloc-operator-identity")
    assert identity["data"]["usernames"] == "system:serviceaccount:dra:dralloc-operator"
    (hook,) = only(objects, "MutatingWebhookConfiguration", "dralloc")["webhooks"]
    assert "dra" in hook["namespaceSelector"]["matchExpressions"][0]["values"]
    # The namespaces the operator leaves to kube-scheduler are those the policy leaves out.
    binding = only(objects, "ValidatingAdmissionPolicyBinding", "dralloc-claim-allocation")
    (left_out,) = binding["spec"]["matchResources"]["namespaceSelector"]["matchExpressions"]
    assert env["DRALLOC_UNSERVED_NAMESPACES"].split(",") == left_out["values"]
    assert binding["spec"]["paramRef"]["namespace"] == "dra"
    assert "dralloc-system" not in yaml.safe_dump(objects)


@pytest.mark.parametrize(
    ("value", "named"),
    [
        ("replicas=-1", "/replicas"),
        ('image.tag=1.0 "latest"', "/image/tag"),
        ("image.repository=registry.example.com/dralloc:1", "/image/repository"),
        ("image.pullPolicy=Sometimes", "/image/pullPolicy"),
        ("namespace.name=Dralloc_System", "/namespace/name"),
        ("gateLabelledNamespaces.label.key=a: b", "/gateLabelledNamespaces/label/key"),
        ("gateLabelledNamespaces.label.value=not ok", "/gateLabelledNamespaces/label/value"),
        ("evictionMode=kill", "/evictionMode"),
        ("webhook.certManager.duration=90 days", "/webhook/certManager/duration"),
        ("metrics.serviceMonitor.interval=30 s", "/metrics/serviceMonitor/interval"),
        ("allocationPolicy.operatorUsers={alice bob}", "/allocationPolicy/operatorUsers/0"),
        ("nodeSelector.a: b=c", "invalid propertyName 'a: b'"),
        ("replica=3", "additional properties 'replica' not allowed"),
    ],
)
def test_the_schema_refuses_a_bad_value_naming_it(value: str, named: str) -> None:
    """values.schema.json: types, ranges, enums and patterns, so that nonsense fails at
    install (and `helm lint --strict`) with the value's path, not in a rendered manifest."""
    refused = run(helm(), "template", "dralloc", CHART, "--set", value)
    assert refused.returncode != 0, value
    assert named in refused.stderr, refused.stderr
    linted = run(helm(), "lint", "--strict", CHART, "--set", value)
    assert linted.returncode != 0, value


def test_the_defaults_lint_strictly_in_both_modes() -> None:
    for values in ([], IN_TREE):
        linted = run(helm(), "lint", "--strict", CHART, *values)
        assert linted.returncode == 0, linted.stdout + linted.stderr


@pytest.mark.parametrize("namespace", ["default", "kube-system", "kube-public", "kube-node-lease"])
def test_a_namespace_shared_with_other_pods_is_refused_with_why(namespace: str) -> None:
    """The operator's namespace is left out of the gate and the policies (so they never hold
    back the operator): a namespace of other pods would lose them silently."""
    refused = run(
        helm(), "template", "dralloc", CHART,
        "--set", f"namespace.name={namespace}", "--set", "namespace.create=false",
    )  # fmt: skip
    assert refused.returncode != 0
    assert f"namespace.name={namespace}: the operator's namespace is left out" in refused.stderr


def test_crds_can_be_left_out_and_unknown_values_are_refused() -> None:
    assert "CustomResourceDefinition" not in {
        o["kind"] for o in template("--set", "crds.install=false")
    }
    for bad in ("apiGroup=example.com", "webhook.certificate.mode=vault"):
        result = run(helm(), "template", "dralloc", CHART, "--set", bad)
        assert result.returncode != 0, bad


def test_classes_left_to_kube_scheduler_reach_the_policy_and_the_webhook_alike() -> None:
    assert "DRALLOC_SCHEDULER_EXTENDED_CLASSES" not in env_by_name(template())
    objects = template("--set", "allocationPolicy.extendedClasses=legacy-gpu")
    identity = only(objects, "ConfigMap", "dralloc-operator-identity")
    assert identity["data"]["extendedClasses"] == "legacy-gpu"
    assert env_by_name(objects)["DRALLOC_SCHEDULER_EXTENDED_CLASSES"] == "legacy-gpu"


def test_one_list_of_operator_identities_feeds_the_identity_and_the_fencing() -> None:
    """allocationPolicy.operatorUsers and operatorGroups let a user act as the operator (the
    identity ConfigMap) and fence it by the Lease, in one value: never one without the other."""
    objects = template(
        "--set", "allocationPolicy.operatorUsers={alice,o'hara}",
        "--set", "allocationPolicy.operatorGroups={dralloc-operators}",
    )  # fmt: skip
    users, groups = identities(only(objects, "ConfigMap", "dralloc-operator-identity"))
    assert users == ["system:serviceaccount:dralloc-system:dralloc-operator", "alice", "o'hara"]
    assert groups == ["dralloc-operators"]
    policy = only(objects, "ValidatingAdmissionPolicy", "dralloc-claim-allocation-fencing")
    for user in users:
        assert fenced(policy, user, []), user
    assert fenced(policy, "bob", ["dralloc-operators"])
    assert not fenced(policy, "bob", ["system:authenticated"])
    # ... and the same identities may change pods only as dralloc's protocol allows
    writes = only(objects, "ValidatingAdmissionPolicy", "dralloc-operator-pod-writes")
    old = bound_pod()
    new = copy.deepcopy(old)
    new["spec"]["containers"][0]["image"] = "attacker.example/backdoor:1"
    for user, groups in [*((u, []) for u in users), ("bob", ["dralloc-operators"])]:
        refused = admit(writes, {}, operation="UPDATE", obj=new, old=old, user=user, groups=groups)
        assert refused is not None and "spec.containers" in refused, user
    assert admit(writes, {}, operation="UPDATE", obj=new, old=old, user="bob") is None
    # ... and claims only as its protocol allows
    claim_writes = only(objects, "ValidatingAdmissionPolicy", "dralloc-operator-claim-writes")
    for user, groups in [*((u, []) for u in users), ("bob", ["dralloc-operators"])]:
        refused = admit(
            claim_writes, {}, operation="DELETE", obj=None, old=users_claim(), user=user,
            groups=groups, resource="resourceclaims",
        )  # fmt: skip
        assert refused is not None and "not made for a pod" in refused, user
    assert (
        admit(claim_writes, {}, operation="DELETE", obj=None, old=users_claim(), user="bob") is None
    )
    templated = run(
        helm(), "template", "dralloc", CHART, "--set", "allocationPolicy.operatorUsers={a\\,b}"
    )
    assert templated.returncode != 0 and "/allocationPolicy/operatorUsers/0" in templated.stderr
