"""Real nodes: a device allocated for a pod reaches its container, and is unprepared when the
pod ends, on a node with a real kubelet, containerd and upstream's DRA test driver; the
operator runs in-cluster from its own image, as `manifests/` deploys it.

kwok nodes run no containers and call no driver, so these are the only tests that show the
kubelet preparing what dralloc allocated (the driver's CDI spec sets environment variables in
the container) and the operator working as the Deployment its manifests describe: two replicas
with one leader, the webhook serving the certificate Job's certificate, JSON logs.

They skip, with the reason, where real nodes cannot run (not root, a part that did not build:
`testbed/build` records why) or the operator image cannot be built (`testbed/image`).
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from .kube_helpers import (
    REPO_ROOT,
    TESTBED_DIR,
    Testbed,
    TestbedRegistry,
    token_kubeconfig,
    unique_name,
    wait_for,
    wait_for_real_nodes,
)
from .modes import TESTBED_REAL_NODE, TESTBED_REAL_NODE_DRA

pytestmark = pytest.mark.real_node

DRIVER = "test-driver.cdi.k8s.io"
NODE = "real-node-0"
OPERATOR_NAMESPACE = "dralloc-system"
IMAGE_TIMEOUT_S = 900.0
TAINT_KEY = "example.com/unhealthy"
KEEP_SELECTOR = "resource.dralloc.dev/on-uninstall!=keep"
"""What removing dralloc deletes (manifests/README.md)."""


def real_testbed(testbeds: TestbedRegistry, kind: str) -> Testbed:
    if kind in testbeds.running:
        return testbeds.running[kind]
    reason = wait_for_real_nodes(testbeds)
    if reason:
        pytest.skip(f"real nodes unavailable: {reason}")
    return testbeds.get(kind)


def node_dir(testbed: Testbed) -> Path:
    assert testbed.state_dir is not None, "a reused testbed has no state directory here"
    return testbed.state_dir / "nodes" / NODE


def new_namespace(testbed: Testbed) -> str:
    """A namespace whose pods can be created: the ServiceAccount admission plugin (on with
    real nodes) refuses pods until kcm's serviceaccount controller made `default`."""
    name = unique_name("real")
    testbed.kubectl("create", "namespace", name)
    wait_for(
        f"ServiceAccount {name}/default",
        lambda: testbed.get("serviceaccount", "default", "-n", name),
        timeout=30,
    )
    return name


def device_class(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": name},
        "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]},
    }


