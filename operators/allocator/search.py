"""The depth-first, first-fit search for one node (upstream parity).

Claims are allocated in order, requests in order, devices one at a time.
Each candidate device is checked (in use? selectors? capacity? counters?
taints? constraints?), tentatively taken, and the search recurses; on a dead
end it backtracks. Within one request only combinations are tried, not
permutations (the start position moves forward). The first full solution
wins. The step counter matches upstream's allocateOne invocations, so the
search effort of upstream's tests can be checked.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from operators.allocator import capacity as cap
from operators.allocator.allocated import AllocatedDevices
from operators.allocator.compatibility import GroupTracker
from operators.allocator.compiled import (
    AttributeValue,
    CompiledClaim,
    CompiledClass,
    CompiledDevice,
    CompiledRequest,
    CompiledSlice,
    DeviceId,
    PoolId,
    Selector,
    Taint,
)
from operators.allocator.constraints import (
    AttributePin,
    Constraint,
    DerivedAttributes,
    MatchAttribute,
    build_constraint,
)
from operators.allocator.errors import (
    AllocationError,
    CapacityRequestError,
    InvalidPoolsError,
    SearchAborted,
    SearchBudgetExceeded,
)
from operators.allocator.features import Features
from operators.allocator.nodes import (
    OPTIONAL_NODE_OPERATIONS,
    NodeInfo,
    NodeSelector,
    NodeSelectorError,
    merge_terms,
)
from operators.allocator.pools import Pool, counters_left
from operators.allocator.quantities import Nanos
from operators.allocator.quota import QuotaBook, QuotaTally
from operators.allocator.results import ClaimAllocation, ConfigResult, DeviceResult
from operators.allocator.selectors import (
    SelectorCompileError,
    SelectorEvaluator,
    SelectorRuntimeError,
)

MAX_DEVICES_PER_CLAIM = 32  # AllocationResultsMaxSize
DEFAULT_BUDGET = 1_000_000  # allocateOne steps per node

_NO, _DONE, _MAX = 0, 1, 2  # outcomes of one search step


@dataclass(slots=True)
class _RequestData:
    request: CompiledRequest
    cls: CompiledClass
    num_devices: int
    all_devices: list[tuple[CompiledDevice, Pool]] | None = None
    selected_sub: int = 0


@dataclass(frozen=True, slots=True)
class SearchInputs:
    """Everything one search reads besides the claims and the node."""

    features: Features
    classes: Callable[[str], CompiledClass | None]
    allocated: AllocatedDevices
    evaluator: SelectorEvaluator
    extra_taints: Callable[[DeviceId], tuple[Taint, ...]] = lambda _device: ()
    budget: int = DEFAULT_BUDGET
    deadline: float | None = None  # time.monotonic() value
    cancelled: Callable[[], str | None] | None = None  # returns a cause once cancelled
    quotas: QuotaBook | None = None  # DeviceQuotas, consulted before a device is taken
    # Only devices with this attribute value, for requests without adminAccess (a gang's
    # device-attribute topology): passed per search, never part of the state's inputs.
    pin: AttributePin | None = None


@dataclass(slots=True)
class _Picked:
    request: CompiledRequest
    device: CompiledDevice
    share_id: str | None
    consumed: dict[str, Nanos] | None


@dataclass(slots=True)
class Search:
    """One allocation attempt of some claims on one node."""

    claims: Sequence[CompiledClaim]
    node: NodeInfo
    pools: Sequence[Pool]
    inputs: SearchInputs
    steps: int = 0
    data: dict[tuple[int, int, int], _RequestData] = field(default_factory=dict)
    constraints: list[list[Constraint]] = field(default_factory=list)
    picked: list[list[_Picked]] = field(default_factory=list)
    allocating: dict[DeviceId, set[int]] = field(default_factory=dict)
    allocating_capacity: dict[DeviceId, dict[str, Nanos]] = field(default_factory=dict)
    consumed_counters: dict[PoolId, dict[str, dict[str, Nanos]]] = field(default_factory=dict)
    available_counters: dict[PoolId, dict[str, dict[str, Nanos]]] = field(default_factory=dict)
    # Compatibility groups on counter sets, checked as counters are reserved (only in pools
    # where a device declares groups and the gate is on; made at the first such take, so a
    # search of other pools, nearly all of them, makes none).
    groups: GroupTracker | None = None
    match_cache: dict[tuple[DeviceId, tuple[int, int, int]], bool] = field(default_factory=dict)
    quota: QuotaTally | None = None  # set in _prepare when a DeviceQuota applies
    # Set by _prepare: no request can make the search backtrack by its own shape (see
    # _straight_through), so the first free devices that pass are the search's answer.
    straight: bool = False
    # Set by _prepare: devices that skip node operations may be taken on this node (the
    # gate is on and the node declares it can do without those kubelet calls).
    node_operations: bool = False

    # --- entry point ---------------------------------------------------------

    def run(self) -> list[ClaimAllocation] | None:
        """Allocations (one per claim, in order), or None when nothing fits.

        Raises AllocationError for fatal problems and NodeAllocationError
        subclasses for problems of this node only.
        """
        self._prepare()
        if self.straight and self._straight_through():
            return [self._claim_result(i) for i in range(len(self.claims))]
        outcome = self._one(0, 0, 0, 0, False, 0, 0, 0)
        if outcome != _DONE:
            reasons = tuple(f"{p.name}: {p.invalid_reason}" for p in self.pools if p.invalid)
            if reasons:
                raise InvalidPoolsError(reasons)
            return None
        return [self._claim_result(i) for i in range(len(self.claims))]

    def quota_refusal(self) -> str | None:
        """After a failed run: the first DeviceQuota that refused a device, if any."""
        refusal = self.quota.refusal if self.quota is not None else None
        return str(refusal) if refusal is not None else None

    # --- validation (before the search) --------------------------------------

    def _prepare(self) -> None:
        features = self.inputs.features
        if self.inputs.quotas is not None:
            self.quota = self.inputs.quotas.tally(self.claims)
        self.node_operations = (
            features.optional_node_operations
            and OPTIONAL_NODE_OPERATIONS in self.node.declared_features
        )
        straight = True
        for ci, claim in enumerate(self.claims):
            min_devices = 0
            for ri, request in enumerate(claim.requests):
                subs = request.first_available
                if subs and not features.prioritized_list:
                    raise AllocationError(
                        f"claim {claim.ref}, request {request.name}: has subrequests, "
                        "but the DRAPrioritizedList feature is disabled"
                    )
                if not features.consumable_capacity:
                    if (
                        request.exactly is not None
                        and request.exactly.capacity_requests is not None
                    ):
                        raise AllocationError(
                            f"claim {claim.ref}, request {request.name}: has capacity requests, "
                            "but the DRAConsumableCapacity feature is disabled"
                        )
                    for sub in subs:
                        if sub.capacity_requests is not None:
                            raise AllocationError(
                                f"claim {claim.ref}, subrequest {sub.name}: has capacity requests, "
                                "but the DRAConsumableCapacity feature is disabled"
                            )
                if subs:
                    fewest = None
                    for si, sub in enumerate(subs):
                        rd = self._validate(claim, sub, (ci, ri, si))
                        self.data[(ci, ri, si)] = rd
                        fewest = rd.num_devices if fewest is None else min(fewest, rd.num_devices)
                    least = fewest or 0
                else:
                    if request.exactly is None:
                        raise AllocationError(
                            f"claim {claim.ref}, request {request.name}: missing device class name "
                            "(unsupported request type?)"
                        )
                    exactly = request.exactly
                    rd = self._validate(claim, exactly, (ci, ri, 0))
                    self.data[(ci, ri, 0)] = rd
                    least = rd.num_devices
                    if (
                        exactly.mode != "ExactCount"
                        or exactly.admin_access
                        or exactly.capacity_requests is not None
                    ):
                        straight = False
                if subs:
                    straight = False
                # Checked request by request, before the next one is validated, so the
                # error names the request that goes over the limit.
                if least > MAX_DEVICES_PER_CLAIM - min_devices:
                    raise AllocationError(
                        f"claim {claim.ref}, request {request.name}: adding {least} devices "
                        f"exceeds the claim limit of {MAX_DEVICES_PER_CLAIM}, with {min_devices} "
                        "already accounted for"
                    )
                min_devices += least
            checkers: list[Constraint] = []
            derived = self._derived_attributes(ci) if features.derived_attributes else None
            for i, spec in enumerate(claim.constraints):
                checker = build_constraint(spec, features.list_type_attributes, derived)
                if checker is None:
                    raise AllocationError(
                        f"claim {claim.ref}, constraint #{i}: empty constraint (unsupported constraint type?)"
                    )
                checkers.append(checker)
            self.constraints.append(checkers)
            self.picked.append([])
        self.straight = straight

    def _derived_attributes(self, ci: int) -> DerivedAttributes | None:
        """The claim's derived attributes, for its constraints (None: it has none)."""
        expressions: dict[tuple[str, str | None], dict[str, str]] = {}
        for request in self.claims[ci].requests:
            for variant in (request.exactly, *request.first_available):
                if variant is not None and variant.derived_attributes:
                    expressions[(variant.name, variant.parent)] = dict(variant.derived_attributes)
        if not expressions:
            return None
        claim = self.claims[ci]
        evaluator = self.inputs.evaluator

        def derive(
            request: str, parent: str | None, name: str, expression: str, device: CompiledDevice
        ) -> AttributeValue:
            # Like a selector's error, a derived attribute's ends the allocation: a value
            # that cannot be computed must not quietly fail (or pass) a constraint.
            shown = f"{parent}/{request}" if parent else request
            try:
                return evaluator.derive(expression, device)
            except SelectorCompileError as err:
                raise AllocationError(
                    f"claim {claim.ref}, request {shown}: derived attribute {name}: "
                    f"CEL compile error: {err}"
                ) from None
            except SelectorRuntimeError as err:
                raise AllocationError(
                    f"claim {claim.ref}, request {shown}: derived attribute {name} on device "
                    f"{'/'.join(device.id)}: CEL runtime error: {err}"
                ) from None

        return DerivedAttributes(expressions, derive)

    def _validate(
        self, claim: CompiledClaim, request: CompiledRequest, key: tuple[int, int, int]
    ) -> _RequestData:
        if request.derived_attributes and not self.inputs.features.derived_attributes:
            # Refused rather than ignored: without its values a constraint would compare
            # published attributes the user did not mean.
            raise AllocationError(
                f"claim {claim.ref}, request {request.name}: cannot handle request with "
                "derived attributes, the feature is disabled"
            )
        for i, selector in enumerate(request.selectors):
            if selector.expression is None:
                raise AllocationError(
                    f"claim {claim.ref}, request {request.name}, selector #{i}: "
                    "CEL expression empty (unsupported selector type?)"
                )
        if not self.inputs.features.admin_access and request.admin_access is not None:
            raise AllocationError(
                f"claim {claim.ref}, request {request.name}: admin access is requested, but the feature is disabled"
            )
        if not request.class_name:
            raise AllocationError(
                f"claim {claim.ref}, request {request.name}: missing device class name (unsupported request type?)"
            )
        cls = self.inputs.classes(request.class_name)
        if cls is None:
            raise AllocationError(
                f"claim {claim.ref}, request {request.name}: could not retrieve device class "
                f'{request.class_name}: deviceclass "{request.class_name}" not found'
            )
        if request.mode == "ExactCount":
            return _RequestData(request, cls, request.count)
        if request.mode != "All":
            raise AllocationError(
                f"claim {claim.ref}, request {request.name}: unsupported count mode {request.mode}"
            )
        rd = _RequestData(request, cls, 0, [])
        for pool in self.pools:
            if pool.incomplete:
                raise AllocationError(
                    f"claim {claim.ref}, request {request.name}: asks for all devices, "
                    f"but resource pool {pool.name} is currently being updated"
                )
            if pool.invalid:
                raise AllocationError(
                    f"claim {claim.ref}, request {request.name}: asks for all devices, "
                    f"but resource pool {pool.name} is currently invalid"
                )
            for slice_ in pool.slices:
                for device in slice_.devices:
                    if not self._selectable(key, rd, device):
                        continue
                    # What the device offers, not what is left of it: a matching device
                    # whose capacity is in use stays among "all", so that "all" fails.
                    if self.inputs.features.consumable_capacity and not self._capacity_fits(
                        request, device, key[0], static=True
                    ):
                        continue
                    assert rd.all_devices is not None
                    rd.all_devices.append((device, pool))
        rd.num_devices = len(rd.all_devices or ())
        pin = self.inputs.pin
        if (
            pin is not None
            and not request.admin_access
            and not all(pin.admits(device) for device, _ in rd.all_devices or ())
        ):
            # As under a matchAttribute constraint, "all" stays all the matching devices
            # (no subset of them): not on this node, under this value. Not an error either.
            rd.all_devices = []
        return rd

    # --- the straight path -----------------------------------------------------

    def _straight_through(self) -> bool:
        """The search's answer without recursion, when it needs no backtracking.

        The recursion walks forward, taking the first device that passes its checks,
        request after request, and goes back only at a dead end. With only exact counts
        (no alternatives, adminAccess or capacity requests) this walk makes the same
        checks on the same devices in the same order (constraints against the devices
        taken so far, a pin, quotas), with their side effects: selector errors raised from
        the same device, the same quota refusals, the same step count. At a dead end, or
        at a device whose taking the recursion handles with more state (counters, shared
        capacity), it gives everything back and returns False: the recursion then
        searches as always.
        """
        inputs = self.inputs
        # The recursion's steps along this path: the first, one per device taken, per
        # request and per claim done. ``self.steps`` follows them, so an error raised on
        # the way reports the recursion's count; its budget holds here too.
        budget = inputs.budget
        bound = 1 + (MAX_DEVICES_PER_CLAIM + 1) * len(self.data) + len(self.claims)
        if bound > budget and (
            1 + sum(rd.num_devices + 1 for rd in self.data.values()) + len(self.claims) > budget
        ):
            return False  # the recursion reports the exceeded budget
        self.steps = 1
        # With a deadline or a cancellation, every step is checked as the recursion checks
        # it (the deadline each step, cancellation every 64th).
        watched = inputs.deadline is not None or inputs.cancelled is not None
        if watched:
            self._tick()
        features = inputs.features
        consumable = features.consumable_capacity
        taints = features.device_taints
        exclusive = inputs.allocated.exclusive
        allocating = self.allocating
        quota = self.quota
        held = inputs.pin
        taken: list[tuple[int, CompiledRequest, CompiledDevice]] = []
        for ci, claim in enumerate(self.claims):
            picked = self.picked[ci]
            checkers = self.constraints[ci]
            for ri in range(len(claim.requests)):
                key = (ci, ri, 0)
                rd = self.data[key]
                need = rd.num_devices
                if not need:
                    self.steps += 1
                    if watched:
                        self._tick()
                    continue
                request = rd.request
                class_name = rd.cls.name
                for pool in self.pools:
                    if pool.incomplete or pool.invalid:
                        continue
                    for slice_ in pool.slices:
                        for device in slice_.devices:
                            did = device.id
                            if did in allocating or did in exclusive:
                                continue
                            if not self._selectable(key, rd, device):
                                continue
                            if device.skip_node_operations and not self.node_operations:
                                continue
                            if consumable and (
                                device.allow_multiple
                                or not self._capacity_fits(request, device, ci)
                            ):
                                if device.allow_multiple:
                                    return self._give_back(taken)
                                continue
                            if device.consumes_counters:
                                if features.partitionable_devices:
                                    return self._give_back(taken)
                                continue
                            if taints and self._taint_blocks(device, request):
                                continue
                            if held is not None and not held.admits(device):
                                continue
                            if checkers and not _add_to(checkers, request, device):
                                continue
                            if quota is not None and not quota.take(ci, class_name, device, None):
                                for checker in reversed(checkers):
                                    checker.remove(request.name, request.parent, device)
                                continue
                            allocating[did] = {ci}
                            taken.append((ci, request, device))
                            picked.append(_Picked(request, device, None, None))
                            self.steps += 1
                            if watched:
                                self._tick()
                            need -= 1
                            if not need:
                                break
                        if not need:
                            break
                    if not need:
                        break
                if need:
                    return self._give_back(taken)
                self.steps += 1
                if watched:
                    self._tick()
            self.steps += 1
            if watched:
                self._tick()
        return True

    def _give_back(self, taken: list[tuple[int, CompiledRequest, CompiledDevice]]) -> bool:
        """Undo a straight walk that hit a dead end (see _straight_through)."""
        for ci, request, device in reversed(taken):
            del self.allocating[device.id]
            for checker in reversed(self.constraints[ci]):
                checker.remove(request.name, request.parent, device)
            if self.quota is not None:
                self.quota.give_back()
        for picked in self.picked:
            picked.clear()
        self.steps = 0
        return False

    # --- the recursion -------------------------------------------------------

    def _tick(self) -> None:
        """The checks of one step (``_one`` counts the step and calls this only when one
        of them may fire: over budget, a deadline, or a cancellation poll due)."""
        inputs = self.inputs
        if self.steps > inputs.budget:
            raise SearchBudgetExceeded(self.node.name, inputs.budget)
        if inputs.deadline is not None and time.monotonic() > inputs.deadline:
            raise SearchAborted("context deadline exceeded")
        if self.steps & 63 == 0 and inputs.cancelled is not None:
            cause = inputs.cancelled()
            if cause:
                raise SearchAborted(cause)

    def _one(
        self, ci: int, ri: int, si: int, di: int, in_sub: bool, sp: int, ss: int, sd: int
    ) -> int:
        self.steps = steps = self.steps + 1
        inputs = self.inputs
        if (
            steps > inputs.budget
            or inputs.deadline is not None
            or (steps & 63 == 0 and inputs.cancelled is not None)
        ):
            self._tick()
        if ci >= len(self.claims):
            return _DONE
        claim = self.claims[ci]
        if ri >= len(claim.requests):
            outcome = self._one(ci + 1, 0, 0, 0, False, 0, 0, 0)
            return _NO if outcome == _MAX else outcome
        rd = self.data[(ci, ri, si)]
        request = rd.request
        if not in_sub and request.parent is not None:
            all_exceeded = True
            sub = 0
            while (ci, ri, sub) in self.data:
                outcome = self._one(ci, ri, sub, di, True, 0, 0, 0)
                if outcome == _MAX:
                    sub += 1
                    continue
                all_exceeded = False
                if outcome == _DONE:
                    self.data[(ci, ri, 0)].selected_sub = sub
                    return _DONE
                sub += 1
            return _MAX if all_exceeded else _NO
        all_mode = request.mode == "All"
        if all_mode and not rd.all_devices:
            return _NO
        if di >= rd.num_devices:
            return self._one(ci, ri + 1, 0, 0, False, 0, 0, 0)
        if len(self.picked[ci]) + rd.num_devices - di > MAX_DEVICES_PER_CLAIM:
            return _MAX
        if all_mode:
            assert rd.all_devices is not None
            device, pool = rd.all_devices[di]
            undo = self._take(ci, rd, device, pool, must=True)
            if undo is None:
                return _NO
            outcome = self._one(ci, ri, si, di + 1, in_sub, 0, 0, 0)
            if outcome != _DONE:
                undo()
            return outcome

        key = (ci, ri, si)
        admin = bool(request.admin_access)
        consumable = self.inputs.features.consumable_capacity
        allocated = self.inputs.allocated
        pools = self.pools
        checkers = self.constraints[ci]
        early = (
            _early_rejections(checkers, request)
            # A capacity request can end the allocation with an error on a device that a
            # constraint would reject (upstream checks capacity first): no early rejection.
            if checkers and not (consumable and request.capacity_requests)
            else ()
        )
        # (attribute, (kind, values)) each fixed scalar matchAttribute needs: a slice
        # without that value anywhere is passed over whole, not device by device.
        pins = [pin for c in early if (pin := c.pin()) is not None] if early else ()
        held = None if admin else inputs.pin  # a search-wide pin (adminAccess is exempt)
        if held is not None:
            pins = [*pins, (held.attribute, held.value)]
        for p in range(sp, len(pools)):
            pool = pools[p]
            if pool.incomplete or pool.invalid:
                continue
            slices = pool.slices
            for s in range(ss if p == sp else 0, len(slices)):
                slice_ = slices[s]
                if pins:
                    cache = slice_.scalar_values_cache
                    ruled_out = False
                    for attribute, value in pins:
                        present = cache.get(attribute)
                        if present is None:
                            present = slice_.scalar_values(attribute)
                        if value not in present:
                            ruled_out = True
                            break
                    if ruled_out:
                        self._raise_selector_error_in(key, rd, slice_, admin, ci)
                        continue
                devices = slice_.devices
                for d in range(sd if (p == sp and s == ss) else 0, len(devices)):
                    device = devices[d]
                    did = device.id
                    users = self.allocating.get(did)
                    if admin:
                        if users and ci in users:
                            continue
                    elif users or did in allocated.exclusive:
                        continue
                    # Selectors before constraints, as upstream: a CEL runtime error on a
                    # device a pinned value rules out still ends the allocation.
                    if not self._selectable(key, rd, device):
                        continue
                    if early and any(c.rejects(device) for c in early):
                        continue
                    if held is not None and not held.admits(device):
                        continue
                    if consumable and not self._capacity_fits(request, device, ci):
                        continue
                    undo = self._take(ci, rd, device, pool, must=False)
                    if undo is None:
                        continue
                    outcome = self._one(ci, ri, si, di + 1, in_sub, p, s, d + 1)
                    if outcome == _DONE:
                        return _DONE
                    undo()
                    if outcome == _MAX:
                        return _MAX
        return _NO

    def _raise_selector_error_in(
        self,
        key: tuple[int, int, int],
        rd: _RequestData,
        slice_: CompiledSlice,
        admin: bool,
        ci: int,
    ) -> None:
        """Raise the CEL runtime error upstream meets in a slice the search passes over whole.

        Upstream evaluates the selectors of every device not in use before it checks any
        constraint, so a slice ruled out by a pinned ``matchAttribute`` value still ends the
        allocation if a selector fails there. Whether the selectors fail on any of the slice's
        devices is kept per slice, so a steady cluster pays one lookup per slice.
        """
        selectors = (rd.request.signature, tuple(s.expression for s in rd.cls.selectors))
        error_free = slice_.selector_error_free_cache.get(selectors)
        if error_free is None:
            error_free = True
            for device in slice_.devices:
                try:
                    self._selectable(key, rd, device)
                except AllocationError:
                    error_free = False
                    break
            slice_.selector_error_free_cache[selectors] = error_free
        if error_free:
            return
        allocated = self.inputs.allocated
        for device in slice_.devices:
            users = self.allocating.get(device.id)
            in_use = (
                bool(users and ci in users) if admin
                else bool(users) or device.id in allocated.exclusive
            )  # fmt: skip
            if not in_use:
                self._selectable(key, rd, device)  # raises on the first failing device

    # --- per-device checks ---------------------------------------------------

    def _selectable(
        self, key: tuple[int, int, int], rd: _RequestData, device: CompiledDevice
    ) -> bool:
        if device.binding_conditions and not self.inputs.features.device_binding_conditions:
            return False
        cache_key = (device.id, key)
        cached = self.match_cache.get(cache_key)
        if cached is not None:
            return cached
        result = self._selectors_match(rd.cls.selectors, device, rd.cls, None)
        if result and rd.request.selectors:
            result = self._selectors_match(rd.request.selectors, device, None, self.claims[key[0]])
        if result and device.slice_per_device:
            result = device.reachable_from(self.node)
        self.match_cache[cache_key] = result
        return result

    def _selectors_match(
        self,
        selectors: Sequence[Selector],
        device: CompiledDevice,
        cls: CompiledClass | None,
        claim: CompiledClaim | None,
    ) -> bool:
        """Whether the device passes the selectors of the class, or else of the claim (the
        owner an error names; its name is made only for an error, not per device)."""
        evaluator = self.inputs.evaluator
        for i, selector in enumerate(selectors):
            assert selector.expression is not None
            try:
                if not evaluator.matches(selector.expression, device):
                    return False
            except SelectorCompileError as err:
                owner = _owner(cls, claim)
                raise AllocationError(f"{owner}: selector #{i}: CEL compile error: {err}") from None
            except SelectorRuntimeError as err:
                owner, device_name = _owner(cls, claim), "/".join(device.id)
                raise AllocationError(
                    f"{owner}: selector #{i} on device {device_name}: CEL runtime error: {err}"
                ) from None
        return True

    def _capacity_fits(
        self, request: CompiledRequest, device: CompiledDevice, ci: int, static: bool = False
    ) -> bool:
        """Whether the request fits what is left of the device's capacity (``static``:
        what the device offers, ignoring what is in use). Raises AllocationError, naming
        claim ``ci``, for an amount no device may take."""
        requests = request.capacity_requests
        if not requests and not device.capacity:
            return True  # nothing to consume, nothing asked for
        try:
            return self._left_fits(request, device, static)
        except CapacityRequestError as err:
            raise CapacityRequestError(
                f"claim {self.claims[ci].ref}, request {request.name}: checking capacity for "
                f"device {'/'.join(device.id)}: {err}"
            ) from None

    def _left_fits(self, request: CompiledRequest, device: CompiledDevice, static: bool) -> bool:
        requests = request.capacity_requests
        in_use = None if static else self.inputs.allocated.capacity_in_use(device.id)
        allocating = None if static else self.allocating_capacity.get(device.id)
        if in_use is None and allocating is None:
            if not requests and device.plain_capacity:
                return True  # nothing asked for, nothing shared: each capacity taken whole fits
            # The gate is part of the key: a compiled device may serve states that differ.
            fractional = self.inputs.features.fractional_capacity_range
            key = (fractional, tuple(sorted(requests.items())) if requests else ())
            cached = device.idle_fit_cache.get(key)
            if cached is None:
                cached = device.idle_fit_cache[key] = self._fits(request, device, None, None)
            return cached
        return self._fits(request, device, in_use, allocating)

    def _fits(
        self,
        request: CompiledRequest,
        device: CompiledDevice,
        in_use: Mapping[str, Nanos] | None,
        allocating: Mapping[str, Nanos] | None,
    ) -> bool:
        fractional = self.inputs.features.fractional_capacity_range
        try:
            return cap.fits(request.capacity_requests, device, in_use, allocating, fractional)
        except CapacityRequestError:
            raise
        except AllocationError:
            return False

    def _taint_blocks(self, device: CompiledDevice, request: CompiledRequest) -> bool:
        extra = self.inputs.extra_taints(device.id)
        if not extra and not device.taints:
            return False  # the common case, without building a tuple per device and pod
        for taint in device.taints + extra:
            if taint.effect not in ("NoSchedule", "NoExecute"):
                continue
            if not any(t.tolerates(taint) for t in request.tolerations):
                return True
        return False

    def _available(self, pool: Pool) -> dict[str, dict[str, Nanos]]:
        available = self.available_counters.get(pool.id)
        if available is None:
            available = counters_left(pool, self.inputs.allocated)
            self.available_counters[pool.id] = available
        return available

    def _reserve_counters(self, device: CompiledDevice, pool: Pool) -> bool:
        # Groups first, as upstream: a device they refuse takes no counters.
        if pool.compatibility_groups:
            if self.groups is None:
                self.groups = GroupTracker()
            if not self.groups.take(device, pool, self.inputs.allocated):
                return False
        available = self._available(pool)
        consumed = self.consumed_counters.setdefault(pool.id, {})
        for set_name, counters in device.consumes_counters:
            target = consumed.setdefault(set_name, {})
            for name, amount in counters.items():
                target[name] = target.get(name, 0) + amount
        for set_name, counters in available.items():
            used = consumed.get(set_name, {})
            for name, amount in counters.items():
                if amount < used.get(name, 0):
                    self._release_counters(device, pool)
                    return False
        return True

    def _release_counters(self, device: CompiledDevice, pool: Pool) -> None:
        if pool.compatibility_groups and self.groups is not None:
            self.groups.give_back(device)
        consumed = self.consumed_counters[pool.id]
        for set_name, counters in device.consumes_counters:
            target = consumed[set_name]
            for name, amount in counters.items():
                target[name] -= amount

    def _take(
        self, ci: int, rd: _RequestData, device: CompiledDevice, pool: Pool, must: bool
    ) -> Callable[[], None] | None:
        """Tentatively allocate a selectable device; returns an undo function or None."""
        features = self.inputs.features
        request = rd.request
        did = device.id
        admin = bool(request.admin_access)
        shared = features.consumable_capacity and device.allow_multiple
        users = self.allocating.get(did)
        if not shared and admin and users and ci in users:
            return None
        if not admin and (users or did in self.inputs.allocated.exclusive):
            return None
        if device.skip_node_operations and not self.node_operations:
            return None
        if device.consumes_counters and not features.partitionable_devices:
            return None
        skip_counters = shared and (
            self.inputs.allocated.capacity_in_use(did) is not None
            or did in self.allocating_capacity
        )
        reserved = False
        if device.consumes_counters and not skip_counters:
            if not self._reserve_counters(device, pool):
                return None
            reserved = True
        if features.device_taints and self._taint_blocks(device, request):
            if reserved:
                self._release_counters(device, pool)
            return None
        checkers = self.constraints[ci]
        name, parent = request.name, request.parent
        if checkers and not _add_to(checkers, request, device):
            if reserved:
                self._release_counters(device, pool)
            if must:
                raise AllocationError(
                    f"claim {self.claims[ci].ref}, request {request.name}: cannot add device "
                    f"{'/'.join(did)} because a claim constraint would not be satisfied"
                )
            return None
        if not shared:
            self.allocating.setdefault(did, set()).add(ci)
        share_id = None
        consumed = None
        existed = False
        if features.consumable_capacity:
            try:
                fits = self._capacity_fits(request, device, ci)
            except CapacityRequestError:
                self._undo(ci, device, pool, name, parent, shared, reserved, None, False, False)
                raise
            if not fits:
                self._undo(ci, device, pool, name, parent, shared, reserved, None, False, False)
                return None
            if shared:
                fractional = features.fractional_capacity_range
                consumed = cap.consumption(request.capacity_requests, device, fractional) or {}
                share_id = str(uuid.uuid4())
                existed = did in self.allocating_capacity
                totals = self.allocating_capacity.setdefault(did, {})
                for key, amount in consumed.items():
                    totals[key] = totals.get(key, 0) + amount
        quota = None if admin else self.quota  # adminAccess is not charged
        if quota is not None and not quota.take(ci, rd.cls.name, device, consumed):
            self._undo(ci, device, pool, name, parent, shared, reserved, consumed, existed, False)
            return None
        self.picked[ci].append(_Picked(request, device, share_id, consumed))

        def undo() -> None:
            if quota is not None:
                quota.give_back()
            self._undo(ci, device, pool, name, parent, shared, reserved, consumed, existed, True)

        return undo

    def _undo(
        self,
        ci: int,
        device: CompiledDevice,
        pool: Pool,
        name: str,
        parent: str | None,
        shared: bool,
        reserved: bool,
        consumed: dict[str, Nanos] | None,
        existed: bool,
        picked: bool,
    ) -> None:
        did = device.id
        if picked:
            self.picked[ci].pop()
        if consumed is not None:
            totals = self.allocating_capacity[did]
            for key, amount in consumed.items():
                totals[key] -= amount
            if not existed:
                del self.allocating_capacity[did]
        if not shared:
            users = self.allocating[did]
            users.discard(ci)
            if not users:
                del self.allocating[did]
        for checker in reversed(self.constraints[ci]):
            checker.remove(name, parent, device)
        if reserved:
            self._release_counters(device, pool)

    # --- results ---------------------------------------------------------------

    def _claim_result(self, ci: int) -> ClaimAllocation:
        claim = self.claims[ci]
        features = self.inputs.features
        devices = []
        binding = features.device_binding_conditions
        for item in self.picked[ci]:
            request, device = item.request, item.device
            exclusive = item.share_id is None and not item.consumed
            if exclusive:
                # The same (request, device) gives the same result every time: made once
                # and shared (the request object is the template's, via the spec cache).
                hit = device.result_cache.get(id(request))
                if hit is not None and hit[0] is request and hit[1] == binding:
                    devices.append(hit[2])
                    continue
            consumed_published = None
            if item.consumed:
                consumed_published = cap.published_amounts(item.consumed, device)
            result = DeviceResult(
                request=request.full_name,
                driver=device.id[0],
                pool=device.id[1],
                device=device.id[2],
                admin_access=True if request.admin_access else None,
                tolerations=request.tolerations_raw,
                binding_conditions=device.binding_conditions
                if features.device_binding_conditions
                else None,
                binding_failure_conditions=(
                    device.binding_failure_conditions
                    if features.device_binding_conditions
                    else None
                ),
                share_id=item.share_id,
                consumed_capacity=consumed_published,
                consumed_qualified=item.consumed,
                device_class=request.class_name,
                # Taken only where allowed (see _take): the kubelet skips these calls.
                skip_node_operations=device.skip_node_operations,
            )
            if exclusive:
                if len(device.result_cache) > 64:
                    device.result_cache.clear()
                device.result_cache[id(request)] = (request, binding, result)
            devices.append(result)
        try:
            selector = self._node_selector(ci)
        except NodeSelectorError as err:
            raise AllocationError(f"create NodeSelector for claim {claim.name}: {err}") from None
        return ClaimAllocation(
            claim=claim.ref,
            uid=claim.uid,
            devices=tuple(devices),
            config=self._configs(ci),
            node_selector=selector,
        )

    def _chosen(self, ci: int, ri: int) -> _RequestData:
        rd = self.data[(ci, ri, 0)]
        if rd.request.parent is not None:
            return self.data[(ci, ri, rd.selected_sub)]
        return rd

    def _configs(self, ci: int) -> tuple[ConfigResult, ...]:
        claim = self.claims[ci]
        if not claim.configs:
            # Most claims: no configuration anywhere (a loop, not a generator per pod).
            for ri in range(len(claim.requests)):
                if self._chosen(ci, ri).cls.configs:
                    break
            else:
                return ()
        entries: list[tuple[str, list[str] | None, Mapping[str, object]]] = []
        by_class: dict[str, tuple[int, int]] = {}
        chosen_names = [self._chosen(ci, ri).request.full_name for ri in range(len(claim.requests))]
        for ri in range(len(claim.requests)):
            rd = self._chosen(ci, ri)
            span = by_class.get(rd.cls.name)
            if span is not None:
                for i in range(*span):
                    requests = entries[i][1]
                    assert requests is not None
                    requests.append(rd.request.full_name)
                continue
            start = len(entries)
            for config in rd.cls.configs:
                entries.append(("FromClass", [rd.request.full_name], config))
            by_class[rd.cls.name] = (start, len(entries))
        for claim_config in claim.configs:
            scope = claim_config.requests
            if not scope:
                entries.append(("FromClaim", None, claim_config.config))
                continue
            for ri, request in enumerate(claim.requests):
                if request.name in scope or (request.first_available and chosen_names[ri] in scope):
                    entries.append(("FromClaim", list(scope), claim_config.config))
                    break
        results = []
        for source, requests, config in entries:
            if requests and all(
                request.name in requests or chosen_names[ri] in requests
                for ri, request in enumerate(claim.requests)
            ):
                requests = None
            results.append(ConfigResult(source, tuple(requests) if requests else None, config))
        return tuple(results)

    def _node_selector(self, ci: int) -> NodeSelector | None:
        selectors: list[NodeSelector] = []
        for item in self.picked[ci]:
            device = item.device
            if device.slice_per_device:
                node_name, selector = device.node_name, device.node_selector
            else:
                node_name, selector = device.slice_node_name, device.slice_node_selector
            if node_name or device.binds_to_node:
                return NodeSelector.for_node(self.node.name)
            if selector is not None:
                selectors.append(selector)
        return merge_terms(selectors)


