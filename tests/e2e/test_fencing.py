"""Fencing by the API server (manifests/base/claim-allocation-fencing.yaml), on a real one.

Two operators run with pod-bound tokens of one ServiceAccount, as two replicas of the
Deployment do (the API server puts each pod's name in its requests' userInfo.extra). Each is
told a Lease of its own, so both lead: a laptop's ``kopf run`` next to the in-cluster one.
The policy, as shipped, is bound to the first one's Lease. The second one's Lease sorts
first, so dralloc's own second line (allocation records: the allocator whose Lease sorts
first goes on) would keep *it* going and stop the first: only the API server stands between
them. It refuses the second one every claim and every allocation; every claim is made and
allocated by the first, one per pod, and no device is held twice at any recorded revision;
told so by the API server, the second stops allocating.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from .history_helpers import judged, recording
from .kube_helpers import REPO_ROOT, Testbed, token_kubeconfig, unique_name, wait_for
from .operator_fixtures import (
    GATE,
    LEASE_NAMESPACE,
    OperatorProcess,
    claims_in,
    ensure_lease_namespace,
    install_crds,
    make_pool,
    pod,
    template,
    wait_bound,
)

pytestmark = [pytest.mark.api_modes, pytest.mark.timeout(300)]

POLICY = "dralloc-claim-allocation-fencing"
SHIPPED_WRITER = "system:serviceaccount:dralloc-system:dralloc-operator"
REFUSED = "only the dralloc operator that holds the Lease"
PODS = 10


def rendered(testbed: Testbed, scratch: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """The fencing policy and its binding, as kustomize renders them in this mode."""
    scratch.mkdir(parents=True, exist_ok=True)
    in_tree = not testbed.api_mode.claims_in_annotation
    kustomization = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": [os.path.relpath(REPO_ROOT / "manifests" / "base", scratch)],
        "components": [os.path.relpath(REPO_ROOT / "manifests" / "components" / "in-tree", scratch)]
        if in_tree
        else [],
    }
    (scratch / "kustomization.yaml").write_text(yaml.safe_dump(kustomization))
    objects = [d for d in yaml.safe_load_all(testbed.kubectl("kustomize", str(scratch)).stdout)]
    named = [o for o in objects if o and o["metadata"]["name"] == POLICY]
    policy = next(o for o in named if o["kind"] == "ValidatingAdmissionPolicy")
    binding = next(o for o in named if o["kind"] == "ValidatingAdmissionPolicyBinding")
    return policy, binding


class Replicas:
    """A ServiceAccount with the rights of an operator, and pods whose tokens it hands out."""

    def __init__(self, testbed: Testbed, where: Path) -> None:
        self.testbed = testbed
        self.where = where
        self.namespace = unique_name("e2e-fence-ops")
        self.account = "dralloc-operator"
        self.binding = f"{self.namespace}-admin"

    @property
    def username(self) -> str:
        return f"system:serviceaccount:{self.namespace}:{self.account}"

    def create(self) -> None:
        self.testbed.kubectl("create", "namespace", self.namespace)
        self.testbed.kubectl("create", "serviceaccount", self.account, "-n", self.namespace)
        # What the operator may do is not this test's subject (test_manifests is).
        self.testbed.kubectl(
            "create", "clusterrolebinding", self.binding, "--clusterrole=cluster-admin",
            f"--serviceaccount={self.namespace}:{self.account}",
        )  # fmt: skip

    def kubeconfig(self, name: str) -> Path:
        """A pod ``name`` of the ServiceAccount (it never runs) and a token bound to it."""
        body = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": self.namespace},
            "spec": {
                "serviceAccountName": self.account,
                "containers": [{"name": "operator", "image": "registry.invalid/dralloc"}],
                "nodeSelector": {"e2e-fencing": "nowhere"},
            },
        }
        made = self.testbed.kubectl("create", "-o", "json", "-f", "-", input=json.dumps(body))
        uid = json.loads(made.stdout)["metadata"]["uid"]
        token = self.testbed.kubectl(
            "create", "token", self.account, "-n", self.namespace, "--duration=2h",
            "--bound-object-kind=Pod", f"--bound-object-name={name}", f"--bound-object-uid={uid}",
        ).stdout.strip()  # fmt: skip
        return token_kubeconfig(self.testbed, token, self.where / f"{name}.kubeconfig")

    def delete(self) -> None:
        self.testbed.kubectl("delete", "clusterrolebinding", self.binding, check=False)
        self.testbed.kubectl("delete", "namespace", self.namespace, "--wait=false", check=False)


@pytest.fixture
def replicas(testbed: Testbed, tmp_path: Path) -> Iterator[Replicas]:
    made = Replicas(testbed, tmp_path)
    try:
        made.create()
        yield made
    finally:
        made.delete()


def install_fencing(
    testbed: Testbed, scratch: Path, name: str, writer: str, lease: str, namespace: str
) -> None:
    """The shipped policy for ``writer`` (the ServiceAccount), bound to ``lease`` and to the
    claims of ``namespace`` only; waits until it refuses a claim without a Lease holder."""
    policy, binding = rendered(testbed, scratch)
    for condition in policy["spec"]["matchConditions"]:
        condition["expression"] = condition["expression"].replace(SHIPPED_WRITER, writer)
    assert any(writer in c["expression"] for c in policy["spec"]["matchConditions"])
    policy["metadata"] = {"name": name}
    binding["metadata"] = {"name": name}
    binding["spec"]["policyName"] = name
    binding["spec"]["paramRef"].update({"name": lease, "namespace": LEASE_NAMESPACE})
    binding["spec"]["matchResources"] = {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}}
    }
    testbed.apply(policy, binding)


def keep_fencing(testbed: Testbed, name: str) -> None:
    """The policy and binding stay (scoped to the test's namespace, gone with it): deleting
    the last binding whose parameter is a Lease stops kube-apiserver's Lease informer for
    policies until it restarts (kubernetes/kubernetes#130887), and later tests on this
    testbed that fence (test_robustness) would be judged against a frozen Lease."""


def wait_fenced(testbed: Testbed, kubeconfig: Path, namespace: str) -> None:
    """Until the policy is in force: a claim made with ``kubeconfig`` (whose pod holds no
    Lease) is refused."""
    claim = {
        "apiVersion": f"{testbed.api_mode.group}/v1",
        "kind": "ResourceClaim",
        "metadata": {"generateName": "fence-probe-", "namespace": namespace},
        "spec": {"devices": {"requests": []}},
    }

    def refused() -> bool:
        made = testbed.kubectl(
            f"--kubeconfig={kubeconfig}", "create", "-o", "name", "-f", "-",
            input=json.dumps(claim), check=False,
        )  # fmt: skip
        if made.returncode == 0:  # not in force yet
            testbed.kubectl("delete", "-n", namespace, made.stdout.strip(), check=False)
            return False
        assert POLICY in made.stderr or "ValidatingAdmissionPolicy" in made.stderr, made.stderr
        return True

    wait_for("the fencing policy in force", refused, timeout=60)


def test_of_two_leading_operators_only_the_lease_holder_makes_and_allocates_claims(
    testbed: Testbed, tmp_path: Path, replicas: Replicas, namespace: str
) -> None:
    install_crds(testbed)
    ensure_lease_namespace(testbed)
    run = unique_name("fence")
    configured, other = f"z-{run}", f"a-{run}"  # the other's Lease sorts first
    name = f"{run}-policy"
    keys = {role: replicas.kubeconfig(f"op-{role}") for role in ("holder", "other")}
    operators = {
        role: OperatorProcess(
            testbed, tmp_path / f"{role}.log", lease=lease, webhook=False,
            identity=f"op-{role}", kubeconfig=keys[role],
        )
        for role, lease in (("holder", configured), ("other", other))
    }  # fmt: skip
    pool = make_pool(testbed, nodes=2, devices=PODS)
    testbed.apply(template(namespace, "one", pool))
    entry = [{"name": "dev", "resourceClaimTemplateName": "one"}]
    gate: dict[str, Any] = {"schedulingGates": [{"name": GATE}]}
    try:
        install_fencing(
            testbed, tmp_path / "policy", name, replicas.username, configured, namespace
        )
        wait_fenced(testbed, keys["other"], namespace)
        with recording(testbed, [namespace], f"{namespace}-marks") as recorder:
            for proc in operators.values():
                proc.start()
            for proc in operators.values():
                proc.wait_until("controllers starting")
            testbed.apply(*[pod(namespace, f"p-{i}", pool, entry, **gate) for i in range(PODS)])
            for i in range(PODS):
                wait_bound(testbed, namespace, f"p-{i}", timeout=120)
            report = judged(recorder.history())
        assert report.ok, [str(v) for v in report.violations]
        owners = [
            ref["uid"]
            for c in claims_in(testbed, namespace)
            for ref in c["metadata"].get("ownerReferences") or []
        ]
        assert len(owners) == PODS == len(set(owners)), "a pod got a second claim"
        other_log = operators["other"].log()
        assert REFUSED in other_log, other_log[-3000:]
        # Told by the API server, it stopped (it never saw a record of the holder's winning).
        assert "the API server refuses this replica's claims and allocations" in other_log
        assert "pod allocated" not in other_log
        assert "another allocator is acting" not in operators["holder"].log()
    finally:
        for proc in operators.values():
            proc.stop()
        keep_fencing(testbed, name)
