"""The testbed behaves like the cluster dralloc relies on: CRDs get served, kube-scheduler binds
pods to kwok nodes (honouring scheduling gates and node affinity), kwok runs and deletes them,
the garbage collector follows owner references, the disruption controller keeps budgets'
status, in-tree DRA works when switched on, and `--kcm-controllers` decides which
kube-controller-manager controllers run.
"""

from __future__ import annotations

import json
import ssl
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from operators.kube import NAMESPACES, KubeClient

from .kube_helpers import (
    REPO_ROOT,
    TESTBED_DIR,
    JsonObject,
    Testbed,
    find_binaries,
    start_testbed,
    stop_testbed,
    unique_name,
    wait_for,
)

pytestmark = pytest.mark.timeout(300)

GATE = "resource.dralloc.dev/allocation"


def pod_manifest(name: str, namespace: str, **spec: Any) -> JsonObject:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"containers": [{"name": "main", "image": "registry.invalid/none"}], **spec},
    }


def own_crd(group: str) -> JsonObject:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"widgets.{group}"},
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "properties": {
                                "spec": {
                                    "type": "object",
                                    "properties": {"size": {"type": "integer"}},
                                }
                            },
                        }
                    },
                }
            ],
        },
    }


def _holds_crds(path: Path) -> bool:
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
    return bool(docs) and all(d.get("kind") == "CustomResourceDefinition" for d in docs)


# crds/ also holds a kustomization; only the CRD manifests are installed here.
CRD_FILES = [p for p in sorted((REPO_ROOT / "crds").glob("*.y*ml")) if _holds_crds(p)]


def node_of(testbed: Testbed, namespace: str, pod: str) -> str | None:
    obj = testbed.get("pod", pod, "-n", namespace)
    assert obj is not None, f"pod {namespace}/{pod} disappeared"
    node: str | None = obj["spec"].get("nodeName")
    return node


@pytest.mark.parametrize("crd_file", CRD_FILES, ids=lambda path: path.name)
def test_repo_crd_installs_and_becomes_established(testbed: Testbed, crd_file: Path) -> None:
    crds = [d for d in yaml.safe_load_all(crd_file.read_text()) if d]
    testbed.apply(*crds)
    for crd in crds:
        testbed.wait_established(f"crd/{crd['metadata']['name']}")


def test_own_crd_installs_becomes_established_and_is_served(
    testbed: Testbed, namespace: str
) -> None:
    group = f"{unique_name('e2e')}.dralloc.test"
    testbed.apply(own_crd(group))
    testbed.wait_established(f"crd/widgets.{group}")
    widget = {
        "apiVersion": f"{group}/v1",
        "kind": "Widget",
        "metadata": {"name": "w", "namespace": namespace},
        "spec": {"size": 3},
    }
    # Established means served: a custom object round-trips through the API.
    wait_for("the new kind to be discoverable", lambda: _try_apply(testbed, widget), timeout=30)
    stored = testbed.get(f"widgets.{group}", "w", "-n", namespace)
    assert stored is not None
    assert stored["spec"] == {"size": 3}
    testbed.kubectl("delete", "crd", f"widgets.{group}", "--wait=false")


def _try_apply(testbed: Testbed, obj: JsonObject) -> bool:
    doc = json.dumps(obj)
    result = testbed.kubectl("apply", "--server-side", "-f", "-", input=doc, check=False)
    return result.returncode == 0


def ready_node(testbed: Testbed, name: str) -> JsonObject:
    """The node once kwok has marked it Ready (kwok's node stage rewrites its status)."""

    def probe() -> JsonObject | None:
        obj = testbed.get("node", name)
        conditions = ((obj or {}).get("status") or {}).get("conditions") or []
        ready = any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)
        return obj if ready else None

    found: JsonObject = wait_for(f"node {name} Ready", probe, timeout=30)
    return found


