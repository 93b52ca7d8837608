"""What dralloc's admission policies cost kube-apiserver per pod, version against version (#42).

Level 2 puts the policies at about a seventh of kube-apiserver's CPU per pod in in-tree mode,
and a change to them moves that by a few tenths of a millisecond: less than level 2's spread
from run to run. This measures only that: the writes one pod and its claim go through in
in-tree mode, each by the identity that makes it (the pod's creator, the operator with its
ServiceAccount's token and the Lease, the kubelet and kube-scheduler's status writes as the
testbed's admin), on one control plane, with each version of the policies in force in turn
and with none, versions alternated round by round. The figure is kube-apiserver's CPU (user
+ system, from ``/proc``) per pod over the writes; a version's cost is its figure less that
of the round's run without policies.

The writes per pod, in the order level 2 makes them:

1. the pod created, gated (its creator);
2. its claim created, owned by the pod (the operator);
3. the claim's allocation and reservation written to its status (the operator);
4. the claim's name written to the pod's status (the operator, an update of the pod as read);
5. the gate lifted, the devices recorded, the node pinned (the operator, an update);
6. ``status.nominatedNodeName`` (kube-scheduler's write before binding);
7. the pod running (the kubelet's status write).

Pods keep a second scheduling gate, so that kube-scheduler and kwok write nothing of their
own in the window; the binding is left out (the API server refuses it for a gated pod: it
costs the pod-protocol policy what step 6 does).

    python -m bench.policy_cost [--pods 1000] [--rounds 5] [VERSION ...]

A version is a git revision (its ``manifests/``) or a directory holding a ``manifests/``;
by default ``HEAD`` and the working tree.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from io import BytesIO
from pathlib import Path
from typing import Any, TextIO

import yaml

from bench.level2 import (
    CONCURRENCY,
    DRALLOC_IN_TREE,
    REPO,
    Testbed,
    _bounded,
    cpu_seconds,
    install_identity,
    kinds,
    testbed_bin,
)
from bench.write_cost import HOLD_GATE, NAMESPACE, small_pod
from operators.kube import MERGE_PATCH, NAMESPACES, PODS, KubeClient, Resource

JsonDict = dict[str, Any]
NODE = "node-0"
LEASES = Resource("coordination.k8s.io", "v1", "leases", "Lease", True)
POLICY_KINDS = ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")
SETTLE_S = 3.0
"""After the policies change: kube-apiserver reloads its policies every second."""


def policies(testbed: Testbed, manifests: Path) -> list[JsonDict]:
    """The admission policies and bindings the in-tree overlay of ``manifests`` renders."""
    rendered = testbed.kubectl("kustomize", str(manifests / "overlays" / "in-tree"))
    return [d for d in yaml.safe_load_all(rendered) if d and d["kind"] in POLICY_KINDS]


def manifests_at(revision: str, into: Path) -> Path:
    """``manifests/`` (and the CRDs it includes) as of a git revision, extracted under ``into``."""
    archive = subprocess.run(
        ["git", "-C", str(REPO), "archive", revision, "manifests", "crds"],
        capture_output=True,
        check=True,
    ).stdout
    with tarfile.open(fileobj=BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")
    return into / "manifests"


def claim(pod: JsonDict) -> JsonDict:
    meta = pod["metadata"]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {
            "name": f"{meta['name']}-resource",
            "namespace": NAMESPACE,
            "annotations": {"resource.kubernetes.io/pod-claim-name": "resource"},
            "ownerReferences": [
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "name": meta["name"],
                    "uid": meta["uid"],
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": {
            "devices": {
                "requests": [{"name": "req-0", "exactly": {"deviceClassName": "test-class"}}]
            }
        },
    }


def as_read(obj: JsonDict) -> JsonDict:
    """An object to send back by update: as read, without managedFields."""
    meta = {k: v for k, v in obj["metadata"].items() if k != "managedFields"}
    return {**obj, "metadata": meta}


@dataclass
class Clients:
    creator: KubeClient
    """The testbed's admin: the pod's creator, kube-scheduler's and the kubelet's writes."""
    operator: KubeClient
    """The operator's ServiceAccount token."""


async def lifecycle(clients: Clients, name: str) -> None:
    """The seven writes of one pod (see the module's docstring)."""
    claims = kinds(("resource.k8s.io", "v1"))["ResourceClaim"]
    made = await clients.creator.create(PODS, small_pod(name), namespace=NAMESPACE)
    body = claim(made)
    made_claim = await clients.operator.create(claims, body, namespace=NAMESPACE)
    claim_name = made_claim["metadata"]["name"]
    uid = made["metadata"]["uid"]
    allocation = {
        "devices": {
            "results": [
                {"request": "req-0", "driver": "gpu.example.com", "pool": NODE, "device": "gpu-0"}
            ]
        },
        "nodeSelector": {
            "nodeSelectorTerms": [
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [NODE]}]}
            ]
        },
    }
    status = {
        "metadata": {"resourceVersion": made_claim["metadata"]["resourceVersion"]},
        "status": {
            "allocation": allocation,
            "reservedFor": [{"resource": "pods", "name": name, "uid": uid}],
        },
    }
    await clients.operator.request(
        "PATCH",
        claims.path(NAMESPACE, claim_name, "status"),
        body=status,
        content_type=MERGE_PATCH,
    )
    statuses = as_read(made)
    statuses["status"] = {
        **made.get("status", {}),
        "resourceClaimStatuses": [{"name": "resource", "resourceClaimName": claim_name}],
    }
    read = await clients.operator.request(
        "PUT", PODS.path(NAMESPACE, name, "status"), body=statuses
    )
    lifted = as_read(read)
    lifted["metadata"]["annotations"] = {
        "resource.dralloc.dev/devices": json.dumps([{"name": "resource"}]),
        "resource.dralloc.dev/allocated-by": json.dumps({"at": time.time()}),
    }
    lifted["spec"] = {
        **read["spec"],
        "schedulingGates": [{"name": HOLD_GATE}],
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {
                            "matchFields": [
                                {"key": "metadata.name", "operator": "In", "values": [NODE]}
                            ]
                        }
                    ]
                }
            }
        },
    }
    await clients.operator.request("PUT", PODS.path(NAMESPACE, name), body=lifted)
    for change in ({"nominatedNodeName": NODE}, {"phase": "Running"}):
        await clients.creator.request(
            "PATCH",
            PODS.path(NAMESPACE, name, "status"),
            body={"status": change},
            content_type=MERGE_PATCH,
        )


