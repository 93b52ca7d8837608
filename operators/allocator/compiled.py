"""Compact, immutable forms of the API objects that the search works on.

Objects arrive as pydantic models or plain dicts (``resource.k8s.io/v1`` or
``resource.dralloc.dev/v1`` shape; both serialise to the same JSON). They are
compiled once per object change: quantities become exact nano-units, node
selection is parsed, attributes are normalised. The search never touches the
API objects again.
"""

from __future__ import annotations

import json
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from operators.allocator.nodes import NodeInfo, NodeSelector
from operators.allocator.objects import as_dict
from operators.allocator.quantities import Nanos, to_nanos
from operators.api.quantity import Quantity
from operators.api.quickinit import quick_init

DeviceId = tuple[str, str, str]  # (driver, pool, device)
PoolId = tuple[str, str]  # (driver, pool)

_SCALAR_KINDS = ("int", "bool", "string", "version")
_LIST_KINDS = {"ints": "int", "bools": "bool", "strings": "string", "versions": "version"}


@dataclass(frozen=True, slots=True)
class AttributeValue:
    """One device attribute: a typed scalar, a typed list, or nothing usable.

    ``kind`` is the element type ("int", "bool", "string", "version") or ""
    when the attribute has no value of a known type.
    """

    kind: str
    values: tuple[Any, ...]
    is_list: bool

    @classmethod
    def parse(cls, data: Mapping[str, Any]) -> AttributeValue:
        for kind in _SCALAR_KINDS:
            if data.get(kind) is not None:
                return cls(kind, (data[kind],), False)
        for list_kind, kind in _LIST_KINDS.items():
            items = data.get(list_kind)
            if items:
                return cls(kind, tuple(items), True)
        return cls("", (), False)


@dataclass(frozen=True, slots=True)
class RequestPolicy:
    """Capacity request policy (consumable capacity), in nano-units."""

    default: Nanos | None = None
    valid_values: tuple[Nanos, ...] | None = None
    range_min: Nanos | None = None
    range_max: Nanos | None = None
    range_step: Nanos | None = None
    has_range: bool = False


@dataclass(frozen=True, slots=True)
class CapacityEntry:
    quantity: Quantity  # as published: what CEL sees, and the notation results use
    policy: RequestPolicy | None

    @property
    def value(self) -> Nanos:
        return self.quantity.nanos


@dataclass(frozen=True, slots=True)
class Taint:
    key: str
    value: str
    effect: str


@dataclass(frozen=True, slots=True)
class Toleration:
    key: str
    operator: str
    value: str
    effect: str

    def tolerates(self, taint: Taint) -> bool:
        if self.effect and self.effect != taint.effect:
            return False
        if self.key and self.key != taint.key:
            return False
        if self.operator == "Exists":
            return True
        return self.value == taint.value  # "Equal" or empty operator


