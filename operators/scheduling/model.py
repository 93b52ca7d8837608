"""What kube-scheduler looks at in a pod and a node, read once per watch event.

A pod's scheduling needs (requests, host ports, node selector and affinity, tolerations,
inter-pod affinity, topology spread) are parsed here into frozen values, so the filters in
:mod:`operators.scheduling.filters` never walk a pod body, and so the operator's cache and
the toolkit's snapshots read pods the same way.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Hashable, Mapping
from typing import Any

from operators.allocator.nodes import NODE_NAME_FIELD, NodeInfo, NodeSelector, NodeSelectorError
from operators.api.annotations import DEVICES_ANNOTATION
from operators.api.base import json_copy, json_text, scalar_items
from operators.api.quickinit import quick_init
from operators.scheduling import resources

FINISHED_PHASES = frozenset({"Succeeded", "Failed"})
HOSTNAME_LABEL = "kubernetes.io/hostname"
WILDCARD_IP = "0.0.0.0"


@dataclasses.dataclass(frozen=True, slots=True)
class LabelRequirement:
    key: str
    operator: str
    values: frozenset[str] = frozenset()

    def matches(self, labels: Mapping[str, str]) -> bool:
        value = labels.get(self.key)
        if self.operator == "In":
            return value is not None and value in self.values
        if self.operator == "NotIn":
            return value is None or value not in self.values
        if self.operator == "Exists":
            return value is not None
        if self.operator == "DoesNotExist":
            return value is None
        return False  # unknown operator: the API server refuses these; match nothing


@dataclasses.dataclass(frozen=True, slots=True)
class LabelSelector:
    """metav1.LabelSelector: every requirement must hold (an empty selector matches all)."""

    requirements: tuple[LabelRequirement, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(r.matches(labels) for r in self.requirements)

    @classmethod
    def parse(cls, data: Mapping[str, Any] | None) -> LabelSelector | None:
        """None for a null selector (which matches nothing where the API says so)."""
        if data is None:
            return None
        reqs = [
            LabelRequirement(str(k), "In", frozenset({str(v)}))
            for k, v in sorted((data.get("matchLabels") or {}).items())
        ]
        for expr in data.get("matchExpressions") or ():
            reqs.append(
                LabelRequirement(
                    str(expr.get("key", "")),
                    str(expr.get("operator", "")),
                    frozenset(str(v) for v in expr.get("values") or ()),
                )
            )
        return cls(tuple(reqs))

    def with_label_keys(
        self, labels: Mapping[str, str], match: tuple[str, ...], mismatch: tuple[str, ...] = ()
    ) -> LabelSelector:
        """matchLabelKeys / mismatchLabelKeys folded in with the owning pod's label values."""
        extra = [LabelRequirement(k, "In", frozenset({labels[k]})) for k in match if k in labels]
        extra += [
            LabelRequirement(k, "NotIn", frozenset({labels[k]})) for k in mismatch if k in labels
        ]
        if not extra:
            return self
        return LabelSelector(self.requirements + tuple(extra))


@dataclasses.dataclass(frozen=True, slots=True)
class AffinityTerm:
    """A required pod (anti-)affinity term, with its namespaces resolved against its pod."""

    selector: LabelSelector | None
    namespaces: frozenset[str]
    namespace_selector: LabelSelector | None
    topology_key: str

    def matches(
        self, namespace: str, labels: Mapping[str, str], namespace_labels: Mapping[str, str]
    ) -> bool:
        """Whether a pod in ``namespace`` with ``labels`` is one this term speaks of."""
        if self.selector is None or not self.selector.matches(labels):
            return False
        if namespace in self.namespaces:
            return True
        return self.namespace_selector is not None and self.namespace_selector.matches(
            namespace_labels
        )

    @property
    def needs_namespace_labels(self) -> bool:
        return self.namespace_selector is not None


