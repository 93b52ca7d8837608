"""The kinds the shared cache watches, and how each is validated into its frozen form.

The DRA kinds are named by dralloc's group here; the client resolves them to the API mode's
group (:class:`operators.kube.KubeClient`), and their models read either group alike. Pods
and namespaces are read in the mode's own fields (:mod:`operators.api.podprotocol`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any

from operators.api.base import SHARED_PARTS
from operators.api.models import (
    DeviceClass,
    DeviceQuota,
    DeviceTaintRule,
    ResourceClaim,
    ResourceClaimTemplate,
    ResourceSlice,
)
from operators.api.podgroup import parse_pod_group
from operators.api.podprotocol import DRALLOC, PodProtocol
from operators.cache.core import gated_by_dralloc, parse_namespace, parse_node, parse_pod
from operators.cache.fields import PodFields
from operators.cache.informer import Parser
from operators.kube import (
    DEVICE_CLASSES,
    DEVICE_QUOTAS,
    DEVICE_TAINT_RULES,
    DISRUPTION_BUDGETS,
    NAMESPACES,
    NODES,
    POD_GROUPS,
    PODS,
    RESOURCE_CLAIM_TEMPLATES,
    RESOURCE_CLAIMS,
    RESOURCE_SLICES,
    JsonDict,
    Resource,
)
from operators.scheduling.budgets import parse_budget


def parsers(protocol: PodProtocol = DRALLOC) -> Mapping[Resource, Parser[Any]]:
    """The parser of every watched kind, for one API mode."""
    return {
        PODS: functools.partial(parse_pod, protocol=protocol),
        NODES: parse_node,
        NAMESPACES: functools.partial(parse_namespace, protocol=protocol),
        POD_GROUPS: parse_pod_group,
        DISRUPTION_BUDGETS: parse_budget,
        **_DRA_PARSERS,
    }


_DRA_PARSERS: Mapping[Resource, Parser[Any]] = {
    DEVICE_CLASSES: functools.partial(DeviceClass.model_validate, context=SHARED_PARTS),
    RESOURCE_CLAIMS: functools.partial(ResourceClaim.model_validate, context=SHARED_PARTS),
    RESOURCE_CLAIM_TEMPLATES: functools.partial(
        ResourceClaimTemplate.model_validate, context=SHARED_PARTS
    ),
    RESOURCE_SLICES: functools.partial(ResourceSlice.model_validate, context=SHARED_PARTS),
    DEVICE_TAINT_RULES: functools.partial(DeviceTaintRule.model_validate, context=SHARED_PARTS),
    DEVICE_QUOTAS: functools.partial(DeviceQuota.model_validate, context=SHARED_PARTS),
}


OPTIONAL: frozenset[Resource] = frozenset(
    {DEVICE_TAINT_RULES, DEVICE_QUOTAS, POD_GROUPS, DISRUPTION_BUDGETS}
)
"""Kinds a server may not serve: DeviceQuota where its CRD is not installed (an in-tree
install from before quotas existed; no quota then applies); in-tree DeviceTaintRule reached resource.k8s.io/v1 only in
Kubernetes 1.37 (1.36 serves v1beta2 behind an off-by-default gate, 1.33-1.35 v1alpha3);
PodGroups only where the Workload API is on (GenericWorkload gate and
``--runtime-config=scheduling.k8s.io/v1beta1=true``, off by default in 1.37).
Missing at every version of :data:`OTHER_VERSIONS`, they read as empty (with a warning)."""

LISTED_FIELDS: Mapping[Resource, type] = {PODS: PodFields}
"""Kinds whose lists are decoded into only the fields the parsers read (see
operators.cache.fields): pods, a cluster's most numerous and largest objects."""

RAW_KEPT: Mapping[Resource, Callable[[JsonDict], bool]] = {PODS: gated_by_dralloc}
"""Kinds whose raw objects the informer keeps, and which: pods under dralloc's gate, which the
claim controller and the allocation write back whole (see operators.cache.rawkept)."""

FORBIDDEN_AS_ABSENT: frozenset[Resource] = frozenset({POD_GROUPS, DISRUPTION_BUDGETS})
"""Optional kinds that also read as empty (rechecked like a kind not served) where the
operator's role may not list them: a role from before PodGroups (or budgets) were read must
not keep the operator from starting; without PodGroups pods are allocated as before (one by
one), without budgets preemption weighs none (as with none in the cluster).
Not so for taint rules or quotas: dropping those would hand out devices they hold back."""

OTHER_VERSIONS: Mapping[Resource, tuple[str, ...]] = {DEVICE_TAINT_RULES: ("v1beta2", "v1alpha3")}
"""Older versions to read an optional kind at when the server lacks v1 (same fields)."""

WITHOUT_STATUS: Mapping[Resource, frozenset[str]] = {DEVICE_TAINT_RULES: frozenset({"v1alpha3"})}
"""Versions at which a kind has no status: in-tree DeviceTaintRule got one in v1beta2, so a
v1alpha3 rule (Kubernetes 1.33 and 1.34) has no status subresource to write to. Discovery
says first where it can (1.35 serves v1alpha3 rules with a status); this is the fallback."""


def has_status(kind: Resource, served_version: str) -> bool:
    """Whether ``kind``, read at ``served_version`` (the informer's ``served``), has a status."""
    return served_version not in WITHOUT_STATUS.get(kind, frozenset())