@dataclass(frozen=True, slots=True)
class CompiledDevice:
    """A device of a slice, with everything the search asks about it."""

    id: DeviceId
    name: str
    slice_name: str
    attributes: Mapping[str, AttributeValue]
    capacity: Mapping[str, CapacityEntry]
    consumes_counters: tuple[tuple[str, Mapping[str, Nanos]], ...]
    taints: tuple[Taint, ...]
    binding_conditions: tuple[str, ...] | None
    binding_failure_conditions: tuple[str, ...] | None
    binds_to_node: bool
    allow_multiple: bool
    # Per-device node selection (only meaningful with perDeviceNodeSelection).
    node_name: str | None
    node_selector: NodeSelector | None
    all_nodes: bool
    # Node selection of the slice the device came from.
    slice_per_device: bool
    slice_node_name: str | None
    slice_node_selector: NodeSelector | None
    # Every capacity without a request policy and not negative: a request that names no
    # capacity then fits while no share is in use (consuming each in full), with no
    # arithmetic. Fixed per device, so the search skips the capacity work per pod.
    plain_capacity: bool = False
    # Per entry of consumes_counters, the groups it declares (DRADeviceCompatibilityGroups);
    # empty when no entry declares any, as for nearly every device.
    compatibility_groups: tuple[frozenset[str], ...] = ()
    # The slice's skipNodeOperations: such a device needs a node that declares
    # DRAOptionalNodeOperations, and its results carry them (the kubelet reads them there).
    skip_node_operations: tuple[str, ...] = ()
    # What a selector sees of the device (driver, attributes, capacities), one shared
    # object for every device that looks the same (see ``_look``): the evaluator keys its
    # views and results by it.
    look: tuple[Any, ...] = ()
    # Selector results keyed by CEL expression; dropped with the device when
    # its slice changes, so "per (expression, device, slice generation)".
    selector_cache: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    view_cache: list[Any] = field(default_factory=list, repr=False, compare=False)
    # Whether a request (by the DRAFractionalCapacityRange gate and its capacity requests)
    # fits while no share of the device is in use: fixed for the device, asked once per
    # candidate and pod.
    idle_fit_cache: dict[tuple[bool, tuple[tuple[str, Nanos], ...]], bool] = field(
        default_factory=dict, repr=False, compare=False
    )
    # Exclusive allocation results of this device, by id of the request (the entry keeps
    # the request and the binding-conditions feature it was made under): a DeviceResult
    # is immutable, so pods from one template share it (search.py).
    result_cache: dict[int, tuple[Any, bool, Any]] = field(
        default_factory=dict, repr=False, compare=False
    )

    def lookup_attribute(self, qualified: str) -> AttributeValue | None:
        """Attribute by fully qualified name; the driver's own domain may be omitted."""
        attr = self.attributes.get(qualified)
        if attr is not None:
            return attr
        domain, sep, ident = qualified.partition("/")
        if not sep or domain != self.id[0]:
            return None
        return self.attributes.get(ident)

    def reachable_from(self, node: NodeInfo) -> bool:
        """Per-device node selection (nodeName / nodeSelector / allNodes)."""
        if self.node_name:
            return node.name == self.node_name
        if self.all_nodes:
            return True
        if self.node_selector is not None:
            return self.node_selector.matches(node)
        return False


@dataclass(frozen=True, slots=True)
class CompiledSlice:
    name: str
    driver: str
    pool: str
    generation: int
    slice_count: int
    node_name: str | None
    node_selector: NodeSelector | None
    node_selector_error: str | None
    all_nodes: bool
    per_device: bool
    devices: tuple[CompiledDevice, ...]
    shared_counters: tuple[tuple[str, Mapping[str, Nanos]], ...]
    resource_version: str = ""
    uid: str = ""
    # Attribute name -> (kind, values) of its scalar values on the devices, so the
    # search can pass over a whole slice that a matchAttribute value rules out.
    scalar_values_cache: dict[str, frozenset[tuple[str, tuple[Any, ...]]]] = field(
        default_factory=dict, repr=False, compare=False
    )
    # Per selector set (class and request expressions): whether they evaluate without a CEL
    # runtime error on every device here, so a slice passed over whole needs no evaluation.
    selector_error_free_cache: dict[Hashable, bool] = field(
        default_factory=dict, repr=False, compare=False
    )
    # A device here declares compatibility groups (without their gate the slice is left
    # out): set once here, since pools are gathered per node and pod.
    uses_compatibility_groups: bool = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        uses = any(device.compatibility_groups for device in self.devices)
        object.__setattr__(self, "uses_compatibility_groups", uses)

    @property
    def key(self) -> str:
        """Identity in the state: the UID when known, else the name."""
        return self.uid or self.name

    def scalar_values(self, attribute: str) -> frozenset[tuple[str, tuple[Any, ...]]]:
        """(kind, values) of every non-list value the devices have for the attribute."""
        found = self.scalar_values_cache.get(attribute)
        if found is None:
            values = set()
            for device in self.devices:
                attr = device.lookup_attribute(attribute)
                if attr is not None and not attr.is_list:
                    values.add((attr.kind, attr.values))
            found = self.scalar_values_cache[attribute] = frozenset(values)
        return found

    @property
    def pool_id(self) -> PoolId:
        return (self.driver, self.pool)

    @property
    def has_binding_conditions(self) -> bool:
        return any(d.binding_conditions is not None for d in self.devices)


