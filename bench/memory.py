"""What the operator holds at a given cluster size, measured in process (no control plane).

The end-to-end figure (the operator's RSS after a level-2 run) needs a cluster; this one needs
only the operator's own code. It builds the operator's :class:`Runtime` with every controller
the process runs, on a client that is never called, and feeds the shared cache the watch
events a cluster of that size sends: nodes with the kubelet's labels and status, one
ResourceSlice per node, a DeviceClass, a ResourceClaimTemplate per namespace, and per pod the
sequence its life produces (the pod created and gated, its claim generated, the allocation
decision made by the allocation controller itself, the claim allocated and reserved, the pod
bound and running). Bodies are JSON-decoded from text as the client decodes them, so no string
is shared that the API server's answers would not share.

Every live allocation is then attributed with :mod:`tracemalloc`: to the allocator state when
``operators/allocator`` is on its stack, to the controllers' own bookkeeping when a controller
is, and otherwise to the kind whose event made it (the feeding function on the stack).
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import hashlib
import json
import sys
import sysconfig
import tracemalloc
from collections.abc import Callable, Sequence
from pathlib import Path
from types import CodeType
from typing import Any

from operators.api.annotations import (
    CLAIM_STATUSES_ANNOTATION,
    CLAIMS_ANNOTATION,
    DEVICES_ANNOTATION,
)
from operators.api.models import GROUP
from operators.api.podprotocol import PodProtocol
from operators.cache.informer import Key
from operators.cel import parser as cel_parser
from operators.controllers import allocation, claims, doubles, released, taints
from operators.controllers.allocation.outcomes import SliceUsed, StillWaiting, Unallocatable
from operators.controllers.runtime import Runtime
from operators.fencing import ALLOCATED_BY_ANNOTATION, AllocationRecord, AllocatorMark
from operators.kube import (
    DEVICE_CLASSES,
    NAMESPACES,
    NODES,
    PODS,
    RESOURCE_CLAIM_TEMPLATES,
    RESOURCE_CLAIMS,
    RESOURCE_SLICES,
    JsonDict,
)
from operators.settings import Settings

NAMESPACE = "test"
DRIVER = "gpu.example.com"
CLASS = "gpu.example.com"
TEMPLATE = "gpu-claim-template"
ENTRY = "gpu"
CREATED = "2026-01-01T00:00:00Z"
KINDS = ("setup", "nodes", "slices", "claims", "pods", "allocator state", "controllers", "other")
"""The rows of the report: each kind's cache (what its events left in the shared cache),
what the allocator keeps, and what the controllers keep of their own ("setup": namespaces,
the class and the templates; "other": what no event made, such as caches of modules)."""

_OPERATORS = str(Path(__file__).resolve().parent.parent / "operators")
_ALLOCATOR = f"{_OPERATORS}/allocator/"
_CONTROLLERS = f"{_OPERATORS}/controllers/"
_THIS = str(Path(__file__).resolve())


@dataclasses.dataclass(frozen=True)
class Size:
    nodes: int = 500
    devices_per_node: int = 10
    pods: int = 5000
    api_group: str = GROUP


@dataclasses.dataclass(frozen=True)
class Site:
    where: str
    bytes: int
    blocks: int


@dataclasses.dataclass(frozen=True)
class Report:
    size: Size
    by_kind: dict[str, int]
    objects: dict[str, int]
    total: int
    top: tuple[Site, ...]
    allocated_pods: int

    def render(self) -> str:
        lines = [
            f"nodes={self.size.nodes} devices={self.size.nodes * self.size.devices_per_node} "
            f"pods={self.size.pods} (allocated {self.allocated_pods}) "
            f"api-group={self.size.api_group}",
            "",
            f"{'held by':<18}{'objects':>9}{'MiB':>10}{'bytes/object':>14}",
        ]
        for kind in KINDS:
            held, count = self.by_kind.get(kind, 0), self.objects.get(kind, 0)
            per = f"{held // count:,}" if count else ""
            lines.append(f"{kind:<18}{count or '':>9}{held / 2**20:>10.2f}{per:>14}")
        lines.append(f"{'total':<18}{'':>9}{self.total / 2**20:>10.2f}")
        lines += ["", f"top {len(self.top)} allocation sites", f"{'MiB':>8}{'blocks':>10}  where"]
        lines += [f"{s.bytes / 2**20:>8.2f}{s.blocks:>10}  {s.where}" for s in self.top]
        return "\n".join(lines)


# --- the objects, as the API server sends them ---------------------------------------------


def _decoded(obj: JsonDict) -> JsonDict:
    """The object as the client hands it over: decoded from the watch's JSON text."""
    return json.loads(json.dumps(obj))