def test_nodes_keep_the_size_they_were_given_once_ready(testbed: Testbed) -> None:
    prefix = unique_name("sized")
    result = subprocess.run(
        [str(TESTBED_DIR / "nodes"), f"--kubeconfig={testbed.kubeconfig}", f"--bin={testbed.bin}",
         f"--prefix={prefix}", f"--label=e2e-pool={prefix}", "--cpu=2", "--memory=8Gi",
         "--pods=110", "--ephemeral-storage=100Gi", "--extended=example.com/foo=4",
         "--extended=example.com/bar=2", "1"],
        capture_output=True, text=True, check=False, timeout=60,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    (node,) = result.stdout.split()
    size = {
        "cpu": "2",
        "memory": "8Gi",
        "pods": "110",
        "ephemeral-storage": "100Gi",
        "example.com/foo": "4",
        "example.com/bar": "2",
    }
    status = ready_node(testbed, node)["status"]
    assert (status["capacity"], status["allocatable"]) == (size, size)

    # The fixture helper passes cpu, memory and pods through; no size keeps the old default.
    (helper,) = testbed.create_nodes(
        1, {"e2e-pool": prefix}, f"{prefix}-helper", cpu="3500m", memory="32Gi", pods=20
    )
    (default,) = testbed.create_nodes(1, {"e2e-pool": prefix}, f"{prefix}-default")
    expected = {
        helper: {"cpu": "3500m", "memory": "32Gi", "pods": "20"},
        default: {"cpu": "1k", "memory": "4Ti", "pods": "100k"},
    }
    for name, want in expected.items():
        status = ready_node(testbed, name)["status"]
        assert (status["capacity"], status["allocatable"]) == (want, want), name


def test_node_size_that_is_no_quantity_creates_nothing(testbed: Testbed) -> None:
    prefix = unique_name("badsize")
    with pytest.raises(AssertionError, match="'2 cores' is not a Kubernetes quantity"):
        testbed.create_nodes(1, {}, prefix, cpu="2 cores")
    result = subprocess.run(
        [str(TESTBED_DIR / "nodes"), f"--kubeconfig={testbed.kubeconfig}", f"--bin={testbed.bin}",
         f"--prefix={prefix}", "--extended=foo=1", "1"],
        capture_output=True, text=True, check=False, timeout=60,
    )  # fmt: skip
    assert result.returncode != 0 and "has no domain prefix" in result.stderr, result
    assert testbed.get("node", f"{prefix}-0") is None


def test_pod_is_bound_to_kwok_node_runs_and_is_deleted(testbed: Testbed, namespace: str) -> None:
    pool = unique_name("pool")
    (node,) = testbed.create_nodes(1, {"e2e-pool": pool}, prefix=pool)
    testbed.apply(pod_manifest("p", namespace, nodeSelector={"e2e-pool": pool}))

    wait_for("the pod to be bound", lambda: node_of(testbed, namespace, "p"), timeout=60)
    assert node_of(testbed, namespace, "p") == node

    def phase() -> str | None:
        obj = testbed.get("pod", "p", "-n", namespace)
        return obj["status"].get("phase") if obj else None

    wait_for("the pod to be Running", lambda: phase() == "Running", timeout=60)

    testbed.kubectl("delete", "pod", "p", "-n", namespace, "--wait=false")
    # Without kwok's delete stage a bound pod would stay Terminating forever.
    wait_for(
        "the pod to be gone", lambda: testbed.get("pod", "p", "-n", namespace) is None, timeout=60
    )


def test_gated_pod_waits_then_binds_to_affinity_node(testbed: Testbed, namespace: str) -> None:
    pool = unique_name("pool")
    nodes = testbed.create_nodes(3, {"e2e-pool": pool}, prefix=pool)
    chosen = nodes[1]
    testbed.apply(
        pod_manifest(
            "gated",
            namespace,
            nodeSelector={"e2e-pool": pool},
            schedulingGates=[{"name": GATE}],
        )
    )

    def scheduled_condition() -> JsonObject | None:
        obj = testbed.get("pod", "gated", "-n", namespace)
        assert obj is not None
        conditions = obj.get("status", {}).get("conditions", [])
        return next((c for c in conditions if c["type"] == "PodScheduled"), None)

    condition = wait_for("the PodScheduled condition", scheduled_condition, timeout=30)
    assert condition["status"] == "False"
    assert condition["reason"] == "SchedulingGated"

    # Same order as dralloc's allocator: pin the node while gated, then lift the gate.
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {
                        "matchFields": [
                            {"key": "metadata.name", "operator": "In", "values": [chosen]}
                        ]
                    }
                ]
            }
        }
    }
    testbed.kubectl(
        "patch", "pod", "gated", "-n", namespace, "--type=merge",
        "-p", json.dumps({"spec": {"affinity": affinity}}),
    )  # fmt: skip
    assert node_of(testbed, namespace, "gated") is None, "bound while still gated"

    remove_gate = [{"op": "remove", "path": "/spec/schedulingGates"}]
    testbed.kubectl(
        "patch", "pod", "gated", "-n", namespace, "--type=json", "-p", json.dumps(remove_gate)
    )
    bound = wait_for(
        "the pod to be bound", lambda: node_of(testbed, namespace, "gated"), timeout=60
    )
    assert bound == chosen


