"""Operators that run as a Deployment's replicas do, and the fencing policy as shipped.

With ``--fencing`` every operator of a run (the first, the supervisor's restarts, the
second-operator fault's) uses a token bound to a pod of its own of one ServiceAccount, as the
replicas of the Deployment do: the API server names the pod in each of its requests, and the
shipped fencing policy (manifests/base/claim-allocation-fencing.yaml), bound to the run's
Lease, refuses claims and allocations from every operator but the Lease's holder; the shipped
policies dralloc-operator-pod-writes and dralloc-operator-claim-writes limit their pod and
claim writes to dralloc's protocol. The pods
never run (no node matches them); the ServiceAccount may do anything (the run does not test
RBAC).
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

import yaml

from operators.fencing import NOT_THE_HOLDER
from robustness.cluster import Cluster
from robustness.gates import rendered

POLICY: Final = "dralloc-claim-allocation-fencing"
POD_WRITES: Final = "dralloc-operator-pod-writes"
CLAIM_WRITES: Final = "dralloc-operator-claim-writes"
SHIPPED_WRITER: Final = "system:serviceaccount:dralloc-system:dralloc-operator"
ACCOUNT: Final = "dralloc-operator"


class Replicas:
    def __init__(
        self,
        cluster: Cluster,
        prefix: str,
        lease: tuple[str, str],
        namespaces: Sequence[str],
        work_dir: Path,
    ) -> None:
        self.cluster = cluster
        self.namespace = f"ops-{prefix}"
        self.name = f"{prefix}-fencing"
        self.lease = lease
        """The Lease whose holder may allocate: (namespace, name)."""
        self.namespaces = tuple(namespaces)
        """The namespaces whose claims the policy guards."""
        self.work_dir = work_dir

    @property
    def username(self) -> str:
        return f"system:serviceaccount:{self.namespace}:{ACCOUNT}"

    @property
    def pod_writes_name(self) -> str:
        return f"{self.name.removesuffix('-fencing')}-pod-writes"

    @property
    def claim_writes_name(self) -> str:
        return f"{self.name.removesuffix('-fencing')}-claim-writes"

    def policy(self) -> list[dict[str, Any]]:
        """The shipped fencing policy and binding for this run's ServiceAccount, Lease and
        namespaces, and the shipped policies that limit the operator's pod and claim writes to
        its protocol (so every such write of the run's operators is judged by them too)."""
        components = ["in-tree"] if self.cluster.mode.in_tree else []
        kinds = ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")
        objects = rendered(self.cluster, components, kinds)
        out: list[dict[str, Any]] = []
        for shipped, name in (
            (POLICY, self.name),
            (POD_WRITES, self.pod_writes_name),
            (CLAIM_WRITES, self.claim_writes_name),
        ):
            found = [o for o in objects if o["metadata"]["name"] == shipped]
            policy = next(o for o in found if o["kind"] == kinds[0])
            binding = next(o for o in found if o["kind"] == kinds[1])
            for condition in policy["spec"]["matchConditions"]:
                condition["expression"] = condition["expression"].replace(
                    SHIPPED_WRITER, self.username
                )
            policy["metadata"] = {"name": name}
            binding["metadata"] = {"name": name}
            binding["spec"]["policyName"] = name
            if "paramRef" in binding["spec"]:
                namespace, lease = self.lease
                binding["spec"]["paramRef"].update({"name": lease, "namespace": namespace})
            binding["spec"]["matchResources"] = {
                "namespaceSelector": {
                    "matchExpressions": [
                        {"key": "kubernetes.io/metadata.name", "operator": "In",
                         "values": list(self.namespaces)}
                    ]
                }
            }  # fmt: skip
            out += [policy, binding]
        return out

    def install(self) -> None:
        self.cluster.kubectl("create", "namespace", self.namespace)
        self.cluster.kubectl("create", "serviceaccount", ACCOUNT, "-n", self.namespace)
        self.cluster.kubectl(
            "create", "clusterrolebinding", self.name, "--clusterrole=cluster-admin",
            f"--serviceaccount={self.namespace}:{ACCOUNT}",
        )  # fmt: skip
        self.cluster.apply(*self.policy())

    def credentials(self, pod: str) -> Path:
        """A kubeconfig with a token bound to a new pod ``pod`` of the ServiceAccount."""
        body = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": pod, "namespace": self.namespace},
            "spec": {
                "serviceAccountName": ACCOUNT,
                "containers": [{"name": "operator", "image": "registry.invalid/dralloc"}],
                "nodeSelector": {"robustness-pool": "none"},
            },
        }
        made = json.loads(
            self.cluster.kubectl("create", "-o", "json", "-f", "-", input=json.dumps(body))
        )
        token = self.cluster.kubectl(
            "create", "token", ACCOUNT, "-n", self.namespace, "--duration=6h",
            "--bound-object-kind=Pod", f"--bound-object-name={pod}",
            f"--bound-object-uid={made['metadata']['uid']}",
        ).strip()  # fmt: skip
        config = yaml.safe_load(self.cluster.kubeconfig.read_text())
        config["users"] = [{"name": pod, "user": {"token": token}}]
        for context in config["contexts"]:
            context["context"]["user"] = pod
        path = self.work_dir / f"{pod}.kubeconfig"
        path.write_text(json.dumps(config))
        path.chmod(0o600)
        return path

    def wait_in_force(self, kubeconfig: Path, namespace: str, timeout: float = 60) -> None:
        """Until a claim made with ``kubeconfig`` (a pod that holds no Lease) is refused."""
        claim = {
            "apiVersion": f"{self.cluster.mode.group}/v1",
            "kind": "ResourceClaim",
            "metadata": {
                "generateName": "fencing-probe-",
                "namespace": namespace,
                # As the claim controller makes them (made for a pod), so that the policy on
                # the operator's claim writes lets it by and the fencing policy judges it.
                "ownerReferences": [
                    {"apiVersion": "v1", "kind": "Pod", "name": "fencing-probe",
                     "uid": "00000000-0000-0000-0000-000000000000", "controller": True}
                ],
            },
            "spec": {"devices": {"requests": []}},
        }  # fmt: skip
        deadline = time.monotonic() + timeout
        answer = ""
        while time.monotonic() < deadline:
            made = subprocess.run(
                [str(self.cluster.bin / "kubectl"), f"--kubeconfig={kubeconfig}", "create",
                 "-o", "name", "-f", "-"],
                input=json.dumps(claim), capture_output=True, text=True, check=False, timeout=60,
            )  # fmt: skip
            answer = made.stderr.strip() or made.stdout.strip()
            if made.returncode == 0:  # not in force yet
                self.cluster.kubectl("delete", "-n", namespace, made.stdout.strip(), check=False)
            elif NOT_THE_HOLDER in answer or "no params found" in answer:
                return  # the policy's own refusal, or its Lease not there yet
            time.sleep(0.5)
        raise RuntimeError(f"the fencing policy is not in force after {timeout:.0f} s: {answer}")

    def remove(self) -> None:
        """The ServiceAccount's rights and pods go; the policy and binding stay (scoped to
        the run's namespaces): deleting the last binding whose parameter is a Lease stops
        kube-apiserver's Lease informer for policies until it restarts
        (kubernetes/kubernetes#130887), and the next run would be judged against a frozen
        Lease."""
        self.cluster.kubectl(
            "delete", "clusterrolebinding", self.name, "--ignore-not-found", check=False
        )
        for kind in ("validatingadmissionpolicybinding", "validatingadmissionpolicy"):
            for name in (self.pod_writes_name, self.claim_writes_name):
                self.cluster.kubectl("delete", kind, name, "--ignore-not-found", check=False)
        self.cluster.kubectl("delete", "namespace", self.namespace, "--wait=false", check=False)