def _managed(manager: str, operation: str, fields: JsonDict, subresource: str = "") -> JsonDict:
    entry = {
        "manager": manager,
        "operation": operation,
        "apiVersion": "v1",
        "time": CREATED,
        "fieldsType": "FieldsV1",
        "fieldsV1": fields,
    }
    if subresource:
        entry["subresource"] = subresource
    return entry


def digest(index: int) -> str:
    """An image digest as a registry gives one (hex; rarely 20 decimal digits in a row)."""
    return hashlib.sha256(index.to_bytes(8, "big")).hexdigest()


def node_name(index: int) -> str:
    return f"worker-{index:05d}"


def node(index: int) -> JsonDict:
    name = node_name(index)
    condition_types = ("MemoryPressure", "DiskPressure", "PIDPressure", "Ready")
    conditions = [
        {
            "type": kind,
            "status": "True" if kind == "Ready" else "False",
            "lastHeartbeatTime": CREATED,
            "lastTransitionTime": CREATED,
            "reason": f"Kubelet{'Ready' if kind == 'Ready' else 'Has' + kind}",
            "message": f"kubelet reports {kind}",
        }
        for kind in condition_types
    ]
    resources = {"cpu": "32", "memory": "263855096Ki", "pods": "110", "ephemeral-storage": "1Ti"}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "uid": f"00000000-0000-0000-0001-{index:012d}",
            "resourceVersion": str(1000 + index),
            "creationTimestamp": CREATED,
            "labels": {
                "beta.kubernetes.io/arch": "amd64",
                "beta.kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "node.kubernetes.io/instance-type": "gpu-8x",
                "topology.kubernetes.io/region": "region-1",
                "topology.kubernetes.io/zone": f"zone-{index % 3}",
            },
            "annotations": {
                "node.alpha.kubernetes.io/ttl": "0",
                "volumes.kubernetes.io/controller-managed-attach-detach": "true",
            },
            "managedFields": [
                _managed("kubelet", "Update", {"f:metadata": {"f:labels": {".": {}}}}),
                _managed(
                    "kubelet", "Update", {"f:status": {"f:conditions": {}}}, subresource="status"
                ),
            ],
        },
        "spec": {"podCIDR": f"10.{index // 256}.{index % 256}.0/24"},
        "status": {
            "capacity": resources,
            "allocatable": resources,
            "conditions": conditions,
            "addresses": [
                {"type": "InternalIP", "address": f"192.168.{index // 256}.{index % 256}"},
                {"type": "Hostname", "address": name},
            ],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {
                "machineID": f"{index:032x}",
                "systemUUID": f"{index:032x}",
                "bootID": f"{index:032x}",
                "kernelVersion": "6.8.0",
                "osImage": "Ubuntu 24.04 LTS",
                "containerRuntimeVersion": "containerd://2.0.0",
                "kubeletVersion": "v1.34.0",
                "kubeProxyVersion": "v1.34.0",
                "operatingSystem": "linux",
                "architecture": "amd64",
            },
            "images": [
                {"names": ["registry.k8s.io/pause:3.10.1"], "sizeBytes": 320368},
                {"names": ["registry.example.com/cuda-workload:12.4"], "sizeBytes": 5_000_000},
            ],
        },
    }


