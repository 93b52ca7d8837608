"""Upstream's Workload API PodGroup, read as a gang: the few fields dralloc follows.

Kubernetes 1.37 serves ``scheduling.k8s.io/v1beta1`` PodGroups behind the GenericWorkload
feature gate (beta, off by default). A pod joins one with ``spec.schedulingGroup.podGroupName``
(a PodGroup of its own namespace, which may be created after the pod). A PodGroup whose
``spec.schedulingPolicy`` is ``gang`` asks for all or nothing with ``gang.minCount`` pods at
least; ``basic`` is plain one-pod-at-a-time scheduling. dralloc reads:

=============================================  ===========================================
field                                          what it is to dralloc
=============================================  ===========================================
``metadata.namespace``, ``metadata.name``      the gang's name (namespace-scoped)
``spec.schedulingPolicy.gang.minCount``        the gang size: members placed at once
``spec.schedulingPolicy.basic`` (or no gang)   no gang: each pod is allocated on its own
``spec.schedulingConstraints.topology[0].key``  the gang topology: a node label all placed
                                               members share one value of (upstream allows
                                               one entry; the TopologyAwareWorkloadScheduling
                                               gate, alpha in 1.37)
pod ``spec.schedulingGroup.podGroupName``      the pod's PodGroup
=============================================  ===========================================

Nothing else (status, ``workloadRef``, ``parentCompositePodGroupName``, PodGroup
``resourceClaims``, priorities, disruption mode) changes what dralloc does. The view is the
frozen :class:`PodGroup`, equal for two versions that differ only in what is not read, so a
status update by kube-scheduler wakes nobody.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, Final

from operators.api.annotations import GANG_SIZE_MAX, GangRef, GangTopology, is_label_key

GROUP: Final = "scheduling.k8s.io"
VERSION: Final = "v1beta1"
PLURAL: Final = "podgroups"
KIND: Final = "PodGroup"


@dataclasses.dataclass(frozen=True, slots=True)
class PodGroup:
    """What dralloc reads of one PodGroup."""

    namespace: str
    name: str
    min_count: int | None
    """``spec.schedulingPolicy.gang.minCount`` (None: no gang policy, e.g. ``basic``)."""
    topology: str | None = None
    """``spec.schedulingConstraints.topology[0].key`` (None: anywhere)."""
    problem: str = ""
    """Why dralloc cannot follow the gang policy ('' = it can); its pods are told."""

    def gang(self) -> GangRef | None:
        """The gang its pods form (None: no gang, or a policy dralloc cannot follow)."""
        if self.min_count is None or self.problem:
            return None
        topology = GangTopology(self.topology) if self.topology is not None else None
        return GangRef(self.name, self.min_count, topology, pod_group=True)


def _whole_number(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def parse_pod_group(raw: Mapping[str, Any]) -> PodGroup:
    """The view of a PodGroup object (as the API server sends it; never raises for a
    policy dralloc cannot follow: that is :attr:`PodGroup.problem`)."""
    metadata = raw.get("metadata") or {}
    spec = raw.get("spec") or {}
    namespace = str(metadata.get("namespace") or "")
    name = str(metadata.get("name") or "")
    policy = spec.get("schedulingPolicy") or {}
    gang = policy.get("gang") if isinstance(policy, Mapping) else None
    problems: list[str] = []
    min_count: int | None = None
    if isinstance(gang, Mapping):
        count = _whole_number(gang.get("minCount"))
        if count is None or count < 1:
            problems.append(
                f"spec.schedulingPolicy.gang.minCount {gang.get('minCount')!r} is not a "
                "whole number of at least 1"
            )
        elif count > GANG_SIZE_MAX:
            problems.append(
                f"spec.schedulingPolicy.gang.minCount {count} is more than the "
                f"{GANG_SIZE_MAX} members dralloc places together"
            )
        else:
            min_count = count
    constraints = spec.get("schedulingConstraints") or {}
    topologies = constraints.get("topology") if isinstance(constraints, Mapping) else None
    topology: str | None = None
    if topologies and isinstance(gang, Mapping):  # a basic group's pods go one by one
        first = topologies[0] if isinstance(topologies, list) else None
        key = first.get("key") if isinstance(first, Mapping) else None
        if isinstance(key, str) and is_label_key(key):
            topology = key
        else:
            problems.append(
                f"spec.schedulingConstraints.topology[0].key {key!r} is not a node label key"
            )
    problem = f'PodGroup "{name}": {"; ".join(problems)}' if problems else ""
    return PodGroup(namespace, name, min_count, topology, problem)


def pod_group_name(pod_spec: Mapping[str, Any]) -> str:
    """``spec.schedulingGroup.podGroupName`` of a pod ('' = none)."""
    group = pod_spec.get("schedulingGroup") or {}
    return str(group.get("podGroupName") or "") if isinstance(group, Mapping) else ""


def missing_pod_group(namespace: str, name: str) -> str:
    """The reason told to a pod whose PodGroup does not exist."""
    return (
        f'waiting for its PodGroup "{name}" ({GROUP}), which does not exist in namespace '
        f'"{namespace}"'
    )


def resolve_gang(
    annotated: GangRef | None,
    annotation_error: str,
    namespace: str,
    group_name: str,
    group: PodGroup | None,
) -> tuple[GangRef | None, str]:
    """A pod's gang, as the operator and the toolkit both decide it: ``(gang, problem)``.

    The gang annotations win (``annotated``, or their ``annotation_error``); else, for a pod
    of PodGroup ``group_name``, that PodGroup's gang (``group``: None if it does not exist,
    which is the problem; so is a policy dralloc cannot follow; a ``basic`` policy is no
    gang). ``problem`` is '' when the pod can be decided; else the pod waits with it."""
    if annotated is not None:
        return annotated, ""
    if annotation_error:
        return None, annotation_error
    if not group_name:
        return None, ""
    if group is None:
        return None, missing_pod_group(namespace, group_name)
    if group.problem:
        return None, group.problem
    return group.gang(), ""


def gang_too_large(gang: GangRef, limit: int) -> str | None:
    """Why a gang is refused for its size (more members to place together than ``limit``,
    the operator's ``max_gang_size``), or None: the words the operator tells each member
    and ``dralloc explain``/``simulate`` print."""
    if gang.size <= limit:
        return None
    return (
        f"{gang.label} needs {gang.size} members placed together, more than the {limit} "
        "this operator places (its setting max_gang_size, DRALLOC_MAX_GANG_SIZE): make the "
        "gang smaller, or ask the cluster's administrators to raise the limit"
    )
