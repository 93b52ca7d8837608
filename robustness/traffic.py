"""Seeded traffic: what users do to a cluster with devices, at random, reproducibly.

Every choice comes from one ``random.Random(seed)``, so a seed names a run's traffic (its
timing still depends on the machine). The operations are the ones that found bugs before:
pods from templates and with a shared claim, gangs, pods in a namespace at its DeviceQuota,
pods and claims deleted while dralloc works on them, nodes and their slices coming and
going, devices tainted NoExecute (DeviceTaintRules: dralloc evicts their pods) and the
taints lifted; pods of a high priority, which dralloc preempts lower ones for (with
``preemption``); in in-tree mode with the webhook, pods asking for the devices as an extended
resource (a DeviceClass's ``extendedResourceName``) in the namespaces dralloc serves, which
the webhook turns into claims pods (some under a DeviceQuota of that class), and pods
kube-scheduler allocates itself beside dralloc's (``scheduler_pods``), on the same devices:
with a claim from a template, and asking for an extended resource.

A request that fails (the API server down during a fault, a conflict) is counted, not
retried: the traffic goes on as users' would.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Final

from operators.kube import (
    DEVICE_CLASSES,
    DEVICE_TAINT_RULES,
    NODES,
    POD_GROUPS,
    PODS,
    RESOURCE_CLAIMS,
    RESOURCE_SLICES,
    KubeClient,
    NotFound,
)
from robustness.cluster import DRALLOC_GROUP, Mode

GATE: Final = f"{DRALLOC_GROUP}/allocation"
CLAIMS_ANNOTATION: Final = f"{DRALLOC_GROUP}/claims"
GATED_LABEL: Final = ("robustness.dralloc.dev/gated", "true")
"""The label of namespaces whose pods dralloc gates (``--gate-namespace-label``)."""
TEMPLATE: Final = "one"
NODE_CAPACITY: Final = {"cpu": "8", "memory": "32Gi", "pods": "110"}
HIGH_PRIORITY: Final = 1000


@dataclass(frozen=True)
class Layout:
    """Names of one run's objects, all derived from its prefix."""

    prefix: str
    mode: Mode
    nodes: int
    devices_per_node: int
    quota_devices: int
    preemption: bool = False
    """PriorityClasses for pods that preempt (and that may not), beside the others' 0."""

    @property
    def driver(self) -> str:
        return f"{self.prefix}.example.com"

    @property
    def device_class(self) -> str:
        return self.prefix

    @property
    def gated(self) -> tuple[str, ...]:
        return (f"{self.prefix}-a", f"{self.prefix}-b")

    @property
    def quota_namespace(self) -> str:
        return f"{self.prefix}-quota"

    @property
    def scheduler_namespace(self) -> str:
        """kube-scheduler's own pods (in-tree mode): not gated, dralloc does not allocate them."""
        return f"{self.prefix}-sched"

    @property
    def probe_namespace(self) -> str:
        """Gated, but not recorded: where the run tries whether admission gates pods yet."""
        return f"probe-{self.prefix}"

    @property
    def marker_namespace(self) -> str:
        return f"{self.prefix}-marker"

    def namespaces(self) -> tuple[str, ...]:
        extra = (self.scheduler_namespace,) if self.mode.in_tree else ()
        return (*self.gated, self.quota_namespace, *extra, self.marker_namespace)

    @property
    def extended_resource(self) -> str:
        """The extended resource the extended-resource class backs (in-tree mode)."""
        return f"{self.prefix}.example.com/gpu"

    def extended_class(self) -> dict[str, Any]:
        return {
            "apiVersion": self.mode.api_version,
            "kind": "DeviceClass",
            "metadata": {"name": f"{self.device_class}-extended"},
            "spec": {
                "selectors": [{"cel": {"expression": f'device.driver == "{self.driver}"'}}],
                "extendedResourceName": self.extended_resource,
            },
        }

    @property
    def high_priority(self) -> str:
        """A PriorityClass above every other pod's (they have none: 0)."""
        return f"{self.prefix}-high"

    @property
    def polite_priority(self) -> str:
        """As high, with ``preemptionPolicy: Never``."""
        return f"{self.prefix}-polite"

    def priority_classes(self) -> list[dict[str, Any]]:
        return [
            {
                "apiVersion": "scheduling.k8s.io/v1",
                "kind": "PriorityClass",
                "metadata": {"name": name},
                "value": HIGH_PRIORITY,
                "preemptionPolicy": policy,
            }
            for name, policy in (
                (self.high_priority, "PreemptLowerPriority"),
                (self.polite_priority, "Never"),
            )
        ]

    def node_name(self, index: int) -> str:
        return f"{self.prefix}-n{index}"

    def node(self, index: int) -> dict[str, Any]:
        name = self.node_name(index)
        return {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": name,
                "labels": {
                    "kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
                    "kubernetes.io/arch": "amd64", "type": "kwok", "robustness-pool": self.prefix,
                },
                "annotations": {"kwok.x-k8s.io/node": "fake"},
            },
            "status": {"allocatable": NODE_CAPACITY, "capacity": NODE_CAPACITY},
        }  # fmt: skip

    def slice(self, index: int) -> dict[str, Any]:
        node = self.node_name(index)
        return {
            "apiVersion": self.mode.api_version,
            "kind": "ResourceSlice",
            "metadata": {"name": f"{node}-devices"},
            "spec": {
                "driver": self.driver,
                "nodeName": node,
                "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                "devices": [{"name": f"dev-{i}"} for i in range(self.devices_per_node)],
            },
        }

    def setup(self) -> list[dict[str, Any]]:
        """Namespaces, the DeviceClass, nodes and slices, templates and the quota."""
        objects: list[dict[str, Any]] = []
        for namespace in (*self.namespaces(), self.probe_namespace):
            labels = dict([GATED_LABEL]) if namespace != self.scheduler_namespace else {}
            objects.append(
                {"apiVersion": "v1", "kind": "Namespace",
                 "metadata": {"name": namespace, "labels": labels}}
            )  # fmt: skip
        objects.append(
            {
                "apiVersion": self.mode.api_version,
                "kind": "DeviceClass",
                "metadata": {"name": self.device_class},
                "spec": {
                    "selectors": [{"cel": {"expression": f'device.driver == "{self.driver}"'}}]
                },
            }
        )
        if self.preemption:
            objects += self.priority_classes()
        for index in range(self.nodes):
            objects += [self.node(index), self.slice(index)]
        for namespace in self.namespaces():
            objects.append(
                {
                    "apiVersion": self.mode.api_version,
                    "kind": "ResourceClaimTemplate",
                    "metadata": {"name": TEMPLATE, "namespace": namespace},
                    "spec": {"spec": self.claim_spec()},
                }
            )
        objects.append(
            {
                "apiVersion": f"{DRALLOC_GROUP}/v1",
                "kind": "DeviceQuota",
                "metadata": {"name": "gpus", "namespace": self.quota_namespace},
                "spec": {
                    "deviceClassName": self.device_class,
                    "hard": {"devices": self.quota_devices},
                },
            }
        )
        if self.mode.in_tree:  # the extended-resource class's devices, asked for that way
            objects.append(
                {
                    "apiVersion": f"{DRALLOC_GROUP}/v1",
                    "kind": "DeviceQuota",
                    "metadata": {"name": "gpus-extended", "namespace": self.quota_namespace},
                    "spec": {
                        "deviceClassName": self.extended_class()["metadata"]["name"],
                        "hard": {"devices": self.quota_devices},
                    },
                }
            )
        return objects

    def claim_spec(self) -> dict[str, Any]:
        return {
            "devices": {
                "requests": [{"name": "dev", "exactly": {"deviceClassName": self.device_class}}]
            }
        }

    def pod(
        self,
        namespace: str,
        name: str,
        claims: list[dict[str, str]],
        *,
        gated: bool = True,
        annotations: dict[str, str] | None = None,
        priority_class: str = "",
    ) -> dict[str, Any]:
        body: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "namespace": namespace,
                "annotations": dict(annotations or {}),
            },
            "spec": {
                "containers": [
                    {
                        "name": "c",
                        "image": "registry.invalid/fake",
                        "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}},
                    }
                ],
                "nodeSelector": {"robustness-pool": self.prefix},
                "terminationGracePeriodSeconds": 0,
            },
        }
        if priority_class:
            body["spec"]["priorityClassName"] = priority_class
        if gated:
            body["spec"]["schedulingGates"] = [{"name": GATE}]
        if self.mode.in_tree:
            body["spec"]["resourceClaims"] = claims
        else:
            body["metadata"]["annotations"][CLAIMS_ANNOTATION] = json.dumps(claims)
        return body


