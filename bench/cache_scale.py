"""The operator's cache at upstream's scalability envelope: its RSS and how long it takes to sync.

An operator restarted on a big cluster lists every kind it watches before it decides anything:
5,000 nodes with their ResourceSlices and 150,000 pods, a tenth of them with an allocated claim
and the rest ordinary pods of Deployments (realistic specs and statuses, managedFields
included). What that costs is what this measures, through the operator's own code: the
:class:`~operators.controllers.runtime.Runtime` with every controller the process runs, its
client, its informers in pages of 500 and the controllers' handlers. Only the transport is not
the network's: it writes each page's JSON text when asked, from generators, and the time spent
writing is left out of the sync time.

Run in a process of its own, so that the resident set is the operator's (the interpreter, its
modules, the cache and the controllers' state) and its peak is what listing costs on top.

Targets (issue 42): RSS at most 1 GiB, sync at most 20 s.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import gc
import json
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any

from bench import memory
from operators import gcpause
from operators.api.models import GROUP
from operators.api.podprotocol import PodProtocol
from operators.controllers.runtime import Runtime
from operators.kube import (
    DEVICE_CLASSES,
    NAMESPACES,
    NODES,
    PODS,
    RESOURCE_CLAIM_TEMPLATES,
    RESOURCE_CLAIMS,
    RESOURCE_SLICES,
    Connection,
    JsonDict,
    KubeClient,
    Request,
    Resource,
)
from operators.process import loop_factory
from operators.settings import Settings

PAGE = 500
"""Objects per list page: the informers' own limit."""

TARGET_RSS_MIB = 1024
TARGET_SYNC_SECONDS = 20.0


@dataclasses.dataclass(frozen=True)
class Size:
    nodes: int = 5000
    devices_per_node: int = 8
    pods: int = 150_000
    claim_share: float = 0.1
    """Of the pods, those with a claim (allocated, bound, running); the rest are ordinary."""
    namespaces: int = 100
    """Namespaces the ordinary pods are spread over."""
    api_group: str = GROUP

    @property
    def claim_pods(self) -> int:
        return int(self.pods * self.claim_share)

    @property
    def ordinary_pods(self) -> int:
        return self.pods - self.claim_pods


@dataclasses.dataclass(frozen=True)
class Result:
    size: Size
    objects: Mapping[str, int]
    """Objects each informer holds once synced, by plural."""
    sync_seconds: float
    """From the informers' start until every one has listed, less the time spent writing."""
    rss_before_mib: float
    """The process before its informers started: the interpreter and the operator's modules."""
    rss_mib: float
    """Once synced, after a garbage collection."""
    peak_rss_mib: float
    """The most the process held at any moment (VmHWM)."""

    @property
    def met(self) -> bool:
        return self.rss_mib <= TARGET_RSS_MIB and self.sync_seconds <= TARGET_SYNC_SECONDS

    def render(self) -> str:
        size = self.size
        return "\n".join(
            [
                f"nodes={size.nodes} devices={size.nodes * size.devices_per_node} "
                f"pods={size.pods} (with claims {size.claim_pods}) api-group={size.api_group}",
                f"objects: {', '.join(f'{k} {v:,}' for k, v in self.objects.items() if v)}",
                f"sync {self.sync_seconds:.1f} s (target {TARGET_SYNC_SECONDS:.0f} s)",
                f"RSS {self.rss_mib:.0f} MiB once synced, peak {self.peak_rss_mib:.0f} MiB, "
                f"{self.rss_before_mib:.0f} MiB before (target {TARGET_RSS_MIB} MiB)",
            ]
        )

    def to_json(self) -> JsonDict:
        return {
            "nodes": self.size.nodes,
            "devices": self.size.nodes * self.size.devices_per_node,
            "pods": self.size.pods,
            "claimPods": self.size.claim_pods,
            "apiGroup": self.size.api_group,
            "objects": dict(self.objects),
            "syncSeconds": round(self.sync_seconds, 2),
            "rssBeforeMiB": round(self.rss_before_mib, 1),
            "rssMiB": round(self.rss_mib, 1),
            "peakRssMiB": round(self.peak_rss_mib, 1),
            "targets": {"rssMiB": TARGET_RSS_MIB, "syncSeconds": TARGET_SYNC_SECONDS},
            "met": self.met,
        }


