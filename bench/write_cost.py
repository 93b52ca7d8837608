"""What one write costs kube-apiserver, by the form it is sent in (#42).

Level 2 counts as many writes per pod for dralloc in in-tree mode as for in-tree DRA, yet
kube-apiserver spends more CPU per pod on dralloc's: its profile puts the difference in
merge-patch application (the stored object encoded to JSON, the patch merged into it, the
result decoded again). The same change can be sent in other forms: a JSON patch, an update
(PUT) of the object as read, or server-side apply. This measures each change dralloc makes
per pod in each form, side by side on one control plane: kube-apiserver's CPU per write (user
+ system, from ``/proc``), forms alternated round by round so that drift (the cache filling,
Go's collector) falls on all of them alike.

Each form writes its own fresh objects, made before its window opens; only the writes are
inside the window. Pods keep a second scheduling gate, so lifting dralloc's lets nothing
else (kube-scheduler, kwok) write to them. Pods come in two sizes: the level-2 pod
(scheduler_perf's: one pause container) and a realistic one (a Deployment's pod with two
containers, probes, environment, volumes, owner and labels), since the cost of applying a
patch grows with the object it applies to.

    python -m bench.write_cost [--objects 300] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import json
import statistics
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any, TextIO

from bench.level2 import (
    CONCURRENCY,
    DRALLOC_IN_TREE,
    GATE,
    K8S_GROUP,
    NAMESPACES,
    Testbed,
    _bounded,
    cpu_seconds,
    kinds,
    testbed_bin,
)
from operators.kube import JSON_PATCH, MERGE_PATCH, PODS, KubeClient, Resource

JsonDict = dict[str, Any]
APPLY_PATCH = "application/apply-patch+yaml"
HOLD_GATE = "bench.dralloc.dev/hold"
"""A second gate no one lifts: the pod stays unscheduled after dralloc's goes."""
NAMESPACE = "writes"
NODE = "scheduler-perf-dra-0"
CONFIG_MAPS = Resource("", "v1", "configmaps", "ConfigMap", True)
FORMS = ("merge patch", "JSON patch", "update", "update, fieldValidation=Ignore", "apply")
"""How a change is sent. The API server checks every field of a body it decodes against the
schema unless told not to (``fieldValidation``, by default ``Warn``: it decodes strictly and
answers with warnings); a patch's check covers only the patch, an update's the whole object."""


def small_pod(name: str) -> JsonDict:
    """The level-2 pod (scheduler_perf's), in in-tree mode."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "containers": [
                {
                    "name": "pause",
                    "image": "registry.k8s.io/pause:3.10.1",
                    "resources": {"claims": [{"name": "resource"}]},
                }
            ],
            "resourceClaims": [
                {"name": "resource", "resourceClaimTemplateName": "test-claim-template"}
            ],
            "schedulingGates": [{"name": GATE}, {"name": HOLD_GATE}],
        },
    }


OWNER = "inference-llm-7d9c8b6f5"
"""The realistic pods' owner: a ConfigMap standing in for their ReplicaSet (the testbed runs
no ReplicaSet controller), so that the garbage collector leaves them alone."""


def realistic_pod(name: str, owner_uid: str = "") -> JsonDict:
    """A Deployment's pod of the kind platform teams run on GPU nodes (about 4 KiB stored)."""
    pod = small_pod(name)
    pod["metadata"]["labels"] = {
        "app.kubernetes.io/name": "inference",
        "app.kubernetes.io/instance": "inference-llm",
        "app.kubernetes.io/component": "server",
        "pod-template-hash": "7d9c8b6f5",
    }
    pod["metadata"]["annotations"] = {
        "prometheus.io/scrape": "true",
        "prometheus.io/port": "9400",
        "kubectl.kubernetes.io/restartedAt": "2026-11-30T08:00:00Z",
    }
    pod["metadata"]["ownerReferences"] = [
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "name": OWNER,
            "uid": owner_uid,
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]
    env: list[JsonDict] = [{"name": f"SETTING_{i}", "value": f"value-{i}"} for i in range(12)]
    env.append({"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}})
    probe = {"httpGet": {"path": "/healthz", "port": 8080}, "periodSeconds": 10}
    server = {
        "name": "server",
        "image": "registry.example.com/inference/server:v2.14.1",
        "args": ["--model=/models/llm", "--port=8080", "--max-batch=32"],
        "ports": [
            {"name": "http", "containerPort": 8080},
            {"name": "metrics", "containerPort": 9400},
        ],
        "env": env,
        "resources": {
            "requests": {"cpu": "4", "memory": "32Gi"},
            "limits": {"memory": "32Gi"},
            "claims": [{"name": "resource"}],
        },
        "readinessProbe": probe,
        "livenessProbe": {**probe, "failureThreshold": 6},
        "volumeMounts": [
            {"name": "models", "mountPath": "/models", "readOnly": True},
            {"name": "cache", "mountPath": "/cache"},
        ],
    }
    sidecar = {
        "name": "exporter",
        "image": "registry.example.com/inference/exporter:v1.3.0",
        "ports": [{"containerPort": 9401}],
        "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}},
    }
    pod["spec"]["containers"] = [server, sidecar]
    pod["spec"]["volumes"] = [
        {"name": "models", "persistentVolumeClaim": {"claimName": "models", "readOnly": True}},
        {"name": "cache", "emptyDir": {"sizeLimit": "20Gi"}},
    ]
    pod["spec"]["tolerations"] = [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    ]
    pod["spec"]["nodeSelector"] = {"node-with-dra": "true"}
    pod["spec"]["terminationGracePeriodSeconds"] = 60
    return pod


POD_SIZES = ("small", "realistic")

DEVICES = json.dumps(
    [
        {
            "name": "resource",
            "claim": "pod-resource-x7k2p",
            "devices": [
                {"driver": "gpu.example.com", "pool": NODE, "device": "gpu-3", "request": "req-0"}
            ],
        }
    ],
    separators=(",", ":"),
)


def pin(node: str) -> JsonDict:
    term = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}
        }
    }