@dataclass(frozen=True, slots=True)
class Selector:
    """A device selector; ``expression`` is None for an unknown selector type."""

    expression: str | None


# A request's class name and selector expressions: requests alike in these match the same devices.
RequestSignature = tuple[str, tuple[str | None, ...]]


@dataclass(frozen=True, slots=True)
class CompiledClass:
    name: str
    selectors: tuple[Selector, ...]
    configs: tuple[Mapping[str, Any], ...]  # DeviceConfiguration dicts (opaque)


@dataclass(frozen=True, slots=True)
class CompiledRequest:
    """An exact request or one subrequest of a firstAvailable request."""

    name: str
    parent: str | None
    class_name: str
    selectors: tuple[Selector, ...]
    mode: str
    count: int
    admin_access: bool | None
    tolerations: tuple[Toleration, ...]
    tolerations_raw: tuple[Mapping[str, Any], ...]
    capacity_requests: Mapping[str, Nanos] | None  # None: no capacity field
    # (name, CEL expression) of the request's derived attributes, in the claim's order.
    derived_attributes: tuple[tuple[str, str], ...] = ()
    # What the device index counts by (class plus selector expressions); set once here
    # because find_node needs it for every request of every pod.
    signature: RequestSignature = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        signature = (self.class_name, tuple(s.expression for s in self.selectors))
        object.__setattr__(self, "signature", signature)

    @property
    def full_name(self) -> str:
        return f"{self.parent}/{self.name}" if self.parent else self.name


@dataclass(frozen=True, slots=True)
class CompiledDeviceRequest:
    name: str
    exactly: CompiledRequest | None
    first_available: tuple[CompiledRequest, ...]


@dataclass(frozen=True, slots=True)
class CompiledConstraint:
    requests: tuple[str, ...]
    match_attribute: str | None
    distinct_attribute: str | None


@dataclass(frozen=True, slots=True)
class CompiledClaimConfig:
    requests: tuple[str, ...]
    config: Mapping[str, Any]  # DeviceConfiguration dict ({"opaque": ...})


@quick_init
@dataclass(frozen=True, slots=True)
class CompiledClaim:
    namespace: str
    name: str
    uid: str
    resource_version: str
    requests: tuple[CompiledDeviceRequest, ...]
    constraints: tuple[CompiledConstraint, ...]
    configs: tuple[CompiledClaimConfig, ...]

    @property
    def ref(self) -> str:
        """How upstream names a claim in messages (klog.KObj)."""
        return f"{self.namespace}/{self.name}" if self.namespace else self.name


@dataclass(frozen=True, slots=True)
class CompiledTaintRule:
    name: str
    driver: str | None
    pool: str | None
    device: str | None
    matches_nothing: bool  # a missing selector matches no device (documented meaning)
    taint: Taint

    def applies_to(self, device_id: DeviceId) -> bool:
        if self.matches_nothing:
            return False
        driver, pool, name = device_id
        return (
            (self.driver is None or self.driver == driver)
            and (self.pool is None or self.pool == pool)
            and (self.device is None or self.device == name)
        )


# --- compilation -------------------------------------------------------------


def _nanos_map(data: Mapping[str, Any] | None) -> dict[str, Nanos]:
    return {str(k): to_nanos(_counter_value(v)) for k, v in (data or {}).items()}


def _counter_value(value: Any) -> Any:
    return value.get("value") if isinstance(value, Mapping) else value