# --- the cluster, one generator per kind -----------------------------------------------------


def team(index: int) -> str:
    return f"team-{index:03d}"


def ordinary_pod(index: int, size: Size) -> JsonDict:
    """A running pod of a Deployment, without claims: what most of a cluster's pods are."""
    name = f"web-{index:07d}"
    node = memory.node_name(index % size.nodes)
    ip = f"10.{64 + index // 65536}.{index // 256 % 256}.{index % 256}"
    created = memory.CREATED

    def ready(kind: str) -> JsonDict:
        return {
            "type": kind,
            "status": "True",
            "lastProbeTime": None,
            "lastTransitionTime": created,
        }

    env: list[JsonDict] = [{"name": f"SETTING_{i}", "value": f"value-{i}"} for i in range(8)]
    env.append({"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}})
    probe = {
        "httpGet": {"path": "/healthz", "port": 8080, "scheme": "HTTP"},
        "periodSeconds": 10,
        "timeoutSeconds": 1,
        "successThreshold": 1,
        "failureThreshold": 3,
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "generateName": "web-7d9c8b6f5-",
            "namespace": team(index % size.namespaces),
            "uid": f"00000000-0000-0000-0005-{index:012d}",
            "resourceVersion": str(500_000 + index),
            "creationTimestamp": created,
            "labels": {
                "app.kubernetes.io/name": "web",
                "app.kubernetes.io/instance": f"web-{index % 997}",
                "pod-template-hash": "7d9c8b6f5",
            },
            "annotations": {"kubectl.kubernetes.io/restartedAt": "2026-11-30T08:00:00Z"},
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "ReplicaSet",
                    "name": f"web-{index % 997}-7d9c8b6f5",
                    "uid": f"00000000-0000-0000-0006-{index % 997:012d}",
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
            "managedFields": [
                memory._managed(
                    "kube-controller-manager",
                    "Update",
                    {
                        "f:metadata": {"f:generateName": {}, "f:labels": {".": {}}},
                        "f:spec": {"f:containers": {'k:{"name":"web"}': {".": {}}}},
                    },
                ),
                memory._managed(
                    "kubelet",
                    "Update",
                    {"f:status": {"f:conditions": {}, "f:containerStatuses": {}, "f:podIP": {}}},
                    subresource="status",
                ),
            ],
        },
        "spec": {
            "containers": [
                {
                    "name": "web",
                    "image": "registry.example.com/shop/web:v3.8.2",
                    "args": ["--port=8080", "--log-format=json"],
                    "ports": [{"name": "http", "containerPort": 8080, "protocol": "TCP"}],
                    "env": env,
                    "resources": {
                        "requests": {"cpu": "500m", "memory": "512Mi"},
                        "limits": {"memory": "1Gi"},
                    },
                    "readinessProbe": probe,
                    "livenessProbe": probe,
                    "volumeMounts": [
                        {"name": "config", "mountPath": "/etc/web", "readOnly": True},
                        {
                            "name": "kube-api-access-x7k2p",
                            "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
                            "readOnly": True,
                        },
                    ],
                    "terminationMessagePath": "/dev/termination-log",
                    "terminationMessagePolicy": "File",
                    "imagePullPolicy": "IfNotPresent",
                }
            ],
            "volumes": [
                {"name": "config", "configMap": {"name": "web-config", "defaultMode": 420}},
                {
                    "name": "kube-api-access-x7k2p",
                    "projected": {
                        "defaultMode": 420,
                        "sources": [
                            {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                            {
                                "configMap": {
                                    "name": "kube-root-ca.crt",
                                    "items": [{"key": "ca.crt", "path": "ca.crt"}],
                                }
                            },
                        ],
                    },
                },
            ],
            "nodeName": node,
            "restartPolicy": "Always",
            "terminationGracePeriodSeconds": 30,
            "dnsPolicy": "ClusterFirst",
            "serviceAccountName": "default",
            "schedulerName": "default-scheduler",
            "priority": 0,
            "enableServiceLinks": True,
            "preemptionPolicy": "PreemptLowerPriority",
            "tolerations": [
                {
                    "key": "node.kubernetes.io/not-ready",
                    "operator": "Exists",
                    "effect": "NoExecute",
                    "tolerationSeconds": 300,
                },
                {
                    "key": "node.kubernetes.io/unreachable",
                    "operator": "Exists",
                    "effect": "NoExecute",
                    "tolerationSeconds": 300,
                },
            ],
        },
        "status": {
            "phase": "Running",
            "qosClass": "Burstable",
            "hostIP": "192.168.0.1",
            "hostIPs": [{"ip": "192.168.0.1"}],
            "podIP": ip,
            "podIPs": [{"ip": ip}],
            "startTime": created,
            "conditions": [
                ready(kind)
                for kind in (
                    "PodReadyToStartContainers",
                    "Initialized",
                    "Ready",
                    "ContainersReady",
                    "PodScheduled",
                )
            ],
            "containerStatuses": [
                {
                    "name": "web",
                    "state": {"running": {"startedAt": created}},
                    "lastState": {},
                    "ready": True,
                    "restartCount": 0,
                    "image": "registry.example.com/shop/web:v3.8.2",
                    "imageID": "registry.example.com/shop/web@sha256:" + memory.digest(index),
                    "containerID": "containerd://" + memory.digest(index + 1),
                    "started": True,
                }
            ],
        },
    }


def allocation(index: int, size: Size) -> tuple[str, JsonDict]:
    """The node and the allocation of claim pod ``index``: device ``index // nodes`` of node
    ``index % nodes``, so that no device is held twice."""
    node = memory.node_name(index % size.nodes)
    device = f"gpu-{index // size.nodes}"
    return node, {
        "devices": {
            "results": [
                {"request": memory.ENTRY, "driver": memory.DRIVER, "pool": node, "device": device}
            ]
        },
        "nodeSelector": {
            "nodeSelectorTerms": [
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
            ]
        },
    }


Generate = Callable[[int], JsonDict]


def kinds(size: Size, protocol: PodProtocol) -> Mapping[Resource, tuple[int, Generate]]:
    """Every kind listed: how many objects, and the object at each index."""
    if size.claim_pods > size.nodes * size.devices_per_node:
        raise ValueError("more claim pods than devices")
    names = ["default", "kube-system", memory.NAMESPACE] + [team(i) for i in range(size.namespaces)]

    def claim_pod(index: int) -> JsonDict:
        node, result = allocation(index, size)
        return memory.pod(index, protocol, 100_000 + index, node=node, allocation=result)

    step = round(1 / size.claim_share)

    def any_pod(index: int) -> JsonDict:
        # One claim pod in every ``step``, the others ordinary: the list mixes them.
        if index % step == 0:
            return claim_pod(index // step)
        return ordinary_pod(index - index // step - 1, size)

    return {
        NAMESPACES: (len(names), lambda i: memory.namespace(names[i])),
        NODES: (size.nodes, memory.node),
        RESOURCE_SLICES: (size.nodes, lambda i: memory.resource_slice(i, size.devices_per_node)),
        DEVICE_CLASSES: (1, lambda _: memory.device_class()),
        RESOURCE_CLAIM_TEMPLATES: (1, lambda _: memory.template()),
        RESOURCE_CLAIMS: (
            size.claim_pods,
            lambda i: memory.claim(i, protocol, 200_000 + i, allocation(i, size)[1]),
        ),
        PODS: (size.pods, any_pod),
    }


# --- the transport: list pages written on request --------------------------------------------


class _Page:
    def __init__(self, text: str) -> None:
        self.status = 200
        self._text = text

    async def text(self) -> str:
        return self._text

    async def lines(self) -> AsyncIterator[bytes]:
        await asyncio.Event().wait()  # a watch with nothing to say, until cancelled
        yield b""


class ListingTransport:
    """Answers each list request with its page, written when asked; a watch stays silent."""

    def __init__(self) -> None:
        self.listed: dict[str, tuple[int, Generate]] = {}
        """By the list's path: how many objects, and the object at each index."""
        self.kinds: dict[str, str] = {}
        """By the list's path: the list's kind (``PodList``)."""
        self.writing_seconds = 0.0
        """Spent writing pages: not the operator's."""

    @contextlib.asynccontextmanager
    async def send(self, request: Request) -> AsyncIterator[_Page]:
        params = request.params or {}
        if params.get("watch"):
            yield _Page("")
            return
        started = time.perf_counter()
        count, generate = self.listed.get(request.path, (0, lambda _: {}))
        start = int(params.get("continue") or 0)
        stop = min(count, start + int(params.get("limit") or count))
        metadata: JsonDict = {"resourceVersion": "900000"}
        if stop < count:
            metadata["continue"] = str(stop)
        page = {
            "apiVersion": "v1",
            "kind": self.kinds.get(request.path, "List"),
            "metadata": metadata,
            "items": [_listed(generate(index)) for index in range(start, stop)],
        }
        text = json.dumps(page, separators=(",", ":"))
        del page  # freed here, off the operator's clock: freeing what was generated is writing
        self.writing_seconds += time.perf_counter() - started
        yield _Page(text)

    async def close(self) -> None:
        return None


def _listed(obj: JsonDict) -> JsonDict:
    """As a list item: without apiVersion and kind (the list's)."""
    obj.pop("apiVersion", None)
    obj.pop("kind", None)
    return obj


# --- measuring ---------------------------------------------------------------------------


def _status_mib(field: str) -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    return 0.0


async def _sync(size: Size) -> Result:
    settings = dataclasses.replace(Settings(), leader_election=False, api_group=size.api_group)
    connection = Connection(server="https://cluster.invalid", ssl_context=False, headers={})
    transport = ListingTransport()
    client = KubeClient(connection, api_group=size.api_group, transport=transport)
    gcpause.configure(settings.gc_young_threshold)  # as the operator's process does
    runtime = Runtime(settings, client)
    for build in memory.CONTROLLERS:
        runtime.add(build(runtime))
    for resource, listed in kinds(size, runtime.protocol).items():
        served = client.resolve(resource)
        transport.listed[served.path(None)] = listed
        transport.kinds[served.path(None)] = served.kind + "List"
    gc.collect()
    before = _status_mib("VmRSS")
    started = time.perf_counter()
    running = asyncio.create_task(runtime.cache.run())
    try:
        await runtime.cache.wait_synced()
        seconds = time.perf_counter() - started - transport.writing_seconds
    finally:
        running.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await running
    gc.collect()
    return Result(
        size=size,
        objects={r.plural: len(i) for r, i in runtime.cache.informers.items()},
        sync_seconds=seconds,
        rss_before_mib=before,
        rss_mib=_status_mib("VmRSS"),
        peak_rss_mib=_status_mib("VmHWM"),
    )


def measure(size: Size) -> Result:
    """In this process (its RSS is the operator's only in a process of its own: see run)."""
    with asyncio.Runner(loop_factory=loop_factory("uvloop")) as runner:
        return runner.run(_sync(size))


def run(size: Size, log: Any = sys.stderr) -> JsonDict:
    """Measured in a process of its own; its figures as JSON."""
    command = [
        sys.executable,
        "-m",
        "bench.cache_scale",
        "--json",
        f"--nodes={size.nodes}",
        f"--devices-per-node={size.devices_per_node}",
        f"--pods={size.pods}",
        f"--api-group={size.api_group}",
    ]
    print(f"cache scale: {size.nodes} nodes, {size.pods} pods, {size.api_group}", file=log)
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        return {"apiGroup": size.api_group, "error": done.stderr.strip()[-2000:]}
    return json.loads(done.stdout.strip().splitlines()[-1])  # after the operator's log lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.cache_scale", description=__doc__)
    parser.add_argument("--nodes", type=int, default=Size.nodes)
    parser.add_argument("--devices-per-node", type=int, default=Size.devices_per_node)
    parser.add_argument("--pods", type=int, default=Size.pods)
    parser.add_argument("--api-group", default=Size.api_group)
    parser.add_argument("--json", action="store_true", help="the figures as JSON")
    args = parser.parse_args(argv)
    size = Size(args.nodes, args.devices_per_node, args.pods, api_group=args.api_group)
    result = measure(size)
    print(json.dumps(result.to_json()) if args.json else result.render())
    return 0


if __name__ == "__main__":
    sys.exit(main())