def claim_template(namespace: str, device_class_name: str, greeting: str) -> dict[str, Any]:
    """One device; the driver turns the opaque parameters into env vars `user_<key>=<value>`."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "one", "namespace": namespace},
        "spec": {
            "spec": {
                "devices": {
                    "requests": [
                        {"name": "dev", "exactly": {"deviceClassName": device_class_name}}
                    ],
                    "config": [
                        {"opaque": {"driver": DRIVER, "parameters": {"greeting": greeting}}}
                    ],
                }
            }
        },
    }


def workload(namespace: str, name: str) -> dict[str, Any]:
    """Two containers: one uses the claim, the other must not see its device."""

    def container(cname: str, claims: bool) -> dict[str, Any]:
        spec: dict[str, Any] = {
            "name": cname,
            "image": "localhost/busybox:testbed",
            "imagePullPolicy": "Never",
            "command": ["sh", "-c", "env | sort; echo env-done; sleep 3600"],
        }
        if claims:
            spec["resources"] = {"claims": [{"name": "dev"}]}
        return spec

    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "terminationGracePeriodSeconds": 1,
            "resourceClaims": [{"name": "dev", "resourceClaimTemplateName": "one"}],
            "containers": [container("with-device", True), container("without", False)],
        },
    }


def container_env(testbed: Testbed, namespace: str, pod: str, container: str) -> dict[str, str]:
    def printed() -> str | None:
        out = testbed.kubectl("logs", "-n", namespace, pod, "-c", container, check=False)
        return out.stdout if "env-done" in out.stdout else None

    text = wait_for(f"env of {namespace}/{pod}/{container}", printed, timeout=60)
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


def running_on_real_node(testbed: Testbed, namespace: str, pod: str) -> dict[str, Any]:
    def running() -> dict[str, Any] | None:
        obj = testbed.get("pod", pod, "-n", namespace)
        if obj and obj["status"].get("phase") == "Running":
            return obj
        return None

    obj: dict[str, Any] = wait_for(f"pod {namespace}/{pod} Running", running, timeout=90)
    assert obj["spec"]["nodeName"] == NODE
    return obj


def generated_claim(testbed: Testbed, namespace: str) -> dict[str, Any]:
    def allocated() -> dict[str, Any] | None:
        claims = (testbed.get("resourceclaims.resource.k8s.io", "-n", namespace) or {}).get(
            "items", []
        )
        done = [c for c in claims if (c.get("status") or {}).get("allocation")]
        return done[0] if done else None

    claim: dict[str, Any] = wait_for(f"an allocated claim in {namespace}", allocated, timeout=60)
    return claim


def cdi_specs(testbed: Testbed, claim_uid: str) -> list[Path]:
    return [p for p in (node_dir(testbed) / "cdi").glob("*") if claim_uid in p.read_text()]


def unprepared(testbed: Testbed, claim_uid: str) -> bool:
    """The driver logged NodeUnprepareResources for the claim and its CDI spec is gone."""
    assert testbed.state_dir is not None
    log = (testbed.state_dir / "logs" / f"dra-test-driver-{NODE}.log").read_text()
    calls = [line for line in log.splitlines() if "NodeUnprepareResources" in line]
    return any(claim_uid in line for line in calls) and not cdi_specs(testbed, claim_uid)


def assert_device_reached_container(
    testbed: Testbed,
    namespace: str,
    pod: str,
    claim: dict[str, Any],
    greeting: str,
    source: str = "user",
) -> None:
    """``source``: the driver's prefix of the configuration's variables, ``user`` for a
    claim's configuration, ``admin`` for its class's."""
    with_device = container_env(testbed, namespace, pod, "with-device")
    without = container_env(testbed, namespace, pod, "without")
    assert with_device.get(f"{source}_greeting") == greeting, with_device
    claim_vars = [k for k, v in with_device.items() if k.startswith("claim_") and v == "true"]
    assert claim_vars, f"no claim_* variable from the driver's CDI spec: {with_device}"
    assert f"{source}_greeting" not in without
    assert not any(k.startswith("claim_") for k in without)
    assert cdi_specs(testbed, claim["metadata"]["uid"]), "the driver wrote no CDI spec"


def assert_released_when_the_pod_ends(
    testbed: Testbed, namespace: str, pod: str, claim: dict[str, Any]
) -> None:
    """The pod deleted: the driver unprepares its claim, and the generated claim goes."""
    testbed.kubectl("delete", "pod", "-n", namespace, pod, "--wait=true")
    uid = claim["metadata"]["uid"]
    wait_for("NodeUnprepareResources", lambda: unprepared(testbed, uid), timeout=60)
    wait_for(
        "the generated claim deleted",
        lambda: (
            not (testbed.get("resourceclaims.resource.k8s.io", "-n", namespace) or {}).get("items")
        ),
        timeout=60,
    )


def test_in_tree_dra_alone_prepares_the_device_for_the_container(
    testbeds: TestbedRegistry,
) -> None:
    """Upstream alone proves the node: kube-scheduler allocates, kcm makes and removes the claim,
    the kubelet calls the driver, containerd applies its CDI spec."""
    testbed = real_testbed(testbeds, TESTBED_REAL_NODE_DRA)
    namespace = new_namespace(testbed)
    greeting = unique_name("hello")
    class_name = unique_name("test-driver")
    testbed.apply(device_class(class_name))
    testbed.apply(claim_template(namespace, class_name, greeting), workload(namespace, "p"))
    running_on_real_node(testbed, namespace, "p")
    claim = generated_claim(testbed, namespace)
    assert_device_reached_container(testbed, namespace, "p", claim, greeting)

    assert_released_when_the_pod_ends(testbed, namespace, "p", claim)


# ---------------------------------------------------------------------------------------------
# the operator in-cluster


def operator_image() -> tuple[str, Path]:
    """(reference, OCI archive) of the operator's image, built by testbed/image (or reused)."""
    try:
        result = subprocess.run(
            [str(TESTBED_DIR / "image")], capture_output=True, text=True, check=False,
            timeout=IMAGE_TIMEOUT_S,
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired) as exc:
        pytest.skip(f"operator image unavailable: testbed/image: {exc}")
    lines = result.stdout.strip().splitlines()
    if result.returncode != 0 or not lines:
        reason = (result.stderr.strip().splitlines() or ["no output"])[-1]
        pytest.skip(f"operator image unavailable: testbed/image: {reason}")
    ref, archive = lines[-1].split(" ", 1)
    return ref, Path(archive)


