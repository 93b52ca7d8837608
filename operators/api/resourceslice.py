"""ResourceSlice: the devices (or shared counters) a driver publishes, one pool slice at a time.

This is the hot path of the watch cache (a busy cluster has thousands of slices), so the
cross-field rules of devices run in one loop from ResourceSliceSpec instead of as
per-device and per-attribute validators; see `_check_device`.
"""

from __future__ import annotations

from typing import Annotated, Any, Final, Literal

from pydantic import (
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    StrictStr,
    ValidationInfo,
    ValidatorFunctionWrapHandler,
    model_validator,
)
from pydantic_core import PydanticCustomError

from operators.api import limits
from operators.api.base import (
    IMMUTABLE,
    BindingConditions,
    BindingFailureConditions,
    DNSLabel,
    DNSSubdomain,
    DriverName,
    KubeModel,
    PoolName,
    QualifiedName,
    SemverString,
    Shared,
    cel_rules,
    scalar_items,
    unique_by,
)
from operators.api.common import (
    API_VERSION,
    DeviceTaint,
    SkipNodeOperations,
    check_skip_node_operations,
    check_unique,
    empty_map,
    empty_tuple,
)
from operators.api.fielderrors import field_error, key_path
from operators.api.fielderrors import prefixed as _prefixed
from operators.api.meta import NodeSelector, ObjectMeta
from operators.api.quantity import Quantity
from operators.api.semver import Semver

AttributeValue = int | bool | str | Semver | tuple[int, ...] | tuple[bool, ...] | tuple[str, ...]

_SHARED_ATTRIBUTES = Shared(scalar_items)
_SHARED_CAPACITIES = Shared(scalar_items)


class DeviceAttribute(KubeModel):
    """One attribute value: exactly one of the fields is set."""

    # Exactly one property, checked natively by the API server (nulls are pruned before
    # validation); a CEL rule here would run once per attribute of every device.
    model_config = ConfigDict(json_schema_extra={"minProperties": 1, "maxProperties": 1})

    int_value: StrictInt | None = None
    """An integer."""
    bool_value: StrictBool | None = None
    """A boolean."""
    string_value: (
        Annotated[StrictStr, Field(max_length=limits.DEVICE_ATTRIBUTE_MAX_VALUE_LENGTH)] | None
    ) = None
    """A string of at most 64 characters."""
    version_value: SemverString | None = None
    """A semantic version (semver 2.0.0) of at most 64 characters."""
    ints: tuple[StrictInt, ...] | None = None
    """A non-empty list of integers (DRAListTypeAttributes)."""
    bools: tuple[StrictBool, ...] | None = None
    """A non-empty list of booleans (DRAListTypeAttributes)."""
    strings: (
        tuple[Annotated[StrictStr, Field(max_length=limits.DEVICE_ATTRIBUTE_MAX_VALUE_LENGTH)], ...]
        | None
    ) = None
    """A non-empty list of strings (DRAListTypeAttributes)."""
    versions: tuple[SemverString, ...] | None = None
    """A non-empty list of semantic versions (DRAListTypeAttributes)."""

    @model_validator(mode="wrap")
    @classmethod
    def _shared(cls, data: Any, handler: ValidatorFunctionWrapHandler, info: ValidationInfo) -> Any:
        # Most attributes (model, family, driver version) repeat on every device.
        return _SHARED_ATTRIBUTES(cls, data, handler, info)

    @property
    def value(self) -> AttributeValue:
        """The one value that is set; versions come back as Semver."""
        if self.string_value is not None:
            return self.string_value
        if self.int_value is not None:
            return self.int_value
        if self.bool_value is not None:
            return self.bool_value
        if self.version_value is not None:
            return Semver.parse(self.version_value)
        if self.ints is not None:
            return self.ints
        if self.bools is not None:
            return self.bools
        if self.strings is not None:
            return self.strings
        if self.versions is not None:
            return tuple(Semver.parse(v) for v in self.versions)  # type: ignore[return-value]
        raise ValueError("device attribute has no value")

    @property
    def is_list(self) -> bool:
        return (
            self.ints is not None
            or self.bools is not None
            or self.strings is not None
            or self.versions is not None
        )

    def value_count(self) -> int:
        """How many values count against the per-device limit (each list item is one)."""
        for items in (self.ints, self.bools, self.strings, self.versions):
            if items is not None:
                return len(items)
        return 1