def _parse_policy(data: Mapping[str, Any] | None) -> RequestPolicy | None:
    if not data:
        return None
    default = data.get("default")
    valid = data.get("validValues")
    rng = data.get("validRange")
    return RequestPolicy(
        default=to_nanos(default) if default is not None else None,
        valid_values=tuple(to_nanos(v) for v in valid) if valid is not None else None,
        range_min=to_nanos(rng["min"]) if rng and rng.get("min") is not None else None,
        range_max=to_nanos(rng["max"]) if rng and rng.get("max") is not None else None,
        range_step=to_nanos(rng["step"]) if rng and rng.get("step") is not None else None,
        has_range=rng is not None,
    )


def _parse_taint(data: Mapping[str, Any]) -> Taint:
    return Taint(
        str(data.get("key", "")), str(data.get("value") or ""), str(data.get("effect", ""))
    )


def _parse_toleration(data: Mapping[str, Any]) -> Toleration:
    return Toleration(
        key=str(data.get("key") or ""),
        operator=str(data.get("operator") or "Equal"),
        value=str(data.get("value") or ""),
        effect=str(data.get("effect") or ""),
    )


def _parse_selector_or_error(
    data: Mapping[str, Any] | None,
) -> tuple[NodeSelector | None, str | None]:
    if data is None:
        return None, None
    try:
        return NodeSelector.parse(data), None
    except ValueError as err:
        return None, str(err)


def compile_device(
    driver: str,
    pool: str,
    slice_name: str,
    data: Mapping[str, Any],
    slice_node: tuple[bool, str | None, NodeSelector | None] = (False, None, None),
    skip_node_operations: tuple[str, ...] = (),
) -> CompiledDevice:
    name = str(data["name"])
    capacity = {
        str(key): CapacityEntry(
            quantity=Quantity.coerce(entry.get("value")),
            policy=_parse_policy(entry.get("requestPolicy")),
        )
        for key, entry in (data.get("capacity") or {}).items()
    }
    node_selector, _ = _parse_selector_or_error(data.get("nodeSelector"))
    bc = data.get("bindingConditions")
    bfc = data.get("bindingFailureConditions")
    attributes = {
        str(k): AttributeValue.parse(v or {}) for k, v in (data.get("attributes") or {}).items()
    }
    look = _look(driver, attributes, capacity)
    consumptions = data.get("consumesCounters") or ()
    groups = tuple(frozenset(c.get("compatibilityGroups") or ()) for c in consumptions)
    return CompiledDevice(
        id=(driver, pool, name),
        name=name,
        slice_name=slice_name,
        attributes=look[1] if look else attributes,
        capacity=capacity,
        consumes_counters=tuple(
            (str(c["counterSet"]), _nanos_map(c.get("counters"))) for c in consumptions
        ),
        taints=tuple(_parse_taint(t) for t in data.get("taints") or ()),
        binding_conditions=tuple(bc) if bc is not None else None,
        binding_failure_conditions=tuple(bfc) if bfc is not None else None,
        binds_to_node=bool(data.get("bindsToNode")),
        allow_multiple=bool(data.get("allowMultipleAllocations")),
        node_name=data.get("nodeName") or None,
        node_selector=node_selector,
        all_nodes=bool(data.get("allNodes")),
        slice_per_device=slice_node[0],
        slice_node_name=slice_node[1],
        slice_node_selector=slice_node[2],
        plain_capacity=all(e.policy is None and e.value >= 0 for e in capacity.values()),
        compatibility_groups=groups if any(groups) else (),
        look=look,
        skip_node_operations=skip_node_operations,
    )


# Looks of devices compiled so far; past the bound the table starts again (devices keep
# theirs, so a cluster of more kinds of device only shares less).
_LOOKS: dict[tuple[Any, ...], tuple[Any, ...]] = {}
MAX_LOOKS = 50_000


