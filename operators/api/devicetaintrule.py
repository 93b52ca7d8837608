"""DeviceTaintRule: taints devices chosen by driver, pool and name, without touching slices."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import ConfigDict, Field, model_validator

from operators.api import limits
from operators.api.base import DNSLabel, DriverName, KubeModel, PoolName, cel_rules, list_map
from operators.api.common import API_VERSION, DeviceTaint, empty_tuple
from operators.api.fielderrors import field_error
from operators.api.meta import Condition, ObjectMeta


class DeviceTaintSelector(KubeModel):
    """Which devices a rule taints; set fields combine with AND.

    dralloc requires at least one field on its own kind: upstream lets an empty selector
    taint every device of the cluster, which has caused mass evictions (kubernetes#141422).
    In-tree (resource.k8s.io) rules are read with the upstream meaning.
    """

    driver: DriverName | None = None
    """Only devices of this driver."""
    pool: PoolName | None = None
    """Only devices of this pool."""
    device: DNSLabel | None = None
    """Only devices with this name."""

    @property
    def is_empty(self) -> bool:
        return self.driver is None and self.pool is None and self.device is None

    def matches(self, driver: str, pool: str, device: str) -> bool:
        return (
            (self.driver is None or self.driver == driver)
            and (self.pool is None or self.pool == pool)
            and (self.device is None or self.device == device)
        )


class DeviceTaintRuleSpec(KubeModel):
    """A taint to add to every selected device."""

    model_config = ConfigDict(
        json_schema_extra=cel_rules(
            (
                "has(self.deviceSelector) && (has(self.deviceSelector.driver)"
                " || has(self.deviceSelector.pool) || has(self.deviceSelector.device))",
                "deviceSelector must set at least one of driver, pool or device",
            )
        )
    )

    device_selector: DeviceTaintSelector | None = None
    """The devices to taint; at least one of driver, pool or device must be set."""
    taint: DeviceTaint
    """The taint."""

    def matches(self, driver: str, pool: str, device: str) -> bool:
        """Upstream's documented meaning: no selector matches nothing, an empty one everything."""
        selector = self.device_selector
        return selector is not None and selector.matches(driver, pool, device)


class DeviceTaintRuleStatus(KubeModel):
    """Progress of the rule (eviction)."""

    conditions: Annotated[
        tuple[Condition, ...],
        Field(
            max_length=limits.DEVICE_TAINT_RULE_STATUS_MAX_CONDITIONS,
            json_schema_extra=list_map("type"),
        ),
    ] = empty_tuple()
    """Conditions; EvictionInProgress while pods are being evicted."""


class DeviceTaintRule(KubeModel):
    """Taints devices selected by driver, pool and name, without changing their slices (cluster-scoped)."""

    api_version: str = API_VERSION
    """resource.dralloc.dev/v1."""
    kind: Literal["DeviceTaintRule"] = "DeviceTaintRule"
    """DeviceTaintRule."""
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    """Standard object metadata."""
    spec: DeviceTaintRuleSpec
    """Which devices and which taint."""
    status: DeviceTaintRuleStatus | None = None
    """Eviction progress."""

    @model_validator(mode="after")
    def _check(self) -> DeviceTaintRule:
        if self.api_version == API_VERSION:
            selector = self.spec.device_selector
            if selector is None or selector.is_empty:
                raise field_error(
                    "spec.deviceSelector", "at least one of driver, pool or device must be set"
                )
        return self