class CapacityRequestPolicyRange(KubeModel):
    """A range of valid requests: min, optionally max, optionally in steps from min."""

    min: Quantity
    """Smallest amount a request consumes; smaller requests are rounded up to it."""
    max: Quantity | None = None
    """Largest amount a request may consume."""
    step: Quantity | None = None
    """Requests are rounded up to min + k*step."""


class CapacityRequestPolicy(KubeModel):
    """How requests consume a capacity of a device that allows multiple allocations."""

    model_config = ConfigDict(
        json_schema_extra=cel_rules(
            (
                "!(has(self.validValues) && size(self.validValues) > 0 && has(self.validRange))",
                "at most one of validValues and validRange may be set",
            )
        )
    )

    default: Quantity | None = None
    """Amount consumed by a request that does not ask for this capacity."""
    valid_values: Annotated[
        tuple[Quantity, ...], Field(max_length=limits.CAPACITY_REQUEST_POLICY_VALID_VALUES_MAX)
    ] = empty_tuple()
    """Allowed amounts in ascending order; requests are rounded up to the next one."""
    valid_range: CapacityRequestPolicyRange | None = None
    """Allowed range of amounts."""


class DeviceCapacity(KubeModel):
    """An amount a device has, for example memory."""

    value: Quantity
    """The total amount."""
    request_policy: CapacityRequestPolicy | None = None
    """How requests consume it; only for devices with allowMultipleAllocations."""

    @model_validator(mode="wrap")
    @classmethod
    def _shared(cls, data: Any, handler: ValidatorFunctionWrapHandler, info: ValidationInfo) -> Any:
        # A plain capacity (no request policy: a mapping, so not keyed) repeats per device.
        return _SHARED_CAPACITIES(cls, data, handler, info)


class Counter(KubeModel):
    """An amount of a shared resource."""

    value: Quantity
    """The amount."""


class CounterSet(KubeModel):
    """Named counters that partitionable devices of a pool draw from."""

    name: DNSLabel
    """Name of the set, unique in the pool."""
    counters: Annotated[
        dict[DNSLabel, Counter],
        Field(min_length=1, max_length=limits.RESOURCE_SLICE_MAX_COUNTERS_PER_COUNTER_SET),
    ]
    """The counters, by name."""


class DeviceCounterConsumption(KubeModel):
    """What a device takes from one counter set when allocated."""

    counter_set: DNSLabel
    """Name of the counter set in the pool."""
    counters: Annotated[
        dict[DNSLabel, Counter],
        Field(
            min_length=1,
            max_length=limits.RESOURCE_SLICE_MAX_COUNTERS_PER_DEVICE_COUNTER_CONSUMPTION,
        ),
    ]
    """Amount taken from each counter."""
    compatibility_groups: Annotated[
        tuple[DNSLabel, ...],
        Field(
            max_length=limits.DEVICE_COMPATIBILITY_GROUPS_MAX_SIZE,
            json_schema_extra=cel_rules(
                ("self.all(x, self.exists_one(y, y == x))", "compatibility groups must be unique")
            ),
        ),
    ] = empty_tuple()
    """Devices on one counter set are allocated together only if they share a group (alpha)."""