CERT_JOB_TTL_S = 5
"""The finished certificate Job deletes itself after this many seconds here (60 as shipped):
what the upgrade test waits for, the mechanism being the same."""


def kustomization(tmp: Path, ref: str, patches: Sequence[dict[str, Any]] = ()) -> Path:
    """manifests/overlays/in-tree with the image replaced by the locally built one (and the
    certificate Job's ttl shortened, CERT_JOB_TTL_S)."""
    name, _, tag = ref.rpartition(":")
    ttl = {"op": "replace", "path": "/spec/ttlSecondsAfterFinished", "value": CERT_JOB_TTL_S}
    job = {"kind": "Job", "name": "dralloc-webhook-cert"}
    overlay = os.path.relpath(REPO_ROOT / "manifests" / "overlays" / "in-tree", tmp)
    (tmp / "kustomization.yaml").write_text(
        json.dumps(
            {
                "apiVersion": "kustomize.config.k8s.io/v1beta1",
                "kind": "Kustomization",
                "resources": [overlay],
                "images": [{"name": "dralloc", "newName": name, "newTag": tag}],
                "patches": [{"target": job, "patch": json.dumps([ttl])}, *patches],
            }
        )
    )
    return tmp


def operator_pods(testbed: Testbed) -> list[dict[str, Any]]:
    found = testbed.get(
        "pods", "-n", OPERATOR_NAMESPACE, "-l", "app.kubernetes.io/component=operator"
    )
    return [p for p in (found or {}).get("items", []) if not p["metadata"].get("deletionTimestamp")]


def ready(pod: dict[str, Any]) -> bool:
    conditions = pod.get("status", {}).get("conditions", [])
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def lease_holder(testbed: Testbed) -> str | None:
    lease = testbed.get("lease", "-n", OPERATOR_NAMESPACE, "dralloc-operator")
    holder = (lease or {}).get("spec", {}).get("holderIdentity")
    return str(holder) if holder else None