def test_garbage_collector_removes_object_owned_by_deleted_pod(
    testbed: Testbed, namespace: str
) -> None:
    # A gated pod is never bound, so its deletion is immediate and only the GC is under test.
    testbed.apply(pod_manifest("owner", namespace, schedulingGates=[{"name": GATE}]))
    pod = testbed.get("pod", "owner", "-n", namespace)
    assert pod is not None
    owner_ref = {"apiVersion": "v1", "kind": "Pod", "name": "owner", "uid": pod["metadata"]["uid"]}

    def config_map(name: str, owners: list[JsonObject]) -> JsonObject:
        meta = {"name": name, "namespace": namespace, "ownerReferences": owners}
        return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {"k": "v"}}

    testbed.apply(config_map("owned", [owner_ref]), config_map("unowned", []))
    testbed.kubectl("delete", "pod", "owner", "-n", namespace)

    wait_for(
        "the owned ConfigMap to be collected",
        lambda: testbed.get("configmap", "owned", "-n", namespace) is None,
        timeout=90,
    )
    assert testbed.get("configmap", "unowned", "-n", namespace) is not None


def test_disruption_controller_computes_a_budget_over_a_running_kwok_pod(
    testbed: Testbed, namespace: str
) -> None:
    """The budget's status is what the Eviction API decides by: without the controller it
    stays empty and every eviction it covers is refused ("still being processed")."""
    pool = unique_name("pool")
    testbed.create_nodes(1, {"e2e-pool": pool}, prefix=pool)
    running = pod_manifest("guarded", namespace, nodeSelector={"e2e-pool": pool})
    running["metadata"]["labels"] = {"app": "guarded"}
    budget = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "keep-one", "namespace": namespace},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "guarded"}}},
    }
    testbed.apply(running, budget)

    def status() -> JsonObject | None:
        obj = testbed.get("pdb", "keep-one", "-n", namespace)
        found: JsonObject = (obj or {}).get("status") or {}
        return found if found.get("currentHealthy") == 1 else None

    computed = wait_for("the budget's status", status, timeout=60)
    assert computed["observedGeneration"] == 1
    assert (computed["desiredHealthy"], computed["disruptionsAllowed"]) == (1, 0)


def claim_template(namespace: str, device_class: str) -> JsonObject:
    """A ResourceClaimTemplate "one-gpu" with one request for a device of device_class."""
    request = {"name": "gpu", "exactly": {"deviceClassName": device_class}}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "one-gpu", "namespace": namespace},
        "spec": {"spec": {"devices": {"requests": [request]}}},
    }