class PolicyCost:
    def __init__(self, testbed: Testbed, clients: Clients, log: TextIO) -> None:
        self.testbed = testbed
        self.clients = clients
        self.apiserver = testbed.pids()["kube-apiserver"]
        self.log = log
        self.made = 0

    def use(self, objects: Sequence[JsonDict]) -> None:
        """Exactly these policies and bindings in force (none: every binding of ours gone)."""
        self.testbed.kubectl(
            "delete",
            "validatingadmissionpolicybinding",
            "-l",
            "resource.dralloc.dev/on-uninstall!=keep",
            "--ignore-not-found",
        )
        if objects:
            listed = {"apiVersion": "v1", "kind": "List", "items": list(objects)}
            self.testbed.kubectl("apply", "-f", "-", input=json.dumps(listed))
        time.sleep(SETTLE_S)

    async def window(self, pods: int) -> float:
        """kube-apiserver CPU ms per pod over ``pods`` lifecycles. The pods and claims are
        deleted afterwards, outside the window: kept, they would make every later window
        dearer (a larger watch cache and heap), whichever version it measures."""
        names = [f"p-{self.made + i:06d}" for i in range(pods)]
        self.made += pods
        before = cpu_seconds({"a": self.apiserver})["a"]
        await _bounded((lifecycle(self.clients, n) for n in names), CONCURRENCY)
        after = cpu_seconds({"a": self.apiserver})["a"]
        claims = kinds(("resource.k8s.io", "v1"))["ResourceClaim"]
        for resource in (PODS, claims):  # one request each (a collection's deletion)
            await self.clients.creator.request(
                "DELETE", resource.path(NAMESPACE), params={"gracePeriodSeconds": "0"}
            )
        for resource in (PODS, claims):
            while (await self.clients.creator.list(resource, namespace=NAMESPACE))[0]:
                await asyncio.sleep(0.5)
        return (after - before) * 1000 / pods


def manifests_of(version: str, scratch: Path) -> Path:
    """A version's ``manifests/``: a directory's own, else a git revision's."""
    if Path(version).is_dir():
        return Path(version) / "manifests"
    return manifests_at(version, scratch / version.replace("/", "_"))


async def run(pods: int, rounds: int, names: Sequence[str], log: TextIO) -> dict[str, list[float]]:
    testbed = Testbed.up(DRALLOC_IN_TREE, testbed_bin())
    try:
        with tempfile.TemporaryDirectory(prefix="dralloc-policy-cost-") as scratch:
            versions = {
                name: policies(testbed, manifests_of(name, Path(scratch))) for name in names
            }
        identity = install_identity(testbed, DRALLOC_IN_TREE)
        installed = identity.installed
        creator = await KubeClient.connect(str(testbed.kubeconfig), user_agent="bench-creator")
        operator = await KubeClient.connect(str(identity.kubeconfig), user_agent="bench-operator")
        try:
            await creator.create(
                NAMESPACES,
                {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
            )
            await creator.create(
                LEASES,
                {
                    "apiVersion": "coordination.k8s.io/v1",
                    "kind": "Lease",
                    "metadata": {"name": installed.lease, "namespace": installed.namespace},
                    "spec": {
                        "holderIdentity": (
                            f"system:serviceaccount:{installed.namespace}:{installed.account}"
                        ),
                        "leaseDurationSeconds": 3600,
                    },
                },
                namespace=installed.namespace,
            )
            bench = PolicyCost(testbed, Clients(creator, operator), log)
            figures: dict[str, list[float]] = {}
            order = ["none", *versions]
            bench.use(versions[names[0]])
            await bench.window(max(pods // 4, 20))  # warm: caches, connections, compiled CEL
            for round_ in range(rounds):
                for name in order if round_ % 2 == 0 else reversed(order):
                    bench.use(versions.get(name, []))
                    ms = await bench.window(pods)
                    figures.setdefault(name, []).append(ms)
                    print(f"round {round_ + 1}: {name}: {ms:.3f} ms/pod", file=log, flush=True)
            return figures
        finally:
            await creator.close()
            await operator.close()
    finally:
        testbed.down()


def table(figures: dict[str, list[float]]) -> str:
    none = figures["none"]
    lines = [
        "| policies | kube-apiserver CPU ms/pod (median) | rounds | the policies' own (median of round differences) |",
        "|---|---:|---|---:|",
    ]
    for name, values in figures.items():
        own = (
            "-"
            if name == "none"
            else f"{statistics.median(v - n for v, n in zip(values, none, strict=True)):.3f}"
        )
        rounds = ", ".join(f"{v:.3f}" for v in values)
        lines.append(f"| {name} | {statistics.median(values):.3f} | {rounds} | {own} |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.policy_cost", description=__doc__)
    parser.add_argument("versions", nargs="*", default=["HEAD", str(REPO)])
    parser.add_argument("--pods", type=int, default=1000, help="pods per window")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args(argv)
    figures = asyncio.run(run(args.pods, args.rounds, args.versions, sys.stderr))
    print(table(figures))
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