def import_operator_image(testbed: Testbed) -> str:
    """The operator image, built (or reused) and imported into the real node's containerd;
    returns its reference."""
    ref, archive = operator_image()
    assert testbed.state_dir is not None
    subprocess.run(
        ["python3", str(TESTBED_DIR / "control.py"), "import-image", str(testbed.state_dir),
         str(archive)],
        check=True, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    return ref


ADMITTED_IN_A_ROW = 6
"""Dry-run admissions in a row before the webhook counts as reachable: with two replicas
behind the Service and the route to one of them stale, six in a row pass once in 64."""


def rolled_out(testbed: Testbed) -> list[dict[str, Any]]:
    """The certificate Job done, the Deployment rolled out, two Ready replicas, one of them
    holding the Lease; returns the replicas' pods."""
    testbed.kubectl(
        "wait", "-n", OPERATOR_NAMESPACE, "--for=condition=complete",
        "job/dralloc-webhook-cert", "--timeout=180s", timeout=200,
    )  # fmt: skip
    testbed.kubectl(
        "rollout", "status", "-n", OPERATOR_NAMESPACE, "deployment/dralloc-operator",
        "--timeout=240s", timeout=260,
    )  # fmt: skip
    pods: list[dict[str, Any]] = wait_for(
        "two Ready replicas, one holding the Lease",
        lambda: (
            found
            if len(found := operator_pods(testbed)) == 2
            and all(map(ready, found))
            and lease_holder(testbed) in {p["metadata"]["name"] for p in found}
            else None
        ),
        timeout=120,
    )
    # Ready replicas are not yet a reachable webhook: the Service's endpoints still list the
    # replaced replicas for a moment, and kube-proxy programs the new ones later still (seen:
    # "connection refused" on the first apply after an install, and after an upgrade a call
    # that timed out on a gone replica while the next one was admitted, under load). So the
    # endpoints first, then a pod that asks for devices, dry-run until admitted several
    # times in a row (each call may go to either replica).
    names = {p["metadata"]["name"] for p in pods}

    def endpoints_are_the_replicas() -> bool:
        slices = testbed.get(
            "endpointslices", "-n", OPERATOR_NAMESPACE,
            "-l", "kubernetes.io/service-name=dralloc-webhook",
        ) or {}  # fmt: skip
        targets = {
            (endpoint.get("targetRef") or {}).get("name")
            for item in slices.get("items") or []
            for endpoint in item.get("endpoints") or []
        }
        return targets == names

    wait_for("the webhook's endpoints to be the replicas", endpoints_are_the_replicas, timeout=60)
    probe = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "webhook-probe",
            "namespace": "default",
            "annotations": {"resource.dralloc.dev/claims": "[]"},
        },
        "spec": {
            "resourceClaims": [{"name": "dev", "resourceClaimTemplateName": "none"}],
            "containers": [{"name": "c", "image": "localhost/busybox:testbed"}],
        },
    }

    in_a_row = [0]

    def admitted() -> bool:
        answer = testbed.kubectl(
            "create", "--dry-run=server", "-f", "-", input=json.dumps(probe), check=False
        )
        in_a_row[0] = in_a_row[0] + 1 if answer.returncode == 0 else 0
        return in_a_row[0] >= ADMITTED_IN_A_ROW

    wait_for("the webhook to admit pods", admitted, timeout=90, interval=0.5)
    return pods


@pytest.fixture(scope="module")
def in_cluster(
    testbeds: TestbedRegistry, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Testbed]:
    """The operator deployed by `kubectl apply -k` of overlays/in-tree with the local image:
    the certificate Job has run, both replicas are Ready and one holds the Lease."""
    testbed = real_testbed(testbeds, TESTBED_REAL_NODE)
    ref = import_operator_image(testbed)
    overlay = kustomization(tmp_path_factory.mktemp("operator-overlay"), ref)
    testbed.kubectl("apply", "-k", str(overlay), timeout=120)
    rolled_out(testbed)
    yield testbed
    # As manifests/README.md says to remove dralloc: the inert policies that keep
    # kube-apiserver watching policy parameters stay (test_real_node_helm.py installs next).
    testbed.kubectl(
        "delete", "-k", str(overlay), f"--selector={KEEP_SELECTOR}", "--wait=false", check=False
    )


def test_operator_runs_in_cluster_from_its_image(in_cluster: Testbed) -> None:
    """Two replicas from the local image, one leader, the webhook on the Job's certificate,
    JSON logs in `kubectl logs`."""
    testbed = in_cluster
    pods = wait_for(
        "two Ready replicas",
        lambda: p if len(p := operator_pods(testbed)) == 2 and all(map(ready, p)) else None,
        timeout=60,
    )
    images = {c["image"] for p in pods for c in p["spec"]["containers"]}
    assert len(images) == 1 and next(iter(images)).startswith("localhost/dralloc:"), images
    assert {p["spec"]["nodeName"] for p in pods} == {NODE}
    assert lease_holder(testbed) in {p["metadata"]["name"] for p in pods}

    webhook = testbed.get("mutatingwebhookconfiguration", "dralloc")
    assert webhook is not None
    bundle = base64.b64decode(webhook["webhooks"][0]["clientConfig"]["caBundle"])
    secret = testbed.get("secret", "-n", OPERATOR_NAMESPACE, "dralloc-webhook-tls")
    assert secret is not None
    assert base64.b64decode(secret["data"]["ca.crt"]) == bundle, "caBundle is not the Job's CA"

    for p in pods:
        out = testbed.kubectl("logs", "-n", OPERATOR_NAMESPACE, p["metadata"]["name"]).stdout
        records = [json.loads(line) for line in out.splitlines() if line.strip()]
        assert records, f"no log lines from {p['metadata']['name']}"
        assert all("event" in r and "level" in r for r in records), records[:3]