def _look(
    driver: str, attributes: dict[str, AttributeValue], capacity: Mapping[str, CapacityEntry]
) -> tuple[Any, ...]:
    """(driver, attributes, capacities in their published notation): the same object for
    devices that look the same, whose attributes mapping is then shared too. Devices of
    one model differ in few attributes, if any, so selector work and memory go per kind
    of device rather than per device."""
    key = (
        driver,
        tuple(attributes.items()),
        tuple((name, str(entry.quantity)) for name, entry in capacity.items()),
    )
    try:
        found = _LOOKS.get(key)
    except TypeError:  # a value no API server sends (unvalidated input): not shared
        return ()
    if found is None:
        if len(_LOOKS) >= MAX_LOOKS:
            _LOOKS.clear()
        found = _LOOKS[key] = (driver, attributes, key)
    return found


def compile_slice(obj: Any) -> CompiledSlice:
    data = as_dict(obj)
    meta = data.get("metadata") or {}
    spec = data.get("spec") or {}
    pool = spec.get("pool") or {}
    driver, pool_name, name = (
        str(spec.get("driver", "")),
        str(pool.get("name", "")),
        str(meta.get("name", "")),
    )
    node_selector, selector_error = _parse_selector_or_error(spec.get("nodeSelector"))
    per_device = bool(spec.get("perDeviceNodeSelection"))
    node_name = spec.get("nodeName") or None
    slice_node = (per_device, node_name, node_selector)
    skips = tuple(str(op) for op in spec.get("skipNodeOperations") or ())
    return CompiledSlice(
        name=name,
        driver=driver,
        pool=pool_name,
        generation=int(pool.get("generation") or 0),
        slice_count=int(pool.get("resourceSliceCount") or 0),
        node_name=node_name,
        node_selector=node_selector,
        node_selector_error=selector_error,
        all_nodes=bool(spec.get("allNodes")),
        per_device=per_device,
        devices=tuple(
            compile_device(driver, pool_name, name, d, slice_node, skips)
            for d in spec.get("devices") or ()
        ),
        shared_counters=tuple(
            (str(cs["name"]), _nanos_map(cs.get("counters")))
            for cs in spec.get("sharedCounters") or ()
        ),
        resource_version=str(meta.get("resourceVersion") or ""),
        uid=str(meta.get("uid") or ""),
    )


def _selectors(items: Sequence[Mapping[str, Any]] | None) -> tuple[Selector, ...]:
    out = []
    for item in items or ():
        cel = item.get("cel")
        out.append(
            Selector(str(cel["expression"]) if cel and cel.get("expression") is not None else None)
        )
    return tuple(out)


def compile_class(obj: Any) -> CompiledClass:
    data = as_dict(obj)
    spec = data.get("spec") or {}
    configs = tuple(
        {k: v for k, v in c.items() if k != "requests"} for c in spec.get("config") or ()
    )
    return CompiledClass(
        name=str((data.get("metadata") or {}).get("name", "")),
        selectors=_selectors(spec.get("selectors")),
        configs=configs,
    )


def _compile_request(data: Mapping[str, Any], parent: str | None, name: str) -> CompiledRequest:
    capacity = data.get("capacity")
    requests = None
    if capacity is not None:
        requests = {str(k): to_nanos(v) for k, v in (capacity.get("requests") or {}).items()}
    mode = str(data.get("allocationMode") or "ExactCount")
    count = data.get("count")
    if count is None:
        count = 1 if mode == "ExactCount" else 0
    tolerations_raw = tuple(data.get("tolerations") or ())
    return CompiledRequest(
        name=name,
        parent=parent,
        class_name=str(data.get("deviceClassName") or ""),
        selectors=_selectors(data.get("selectors")),
        mode=mode,
        count=int(count),
        admin_access=data.get("adminAccess") if parent is None else None,
        tolerations=tuple(_parse_toleration(t) for t in tolerations_raw),
        tolerations_raw=tolerations_raw,
        capacity_requests=requests,
        derived_attributes=tuple(
            (str(a.get("name", "")), str(a.get("expression", "")))
            for a in data.get("derivedAttributes") or ()
        ),
    )


# The spec part of a compiled claim: (requests, constraints, configs).
ClaimSpecParts = tuple[
    tuple[CompiledDeviceRequest, ...],
    tuple[CompiledConstraint, ...],
    tuple[CompiledClaimConfig, ...],
]