@dataclass(frozen=True)
class Change:
    """One of the writes dralloc makes per pod, as every form sends it."""

    name: str
    resource: Resource
    subresource: str

    def merge_patch(self, obj: JsonDict) -> JsonDict:
        raise NotImplementedError

    def json_patch(self, obj: JsonDict) -> list[JsonDict]:
        raise NotImplementedError

    def updated(self, obj: JsonDict) -> JsonDict:
        """The whole object with the change made (for an update)."""
        raise NotImplementedError

    def applied(self, obj: JsonDict) -> JsonDict:
        """The fields server-side apply sends (this manager's whole intent)."""
        raise NotImplementedError


class PodAllocation(Change):
    """The allocation's pod write: devices and allocated-by annotations, the pin, the gate."""

    def merge_patch(self, obj: JsonDict) -> JsonDict:
        return {
            "metadata": {"annotations": self._annotations()},
            "spec": {"schedulingGates": [{"name": HOLD_GATE}], "affinity": pin(NODE)},
        }

    def json_patch(self, obj: JsonDict) -> list[JsonDict]:
        ops: list[JsonDict] = []
        if "annotations" not in obj["metadata"]:
            ops.append({"op": "add", "path": "/metadata/annotations", "value": {}})
        for key, value in self._annotations().items():
            ops.append(
                {"op": "add", "path": f"/metadata/annotations/{escape(key)}", "value": value}
            )
        ops.append({"op": "remove", "path": "/spec/schedulingGates/0"})
        ops.append({"op": "add", "path": "/spec/affinity", "value": pin(NODE)})
        return ops

    def updated(self, obj: JsonDict) -> JsonDict:
        out = copy.deepcopy(obj)
        out["metadata"].setdefault("annotations", {}).update(self._annotations())
        out["spec"]["schedulingGates"] = [{"name": HOLD_GATE}]
        out["spec"]["affinity"] = pin(NODE)
        return out

    def applied(self, obj: JsonDict) -> JsonDict:
        # Apply cannot lift a gate another manager (the creator) set: the fields it owns
        # stay. Measured as the annotations and pin only, the part apply could take over.
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": obj["metadata"]["name"], "annotations": self._annotations()},
            "spec": {"affinity": pin(NODE)},
        }

    @staticmethod
    def _annotations() -> dict[str, str]:
        return {
            "resource.dralloc.dev/devices": DEVICES,
            "resource.dralloc.dev/allocated-by": '{"by":"dralloc-0","at":1765000000.0}',
        }