def test_only_the_replica_holding_the_lease_may_make_claims(
    in_cluster: Testbed, tmp_path: Path
) -> None:
    """The fencing policy as deployed, with the replicas' own identities: a token bound to
    the leader's pod may make a claim, one bound to the standby's is refused, naming the
    Lease and its holder (server-side dry runs: admission runs, nothing is stored)."""
    testbed = in_cluster
    leader = lease_holder(testbed)
    pods = {p["metadata"]["name"]: p["metadata"]["uid"] for p in operator_pods(testbed)}
    assert leader in pods and len(pods) == 2, (leader, pods)
    namespace = new_namespace(testbed)
    # Made for a pod, as the claim controller makes them: the policy on the operator's own
    # claim writes lets it by, so the fencing policy alone decides.
    owner = {
        "apiVersion": "v1",
        "kind": "Pod",
        "name": "p",
        "uid": str(uuid.uuid4()),
        "controller": True,
    }
    claim = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "fenced", "namespace": namespace, "ownerReferences": [owner]},
        "spec": {"devices": {"requests": []}},
    }
    answers = {}
    for name, uid in pods.items():
        token = testbed.kubectl(
            "create", "token", "dralloc-operator", "-n", OPERATOR_NAMESPACE, "--duration=10m",
            "--bound-object-kind=Pod", f"--bound-object-name={name}", f"--bound-object-uid={uid}",
        ).stdout.strip()  # fmt: skip
        kubeconfig = token_kubeconfig(testbed, token, tmp_path / f"{name}.kubeconfig")
        answers[name] = testbed.kubectl(
            f"--kubeconfig={kubeconfig}", "create", "--dry-run=server", "-f", "-",
            input=json.dumps(claim), check=False,
        )  # fmt: skip
    (standby,) = set(pods) - {leader}
    assert answers[leader].returncode == 0, answers[leader].stderr
    refused = answers[standby].stderr
    assert answers[standby].returncode != 0
    assert "dralloc-claim-allocation-fencing" in refused, refused
    assert f'held by "{leader}"; this writer is pod "{standby}"' in refused, refused


def test_an_upgrade_reapplies_the_certificate_job(in_cluster: Testbed, tmp_path: Path) -> None:
    """An upgrade re-applies the manifests with the Job's pod template changed (a new image;
    here an annotation, there being one image): the finished Job has deleted itself by then,
    so the apply is not refused for its immutable template, and the new run keeps the valid
    certificate and the caBundle."""
    testbed = in_cluster
    secret = testbed.get("secret", "-n", OPERATOR_NAMESPACE, "dralloc-webhook-tls")
    assert secret is not None
    wait_for(
        "the finished certificate Job to delete itself",
        lambda: (
            testbed.get("job", "-n", OPERATOR_NAMESPACE, "dralloc-webhook-cert") is None or None
        ),
        timeout=150,
    )
    ref, _ = operator_image()
    annotate = {
        "op": "add",
        "path": "/spec/template/metadata/annotations",
        "value": {"dralloc.example.com/upgrade": "2"},
    }
    upgrade = kustomization(
        tmp_path,
        ref,
        [
            {
                "target": {"kind": "Job", "name": "dralloc-webhook-cert"},
                "patch": json.dumps([annotate]),
            }
        ],
    )
    testbed.kubectl("apply", "-k", str(upgrade), timeout=120)
    job = testbed.get("job", "-n", OPERATOR_NAMESPACE, "dralloc-webhook-cert")
    assert job is not None
    assert job["spec"]["template"]["metadata"]["annotations"] == annotate["value"]
    testbed.kubectl(
        "wait", "-n", OPERATOR_NAMESPACE, "--for=condition=complete",
        "job/dralloc-webhook-cert", "--timeout=180s", timeout=200,
    )  # fmt: skip
    after = testbed.get("secret", "-n", OPERATOR_NAMESPACE, "dralloc-webhook-tls")
    assert after is not None and after["data"] == secret["data"], (
        "the valid certificate was replaced"
    )
    webhook = testbed.get("mutatingwebhookconfiguration", "dralloc")
    assert webhook is not None
    bundle = base64.b64decode(webhook["webhooks"][0]["clientConfig"]["caBundle"])
    assert bundle == base64.b64decode(secret["data"]["ca.crt"])