def pod_with_template_claim(name: str, namespace: str, **spec: Any) -> JsonObject:
    """A pod whose claim "gpu" comes from the template "one-gpu" (in-tree spec.resourceClaims)."""
    pod = pod_manifest(
        name,
        namespace,
        resourceClaims=[{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}],
        **spec,
    )
    pod["spec"]["containers"][0]["resources"] = {"claims": [{"name": "gpu"}]}
    return pod


def generated_claim_name(testbed: Testbed, namespace: str, pod: str) -> str | None:
    """The claim kcm's resourceclaim controller recorded in pod.status.resourceClaimStatuses."""
    obj = testbed.get("pod", pod, "-n", namespace)
    assert obj is not None, f"pod {namespace}/{pod} disappeared"
    statuses = obj.get("status", {}).get("resourceClaimStatuses", [])
    name: str | None = next(
        (s.get("resourceClaimName") for s in statuses if s["name"] == "gpu"), None
    )
    return name


def test_in_tree_dra_allocates_claim_from_template(dra_testbed: Testbed) -> None:
    tb = dra_testbed
    namespace = unique_name("e2e-dra")
    tb.kubectl("create", "namespace", namespace)
    driver = f"{unique_name('gpu')}.e2e.dralloc.test"
    pool = unique_name("pool")
    nodes = tb.create_nodes(2, {"e2e-pool": pool}, prefix=pool)
    with_device = nodes[1]
    device_class = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": driver},
        "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{driver}"'}}]},
    }
    # Only the second node publishes a device: the scheduler must pick it.
    resource_slice: JsonObject = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{with_device}-{pool}"},
        "spec": {
            "driver": driver,
            "nodeName": with_device,
            "pool": {"name": with_device, "generation": 1, "resourceSliceCount": 1},
            "devices": [{"name": "gpu-0", "attributes": {"model": {"string": "e2e"}}}],
        },
    }
    template = claim_template(namespace, driver)
    pod = pod_with_template_claim("dra", namespace, nodeSelector={"e2e-pool": pool})
    tb.apply(device_class, resource_slice, template, pod)

    claim = wait_for(
        "the claim to be generated from the template",
        lambda: generated_claim_name(tb, namespace, "dra"),
        timeout=60,
    )
    bound = wait_for("the pod to be bound", lambda: node_of(tb, namespace, "dra"), timeout=60)
    assert bound == with_device

    obj = tb.get("resourceclaim", claim, "-n", namespace)
    assert obj is not None
    results = obj["status"]["allocation"]["devices"]["results"]
    assert [(r["driver"], r["pool"], r["device"]) for r in results] == [
        (driver, with_device, "gpu-0")
    ]
    assert [r["name"] for r in obj["status"].get("reservedFor", [])] == ["dra"]
    tb.kubectl("delete", "namespace", namespace, "--wait=false")
    tb.kubectl("delete", "resourceslice", resource_slice["metadata"]["name"], "--wait=false")


NARROW_KCM_CONTROLLERS = "garbage-collector-controller,namespace-controller"


@pytest.fixture(scope="module")
def narrow_dra_testbed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Testbed]:
    """In-tree DRA in the scheduler, but kcm runs neither of its DRA controllers."""
    state_dir = tmp_path_factory.mktemp("testbed-dra-narrow")
    testbed = start_testbed(
        state_dir, find_binaries(), dra=True, kcm_controllers=NARROW_KCM_CONTROLLERS
    )
    try:
        yield testbed
    finally:
        stop_testbed(testbed)


def recorded_kcm_controllers(testbed: Testbed) -> list[str]:
    assert testbed.state_dir is not None
    state = json.loads((testbed.state_dir / "state.json").read_text())
    controllers: list[str] = state["kcm_controllers"]
    return controllers


def kcm_metrics(testbed: Testbed) -> list[str]:
    """kube-controller-manager's /metrics, line by line (the testbed allows /metrics without
    credentials)."""
    assert testbed.state_dir is not None
    state = json.loads((testbed.state_dir / "state.json").read_text())
    url = f"https://127.0.0.1:{state['ports']['controller_manager']}/metrics"
    insecure = ssl.create_default_context()
    insecure.check_hostname = False
    insecure.verify_mode = ssl.CERT_NONE  # kcm serves on a self-signed certificate of its own
    with urllib.request.urlopen(url, timeout=10, context=insecure) as response:
        return list(response.read().decode().splitlines())