class SpecCache:
    """Compiled claim specs, shared by the claims whose specs are equal.

    Claims made from one template differ only in their metadata. A parsed spec is found by
    identity first (the parsers share equal specs, ``operators.api.base.Shared``), else by
    its JSON, which is several times cheaper to produce than the compiled requests.
    """

    LIMIT = 1_000

    def __init__(self) -> None:
        self.by_json: dict[bytes, ClaimSpecParts] = {}
        # id -> (the spec, its parts): the spec is held so that its id is never reused
        self.by_identity: dict[int, tuple[object, ClaimSpecParts]] = {}

    def parts(self, spec: Any, serializer: Any) -> ClaimSpecParts:
        kept = self.by_identity.get(id(spec))
        if kept is not None and kept[0] is spec:
            return kept[1]
        # model_dump_json's own serializer call, without its keyword handling
        key = serializer.to_json(spec, by_alias=True, exclude_none=True)
        parts = self.by_json.get(key)
        if parts is None:
            if len(self.by_json) >= self.LIMIT:
                self.by_json.clear()
            parts = self.by_json[key] = _compile_spec(json.loads(key))
        if len(self.by_identity) >= self.LIMIT:
            self.by_identity.clear()
        self.by_identity[id(spec)] = (spec, parts)
        return parts


def compile_claim(obj: Any, spec_cache: SpecCache | None = None) -> CompiledClaim:
    """A claim as the search reads it; with ``spec_cache``, the spec of a pydantic claim
    is compiled once per distinct spec and shared (see :class:`SpecCache`)."""
    if spec_cache is not None and type(obj) is not dict:  # a dict has no attributes; no ABC check
        spec = getattr(obj, "spec", None)
        serializer = getattr(type(spec), "__pydantic_serializer__", None)
        if serializer is not None:
            meta = obj.metadata
            return CompiledClaim(
                meta.namespace or "",
                meta.name or "",
                meta.uid or "",
                meta.resource_version or "",
                *spec_cache.parts(spec, serializer),
            )
    data = as_dict(obj)
    meta = data.get("metadata") or {}
    return CompiledClaim(
        str(meta.get("namespace") or ""),
        str(meta.get("name", "")),
        str(meta.get("uid") or ""),
        str(meta.get("resourceVersion") or ""),
        *_compile_spec(data.get("spec") or {}),
    )


def _compile_spec(spec: Mapping[str, Any]) -> ClaimSpecParts:
    devices = spec.get("devices") or {}
    requests = []
    for req in devices.get("requests") or ():
        name = str(req.get("name", ""))
        exactly = req.get("exactly")
        subs = tuple(
            _compile_request(sub, name, str(sub.get("name", "")))
            for sub in req.get("firstAvailable") or ()
        )
        requests.append(
            CompiledDeviceRequest(
                name=name,
                exactly=_compile_request(exactly, None, name) if exactly is not None else None,
                first_available=subs,
            )
        )
    constraints = tuple(
        CompiledConstraint(
            requests=tuple(c.get("requests") or ()),
            match_attribute=c.get("matchAttribute"),
            distinct_attribute=c.get("distinctAttribute"),
        )
        for c in devices.get("constraints") or ()
    )
    configs = tuple(
        CompiledClaimConfig(
            requests=tuple(c.get("requests") or ()),
            config={k: v for k, v in c.items() if k != "requests"},
        )
        for c in devices.get("config") or ()
    )
    return tuple(requests), constraints, configs


def compile_taint_rule(obj: Any) -> CompiledTaintRule:
    data = as_dict(obj)
    spec = data.get("spec") or {}
    selector = spec.get("deviceSelector")
    sel = selector or {}
    return CompiledTaintRule(
        name=str((data.get("metadata") or {}).get("name", "")),
        driver=sel.get("driver"),
        pool=sel.get("pool"),
        device=sel.get("device"),
        matches_nothing=selector is None,
        taint=_parse_taint(spec.get("taint") or {}),
    )