def test_dralloc_allocates_and_the_kubelet_prepares(in_cluster: Testbed) -> None:
    """dralloc (not kube-scheduler) allocates; the kubelet prepares that allocation through the
    driver; when the pod ends the driver unprepares and dralloc deallocates and deletes the
    generated claim."""
    testbed = in_cluster
    namespace = new_namespace(testbed)
    greeting = unique_name("hello")
    class_name = unique_name("test-driver")
    testbed.apply(device_class(class_name))
    testbed.apply(claim_template(namespace, class_name, greeting), workload(namespace, "p"))
    pod = running_on_real_node(testbed, namespace, "p")
    assert "resource.dralloc.dev/allocated-by" in pod["metadata"].get("annotations", {}), (
        "the pod was not allocated by dralloc"
    )
    claim = generated_claim(testbed, namespace)
    assert_device_reached_container(testbed, namespace, "p", claim, greeting)

    assert_released_when_the_pod_ends(testbed, namespace, "p", claim)


def test_an_extended_resource_pod_runs_with_the_device_the_driver_prepared(
    in_cluster: Testbed,
) -> None:
    """A container asking for ``<name>.example.com/gpu: 1`` (a DeviceClass's
    extendedResourceName) instead of a claim: the webhook turns it into a claim of the pod,
    dralloc allocates it, and the kubelet prepares it through the driver for that container
    only (the class's configuration reaches it); the claim goes with the pod."""
    testbed = in_cluster
    namespace = new_namespace(testbed)
    greeting = unique_name("hello")
    class_name = unique_name("test-driver-ext")
    resource = f"{class_name}.example.com/gpu"
    extended = device_class(class_name)
    extended["spec"]["extendedResourceName"] = resource
    extended["spec"]["config"] = [
        {"opaque": {"driver": DRIVER, "parameters": {"greeting": greeting}}}
    ]
    testbed.apply(extended)
    pod = workload(namespace, "x")
    del pod["spec"]["resourceClaims"]
    pod["spec"]["containers"][0]["resources"] = {"limits": {resource: "1"}}
    testbed.apply(pod)
    running = running_on_real_node(testbed, namespace, "x")
    assert "resource.dralloc.dev/allocated-by" in running["metadata"].get("annotations", {}), (
        "the pod was not allocated by dralloc"
    )
    assert not running.get("status", {}).get("extendedResourceClaimStatus")  # not kube-scheduler's
    (entry,) = running["spec"]["resourceClaims"]
    claim = generated_claim(testbed, namespace)
    assert claim["metadata"]["name"] == entry["resourceClaimName"]
    assert claim["metadata"]["ownerReferences"][0]["uid"] == running["metadata"]["uid"]
    # The class's configuration: the driver names it admin_<key> (a claim's is user_<key>).
    assert_device_reached_container(testbed, namespace, "x", claim, greeting, source="admin")
    assert_released_when_the_pod_ends(testbed, namespace, "x", claim)