def _owner(cls: CompiledClass | None, claim: CompiledClaim | None) -> str:
    """Whose selector failed, as upstream names it in the error."""
    if cls is not None:
        return f"class {cls.name}"
    assert claim is not None
    return f"claim {claim.ref}"


def _add_to(
    checkers: Sequence[Constraint], request: CompiledRequest, device: CompiledDevice
) -> bool:
    """Add the device to every constraint, or to none when one refuses it."""
    name, parent = request.name, request.parent
    for added, checker in enumerate(checkers):
        if not checker.add(name, parent, device):
            for earlier in reversed(checkers[:added]):
                earlier.remove(name, parent, device)
            return False
    return True


def _early_rejections(
    checkers: Sequence[Constraint], request: CompiledRequest
) -> list[MatchAttribute]:
    """The matchAttribute constraints that may reject a device of ``request`` before it is
    taken (and, pinned, whole slices): those holding a value already, in claim order up to
    the first that computes its attribute for this request. Upstream applies a claim's
    constraints in order, so a derived attribute's evaluation error on a device is raised
    unless an earlier constraint rejected the device; a later one must not hide it."""
    early: list[MatchAttribute] = []
    for c in checkers:
        if not c.scope.applies(request.name, request.parent):
            continue
        if c.derives(request.name, request.parent):
            break
        if isinstance(c, MatchAttribute) and c.stack:
            early.append(c)
    return early
