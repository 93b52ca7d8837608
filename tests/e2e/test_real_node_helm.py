"""`helm install` of charts/dralloc with the operator running in-cluster from its image, on the
real node, in both API modes: it allocates a pod that then runs; `helm upgrade` rolls the
replicas and the new ones allocate the next pod; `helm uninstall` leaves nothing behind but
what the chart documents as kept (the CRDs, and two inert policies that keep kube-apiserver
watching policy parameters). The second mode's install follows the first one's uninstall on
the same kube-apiserver, as a user's reinstall would: without those two policies its fencing
policy judged by the old replica's Lease and refused the new replicas' every write
(kubernetes/kubernetes#130887).

tests/e2e/test_helm.py installs the chart on a control plane without a Deployment controller
(its objects, RBAC and upgrades, but no operator); tests/e2e/test_real_node.py runs the
operator from `manifests/` (kustomize). This module is where the chart's own Deployment,
certificate Job and policies run together. It removes test_real_node.py's kustomize install
first (the same cluster-scoped names) and skips, with the reason, where real nodes or the
image are unavailable.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from .kube_helpers import Testbed, TestbedRegistry, unique_name, wait_for
from .modes import CRD, IN_TREE, TESTBED_REAL_NODE, ApiMode
from .operator_fixtures import slice_manifest
from .test_helm import CHART, KEEP, RELEASE, Helm, exists, helm_binary
from .test_real_node import (
    KEEP_SELECTOR,
    NODE,
    OPERATOR_NAMESPACE,
    assert_device_reached_container,
    assert_released_when_the_pod_ends,
    claim_template,
    device_class,
    generated_claim,
    import_operator_image,
    kustomization,
    new_namespace,
    real_testbed,
    rolled_out,
    running_on_real_node,
    workload,
)

pytestmark = [pytest.mark.timeout(900), pytest.mark.real_node]

ALLOCATED_BY = "resource.dralloc.dev/allocated-by"


@dataclass
class ChartBed:
    testbed: Testbed
    helm: Helm
    image: str
    """The operator image's reference."""
    adopting: list[str]
    """Arguments of the next install only: ``--force-conflicts`` where it adopts what a
    kustomize install kept (kubectl's field manager owns their fields)."""


@pytest.fixture(scope="module")
def chart_testbed(
    testbeds: TestbedRegistry, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ChartBed]:
    """The real-node testbed with the operator image imported and no other install of
    dralloc. Deletes the CRDs the releases kept."""
    testbed = real_testbed(testbeds, TESTBED_REAL_NODE)
    helm = Helm(helm_binary(), testbed, tmp_path_factory.mktemp("helm-home"))
    ref = import_operator_image(testbed)
    # test_real_node.py's install (same names) may still be going: remove it, as
    # manifests/README.md says, and wait; then let the release adopt what that keeps, as
    # charts/dralloc/README.md says (helm refuses objects another tool made).
    overlay = kustomization(tmp_path_factory.mktemp("kustomize-leftover"), ref)
    testbed.kubectl(
        "delete", "-k", str(overlay), f"--selector={KEEP_SELECTOR}", "--ignore-not-found",
        "--wait=true", "--timeout=180s", timeout=200, check=False,
    )  # fmt: skip
    wait_for(
        f"namespace {OPERATOR_NAMESPACE} gone",
        lambda: testbed.get("namespace", OPERATOR_NAMESPACE) is None,
        timeout=180,
    )
    kept = [
        "validatingadmissionpolicies,validatingadmissionpolicybindings",
        "--selector=resource.dralloc.dev/on-uninstall=keep",
    ]
    testbed.kubectl(
        "annotate", *kept, f"meta.helm.sh/release-name={RELEASE}",
        "meta.helm.sh/release-namespace=default", "--overwrite",
    )  # fmt: skip
    testbed.kubectl("label", *kept, "app.kubernetes.io/managed-by=Helm", "--overwrite")
    adopted = testbed.kubectl("get", *kept, "-o", "name").stdout.split()
    yield ChartBed(testbed, helm, ref, ["--force-conflicts"] if adopted else [])
    helm("uninstall", RELEASE, "--wait", check=False)
    for crd in testbed.kubectl("get", "crd", "-o", "name").stdout.split():
        if crd.endswith(".resource.dralloc.dev"):
            testbed.kubectl("delete", crd, "--wait=false", check=False)


def crd_mode_pod(namespace: str, name: str, device_class_name: str) -> list[dict[str, Any]]:
    """A claim template of dralloc's CRDs and a pod asking for it in the claims annotation."""
    template = {
        "apiVersion": CRD.api_version,
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "one", "namespace": namespace},
        "spec": {
            "spec": {
                "devices": {
                    "requests": [{"name": "dev", "exactly": {"deviceClassName": device_class_name}}]
                }
            }
        },
    }
    pod: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "terminationGracePeriodSeconds": 1,
            "containers": [
                {
                    "name": "c",
                    "image": "localhost/busybox:testbed",
                    "imagePullPolicy": "Never",
                    "command": ["sleep", "3600"],
                }
            ],
        },
    }
    CRD.set_pod_claims(pod, [{"name": "dev", "resourceClaimTemplateName": "one"}])
    return [template, pod]


def where_it_is(testbed: Testbed, namespace: str, name: str) -> str:
    """The pod's gates, conditions and events, and the operator's last words, for a failure."""
    pod = testbed.get("pod", name, "-n", namespace) or {}
    events = (testbed.get("events", "-n", namespace) or {}).get("items", [])
    logs = testbed.kubectl(
        "logs", "-n", OPERATOR_NAMESPACE, "-l", "app.kubernetes.io/component=operator",
        "--tail=20", check=False,
    ).stdout  # fmt: skip
    return (
        f"gates {pod.get('spec', {}).get('schedulingGates')}, "
        f"status {json.dumps(pod.get('status'))}, "
        f"events {[(e.get('reason'), e.get('message')) for e in events]}, "
        f"operator log:\n{logs}"
    )