class PodClaimStatuses(Change):
    """The claim controller's pod write in-tree: the generated claim's name in the status."""

    def _statuses(self, obj: JsonDict) -> list[JsonDict]:
        return [{"name": "resource", "resourceClaimName": f"{obj['metadata']['name']}-resource"}]

    def merge_patch(self, obj: JsonDict) -> JsonDict:
        return {"status": {"resourceClaimStatuses": self._statuses(obj)}}

    def json_patch(self, obj: JsonDict) -> list[JsonDict]:
        return [
            {"op": "add", "path": "/status/resourceClaimStatuses", "value": self._statuses(obj)}
        ]

    def updated(self, obj: JsonDict) -> JsonDict:
        out = copy.deepcopy(obj)
        out.setdefault("status", {})["resourceClaimStatuses"] = self._statuses(obj)
        return out

    def applied(self, obj: JsonDict) -> JsonDict:
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": obj["metadata"]["name"]},
            "status": {"resourceClaimStatuses": self._statuses(obj)},
        }


class ClaimAllocation(Change):
    """The allocation's claim write: ``status.allocation`` and ``reservedFor``."""

    @staticmethod
    def _status(obj: JsonDict) -> JsonDict:
        result = {
            "request": "req-0",
            "driver": "gpu.example.com",
            "pool": NODE,
            "device": "gpu-3",
        }
        return {
            "allocation": {
                "devices": {"results": [result]},
                "nodeSelector": pin(NODE)["nodeAffinity"][
                    "requiredDuringSchedulingIgnoredDuringExecution"
                ],
                "allocationTimestamp": "2026-12-07T10:00:00Z",
            },
            "reservedFor": [
                {"resource": "pods", "name": "pod-x", "uid": "5c0a7c1e-3b0a-4a4e-9d8e-1f6b5c2d3e4f"}
            ],
        }

    def merge_patch(self, obj: JsonDict) -> JsonDict:
        return {"status": self._status(obj)}

    def json_patch(self, obj: JsonDict) -> list[JsonDict]:
        return [{"op": "add", "path": "/status", "value": self._status(obj)}]

    def updated(self, obj: JsonDict) -> JsonDict:
        return {**obj, "status": self._status(obj)}

    def applied(self, obj: JsonDict) -> JsonDict:
        return {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": obj["metadata"]["name"]},
            "status": self._status(obj),
        }


def without_managed_fields(metadata: JsonDict) -> JsonDict:
    """An update without them keeps the stored ones: dralloc does not send them back."""
    return {k: v for k, v in metadata.items() if k != "managedFields"}


def escape(key: str) -> str:
    """A map key as a JSON pointer token (RFC 6901)."""
    return key.replace("~", "~0").replace("/", "~1")


@dataclass(frozen=True)
class Cost:
    change: str
    size: str
    form: str
    writes: int
    apiserver_ms: list[float]
    """kube-apiserver CPU per write, one figure per round."""
    body_bytes: int

    @property
    def median_ms(self) -> float:
        return statistics.median(self.apiserver_ms)


class WriteCost:
    def __init__(self, client: KubeClient, testbed: Testbed, log: TextIO) -> None:
        self.client = client
        self.apiserver = testbed.pids()["kube-apiserver"]
        self.claims = kinds(K8S_GROUP)["ResourceClaim"]
        self.log = log
        self.made = 0
        self.owner_uid = ""

    def _name(self, prefix: str) -> str:
        self.made += 1
        return f"{prefix}-{self.made:06d}"

    async def objects(self, change: Change, size: str, count: int) -> list[JsonDict]:
        """Fresh objects the change applies to, created outside the measured window."""
        if change.resource is PODS and size == "small":
            bodies = [small_pod(self._name("pod")) for _ in range(count)]
        elif change.resource is PODS:
            bodies = [realistic_pod(self._name("pod"), self.owner_uid) for _ in range(count)]
        else:
            bodies = [claim(self._name("claim")) for _ in range(count)]
        made: list[JsonDict] = []

        async def create(body: JsonDict) -> None:
            made.append(await self.client.create(change.resource, body, namespace=NAMESPACE))

        await _bounded((create(b) for b in bodies), CONCURRENCY)
        return made

    async def write(self, change: Change, form: str, obj: JsonDict) -> int:
        meta = obj["metadata"]
        path = change.resource.path(NAMESPACE, meta["name"])
        path += f"/{change.subresource}" if change.subresource else ""
        version = meta["resourceVersion"]
        body: Any
        params: dict[str, str] | None = None
        if form == "merge patch":
            body = change.merge_patch(obj)
            body.setdefault("metadata", {})["resourceVersion"] = version
            content_type = MERGE_PATCH
        elif form == "JSON patch":
            test = {"op": "test", "path": "/metadata/resourceVersion", "value": version}
            body, content_type = [test, *change.json_patch(obj)], JSON_PATCH
        elif form.startswith("update"):
            sent = {**obj, "metadata": without_managed_fields(obj["metadata"])}
            body = change.updated(sent)
            if form.endswith("Ignore"):
                params = {"fieldValidation": "Ignore"}
            await self.client.request("PUT", path, params=params, body=body)
            return len(json.dumps(body))
        else:
            body = change.applied(obj)
            body["metadata"]["resourceVersion"] = version
            content_type = APPLY_PATCH
            params = {"fieldManager": "dralloc-bench", "force": "true"}
        await self.client.request(
            "PATCH", path, params=params, body=body, content_type=content_type
        )
        return len(json.dumps(body))

    async def window(self, change: Change, size: str, form: str, count: int) -> tuple[float, int]:
        """kube-apiserver CPU ms per write over ``count`` writes in this form; body bytes."""
        objs = await self.objects(change, size, count)
        await asyncio.sleep(1.0)  # let the creations' watch fan-out settle before the window
        sizes: list[int] = []

        async def one(obj: JsonDict) -> None:
            sizes.append(await self.write(change, form, obj))

        before = cpu_seconds({"a": self.apiserver})["a"]
        await _bounded((one(o) for o in objs), CONCURRENCY)
        after = cpu_seconds({"a": self.apiserver})["a"]
        return (after - before) * 1000 / count, int(statistics.mean(sizes))