@dataclasses.dataclass(frozen=True, slots=True)
class SpreadConstraint:
    """A topologySpreadConstraint with whenUnsatisfiable: DoNotSchedule."""

    max_skew: int
    topology_key: str
    selector: LabelSelector | None
    min_domains: int
    honor_node_affinity: bool
    honor_node_taints: bool


@dataclasses.dataclass(frozen=True, slots=True)
class HostPort:
    protocol: str
    port: int
    ip: str

    def conflicts(self, other: HostPort) -> bool:
        if self.protocol != other.protocol or self.port != other.port:
            return False
        return self.ip == other.ip or WILDCARD_IP in (self.ip, other.ip)


@quick_init
@dataclasses.dataclass(frozen=True, slots=True)
class PodNeeds:
    """The part of a pod kube-scheduler's Filter plugins read."""

    namespace: str
    name: str
    labels: Mapping[str, str]
    node_name: str
    terminal: bool
    deleting: bool
    gated: bool
    requests: resources.Resources
    host_ports: tuple[HostPort, ...]
    node_selector: Mapping[str, str]
    node_affinity: NodeSelector | None
    """Required node affinity; an unparsable one is an empty selector (matches no node)."""
    tolerations: tuple[Mapping[str, Any], ...]
    affinity: tuple[AffinityTerm, ...] = ()
    anti_affinity: tuple[AffinityTerm, ...] = ()
    spread: tuple[SpreadConstraint, ...] = ()
    pinned_node: str = ""
    """The one node its required node affinity allows by name (dralloc's pin), if any."""
    released: bool = False
    """dralloc allocated it and lifted its gate (it carries dralloc's devices annotation)."""
    priority: int = 0
    """``spec.priority`` (admission resolves the PriorityClass into it; none is 0)."""
    preempts: bool = True
    """Whether it may preempt pods of lower priority (``preemptionPolicy`` is not Never)."""
    started: str = ""
    """``status.startTime`` ('' = not started): among equals, the earlier is kept."""

    @property
    def placed_node(self) -> str:
        """The node this pod occupies in the scheduler's eyes ('' = none yet).

        A bound pod occupies its node until it finishes. A pod dralloc released, pinned to
        one node, will go there or nowhere, so it is counted there before it is bound: the
        pods dralloc released must not be forgotten while kube-scheduler catches up. Other
        unbound pods (a pinned DaemonSet pod stuck Pending, a release dralloc undid) hold
        nothing, for the scheduler as for us.
        """
        if self.terminal:
            return ""
        if self.node_name:
            return self.node_name
        if self.pinned_node and self.released and not self.gated and not self.deleting:
            return self.pinned_node
        return ""

    @property
    def inter_pod(self) -> bool:
        return bool(self.affinity or self.anti_affinity)


