"""The fields of a listed object the cache's readers read, for kinds listed by the thousand.

An informer lists such a kind decoding only these (:mod:`operators.shapes`): a pod's
managedFields, environment, probes, volumes and container statuses are most of its JSON, and
no reader here looks at them. Every field a reader reads must be named here, or it reads as
absent after a list (and present after a watch event, which is decoded whole):
``tests/unit/cache/test_fields.py`` records what the readers read and fails on any field not
named. A nested TypedDict names the fields read at its level; ``Any`` keeps a value whole.

The readers of a pod: :func:`~operators.cache.core.parse_pod` (with the scheduler's view,
:func:`~operators.scheduling.model.parse_pod_needs`, and either mode's
:class:`~operators.api.podprotocol.PodProtocol`), the informer's
:meth:`~operators.cache.informer.Meta.of`, and the raw-kept predicate
:func:`~operators.cache.core.gated_by_dralloc` (a pod it picks is listed whole).
"""

from __future__ import annotations

from typing import Any, TypedDict


class PodMetadataFields(TypedDict, total=False):
    name: Any
    namespace: Any
    uid: Any
    resourceVersion: Any
    creationTimestamp: Any
    deletionTimestamp: Any
    labels: Any
    annotations: Any
    ownerReferences: Any


class ContainerFields(TypedDict, total=False):
    resources: Any
    ports: Any
    restartPolicy: Any


class PodSpecFields(TypedDict, total=False):
    nodeName: Any
    containers: list[ContainerFields] | None
    initContainers: list[ContainerFields] | None
    resources: Any
    overhead: Any
    priority: Any
    preemptionPolicy: Any
    schedulingGates: Any
    schedulingGroup: Any
    nodeSelector: Any
    affinity: Any
    tolerations: Any
    topologySpreadConstraints: Any
    resourceClaims: Any


class PodStatusFields(TypedDict, total=False):
    phase: Any
    startTime: Any
    conditions: Any
    resourceClaimStatuses: Any


class PodFields(TypedDict, total=False):
    metadata: PodMetadataFields | None
    spec: PodSpecFields | None
    status: PodStatusFields | None