def claim(name: str) -> JsonDict:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "devices": {
                "requests": [{"name": "req-0", "exactly": {"deviceClassName": "test-class"}}]
            }
        },
    }


CHANGES: tuple[tuple[Change, tuple[str, ...]], ...] = (
    (PodAllocation("pod allocation", PODS, ""), POD_SIZES),
    (PodClaimStatuses("pod claim statuses", PODS, "status"), POD_SIZES),
    (
        ClaimAllocation(
            "claim allocation",
            Resource("resource.k8s.io", "v1", "resourceclaims", "ResourceClaim", True),
            "status",
        ),
        ("-",),
    ),
)


async def run(objects: int, rounds: int, log: TextIO) -> list[Cost]:
    testbed = Testbed.up(DRALLOC_IN_TREE, testbed_bin())
    try:
        client = await KubeClient.connect(str(testbed.kubeconfig), user_agent="dralloc-bench")
        try:
            await client.create(
                NAMESPACES,
                {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
            )
            bench = WriteCost(client, testbed, log)
            owner = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": OWNER}}
            made = await client.create(CONFIG_MAPS, owner, namespace=NAMESPACE)
            bench.owner_uid = made["metadata"]["uid"]
            figures: dict[tuple[str, str, str], list[float]] = {}
            sizes: dict[tuple[str, str, str], int] = {}
            for round_ in range(rounds):
                for change, pod_sizes in CHANGES:
                    for size in pod_sizes:
                        for form in FORMS:
                            ms, body = await bench.window(change, size, form, objects)
                            key = (change.name, size, form)
                            figures.setdefault(key, []).append(ms)
                            sizes[key] = body
                            print(
                                f"round {round_ + 1}: {change.name} ({size}) {form}: "
                                f"{ms:.3f} ms/write",
                                file=log,
                                flush=True,
                            )
            return [
                Cost(change, size, form, objects, ms, sizes[(change, size, form)])
                for (change, size, form), ms in figures.items()
            ]
        finally:
            await client.close()
    finally:
        testbed.down()


def table(costs: Sequence[Cost]) -> str:
    lines = [
        "| write | pod | form | body bytes | kube-apiserver CPU ms/write (median) | rounds | vs merge patch |",
        "|---|---|---|---:|---:|---|---:|",
    ]
    reference = {(c.change, c.size): c.median_ms for c in costs if c.form == "merge patch"}
    for c in costs:
        rounds = ", ".join(f"{ms:.3f}" for ms in c.apiserver_ms)
        ratio = c.median_ms / reference[(c.change, c.size)]
        lines.append(
            f"| {c.change} | {c.size} | {c.form} | {c.body_bytes} | {c.median_ms:.3f} "
            f"| {rounds} | {ratio:.2f}x |"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.write_cost", description=__doc__)
    parser.add_argument("--objects", type=int, default=300, help="writes per form and round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args(argv)
    costs = asyncio.run(run(args.objects, args.rounds, sys.stderr))
    print(table(costs))
    if args.json:
        with open(args.json, "w") as out:
            json.dump([asdict(c) for c in costs], out, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