def parse_pod_needs(raw: Mapping[str, Any]) -> PodNeeds:
    """From a Pod body (as the API serves it, or from a snapshot file)."""
    metadata = raw.get("metadata") or {}
    spec = raw.get("spec") or {}
    status = raw.get("status") or {}
    namespace = str(metadata.get("namespace") or "default")
    labels = {str(k): str(v) for k, v in (metadata.get("labels") or {}).items()}
    affinity = spec.get("affinity") or {}
    required = (affinity.get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    )
    node_affinity: NodeSelector | None = None
    if required:
        try:
            node_affinity = NodeSelector.parse(required)
        except NodeSelectorError:
            node_affinity = NodeSelector(())
    pod_affinity = (affinity.get("podAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    )
    pod_anti = (affinity.get("podAntiAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    )
    return PodNeeds(
        namespace=namespace,
        name=str(metadata.get("name") or ""),
        labels=labels,
        node_name=str(spec.get("nodeName") or ""),
        terminal=status.get("phase") in FINISHED_PHASES,
        deleting=bool(metadata.get("deletionTimestamp")),
        gated=bool(spec.get("schedulingGates")),
        requests=_requests(spec),
        host_ports=_host_ports(spec),
        node_selector={str(k): str(v) for k, v in (spec.get("nodeSelector") or {}).items()},
        node_affinity=node_affinity,
        tolerations=_tolerations(spec.get("tolerations")),
        affinity=tuple(_term(t, namespace, labels) for t in pod_affinity or ()),
        anti_affinity=tuple(_term(t, namespace, labels) for t in pod_anti or ()),
        spread=tuple(
            _spread(c, labels)
            for c in spec.get("topologySpreadConstraints") or ()
            if c.get("whenUnsatisfiable", "DoNotSchedule") == "DoNotSchedule"
        ),
        pinned_node=_pinned_node(node_affinity),
        released=DEVICES_ANNOTATION in (metadata.get("annotations") or {}),
        priority=_priority(spec.get("priority")),
        preempts=spec.get("preemptionPolicy") != "Never",
        started=str(status.get("startTime") or ""),
    )


INT32 = 2**31


def _priority(value: Any) -> int:
    """An int32 as the API server stores it (a snapshot's out of range is clamped); anything
    else reads as no priority (0)."""
    if type(value) is int:  # nearly every pod's (a bool is not): spared the checks below
        return max(-INT32, min(INT32 - 1, value))
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != int(value):
        return 0
    return max(-INT32, min(INT32 - 1, int(value)))


_SHARED_REQUESTS: dict[Hashable, resources.Resources] = {}
SHARED_REQUESTS_LIMIT = 1024


def _requests(spec: Mapping[str, Any]) -> resources.Resources:
    """The pod's effective request (:func:`resources.pod_requests`), one mapping for all pods
    whose containers ask alike: the pods of a Deployment do, and computing it is a tenth of
    reading a pod. Read only, never changed. Shared only for pods of app containers alone
    whose requests and limits are all scalars (the key keeps their types and order: only
    equal text shares); the table is cleared when full."""
    try:
        if spec.get("initContainers") or spec.get("resources") or spec.get("overhead"):
            raise TypeError("init containers, pod-level resources or overhead")
        key = tuple(
            (scalar_items(r.get("requests") or {}), scalar_items(r.get("limits") or {}))
            for r in (c.get("resources") or {} for c in spec.get("containers") or ())
        )
    except (TypeError, AttributeError):
        return resources.pod_requests(spec)
    found = _SHARED_REQUESTS.get(key)
    if found is None:
        if len(_SHARED_REQUESTS) >= SHARED_REQUESTS_LIMIT:
            _SHARED_REQUESTS.clear()
        found = _SHARED_REQUESTS[key] = resources.pod_requests(spec)
    return found


_SHARED_TOLERATIONS: dict[bytes, tuple[Mapping[str, Any], ...]] = {}
SHARED_TOLERATIONS_LIMIT = 1024


def _tolerations(items: Any) -> tuple[Mapping[str, Any], ...]:
    """The pod's tolerations, one tuple for all pods that have equal ones: admission gives
    every pod the same two (not-ready, unreachable), and a pod view is kept per pod. Read
    only, never changed. The shared tuple is made from the key's text, so it holds nothing
    of any pod's own (mutable) body; the key keeps types and key order, so only tolerations
    that read the same share. The table is cleared when full."""
    if not items:
        return ()
    try:
        if type(items) is not list or any(type(t) is not dict for t in items):
            raise TypeError("not a list of mappings")
        key = json_text(items)
    except (TypeError, ValueError):
        return tuple(items)
    found = _SHARED_TOLERATIONS.get(key)
    if found is None:
        if len(_SHARED_TOLERATIONS) >= SHARED_TOLERATIONS_LIMIT:
            _SHARED_TOLERATIONS.clear()
        found = _SHARED_TOLERATIONS[key] = tuple(json_copy(key))
    return found


def _term(data: Mapping[str, Any], namespace: str, labels: Mapping[str, str]) -> AffinityTerm:
    selector = LabelSelector.parse(data.get("labelSelector"))
    if selector is not None:
        selector = selector.with_label_keys(
            labels,
            tuple(data.get("matchLabelKeys") or ()),
            tuple(data.get("mismatchLabelKeys") or ()),
        )
    namespaces = frozenset(str(n) for n in data.get("namespaces") or ())
    namespace_selector = LabelSelector.parse(data.get("namespaceSelector"))
    if not namespaces and namespace_selector is None:
        namespaces = frozenset({namespace})  # the API's default: the pod's own namespace
    return AffinityTerm(selector, namespaces, namespace_selector, str(data.get("topologyKey")))


def _spread(data: Mapping[str, Any], labels: Mapping[str, str]) -> SpreadConstraint:
    selector = LabelSelector.parse(data.get("labelSelector"))
    if selector is not None:
        selector = selector.with_label_keys(labels, tuple(data.get("matchLabelKeys") or ()))
    return SpreadConstraint(
        max_skew=int(data.get("maxSkew") or 1),
        topology_key=str(data.get("topologyKey") or ""),
        selector=selector,
        min_domains=int(data.get("minDomains") or 1),
        honor_node_affinity=(data.get("nodeAffinityPolicy") or "Honor") == "Honor",
        honor_node_taints=(data.get("nodeTaintsPolicy") or "Ignore") == "Honor",
    )


def _host_ports(spec: Mapping[str, Any]) -> tuple[HostPort, ...]:
    """Host ports of the app containers and of sidecars (which hold theirs for the pod's
    lifetime); regular init containers end before the app starts."""
    containers = list(spec.get("containers") or ())
    containers += [
        c for c in spec.get("initContainers") or () if c.get("restartPolicy") == "Always"
    ]
    ports = []
    for container in containers:
        for port in container.get("ports") or ():
            host_port = int(port.get("hostPort") or 0)
            if host_port > 0:
                ports.append(
                    HostPort(
                        str(port.get("protocol") or "TCP"),
                        host_port,
                        str(port.get("hostIP") or WILDCARD_IP),
                    )
                )
    return tuple(ports)


def _pinned_node(selector: NodeSelector | None) -> str:
    if selector is None or not selector.terms:
        return ""
    pinned: set[str] = set()
    for term in selector.terms:
        names = [
            r.values[0]
            for r in term.match_fields
            if r.key == NODE_NAME_FIELD and r.operator == "In" and len(r.values) == 1
        ]
        if not names:
            return ""
        pinned.update(names)
    return pinned.pop() if len(pinned) == 1 else ""


@dataclasses.dataclass(frozen=True, slots=True)
class Node:
    """The part of a Node the scheduler's filters and the allocator read."""

    name: str
    uid: str
    labels: Mapping[str, str]
    taints: tuple[Mapping[str, Any], ...]
    unschedulable: bool
    allocatable: resources.Resources = dataclasses.field(default_factory=dict)
    """status.allocatable; empty when unknown (a snapshot without status): then no
    resource is checked, rather than every pod refused."""
    declared_features: frozenset[str] = frozenset()
    """status.declaredFeatures: what the node's kubelet says it can do (the allocator asks
    for DRAOptionalNodeOperations)."""

    def info(self) -> NodeInfo:
        """The allocator's view of the node."""
        return NodeInfo(self.name, self.labels, self.declared_features)


def parse_node(raw: Mapping[str, Any]) -> Node:
    metadata = raw.get("metadata") or {}
    spec = raw.get("spec") or {}
    status = raw.get("status") or {}
    return Node(
        name=str(metadata.get("name") or ""),
        uid=str(metadata.get("uid") or ""),
        labels={str(k): str(v) for k, v in (metadata.get("labels") or {}).items()},
        taints=tuple(spec.get("taints") or ()),
        unschedulable=bool(spec.get("unschedulable")),
        allocatable=resources.parse_resource_list(status.get("allocatable")),
        declared_features=frozenset(str(f) for f in status.get("declaredFeatures") or ()),
    )