def resource_slice(index: int, devices: int) -> JsonDict:
    name = node_name(index)
    return {
        "apiVersion": f"{GROUP}/v1",
        "kind": "ResourceSlice",
        "metadata": {
            "name": f"{name}-{DRIVER}-abcde",
            "generateName": f"{name}-{DRIVER}-",
            "uid": f"00000000-0000-0000-0002-{index:012d}",
            "resourceVersion": str(20000 + index),
            "creationTimestamp": CREATED,
            "ownerReferences": [
                {
                    "apiVersion": "v1",
                    "kind": "Node",
                    "name": name,
                    "uid": f"00000000-0000-0000-0001-{index:012d}",
                    "controller": True,
                }
            ],
            "managedFields": [
                _managed("gpu-kubelet-plugin", "Update", {"f:spec": {"f:devices": {}}})
            ],
        },
        "spec": {
            "driver": DRIVER,
            "nodeName": name,
            "pool": {"name": name, "generation": 1, "resourceSliceCount": 1},
            "devices": [
                {
                    "name": f"gpu-{i}",
                    "attributes": {
                        "model": {"string": "A100"},
                        "family": {"string": "GPU"},
                        "driverVersion": {"version": "1.2.3"},
                        "index": {"int": i},
                        "uuid": {"string": f"GPU-{index:08x}-{i:04x}"},
                        "dra.example.com/numa": {"int": i % 2},
                    },
                    "capacity": {"memory": {"value": "80Gi"}},
                }
                for i in range(devices)
            ],
        },
    }


def device_class() -> JsonDict:
    return {
        "apiVersion": f"{GROUP}/v1",
        "kind": "DeviceClass",
        "metadata": {"name": CLASS, "uid": "class-1", "resourceVersion": "10"},
        "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]},
    }


def namespace(name: str) -> JsonDict:
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {
            "name": name,
            "uid": f"ns-{name}",
            "resourceVersion": "5",
            "labels": {"kubernetes.io/metadata.name": name},
        },
    }


def claim_spec() -> JsonDict:
    return {
        "devices": {
            "requests": [
                {
                    "name": "gpu",
                    "exactly": {
                        "deviceClassName": CLASS,
                        "allocationMode": "ExactCount",
                        "count": 1,
                    },
                }
            ]
        }
    }


def template() -> JsonDict:
    return {
        "apiVersion": f"{GROUP}/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {
            "name": TEMPLATE,
            "namespace": NAMESPACE,
            "uid": "template-1",
            "resourceVersion": "11",
        },
        "spec": {"spec": claim_spec()},
    }


def pod_name(index: int) -> str:
    return f"workload-{index:06d}"


def pod_uid(index: int) -> str:
    return f"00000000-0000-0000-0003-{index:012d}"


def claim_name(index: int) -> str:
    return f"{pod_name(index)}-{ENTRY}-x7k2p"