@dataclass
class Traffic:
    client: KubeClient
    layout: Layout
    rng: random.Random
    scheduler_pods: bool = False
    """In-tree mode: pods kube-scheduler allocates itself, on the same devices."""
    self_gated: bool = True
    """dralloc's pods carry the gate themselves; else admission adds it (:mod:`gates`)."""
    webhook_translates: bool = False
    """The operator's webhook admits pods (it turns extended resources into claims)."""
    pod_groups: bool = False
    """Gangs named by Workload API PodGroups too."""
    preemption: bool = False
    """Pods of a high priority, which preempt for devices (some may not: ``Never``)."""
    extended_pods: bool = True
    """With ``scheduler_pods``: pods asking for a DRA extended resource of a class on the same
    devices too (kube-scheduler allocates their claims, unless the policy refuses it)."""
    applied: Counter[str] = field(default_factory=Counter)
    failed: Counter[str] = field(default_factory=Counter)
    live: list[tuple[str, str]] = field(default_factory=list)
    """Pods created and not deleted by the traffic: (namespace, name)."""
    extra_nodes: list[int] = field(default_factory=list)
    taints: list[str] = field(default_factory=list)
    """DeviceTaintRules the traffic made and has not lifted."""
    serial: int = 0

    def _name(self, what: str) -> str:
        self.serial += 1
        return f"{what}-{self.serial}"

    def operations(self) -> list[tuple[str, int]]:
        ops = [
            ("template_pod", 30), ("shared_claim", 5), ("gang", 5), ("gang_torn", 2), ("quota_pod", 6),
            ("delete_pod", 20), ("delete_new_pod", 4), ("delete_claim", 3),
            ("add_node", 1), ("remove_node", 1), ("taint_device", 1), ("untaint_device", 2),
        ]  # fmt: skip
        if self.scheduler_pods and self.layout.mode.in_tree:
            ops += [("scheduler_pod", 12)]
            if self.extended_pods:
                ops += [("extended_pod", 6)]
        if self.pod_groups:
            ops += [("pod_group_gang", 4), ("pod_group_gang_torn", 1)]
        if self.preemption:
            ops += [("priority_pod", 8), ("polite_pod", 2)]
        if self.layout.mode.in_tree and self.webhook_translates and self.extended_pods:
            # The webhook turns their extended resources into a claim dralloc allocates.
            ops += [("served_extended_pod", 6), ("quota_extended_pod", 2)]
        return ops

    async def run(self, until: float, rate: float) -> None:
        """Operations at random (exponential gaps of mean 1/``rate`` s) until the loop's
        clock reaches ``until``."""
        loop = asyncio.get_running_loop()
        names, weights = zip(*self.operations(), strict=True)
        if any(name.endswith("extended_pod") for name in names):
            await self.ensure_extended_class()
        capacity = (self.layout.nodes + len(self.extra_nodes)) * self.layout.devices_per_node
        if self.preemption:  # more pods than devices: a pod of a high priority finds them held
            capacity = capacity * 3 // 2
        while loop.time() < until:
            name = self.rng.choices(names, weights)[0]
            if len(self.live) > capacity and not name.startswith("delete"):
                name = "delete_pod"
            try:
                await getattr(self, name)()
                self.applied[name] += 1
            except Exception as exc:  # refused, or the API server restarting (aiohttp's errors)
                self.failed[f"{name}: {type(exc).__name__}"] += 1
            await asyncio.sleep(self.rng.expovariate(rate))

    async def _create_pod(self, body: dict[str, Any]) -> None:
        meta = body["metadata"]
        if not self.self_gated:
            body["spec"].pop("schedulingGates", None)
        await self.client.create(PODS, body, meta["namespace"])
        self.live.append((meta["namespace"], meta["name"]))

    def _template_claims(self) -> list[dict[str, str]]:
        return [{"name": "dev", "resourceClaimTemplateName": TEMPLATE}]

    async def template_pod(self) -> None:
        namespace = self.rng.choice(self.layout.gated)
        await self._create_pod(self.layout.pod(namespace, self._name("p"), self._template_claims()))

    async def priority_pod(self) -> None:
        """A pod above all others: where every device is taken, dralloc preempts for it."""
        await self._prioritized("hi", self.layout.high_priority)

    async def polite_pod(self) -> None:
        """As high, but ``preemptionPolicy: Never``: it waits, and never preempts."""
        await self._prioritized("po", self.layout.polite_priority)

    async def _prioritized(self, what: str, priority_class: str) -> None:
        namespace = self.rng.choice(self.layout.gated)
        claims = self._template_claims()
        body = self.layout.pod(namespace, self._name(what), claims, priority_class=priority_class)
        await self._create_pod(body)

    async def quota_pod(self) -> None:
        body = self.layout.pod(
            self.layout.quota_namespace, self._name("q"), self._template_claims()
        )
        await self._create_pod(body)

    async def extended_pod(self) -> None:
        """A pod asking for a device as an extended resource, which kube-scheduler turns into
        a claim of its own."""
        await self._create_pod(self._extended_body(self.layout.scheduler_namespace, "x"))

    async def served_extended_pod(self) -> None:
        """The same in a namespace dralloc serves: the webhook makes it a claims pod."""
        namespace = self.rng.choice(self.layout.gated)
        await self._create_pod(self._extended_body(namespace, "xs", count=self.rng.choice("112")))

    async def quota_extended_pod(self) -> None:
        """One under the DeviceQuota: the claim the webhook named counts like any other."""
        await self._create_pod(self._extended_body(self.layout.quota_namespace, "xq"))

    def _extended_body(self, namespace: str, what: str, count: str = "1") -> dict[str, Any]:
        body = self.layout.pod(namespace, self._name(what), [], gated=False)
        body["spec"].pop("resourceClaims", None)
        asked = {self.layout.extended_resource: count}
        resources = body["spec"]["containers"][0]["resources"]
        resources["requests"] = {**resources["requests"], **asked}
        resources["limits"] = asked
        return body

    async def ensure_extended_class(self) -> None:
        with contextlib.suppress(Exception):
            await self.client.create(DEVICE_CLASSES, self.layout.extended_class())

    async def taint_device(self) -> None:
        """A device tainted NoExecute: dralloc evicts the pods using it."""
        index = self.rng.randrange(self.layout.nodes)
        device = f"dev-{self.rng.randrange(self.layout.devices_per_node)}"
        name = self._name("taint")
        await self.client.create(
            DEVICE_TAINT_RULES,
            {
                "apiVersion": self.layout.mode.api_version,
                "kind": "DeviceTaintRule",
                "metadata": {"name": name},
                "spec": {
                    "deviceSelector": {
                        "driver": self.layout.driver,
                        "pool": self.layout.node_name(index),
                        "device": device,
                    },
                    "taint": {"key": "robustness", "value": "broken", "effect": "NoExecute"},
                },
            },
        )
        self.taints.append(name)

    async def untaint_device(self) -> None:
        if self.taints:
            name = self.taints.pop(self.rng.randrange(len(self.taints)))
            await self._delete(DEVICE_TAINT_RULES, name, None)

    async def scheduler_pod(self) -> None:
        body = self.layout.pod(
            self.layout.scheduler_namespace, self._name("s"), self._template_claims(), gated=False
        )
        await self._create_pod(body)

    async def shared_claim(self) -> None:
        namespace = self.rng.choice(self.layout.gated)
        claim = self._name("shared")
        await self.client.create(
            RESOURCE_CLAIMS,
            {"apiVersion": self.layout.mode.api_version, "kind": "ResourceClaim",
             "metadata": {"name": claim, "namespace": namespace},
             "spec": self.layout.claim_spec()},
            namespace,
        )  # fmt: skip
        for _ in range(2):
            entry = [{"name": "dev", "resourceClaimName": claim}]
            await self._create_pod(self.layout.pod(namespace, self._name("u"), entry))

    async def gang(self) -> str:
        """A gang of 2 or 3 pods; returns its name."""
        namespace = self.rng.choice(self.layout.gated)
        size = self.rng.choice((2, 3))
        gang = self._name("g")
        annotations = {f"{DRALLOC_GROUP}/gang": gang, f"{DRALLOC_GROUP}/gang-size": str(size)}
        for index in range(size):
            body = self.layout.pod(
                namespace, f"{gang}-{index}", self._template_claims(), annotations=annotations
            )
            await self._create_pod(body)
        return gang

    async def pod_group_gang(self) -> str:
        """A PodGroup with a gang policy of 2 or 3 and as many pods (``schedulingGroup``);
        the group is made first or, half the time, after its pods."""
        namespace = self.rng.choice(self.layout.gated)
        size = self.rng.choice((2, 3))
        gang = self._name("pg")
        group = {
            "apiVersion": f"{POD_GROUPS.group}/{POD_GROUPS.version}",
            "kind": "PodGroup",
            "metadata": {"name": gang, "namespace": namespace},
            "spec": {"schedulingPolicy": {"gang": {"minCount": size}}},
        }
        group_first = self.rng.random() < 0.5
        if group_first:
            await self.client.create(POD_GROUPS, group, namespace)
        for index in range(size):
            body = self.layout.pod(namespace, f"{gang}-{index}", self._template_claims())
            body["spec"]["schedulingGroup"] = {"podGroupName": gang}
            await self._create_pod(body)
        if not group_first:
            await self.client.create(POD_GROUPS, group, namespace)
        return gang

    async def pod_group_gang_torn(self) -> None:
        await self.gang_torn(await self.pod_group_gang())

    async def gang_torn(self, gang: str | None = None) -> None:
        """A gang one of whose members is deleted while dralloc places the gang."""
        gang = gang or await self.gang()
        gang_members = [i for i, (_, name) in enumerate(self.live) if name.startswith(f"{gang}-")]
        await asyncio.sleep(self.rng.uniform(0, 0.3))
        namespace, name = self.live.pop(self.rng.choice(gang_members))
        await self._delete(PODS, name, namespace)

    async def delete_pod(self) -> None:
        if not self.live:
            return
        namespace, name = self.live.pop(self.rng.randrange(len(self.live)))
        await self._delete(PODS, name, namespace)

    async def delete_new_pod(self) -> None:
        """A pod deleted right after it was made: while dralloc is allocating it."""
        await self.template_pod()
        await asyncio.sleep(self.rng.uniform(0, 0.5))
        namespace, name = self.live.pop()
        await self._delete(PODS, name, namespace)

    async def delete_claim(self) -> None:
        namespace = self.rng.choice(self.layout.gated)
        claims, _ = await self.client.list(RESOURCE_CLAIMS, namespace)
        if claims:
            claim = self.rng.choice(sorted(claims, key=lambda c: c["metadata"]["name"]))
            await self._delete(RESOURCE_CLAIMS, claim["metadata"]["name"], namespace)

    async def add_node(self) -> None:
        index = self.layout.nodes + self.serial
        self.serial += 1
        await self.client.create(NODES, self.layout.node(index))
        await self.client.create(RESOURCE_SLICES, self.layout.slice(index))
        self.extra_nodes.append(index)

    async def remove_node(self) -> None:
        """A node added by the traffic goes, slice first (as a driver's would)."""
        if not self.extra_nodes:
            return
        index = self.extra_nodes.pop(self.rng.randrange(len(self.extra_nodes)))
        await self._delete(RESOURCE_SLICES, f"{self.layout.node_name(index)}-devices", None)
        await self._delete(NODES, self.layout.node_name(index), None)

    async def _delete(self, resource: Any, name: str, namespace: str | None) -> None:
        with contextlib.suppress(NotFound):
            await self.client.delete(resource, name, namespace=namespace)