def test_no_execute_taint_evicts_from_the_real_node(in_cluster: Testbed) -> None:
    """A NoExecute DeviceTaintRule on the pod's device: dralloc evicts the pod, the kubelet
    stops its containers and the driver unprepares the device."""
    testbed = in_cluster
    namespace = new_namespace(testbed)
    class_name = unique_name("test-driver")
    testbed.apply(device_class(class_name))
    testbed.apply(claim_template(namespace, class_name, "taint"), workload(namespace, "victim"))
    victim = running_on_real_node(testbed, namespace, "victim")
    # The check below must be able to see the pod's containers, or it passes for nothing.
    assert len(pod_containers(testbed, victim["metadata"]["uid"])) >= 2
    claim = generated_claim(testbed, namespace)
    result = claim["status"]["allocation"]["devices"]["results"][0]
    version = next(
        v
        for v in ("v1", "v1beta2", "v1alpha3")
        if testbed.kubectl("get", f"devicetaintrules.{v}.resource.k8s.io", check=False).returncode
        == 0
    )
    rule = unique_name("unhealthy")
    testbed.apply(
        {
            "apiVersion": f"resource.k8s.io/{version}",
            "kind": "DeviceTaintRule",
            "metadata": {"name": rule},
            "spec": {
                "deviceSelector": {
                    "driver": result["driver"],
                    "pool": result["pool"],
                    "device": result["device"],
                },
                "taint": {"key": TAINT_KEY, "value": "true", "effect": "NoExecute"},
            },
        }
    )
    try:
        wait_for(
            "the pod evicted",
            lambda: testbed.get("pod", "victim", "-n", namespace) is None,
            timeout=90,
        )
        uid = claim["metadata"]["uid"]
        wait_for("NodeUnprepareResources", lambda: unprepared(testbed, uid), timeout=60)
        # The kubelet stopped the containers: none of the pod's is left in containerd.
        assert not pod_containers(testbed, victim["metadata"]["uid"])
    finally:
        testbed.kubectl("delete", f"devicetaintrules.{version}.resource.k8s.io", rule, check=False)


def pod_containers(testbed: Testbed, pod_uid: str) -> list[str]:
    """Running tasks of the pod in the real node's containerd (by the CRI's pod-uid label)."""
    socket = node_dir(testbed).resolve() / "containerd" / "containerd.sock"
    ctr = [str(testbed.bin / "ctr"), f"--address={socket}", "--namespace=k8s.io"]
    containers = subprocess.run(
        [*ctr, "containers", "list", "-q", f'labels."io.kubernetes.pod.uid"=={pod_uid}'],
        capture_output=True, text=True, check=True, timeout=30,
    ).stdout.split()  # fmt: skip
    tasks = subprocess.run(
        [*ctr, "tasks", "list", "-q"], capture_output=True, text=True, check=True, timeout=30
    ).stdout.split()
    return [c for c in containers if c in tasks]


def test_the_standby_replica_takes_over_when_the_leader_goes(in_cluster: Testbed) -> None:
    """Leader election across the replicas: with the leader's pod deleted, another live
    replica takes the Lease and allocates the next pod (the pod's allocation record names
    it). Usually the standby; the replacement the ReplicaSet starts at once may win instead
    when both wait for the Lease to expire (seen after test_helm's run: the standby's log then
    shows no error, the replacement holds the Lease)."""
    testbed = in_cluster
    leader = lease_holder(testbed)
    standby = [p["metadata"]["name"] for p in operator_pods(testbed)]
    assert leader is not None and leader in standby and len(standby) == 2
    standby.remove(leader)
    testbed.kubectl("delete", "pod", "-n", OPERATOR_NAMESPACE, leader, "--wait=false")

    def new_leader() -> str | None:
        holder = lease_holder(testbed)
        live = {p["metadata"]["name"] for p in operator_pods(testbed)}
        return holder if holder and holder != leader and holder in live else None

    try:
        taken = wait_for("another replica holding the Lease", new_leader, timeout=60)
    except AssertionError as error:
        pods = [p["metadata"]["name"] for p in operator_pods(testbed)]
        logs = testbed.kubectl(
            "logs", "-n", OPERATOR_NAMESPACE, standby[0], "--tail=30", check=False
        ).stdout
        raise AssertionError(
            f"{error}; the Lease is held by {lease_holder(testbed)!r}, operator pods {pods}; "
            f"the standby's log ends:\n{logs}"
        ) from None
    print(
        f"\n[real-node] the Lease went to {'the standby' if taken == standby[0] else 'the replacement'}"
    )

    namespace = new_namespace(testbed)
    class_name = unique_name("test-driver")
    testbed.apply(device_class(class_name))
    testbed.apply(claim_template(namespace, class_name, "after"), workload(namespace, "p"))
    pod = running_on_real_node(testbed, namespace, "p")
    record = json.loads(pod["metadata"]["annotations"]["resource.dralloc.dev/allocated-by"])
    assert record["holder"] == taken, record