def pod(
    index: int,
    protocol: PodProtocol,
    version: int,
    *,
    node: str = "",
    allocation: JsonDict | None = None,
) -> JsonDict:
    """A pod as a Deployment-less workload creates it (the webhook's gate on it), at the
    stage ``node`` says: gated with its claim named (no node), or allocated, bound and
    running."""
    name = pod_name(index)
    entry = {"name": ENTRY, "resourceClaimTemplateName": TEMPLATE}
    statuses = [{"name": ENTRY, "resourceClaimName": claim_name(index)}]
    annotations: dict[str, str] = {}
    spec: JsonDict = {
        "containers": [
            {
                "name": "main",
                "image": "registry.example.com/cuda-workload:12.4",
                "command": ["python", "-m", "train", "--epochs", "10"],
                "env": [{"name": "RANK", "value": str(index)}],
                "resources": {
                    "requests": {"cpu": "1", "memory": "2Gi"},
                    "limits": {"cpu": "2", "memory": "4Gi"},
                },
                "volumeMounts": [
                    {
                        "name": "kube-api-access-abcde",
                        "readOnly": True,
                        "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
                    }
                ],
                "terminationMessagePath": "/dev/termination-log",
                "terminationMessagePolicy": "File",
                "imagePullPolicy": "IfNotPresent",
            }
        ],
        "restartPolicy": "Always",
        "terminationGracePeriodSeconds": 30,
        "dnsPolicy": "ClusterFirst",
        "serviceAccountName": "default",
        "serviceAccount": "default",
        "securityContext": {},
        "schedulerName": "default-scheduler",
        "tolerations": [
            {
                "key": f"node.kubernetes.io/{taint}",
                "operator": "Exists",
                "effect": "NoExecute",
                "tolerationSeconds": 300,
            }
            for taint in ("not-ready", "unreachable")
        ],
        "priority": 0,
        "enableServiceLinks": True,
        "preemptionPolicy": "PreemptLowerPriority",
        "volumes": [
            {
                "name": "kube-api-access-abcde",
                "projected": {
                    "sources": [
                        {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                        {
                            "configMap": {
                                "name": "kube-root-ca.crt",
                                "items": [{"key": "ca.crt", "path": "ca.crt"}],
                            }
                        },
                    ],
                    "defaultMode": 420,
                },
            }
        ],
    }
    status: JsonDict = {"phase": "Pending", "qosClass": "Burstable"}
    if protocol.claims_in_spec:
        spec["resourceClaims"] = [entry]
        spec["containers"][0]["resources"]["claims"] = [{"name": ENTRY}]
        status["resourceClaimStatuses"] = statuses
    else:
        annotations[CLAIMS_ANNOTATION] = json.dumps([entry])
        annotations[CLAIM_STATUSES_ANNOTATION] = json.dumps(statuses)
    managed = [
        _managed("kubectl-client-side-apply", "Update", {"f:spec": {"f:containers": {}}}),
        _managed("dralloc", "Update", {"f:metadata": {"f:annotations": {}}}),
    ]
    if node:
        spec["nodeName"] = node
        results = (allocation or {}).get("devices", {}).get("results", ())
        devices = [{"name": ENTRY, "resourceClaimName": claim_name(index), "devices": results}]
        annotations[DEVICES_ANNOTATION] = json.dumps(devices, separators=(",", ":"))
        annotations[ALLOCATED_BY_ANNOTATION] = AllocationRecord(
            AllocatorMark("dralloc-system/dralloc", "dralloc-0", 1), 1.7e9
        ).render()
        status.update(
            phase="Running",
            hostIP="192.168.0.1",
            podIP=f"10.0.{index // 256}.{index % 256}",
            podIPs=[{"ip": f"10.0.{index // 256}.{index % 256}"}],
            startTime=CREATED,
            conditions=[
                {
                    "type": kind,
                    "status": "True",
                    "lastProbeTime": None,
                    "lastTransitionTime": CREATED,
                }
                for kind in (
                    "PodReadyToStartContainers",
                    "Initialized",
                    "Ready",
                    "ContainersReady",
                    "PodScheduled",
                )
            ],
            containerStatuses=[
                {
                    "name": "main",
                    "state": {"running": {"startedAt": CREATED}},
                    "ready": True,
                    "restartCount": 0,
                    "image": "registry.example.com/cuda-workload:12.4",
                    "imageID": "registry.example.com/cuda-workload@sha256:" + digest(index),
                    "containerID": "containerd://" + digest(index + 1),
                    "started": True,
                }
            ],
        )
        managed.append(
            _managed("kubelet", "Update", {"f:status": {"f:phase": {}}}, subresource="status")
        )
    else:
        spec["schedulingGates"] = [{"name": f"{GROUP}/allocation"}]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": NAMESPACE,
            "uid": pod_uid(index),
            "resourceVersion": str(version),
            "creationTimestamp": CREATED,
            "labels": {"app": "trainer", "pod-template-hash": "5d4f8b7c9"},
            "annotations": annotations,
            "managedFields": managed,
        },
        "spec": spec,
        "status": status,
    }


def claim(
    index: int,
    protocol: PodProtocol,
    version: int,
    allocation: JsonDict | None = None,
) -> JsonDict:
    """A claim generated for pod ``index`` from the template; allocated and reserved for the
    pod when ``allocation`` is given (the status dralloc writes)."""
    metadata: JsonDict = {
        "name": claim_name(index),
        "generateName": f"{pod_name(index)}-{ENTRY}-",
        "namespace": NAMESPACE,
        "uid": f"00000000-0000-0000-0004-{index:012d}",
        "resourceVersion": str(version),
        "creationTimestamp": CREATED,
        "annotations": {protocol.pod_claim_name_annotation: ENTRY},
        "ownerReferences": [
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "name": pod_name(index),
                "uid": pod_uid(index),
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ],
        "managedFields": [
            _managed("dralloc", "Update", {"f:metadata": {"f:ownerReferences": {}}}),
        ],
    }
    body: JsonDict = {
        "apiVersion": f"{protocol.group}/v1",
        "kind": "ResourceClaim",
        "metadata": metadata,
        "spec": claim_spec(),
    }
    if allocation is not None:
        metadata["finalizers"] = [protocol.finalizer]
        metadata["managedFields"].append(
            _managed("dralloc", "Update", {"f:status": {"f:allocation": {}}}, subresource="status")
        )
        status: JsonDict = {
            "allocation": {**allocation, "allocationTimestamp": CREATED},
            "reservedFor": [{"resource": "pods", "name": pod_name(index), "uid": pod_uid(index)}],
        }
        if protocol.claim_conditions:
            status["conditions"] = [
                {
                    "type": "Allocated",
                    "status": "True",
                    "reason": "Allocated",
                    "message": "allocated by dralloc",
                    "lastTransitionTime": CREATED,
                }
            ]
        body["status"] = status
    return body