class Device(KubeModel):
    """One device in a pool."""

    model_config = ConfigDict(
        json_schema_extra=cel_rules(
            (
                "(has(self.attributes) ? size(self.attributes) : 0)"
                " + (has(self.capacity) ? size(self.capacity) : 0) <= 32",
                "attributes and capacity together must have at most 32 entries",
            ),
            (
                "(has(self.bindingConditions) && size(self.bindingConditions) > 0)"
                " == (has(self.bindingFailureConditions) && size(self.bindingFailureConditions) > 0)",
                "bindingConditions and bindingFailureConditions must be set together",
            ),
            (
                "(has(self.allowMultipleAllocations) && self.allowMultipleAllocations)"
                " || !has(self.capacity) || self.capacity.all(k, !has(self.capacity[k].requestPolicy))",
                "capacity requestPolicy may only be set when allowMultipleAllocations is true",
            ),
        )
    )

    name: DNSLabel
    """Name of the device, unique in its pool."""
    attributes: Annotated[
        dict[QualifiedName, DeviceAttribute],
        Field(max_length=limits.RESOURCE_SLICE_MAX_ATTRIBUTES_AND_CAPACITIES_PER_DEVICE),
    ] = empty_map()
    """Attributes by name; unqualified names belong to the slice's driver."""
    capacity: Annotated[
        dict[QualifiedName, DeviceCapacity],
        Field(max_length=limits.RESOURCE_SLICE_MAX_ATTRIBUTES_AND_CAPACITIES_PER_DEVICE),
    ] = empty_map()
    """Capacities by name; unqualified names belong to the slice's driver."""
    consumes_counters: Annotated[
        tuple[DeviceCounterConsumption, ...],
        Field(
            max_length=limits.RESOURCE_SLICE_MAX_DEVICE_COUNTER_CONSUMPTIONS_PER_DEVICE,
            json_schema_extra=unique_by("counterSet", "counter set names"),
        ),
    ] = empty_tuple()
    """Shared counters the device uses when allocated (partitionable devices)."""
    node_name: DNSSubdomain | None = None
    """With perDeviceNodeSelection: the node the device is on."""
    node_selector: NodeSelector | None = None
    """With perDeviceNodeSelection: the nodes the device is usable from."""
    all_nodes: bool | None = None
    """With perDeviceNodeSelection: the device is usable from every node."""
    taints: Annotated[
        tuple[DeviceTaint, ...], Field(max_length=limits.DEVICE_TAINTS_MAX_LENGTH)
    ] = empty_tuple()
    """Taints of the device."""
    binds_to_node: bool | None = None
    """If true, the allocation is restricted to the node chosen for the pod."""
    binding_conditions: BindingConditions = empty_tuple()
    """Device status conditions that must be True before the pod is bound."""
    binding_failure_conditions: BindingFailureConditions = empty_tuple()
    """Device status conditions that, when True, make binding fail."""
    allow_multiple_allocations: bool | None = None
    """If true, the device can be allocated to several requests at once, sharing its capacity."""

    @property
    def uses_advanced_features(self) -> bool:
        """Taints, counters or list attributes lower the slice's device limit to 64."""
        return bool(self.taints or self.consumes_counters) or any(
            a.is_list for a in self.attributes.values()
        )


# Device rules run in one loop from ResourceSliceSpec rather than as a validator per Device
# and per DeviceAttribute: on a 128-device slice that halves the Python work on the watch
# hot path. A Device validated on its own therefore gets only the single-field checks.
_SCALAR_ATTRIBUTE_FIELDS: Final = frozenset(
    {"int_value", "bool_value", "string_value", "version_value"}
)
_LIST_ATTRIBUTE_FIELDS: Final = ("ints", "bools", "strings", "versions")
_LONGEST_UNQUALIFIED: Final = limits.DEVICE_MAX_DOMAIN_LENGTH + 1