def allocate_a_pod(testbed: Testbed, mode: ApiMode, name: str) -> str:
    """A pod asking for one device of the real node, in ``mode`` and a namespace of its own:
    dralloc allocates it and it runs there (in-tree, with the device the driver prepared);
    deleted, its claim goes. Returns the allocating replica, from the pod's allocation
    record."""
    namespace = new_namespace(testbed)
    if mode == IN_TREE:
        greeting = unique_name("hello")
        class_name = unique_name("test-driver")
        testbed.apply(device_class(class_name))
        testbed.apply(claim_template(namespace, class_name, greeting), workload(namespace, name))
        pod = running_on_real_node(testbed, namespace, name)
        claim = generated_claim(testbed, namespace)
        assert_device_reached_container(testbed, namespace, name, claim, greeting)
        assert_released_when_the_pod_ends(testbed, namespace, name, claim)
    else:
        label = unique_name("helm-crd")
        driver = f"{label}.example.com"
        testbed.apply(
            {
                "apiVersion": CRD.api_version,
                "kind": "DeviceClass",
                "metadata": {"name": label},
                "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{driver}"'}}]},
            },
            slice_manifest(driver, NODE, 2, mode=CRD),
            *crd_mode_pod(namespace, name, label),
        )
        try:
            pod = running_on_real_node(testbed, namespace, name)
        except AssertionError as error:
            raise AssertionError(f"{error}; {where_it_is(testbed, namespace, name)}") from None
        claims = (testbed.get(CRD.resource("resourceclaims"), "-n", namespace) or {}).get(
            "items", []
        )
        results = [
            r
            for c in claims
            for r in ((c.get("status") or {}).get("allocation") or {})
            .get("devices", {})
            .get("results", [])
        ]
        assert [(r["driver"], r["pool"]) for r in results] == [(driver, NODE)], claims
        testbed.kubectl("delete", "pod", "-n", namespace, name, "--wait=true")
        wait_for(
            "the generated claim deleted",
            lambda: (
                not (testbed.get(CRD.resource("resourceclaims"), "-n", namespace) or {}).get(
                    "items"
                )
            ),
            timeout=60,
        )
    record = json.loads(pod["metadata"].get("annotations", {}).get(ALLOCATED_BY, "null"))
    assert record, f"{namespace}/{name} was not allocated by dralloc: {pod['metadata']}"
    return str(record["holder"])


@pytest.mark.parametrize("mode", [IN_TREE, CRD], ids=str)
def test_the_chart_runs_the_operator_that_allocates(chart_testbed: ChartBed, mode: ApiMode) -> None:
    testbed, helm, ref = chart_testbed.testbed, chart_testbed.helm, chart_testbed.image
    repository, _, tag = ref.rpartition(":")
    values = [
        "--set", f"image.repository={repository}", "--set", f"image.tag={tag}",
        "--set", "image.pullPolicy=Never",
        *(["--set", "apiGroup=resource.k8s.io"] if mode == IN_TREE else []),
    ]  # fmt: skip
    helm("install", RELEASE, str(CHART), *values, *chart_testbed.adopting)
    chart_testbed.adopting = []
    try:
        rendered = helm.template(*values)
        pods = rolled_out(testbed)
        names = {p["metadata"]["name"] for p in pods}
        assert {c["image"] for p in pods for c in p["spec"]["containers"]} == {ref}
        assert allocate_a_pod(testbed, mode, "before") in names

        # An upgrade that changes the pod template rolls both replicas; the new ones allocate.
        helm(
            "upgrade", RELEASE, str(CHART), *values,
            "--set-json", 'podAnnotations={"e2e.dralloc.dev/upgrade":"2"}',
        )  # fmt: skip
        upgraded = rolled_out(testbed)
        new_names = {p["metadata"]["name"] for p in upgraded}
        assert not names & new_names, (names, new_names)
        assert all(
            p["metadata"]["annotations"].get("e2e.dralloc.dev/upgrade") == "2" for p in upgraded
        )
        assert allocate_a_pod(testbed, mode, "after") in new_names
    except BaseException:
        # Not left for the other mode's install to trip over.
        helm("uninstall", RELEASE, "--wait", "--timeout=180s", check=False)
        raise
    helm("uninstall", RELEASE, "--wait", "--timeout=180s")
    wait_for(
        f"namespace {OPERATOR_NAMESPACE} gone",
        lambda: testbed.get("namespace", OPERATOR_NAMESPACE) is None,
        timeout=180,
    )
    left = {f"{o['kind']}/{o['metadata']['name']}" for o in rendered if exists(testbed, o)}
    kept = {
        f"{o['kind']}/{o['metadata']['name']}"
        for o in rendered
        if (o["metadata"].get("annotations") or {}).get(KEEP) == "keep"
    }
    assert left == kept, f"left behind: {sorted(left - kept)}; kept: {sorted(kept - left)}"
    # DeviceQuota's CRD (both modes) and the two inert policies with their bindings.
    assert "CustomResourceDefinition/devicequotas.resource.dralloc.dev" in kept
    assert len([k for k in kept if k.startswith("ValidatingAdmissionPolicy")]) == 4, kept
    leases = testbed.get("leases", "-A", "--field-selector=metadata.name=dralloc-operator")
    assert not (leases or {}).get("items"), leases