# --- feeding the operator: one function per kind, so tracemalloc can tell them apart -------


def _feed_setup(runtime: Runtime) -> int:
    cache = runtime.cache
    for name in ("default", "kube-system", NAMESPACE):
        cache[NAMESPACES].apply("ADDED", _decoded(namespace(name)))
    cache[DEVICE_CLASSES].apply("ADDED", _decoded(device_class()))
    cache[RESOURCE_CLAIM_TEMPLATES].apply("ADDED", _decoded(template()))
    return 5


def _feed_nodes(runtime: Runtime, size: Size) -> int:
    for index in range(size.nodes):
        runtime.cache[NODES].apply("ADDED", _decoded(node(index)))
    return size.nodes


def _feed_slices(runtime: Runtime, size: Size) -> int:
    for index in range(size.nodes):
        raw = _decoded(resource_slice(index, size.devices_per_node))
        runtime.cache[RESOURCE_SLICES].apply("ADDED", raw)
    return size.nodes


def _feed_claim(runtime: Runtime, body: JsonDict) -> None:
    runtime.cache[RESOURCE_CLAIMS].apply("MODIFIED", _decoded(body))


def _feed_pod(runtime: Runtime, body: JsonDict) -> None:
    runtime.cache[PODS].apply("MODIFIED", _decoded(body))


def _decide(controller: allocation.AllocationController, index: int) -> tuple[str, JsonDict]:
    """The allocation controller's own decision for the pod (node filter, then devices),
    and the assume that precedes its write."""
    pod_ = controller.pods.get(Key(NAMESPACE, pod_name(index)))
    claim_ = controller.claims.get(Key(NAMESPACE, claim_name(index)))
    assert pod_ is not None and claim_ is not None
    for _ in range(20):
        try:
            node_, chosen = controller.decider.choose(pod_, [(pod_.claims[0], claim_)])
            break
        except SliceUsed:
            continue  # a slow first decision (CEL compiled, traced) goes on, as in the loop
    else:
        raise RuntimeError(f"{pod_.ref}: no decision within its budget")
    controller.state.assume(claim_, chosen[0])
    return node_, chosen[0].to_dict()


CONTROLLERS: Sequence[Callable[[Runtime], Any]] = (
    allocation.AllocationController,
    claims.ClaimController,
    released.ReleasedPodsController,
    doubles.DoubleAllocationController,
    taints.TaintController,
)
"""Every controller the operator's process runs (each registers itself with kopf)."""


def load(size: Size) -> tuple[Runtime, dict[str, int], int]:
    """The operator fed a cluster of ``size``: its runtime, the objects fed per kind, and how
    many pods it allocated."""
    settings = dataclasses.replace(Settings(), leader_election=False, api_group=size.api_group)
    runtime = Runtime(settings, client=None)  # type: ignore[arg-type]  # never called
    for build in CONTROLLERS:
        runtime.add(build(runtime))
    controller = next(
        c for c in runtime.controllers if isinstance(c, allocation.AllocationController)
    )
    protocol = runtime.protocol
    objects = {"setup": _feed_setup(runtime)}
    objects["nodes"] = _feed_nodes(runtime, size)
    objects["slices"] = _feed_slices(runtime, size)
    allocated = 0
    version = 100_000
    for index in range(size.pods):
        version += 3
        _feed_pod(runtime, pod(index, protocol, version))
        _feed_claim(runtime, claim(index, protocol, version + 1))
        try:
            node_, result = _decide(controller, index)
        except (StillWaiting, Unallocatable):  # no room left: it stays gated, as in a cluster
            continue
        allocated += 1
        _feed_claim(runtime, claim(index, protocol, version + 2, result))
        _feed_pod(runtime, pod(index, protocol, version + 3, node=node_, allocation=result))
    objects["claims"] = objects["pods"] = size.pods
    # The queues empty as the controllers work through them; what stays is the state.
    for each in runtime.controllers:
        queue = getattr(each, "queue", None)
        if queue is not None:
            queue._ready.clear()
            queue._queued.clear()
    return runtime, objects, allocated


