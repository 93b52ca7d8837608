"""The kinds the shared cache watches, and how each is validated into its frozen form."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from operators.api.models import (
    DeviceClass,
    DeviceTaintRule,
    ResourceClaim,
    ResourceClaimTemplate,
    ResourceSlice,
)
from operators.cache.core import parse_namespace, parse_node, parse_pod
from operators.cache.informer import Parser
from operators.kube import (
    DEVICE_CLASSES,
    DEVICE_TAINT_RULES,
    NAMESPACES,
    NODES,
    PODS,
    RESOURCE_CLAIM_TEMPLATES,
    RESOURCE_CLAIMS,
    RESOURCE_SLICES,
    Resource,
)

PARSERS: Mapping[Resource, Parser[Any]] = {
    PODS: parse_pod,
    NODES: parse_node,
    NAMESPACES: parse_namespace,
    DEVICE_CLASSES: DeviceClass.model_validate,
    RESOURCE_CLAIMS: ResourceClaim.model_validate,
    RESOURCE_CLAIM_TEMPLATES: ResourceClaimTemplate.model_validate,
    RESOURCE_SLICES: ResourceSlice.model_validate,
    DEVICE_TAINT_RULES: DeviceTaintRule.model_validate,
}