def _check_device(device: Device, per_device_nodes: bool) -> bool:
    """Cross-field rules of one device; returns whether it uses advanced features."""
    if per_device_nodes:
        if device.node_name == "":
            raise field_error("nodeName", "must not be empty")
        if device.all_nodes is False:
            raise field_error("allNodes", "must be either unset or set to true")
        own_nodes = (
            (device.node_name is not None)
            + (device.node_selector is not None)
            + (device.all_nodes is not None)
        )
        if own_nodes != 1:
            raise field_error(
                "",
                "exactly one of nodeName, nodeSelector or allNodes must be set "
                "when perDeviceNodeSelection is true",
            )
    elif (
        device.node_name is not None
        or device.node_selector is not None
        or (device.all_nodes is not None)
    ):
        raise field_error(
            "",
            "nodeName, nodeSelector and allNodes may only be set when "
            "perDeviceNodeSelection is true",
        )
    advanced = bool(device.taints)
    if device.consumes_counters:
        advanced = True
        check_unique(
            (c.counter_set for c in device.consumes_counters), "consumesCounters", "counterSet"
        )
        for i, consumption in enumerate(device.consumes_counters):
            if consumption.compatibility_groups:
                check_unique(
                    consumption.compatibility_groups,
                    f"consumesCounters[{i}].compatibilityGroups",
                )
    attributes = device.attributes
    capacity = device.capacity
    if attributes or capacity:
        limit = limits.RESOURCE_SLICE_MAX_ATTRIBUTES_AND_CAPACITIES_PER_DEVICE
        if len(attributes) + len(capacity) > limit:
            raise field_error(
                "", f"attributes and capacity together must have at most {limit} entries"
            )
        values = 0
        for name, attribute in attributes.items():
            if len(name) > _LONGEST_UNQUALIFIED:
                _check_domain_length(name, key_path("attributes", name))
            fields_set = attribute.__pydantic_fields_set__
            if (
                len(fields_set) == 1
                and not fields_set.isdisjoint(_SCALAR_ATTRIBUTE_FIELDS)
                and getattr(attribute, next(iter(fields_set))) is not None  # explicit null
            ):
                values += 1  # the common case: one scalar value
                continue
            count, is_list = _check_attribute_slow(attribute, key_path("attributes", name))
            values += count
            advanced = advanced or is_list
        max_values = limits.RESOURCE_SLICE_MAX_ATTRIBUTE_VALUES_PER_DEVICE
        if values > max_values:
            raise field_error(
                "attributes",
                f"must have at most {max_values} values in total (each list item counts as one)",
            )
        if capacity:
            multi = device.allow_multiple_allocations is True
            for name, cap in capacity.items():
                if len(name) > _LONGEST_UNQUALIFIED:
                    _check_domain_length(name, key_path("capacity", name))
                if cap.request_policy is not None:
                    path = key_path("capacity", name) + ".requestPolicy"
                    if not multi:
                        raise field_error(
                            path, "may only be set when allowMultipleAllocations is true"
                        )
                    _check_request_policy(cap.value, cap.request_policy, path)
    if device.binding_conditions or device.binding_failure_conditions:
        _check_binding_conditions(device)
    return advanced


def _check_attribute_slow(attribute: DeviceAttribute, path: str) -> tuple[int, bool]:
    """Exactly one value set (explicit nulls allowed): (values it holds, whether a list)."""
    scalars = (
        (attribute.int_value is not None)
        + (attribute.bool_value is not None)
        + (attribute.string_value is not None)
        + (attribute.version_value is not None)
    )
    lists = [getattr(attribute, f) for f in _LIST_ATTRIBUTE_FIELDS]
    present = [items for items in lists if items is not None]
    if scalars + len(present) != 1:
        raise field_error(
            path,
            "exactly one of int, bool, string, version, ints, bools, strings or versions "
            "must be set",
        )
    if scalars:
        return 1, False
    if not present[0]:
        raise field_error(path, "a list value must not be empty")
    return len(present[0]), True


def _check_domain_length(name: str, path: str) -> None:
    slash = name.find("/")
    if slash > limits.DEVICE_MAX_DOMAIN_LENGTH:
        raise field_error(
            path, f"domain must be at most {limits.DEVICE_MAX_DOMAIN_LENGTH} characters"
        )


def _check_request_policy(capacity: Quantity, policy: CapacityRequestPolicy, path: str) -> None:
    if policy.valid_values and policy.valid_range is not None:
        raise field_error(path, "at most one of validValues and validRange may be set")
    default = policy.default
    if policy.valid_values:
        values = policy.valid_values
        for i in range(1, len(values)):
            if values[i] <= values[i - 1]:
                raise field_error(f"{path}.validValues[{i}]", "values must be strictly ascending")
        if values[-1] > capacity:
            raise field_error(
                f"{path}.validValues[{len(values) - 1}]", "must not exceed the capacity value"
            )
        if default is None or default not in values:
            raise field_error(f"{path}.default", "must be one of validValues")
    rng = policy.valid_range
    if rng is not None:
        if default is None:
            raise field_error(f"{path}.default", "required when validRange is set")
        if rng.min > capacity:
            raise field_error(f"{path}.validRange.min", "must not exceed the capacity value")
        if rng.max is not None:
            if rng.max < rng.min:
                raise field_error(f"{path}.validRange.max", "must not be less than min")
            if rng.max > capacity:
                raise field_error(f"{path}.validRange.max", "must not exceed the capacity value")
        if default < rng.min or (rng.max is not None and default > rng.max):
            raise field_error(f"{path}.default", "must be within validRange")
        if rng.step is not None:
            step = rng.step.nanos
            if step <= 0:
                raise field_error(f"{path}.validRange.step", "must be greater than zero")
            if (rng.min + rng.step) > capacity:
                raise field_error(
                    f"{path}.validRange.step", "min + step must not exceed the capacity value"
                )
            if (default.nanos - rng.min.nanos) % step:
                raise field_error(f"{path}.default", "must be min plus a multiple of step")
            if rng.max is not None and (rng.max.nanos - rng.min.nanos) % step:
                raise field_error(f"{path}.validRange.max", "must be min plus a multiple of step")