# --- measuring -------------------------------------------------------------------------------


def _lines_of(*functions: Callable[..., Any]) -> set[int]:
    lines: set[int] = set()
    for function in functions:
        code: CodeType = function.__code__
        lines.update(line for _, _, line in code.co_lines() if line is not None)
    return lines


def _classifier() -> Callable[[tracemalloc.Traceback], str]:
    feeders = {
        "setup": _lines_of(_feed_setup),
        "nodes": _lines_of(_feed_nodes),
        "slices": _lines_of(_feed_slices),
        "claims": _lines_of(_feed_claim),
        "pods": _lines_of(_feed_pod),
    }

    def classify(traceback: tracemalloc.Traceback) -> str:
        files = [frame.filename for frame in traceback]
        if any(name.startswith(_ALLOCATOR) for name in files):
            return "allocator state"
        if any(name.startswith(_CONTROLLERS) for name in files):
            return "controllers"
        for frame in traceback:
            if frame.filename == _THIS:
                for kind, lines in feeders.items():
                    if frame.lineno in lines:
                        return kind
        return "other"

    return classify


def _short(where: str) -> str:
    """A site without the machine's directories: operators/..., pydantic/..., json/..."""
    where = where.replace(_OPERATORS, "operators")
    if "/site-packages/" in where:
        return where.split("/site-packages/", 1)[1]
    stdlib = sysconfig.get_paths()["stdlib"]
    return where.removeprefix(stdlib + "/")


def measure(size: Size, top: int = 15) -> Report:
    # The CEL grammar's parser tables are built once per process, whatever the cluster:
    # built before tracing, they neither count nor slow the traced run (by minutes).
    cel_parser.parse("true")
    gc.collect()
    tracemalloc.start(32)
    try:
        runtime, objects, allocated = load(size)
        gc.collect()
        snapshot = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    snapshot = snapshot.filter_traces(
        (tracemalloc.Filter(False, tracemalloc.__file__), tracemalloc.Filter(False, "<unknown>"))
    )
    classify = _classifier()
    by_kind: dict[str, int] = {}
    for trace in snapshot.traces:
        kind = classify(trace.traceback)
        by_kind[kind] = by_kind.get(kind, 0) + trace.size
    sites = tuple(
        Site(_short(str(stat.traceback[0])), stat.size, stat.count)
        for stat in snapshot.statistics("lineno")[:top]
    )
    del runtime
    return Report(size, by_kind, objects, sum(by_kind.values()), sites, allocated)


def rss_mib() -> float:
    """The process's resident set (Linux), as level 2 reads the operator's; 0 elsewhere."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def measure_rss(size: Size) -> str:
    """The resident set before and after loading, untraced: comparable with level 2's RSS
    (interpreter and modules included), and minutes faster than the traced run."""
    cel_parser.parse("true")
    gc.collect()
    before = rss_mib()
    _runtime, _objects, allocated = load(size)
    gc.collect()
    after = rss_mib()
    return (
        f"nodes={size.nodes} devices={size.nodes * size.devices_per_node} pods={size.pods} "
        f"(allocated {allocated}) api-group={size.api_group}\n"
        f"RSS {before:.1f} MiB before loading, {after:.1f} MiB after (+{after - before:.1f})"
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.memory", description=__doc__)
    parser.add_argument("--nodes", type=int, default=Size.nodes)
    parser.add_argument("--devices-per-node", type=int, default=Size.devices_per_node)
    parser.add_argument("--pods", type=int, default=Size.pods)
    parser.add_argument("--api-group", default=Size.api_group)
    parser.add_argument("--top", type=int, default=15)
    parser.add_argument(
        "--rss", action="store_true", help="the process's RSS only, untraced (fast, no split)"
    )
    args = parser.parse_args(argv)
    size = Size(args.nodes, args.devices_per_node, args.pods, args.api_group)
    print(measure_rss(size) if args.rss else measure(size, args.top).render())
    return 0


if __name__ == "__main__":
    sys.exit(main())