def kcm_dra_controllers(testbed: Testbed) -> set[str]:
    """Which of kcm's DRA controllers started, by what each leaves in /metrics on every
    version 1.34-1.37: the resourceclaim controller its work queue ``resource_claim``; the
    device-taint eviction controller its ``device_taint_eviction_controller_*`` metrics, which
    it registers when it is made (1.34's controller has no work queue: it evicts through a timed
    worker queue without metrics; from 1.35 it also has a queue of its own name)."""
    lines = kcm_metrics(testbed)
    started = set()
    if any(line.startswith('workqueue_adds_total{name="resource_claim"') for line in lines):
        started.add("resourceclaim-controller")
    if any(
        line.startswith("device_taint_eviction_controller_pod_deletions_total") for line in lines
    ):
        started.add("device-taint-eviction-controller")
    return started


def kcm_work_queues(testbed: Testbed) -> set[str]:
    """Names of kube-controller-manager's work queues (one per controller that started)."""
    prefix = 'workqueue_adds_total{name="'
    return {
        line[len(prefix) :].split('"', 1)[0]
        for line in kcm_metrics(testbed)
        if line.startswith(prefix)
    }


def test_kcm_controllers_replace_the_default_list(
    dra_testbed: Testbed, narrow_dra_testbed: Testbed
) -> None:
    narrow = narrow_dra_testbed
    assert recorded_kcm_controllers(narrow) == NARROW_KCM_CONTROLLERS.split(",")
    if dra_testbed.state_dir is not None:  # not a reused testbed: its state is ours to read
        assert recorded_kcm_controllers(dra_testbed) == [
            "garbage-collector-controller",
            "namespace-controller",
            "disruption-controller",
            "resourceclaim-controller",
            "device-taint-eviction-controller",
        ]
        assert kcm_dra_controllers(dra_testbed) == {
            "resourceclaim-controller",
            "device-taint-eviction-controller",
        }
    queues = kcm_work_queues(narrow)
    assert "namespace" in queues and "garbage_collector_graph_changes" in queues, queues
    assert not kcm_dra_controllers(narrow)

    # The same pod on both: the default --dra testbed generates its claim, the narrow one not.
    namespace = unique_name("e2e-kcm")
    for tb in (dra_testbed, narrow):
        tb.kubectl("create", "namespace", namespace)
        tb.apply(claim_template(namespace, "absent.e2e.dralloc.test"))
        tb.apply(pod_with_template_claim("p", namespace))
    began = time.monotonic()
    wait_for(
        "the default --dra testbed to generate the claim",
        lambda: generated_claim_name(dra_testbed, namespace, "p"),
        timeout=60,
    )
    # Give the narrow testbed several times as long (at least 10 s) to prove it does nothing.
    deadline = time.monotonic() + max(10.0, 3 * (time.monotonic() - began))
    while time.monotonic() < deadline:
        assert generated_claim_name(narrow, namespace, "p") is None
        claims = narrow.get("resourceclaims.resource.k8s.io", "-n", namespace)
        assert claims is not None and claims["items"] == [], "a claim was generated"
        time.sleep(0.5)

    # kcm itself runs there: its namespace controller finishes a deletion.
    for tb in (dra_testbed, narrow):
        tb.kubectl("delete", "namespace", namespace, "--wait=false")
    wait_for(
        "the namespace to be deleted on the narrow testbed",
        lambda: narrow.get("namespace", namespace) is None,
        timeout=90,
    )


async def test_kube_client_fixture_talks_to_the_testbed(kube_client: KubeClient) -> None:
    namespaces, _ = await kube_client.list(NAMESPACES)
    assert "default" in {ns["metadata"]["name"] for ns in namespaces}