def _check_binding_conditions(device: Device) -> None:
    ok = device.binding_conditions
    fail = device.binding_failure_conditions
    if not ok or not fail:
        raise field_error(
            "bindingConditions" if not ok else "bindingFailureConditions",
            "bindingConditions and bindingFailureConditions must be set together",
        )
    check_unique(ok, "bindingConditions")
    check_unique(fail, "bindingFailureConditions")
    both = set(ok) & set(fail)
    if both:
        raise field_error(
            "bindingFailureConditions",
            f"{sorted(both)[0]!r} must not be in both bindingConditions and bindingFailureConditions",
        )


class ResourcePool(KubeModel):
    """The pool a slice belongs to, and how many slices the pool has at this generation."""

    name: PoolName = Field(json_schema_extra=IMMUTABLE)
    """Name of the pool (DNS subdomains separated by '/'); unique per driver."""
    generation: Annotated[int, Field(ge=0)]
    """Only slices with the pool's highest generation count."""
    resource_slice_count: Annotated[int, Field(gt=0)]
    """Number of slices that make up the pool at this generation."""


class ResourceSliceSpec(KubeModel):
    """A driver's devices (or shared counters) in one slice of one pool."""

    model_config = ConfigDict(
        json_schema_extra=cel_rules(
            (
                "[has(self.nodeName) && self.nodeName != '', has(self.nodeSelector),"
                " has(self.allNodes) && self.allNodes,"
                " has(self.perDeviceNodeSelection) && self.perDeviceNodeSelection]"
                ".filter(x, x).size() == 1",
                "exactly one of nodeName, nodeSelector, allNodes or perDeviceNodeSelection must be set",
            ),
            (
                "!has(self.nodeSelector) || size(self.nodeSelector.nodeSelectorTerms) == 1",
                "nodeSelector must have exactly one term",
            ),
            (
                "!(has(self.devices) && size(self.devices) > 0"
                " && has(self.sharedCounters) && size(self.sharedCounters) > 0)",
                "devices and sharedCounters must not both be set",
            ),
            (
                "!has(self.devices) || ((has(self.perDeviceNodeSelection) && self.perDeviceNodeSelection)"
                " ? self.devices.all(d, [has(d.nodeName) && d.nodeName != '', has(d.nodeSelector),"
                " has(d.allNodes) && d.allNodes].filter(x, x).size() == 1)"
                " : self.devices.all(d, !has(d.nodeName) && !has(d.nodeSelector) && !has(d.allNodes)))",
                "with perDeviceNodeSelection each device sets exactly one of nodeName, nodeSelector"
                " or allNodes; otherwise devices set none of them",
            ),
        )
    )

    driver: DriverName = Field(json_schema_extra=IMMUTABLE)
    """The driver that publishes the devices (a DNS subdomain of at most 63 characters)."""
    pool: ResourcePool
    """The pool the slice belongs to."""
    node_name: DNSSubdomain | None = Field(default=None, json_schema_extra=IMMUTABLE)
    """The node the devices are on. Exactly one of nodeName, nodeSelector, allNodes, perDeviceNodeSelection."""
    node_selector: NodeSelector | None = None
    """Nodes the devices are usable from (exactly one term)."""
    all_nodes: bool | None = None
    """The devices are usable from every node."""
    per_device_node_selection: bool | None = None
    """Each device says its own nodeName, nodeSelector or allNodes."""
    devices: Annotated[
        tuple[Device, ...],
        Field(
            max_length=limits.RESOURCE_SLICE_MAX_DEVICES,
            json_schema_extra=cel_rules(
                (
                    "self.all(x, self.exists_one(y, y.name == x.name))",
                    "device names must be unique",
                ),
                (
                    "size(self) <= 64 || !self.exists(d, (has(d.taints) && size(d.taints) > 0)"
                    " || (has(d.consumesCounters) && size(d.consumesCounters) > 0)"
                    " || (has(d.attributes) && d.attributes.exists(k, has(d.attributes[k].ints)"
                    " || has(d.attributes[k].bools) || has(d.attributes[k].strings)"
                    " || has(d.attributes[k].versions))))",
                    "at most 64 devices when any device uses taints, consumesCounters or list attributes",
                ),
            ),
        ),
    ] = empty_tuple()
    """The devices (at most 128, or 64 if any uses taints, counters or list attributes)."""
    shared_counters: Annotated[
        tuple[CounterSet, ...],
        Field(
            max_length=limits.RESOURCE_SLICE_MAX_COUNTER_SETS,
            json_schema_extra=unique_by("name", "counter set names"),
        ),
    ] = empty_tuple()
    """Counter sets that devices of the pool draw from; a slice has devices or counters, not both."""
    skip_node_operations: SkipNodeOperations = empty_tuple()
    """Kubelet calls to the driver these devices do without: NodePrepareResources, NodeUnprepareResources or * (alpha, DRAOptionalNodeOperations)."""

    @model_validator(mode="after")
    def _check(self) -> ResourceSliceSpec:
        if self.node_name == "":
            raise field_error("nodeName", "must be either unset or set to a non-empty string")
        if self.all_nodes is False:
            raise field_error("allNodes", "must be either unset or set to true")
        if self.per_device_node_selection is False:
            raise field_error("perDeviceNodeSelection", "must be either unset or set to true")
        selections = (
            (self.node_name is not None)
            + (self.node_selector is not None)
            + (self.all_nodes is not None)
            + (self.per_device_node_selection is not None)
        )
        if selections != 1:
            raise field_error(
                "",
                "exactly one of nodeName, nodeSelector, allNodes or perDeviceNodeSelection must be set",
            )
        if (
            self.node_selector is not None
            and len(self.node_selector.node_selector_terms) != limits.NODE_SELECTOR_TERMS_PER_SLICE
        ):
            raise field_error("nodeSelector.nodeSelectorTerms", "must have exactly one term")
        devices = self.devices
        if devices and self.shared_counters:
            raise field_error("", "devices and sharedCounters must not both be set")
        if devices:
            self._check_devices(devices)
        if self.shared_counters:
            check_unique((c.name for c in self.shared_counters), "sharedCounters", "name")
        if self.skip_node_operations:
            check_skip_node_operations(self.skip_node_operations, "skipNodeOperations")
        return self

    def _check_devices(self, devices: tuple[Device, ...]) -> None:
        names = {d.name for d in devices}
        if len(names) != len(devices):
            check_unique((d.name for d in devices), "devices", "name")
        per_device_nodes = self.per_device_node_selection is True
        advanced = False
        for i, device in enumerate(devices):
            try:
                advanced = _check_device(device, per_device_nodes) or advanced
            except PydanticCustomError as exc:
                raise _prefixed(exc, f"devices[{i}]") from None
        limit = limits.RESOURCE_SLICE_MAX_DEVICES_WITH_ADVANCED_FEATURES
        if advanced and len(devices) > limit:
            raise field_error(
                "devices",
                f"must have at most {limit} devices when any device uses taints, "
                "consumesCounters or list attributes",
            )


class ResourceSlice(KubeModel):
    """Devices a driver publishes for allocation (cluster-scoped)."""

    api_version: str = API_VERSION
    """resource.dralloc.dev/v1."""
    kind: Literal["ResourceSlice"] = "ResourceSlice"
    """ResourceSlice."""
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    """Standard object metadata."""
    spec: ResourceSliceSpec
    """The devices and where they are."""
