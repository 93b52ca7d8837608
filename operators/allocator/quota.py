"""DeviceQuota accounting: usage derived from claims, and the check the search consults.

Truth lives in claims. The book keeps, per claim, its allocation as the watch shows it
(confirmed) or as the operator is writing it (assumed, in flight), exactly like the
allocator state does for devices; a quota's usage is the sum over the claims of its
namespace. So a restart, or a second replica, computes the same usage from the same
claims, and an in-flight allocation counts at once: two pods racing for the last unit are
decided one after the other, and the second sees the first's assumed claim.

What is counted (per quota: one DeviceClass, optionally narrowed by CEL selectors):
- every allocated device result requested through the class whose device passes the
  selectors; an ``All`` request counts what it got, not 32;
- capacity: a device taken whole counts its published capacity, a share of a
  multi-allocatable device what it consumes;
- a claim counts once, however many pods share it; adminAccess results are not charged
  (as upstream's quota leaves them out); a deallocated claim releases its part.

The search asks a :class:`QuotaTally` (one per search) before it takes a device; a device
that would push a quota over a limit is not taken, so the search backtracks to devices
the quota does not count, or fails with the refusal as the reason.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from operators.allocator.capacity import device_capacity, qualified
from operators.allocator.compiled import CompiledClaim, CompiledDevice, DeviceId
from operators.allocator.objects import as_dict
from operators.allocator.quantities import Nanos, to_nanos
from operators.allocator.results import ClaimAllocation
from operators.allocator.selectors import (
    SelectorCompileError,
    SelectorEvaluator,
    SelectorRuntimeError,
)
from operators.api.limits import QUALIFIED_NAME_MAX_LENGTH, QUALIFIED_NAME_PATTERN
from operators.api.quantity import Quantity

DEVICES = "devices"
CLAIMS = "claims"
_QUALIFIED_NAME = re.compile(QUALIFIED_NAME_PATTERN)


@dataclass(frozen=True, slots=True)
class CompiledQuota:
    """A DeviceQuota as the accounting reads it."""

    namespace: str
    name: str
    class_name: str
    selectors: tuple[str, ...]  # CEL expressions, all must be true
    devices: int | None
    claims: int | None
    capacity: tuple[tuple[str, Quantity], ...]  # (name as written, hard limit)
    ref: str = field(init=False)
    limits: tuple[tuple[str, Nanos, Quantity | int], ...] = field(init=False)
    """Every limited resource: (name, limit as counted, limit as written), in a fixed order
    (worked out once: the search asks for every device it takes)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "ref", f"{self.namespace}/{self.name}")
        limits: list[tuple[str, Nanos, Quantity | int]] = []
        if self.devices is not None:
            limits.append((DEVICES, self.devices, self.devices))
        if self.claims is not None:
            limits.append((CLAIMS, self.claims, self.claims))
        limits.extend((name, hard.nanos, hard) for name, hard in self.capacity)
        object.__setattr__(self, "limits", tuple(limits))


def compile_quota(obj: Any) -> CompiledQuota:
    """A DeviceQuota model or dict."""
    data = as_dict(obj)
    meta = data.get("metadata") or {}
    spec = data.get("spec") or {}
    hard = spec.get("hard") or {}
    return CompiledQuota(
        namespace=str(meta.get("namespace") or ""),
        name=str(meta.get("name") or ""),
        class_name=str(spec.get("deviceClassName") or ""),
        selectors=tuple(
            str((s.get("cel") or {}).get("expression") or "") for s in spec.get("selectors") or ()
        ),
        devices=hard.get("devices"),
        claims=hard.get("claims"),
        capacity=tuple(
            sorted((str(k), Quantity.coerce(v)) for k, v in (hard.get("capacity") or {}).items())
        ),
    )


@dataclass(frozen=True, slots=True)
class Charge:
    """One allocated device result, as quotas count it."""

    class_name: str
    device: DeviceId
    consumed: Mapping[str, Nanos] | None  # a share's consumed capacity (qualified names)


@dataclass(slots=True)
class Usage:
    devices: int = 0
    claims: int = 0
    capacity: dict[str, Nanos] = field(default_factory=dict)  # by the quota's names

    def add(self, other: Usage, sign: int = 1) -> None:
        self.devices += sign * other.devices
        self.claims += sign * other.claims
        for name, amount in other.capacity.items():
            self.capacity[name] = self.capacity.get(name, 0) + sign * amount

    def amount(self, resource: str) -> Nanos:
        if resource == DEVICES:
            return self.devices
        if resource == CLAIMS:
            return self.claims
        return self.capacity.get(resource, 0)


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why a quota refuses a device: the words a gated pod's reason shows."""

    quota: str
    resource: str
    used: str
    hard: str
    needs: str

    def __str__(self) -> str:
        return (
            f"DeviceQuota {self.quota}: {self.resource} {self.used} of {self.hard} used, "
            f"claim needs {self.needs}"
        )


@dataclass(frozen=True, slots=True)
class QuotaStatus:
    """What the operator writes to a quota's status, and the metrics show."""

    used: Usage
    invalid: str | None  # why the quota cannot be enforced as written
    blocking: bool  # an invalid quota that holds back what it limits (see QuotaBook.status)
    reason: str = ""  # the Valid condition's reason when invalid (see QuotaBook.invalid_reason)


def _format(resource: str, amount: Nanos, hard: Quantity | int) -> str:
    if isinstance(hard, Quantity):
        return str(Quantity.from_nanos(amount, hard.format))
    return str(amount)


def _results_charges(
    claim: CompiledClaim, results: Iterable[tuple[str, DeviceId, Mapping[str, Nanos] | None, bool]]
) -> tuple[Charge, ...]:
    classes: dict[str, str] = {}
    for request in claim.requests:
        if request.exactly is not None:
            classes[request.name] = request.exactly.class_name
        for sub in request.first_available:
            classes[f"{request.name}/{sub.name}"] = sub.class_name
    return tuple(
        Charge(classes.get(name, ""), device, consumed)
        for name, device, consumed, admin in results
        if not admin
    )


def status_charges(claim: CompiledClaim, obj: Any) -> tuple[Charge, ...]:
    """What a claim's status.allocation charges."""
    allocation = (as_dict(obj).get("status") or {}).get("allocation") or {}
    items = []
    for result in (allocation.get("devices") or {}).get("results") or ():
        driver = str(result.get("driver", ""))
        consumed = result.get("consumedCapacity")
        items.append(
            (
                str(result.get("request", "")),
                (driver, str(result.get("pool", "")), str(result.get("device", ""))),
                {qualified(k, driver): to_nanos(v) for k, v in consumed.items()}
                if consumed and result.get("shareID")
                else None,
                bool(result.get("adminAccess")),
            )
        )
    return _results_charges(claim, items)


def allocation_charges(allocation: ClaimAllocation) -> tuple[Charge, ...]:
    """What an allocation the operator is writing charges (its results know their class)."""
    return tuple(
        Charge(d.device_class, d.device_id, d.consumed_qualified if d.share_id else None)
        for d in allocation.devices
        if not d.admin_access
    )


class LazyCharges:
    """A claim's charges, worked out only when a quota of its namespace asks (claims of
    namespaces without quotas, the common case, are never compiled for it).

    It also keeps what the claim contributes to each quota, as the book last counted it:
    a claim is counted when it is assumed, when its write is confirmed and when it is
    released, and selectors and capacities need not be evaluated again each time."""

    __slots__ = ("_charges", "_make", "contributions")

    def __init__(self, make: Callable[[], tuple[Charge, ...]]) -> None:
        self._make: Callable[[], tuple[Charge, ...]] | None = make
        self._charges: tuple[Charge, ...] = ()
        # quota ref -> (the quota as compiled, the book's device generation, usage)
        self.contributions: dict[str, tuple[CompiledQuota, int, Usage]] = {}

    def get(self) -> tuple[Charge, ...]:
        if self._make is not None:
            self._charges, self._make = self._make(), None
        return self._charges


class QuotaBook:
    """Every quota and every claim's charges; usage per quota, kept current incrementally.

    ``devices`` finds a device by id (for its capacity and the selectors); a device no
    slice publishes any more still counts as a device, with no capacity.
    """

    def __init__(
        self, evaluator: SelectorEvaluator, devices: Callable[[DeviceId], CompiledDevice | None]
    ) -> None:
        self.evaluator = evaluator
        self.devices = devices
        self.quotas: dict[str, dict[str, CompiledQuota]] = {}  # namespace -> name -> quota
        self._confirmed: dict[str, LazyCharges] = {}  # claim key -> charges
        self._assumed: dict[str, LazyCharges] = {}
        # Claim key -> (confirmed, assumed, the two counted together), while both exist.
        self._both: dict[str, tuple[LazyCharges, LazyCharges, LazyCharges]] = {}
        self._by_namespace: dict[str, dict[str, LazyCharges]] = {}  # effective
        self._used: dict[str, Usage] = {}  # quota ref -> usage (absent: recompute)
        self.classes: Callable[[str], object | None] = lambda _name: None
        self.version = 0
        # Bumped when devices change: contributions a claim keeps from before are stale.
        self._device_generation = 0
        self._blocking: dict[str, tuple[CompiledQuota, bool]] = {}  # quota ref -> (quota, blocks)
        # A device's capacities by qualified name, as capacity_of reads them (per device
        # generation: devices_changed drops them).
        self._published: dict[DeviceId, dict[str, tuple[str, Any]]] = {}

    # --- feeding ------------------------------------------------------------------------

    def upsert_quota(self, obj: Any) -> CompiledQuota:
        quota = obj if isinstance(obj, CompiledQuota) else compile_quota(obj)
        quotas = self.quotas.get(quota.namespace)
        if not quotas:
            quotas = self.quotas[quota.namespace] = {}
            self._gather(quota.namespace)
        quotas[quota.name] = quota
        self._used.pop(quota.ref, None)
        self.version += 1
        return quota

    def remove_quota(self, namespace: str, name: str) -> None:
        quotas = self.quotas.get(namespace, {})
        if quotas.pop(name, None) is not None:
            self._used.pop(f"{namespace}/{name}", None)
            self.version += 1
        if not quotas:
            self.quotas.pop(namespace, None)
            self._by_namespace.pop(namespace, None)

    def _gather(self, namespace: str) -> None:
        """The claims of a namespace that gets its first quota, from the tables: the book
        keeps claims by namespace only where a quota counts them (see ``_set``)."""
        claims: dict[str, LazyCharges] = {}
        for key in (*self._confirmed, *self._assumed):
            if key.partition("/")[0] == namespace:
                charges = self._effective(key)
                if charges is not None:
                    claims[key] = charges
        if claims:
            self._by_namespace[namespace] = claims
        else:
            self._by_namespace.pop(namespace, None)

    def _effective(self, key: str) -> LazyCharges | None:
        """What a claim is counted for: its watched allocation and the one being written,
        both while both exist (the watch may still show the devices it held before)."""
        confirmed, assumed = self._confirmed.get(key), self._assumed.get(key)
        if confirmed is None or assumed is None or confirmed is assumed:
            self._both.pop(key, None)
            return confirmed or assumed
        both = self._both.get(key)
        if both is None or both[0] is not confirmed or both[1] is not assumed:
            combined = LazyCharges(lambda: (*confirmed.get(), *assumed.get()))
            both = self._both[key] = (confirmed, assumed, combined)
        return both[2]

    def devices_changed(self) -> None:
        """Capacities and selector results may differ: recompute usage when next asked."""
        self._used.clear()
        self._published.clear()
        self._device_generation += 1
        self.version += 1

    def confirm(self, key: str, charges: LazyCharges | None) -> None:
        """The claim's allocation as the watch shows it (None: not allocated, or gone). An
        assumption of the claim stays until its owner ends it (``assume(key, None)``): the
        watch may show an older allocation than the one being written."""
        self._set(self._confirmed, key, charges)

    def assume(self, key: str, charges: LazyCharges | None) -> None:
        """An allocation being written (None: released, the write failed)."""
        self._set(self._assumed, key, charges)

    def _set(self, table: dict[str, LazyCharges], key: str, charges: LazyCharges | None) -> None:
        if charges is None and key not in table:
            return  # nothing to forget
        namespace = key.partition("/")[0]
        if namespace not in self.quotas:
            # No quota counts the claim (most claims, twice per pod): the tables are all
            # there is to keep, and a first quota there gathers from them.
            if charges is not None:
                table[key] = charges
            else:
                table.pop(key, None)
            return
        before = self._effective(key)
        if charges is not None:
            table[key] = charges
        else:
            table.pop(key, None)
        after = self._effective(key)
        if before is after:
            return
        claims = self._by_namespace.setdefault(namespace, {})
        if after is not None:
            claims[key] = after
        else:
            claims.pop(key, None)
            if not claims:
                del self._by_namespace[namespace]
        for quota in self.quotas.get(namespace, {}).values():
            used = self._used.get(quota.ref)
            if used is not None:
                if before is not None:
                    used.add(self.contribution(quota, before), -1)
                if after is not None:
                    used.add(self.contribution(quota, after))
        self.version += 1

    # --- counting -----------------------------------------------------------------------

    def counts(self, quota: CompiledQuota, device_id: DeviceId) -> bool:
        """Whether the quota counts a device of its class (its selectors pass).

        A selector that fails on a device counts it (a quota errs on the side of limiting);
        a selector that does not compile makes the quota invalid (see ``status``).
        """
        if not quota.selectors:
            return True
        device = self.devices(device_id)
        if device is None:
            return True
        for expression in quota.selectors:
            try:
                if not self.evaluator.matches(expression, device):
                    return False
            except (SelectorCompileError, SelectorRuntimeError):
                return True
        return True

    def capacity_of(
        self, quota: CompiledQuota, device_id: DeviceId, consumed: Mapping[str, Nanos] | None
    ) -> dict[str, Nanos]:
        """The limited capacities a device result takes: a share's consumption, or the
        whole device's published capacity."""
        if not quota.capacity:
            return {}
        driver = device_id[0]
        if consumed is not None:
            return {name: consumed.get(qualified(name, driver), 0) for name, _ in quota.capacity}
        published = self._published.get(device_id)
        if published is None:
            device = self.devices(device_id)
            published = device_capacity(device) if device is not None else {}
            self._published[device_id] = published
        out = {}
        for name, _ in quota.capacity:
            entry = published.get(qualified(name, driver))
            out[name] = entry[1].value if entry is not None else 0
        return out

    def _contribution(self, quota: CompiledQuota, charges: Sequence[Charge]) -> Usage:
        usage = Usage()
        for charge in charges:
            if charge.class_name != quota.class_name or not self.counts(quota, charge.device):
                continue
            usage.devices += 1
            for name, amount in self.capacity_of(quota, charge.device, charge.consumed).items():
                usage.capacity[name] = usage.capacity.get(name, 0) + amount
        usage.claims = 1 if usage.devices else 0
        return usage

    def contribution(self, quota: CompiledQuota, charges: LazyCharges) -> Usage:
        """What one claim adds to a quota's usage (kept on the claim's charges; callers
        must not change it)."""
        kept = charges.contributions.get(quota.ref)
        if kept is not None and kept[0] is quota and kept[1] == self._device_generation:
            return kept[2]
        usage = self._contribution(quota, charges.get())
        charges.contributions[quota.ref] = (quota, self._device_generation, usage)
        return usage

    def claim_usage(self, quota: CompiledQuota, key: str) -> Usage:
        """What the claim ``key`` counts for in the quota now (nothing when it is not
        charged). Callers must not change it."""
        charges = self._effective(key)
        return self.contribution(quota, charges) if charges is not None else Usage()

    def used(self, quota: CompiledQuota) -> Usage:
        used = self._used.get(quota.ref)
        if used is None:
            used = Usage()
            for charges in self._by_namespace.get(quota.namespace, {}).values():
                used.add(self.contribution(quota, charges))
            self._used[quota.ref] = used
        return used

    def invalid_reason(self, quota: CompiledQuota) -> tuple[str, bool, str] | None:
        """(why the quota is invalid, whether it blocks, the condition's reason), or None
        when it is valid.

        A selector that does not compile blocks what the quota would limit (its class, in
        its namespace): the quota cannot say which devices it counts, and letting
        everything through would silently lift a limit someone set; so does a capacity name
        that is not one (the CRD cannot check map keys). An unknown class
        blocks nothing: no claim can be allocated devices of a class that does not exist.
        """
        for i, expression in enumerate(quota.selectors):
            error = self.evaluator.compile_error(expression)
            if error is not None:
                return f"selector #{i}: CEL compile error: {error}", True, "InvalidSelector"
        for name, _ in quota.capacity:
            if len(name) > QUALIFIED_NAME_MAX_LENGTH or not _QUALIFIED_NAME.match(name):
                return (
                    f'capacity name "{name}" is not a capacity name (an optional DNS '
                    "domain and /, then a C identifier of at most 32 characters)",
                    True,
                    "InvalidCapacityName",
                )
        if self.classes(quota.class_name) is None:
            return f'deviceclass "{quota.class_name}" not found', False, "UnknownDeviceClass"
        return None

    def status(self, quota: CompiledQuota) -> QuotaStatus:
        invalid = self.invalid_reason(quota)
        used = self.used(quota)
        copy = Usage(used.devices, used.claims, dict(used.capacity))
        if invalid is None:
            return QuotaStatus(copy, None, False)
        return QuotaStatus(copy, *invalid)

    def all_quotas(self) -> list[CompiledQuota]:
        return [q for ns in sorted(self.quotas) for _, q in sorted(self.quotas[ns].items())]

    # --- the search's view --------------------------------------------------------------

    def tally(self, claims: Sequence[CompiledClaim]) -> QuotaTally | None:
        """A check for one search, or None when no quota applies to these claims."""
        quotas = self.quotas
        if not quotas or not any(c.namespace in quotas for c in claims):
            return None
        if self._cannot_refuse(claims):
            return None
        return QuotaTally(self, claims)

    def _cannot_refuse(self, claims: Sequence[CompiledClaim]) -> bool:
        """Whether no quota can refuse anything these claims could take: its usage plus
        the most they could add stays within every limit. Then the search need not check
        device by device, which is the common case of a quota far from its limits.

        The most a claim adds to a class: per request the largest count of its
        alternatives of that class (only one is chosen); an ``All`` request and capacity
        limits have no cheap bound, so a quota with either is checked device by device.
        """
        bounds: dict[tuple[str, str], list[int]] = {}  # (namespace, class) -> [devices, claims]
        for claim in claims:
            if claim.namespace not in self.quotas:
                continue
            most: dict[str, int] = {}
            for request in claim.requests:
                largest: dict[str, int] = {}
                for alternative in (
                    (request.exactly,) if request.exactly is not None else request.first_available
                ):
                    if alternative.admin_access:
                        continue
                    if alternative.mode != "ExactCount":
                        return False
                    count = alternative.count
                    if count > largest.get(alternative.class_name, 0):
                        largest[alternative.class_name] = count
                for class_name, count in largest.items():
                    most[class_name] = most.get(class_name, 0) + count
            for class_name, count in most.items():
                bound = bounds.setdefault((claim.namespace, class_name), [0, 0])
                bound[0] += count
                bound[1] += 1
        for (namespace, class_name), (devices, claim_count) in bounds.items():
            for quota in self.quotas[namespace].values():
                if quota.class_name != class_name:
                    continue
                if quota.capacity or self.blocks(quota):
                    return False
                used = self.used(quota)
                if quota.devices is not None and used.devices + devices > quota.devices:
                    return False
                if quota.claims is not None and used.claims + claim_count > quota.claims:
                    return False
        return True

    def blocks(self, quota: CompiledQuota) -> bool:
        """Whether the quota is invalid in a way that holds back what it limits (its
        selectors and names, which do not change while the quota does not)."""
        kept = self._blocking.get(quota.ref)
        if kept is None or kept[0] is not quota:
            invalid = self.invalid_reason(quota)
            kept = self._blocking[quota.ref] = (quota, invalid is not None and invalid[1])
        return kept[1]


@dataclass(slots=True)
class _Taken:
    quota: CompiledQuota
    ci: int
    usage: Usage


class QuotaTally:
    """The quotas of one search: what it has tentatively taken, on top of the book."""

    def __init__(self, book: QuotaBook, claims: Sequence[CompiledClaim]) -> None:
        self.book = book
        self.claims = claims
        self.pending: dict[str, Usage] = {}  # quota ref -> taken by this search
        self.per_claim: dict[tuple[str, int], Usage] = {}
        self.stack: list[list[_Taken]] = []
        self.refusal: Refusal | str | None = None  # the first refusal, for the reason
        self._applicable: dict[tuple[int, str], tuple[CompiledQuota, ...]] = {}

    def _quotas(self, ci: int, class_name: str) -> tuple[CompiledQuota, ...]:
        key = (ci, class_name)
        found = self._applicable.get(key)
        if found is None:
            namespace = self.claims[ci].namespace
            found = tuple(
                q
                for q in self.book.quotas.get(namespace, {}).values()
                if q.class_name == class_name
            )
            self._applicable[key] = found
        return found

    def take(
        self, ci: int, class_name: str, device: CompiledDevice, consumed: Mapping[str, Nanos] | None
    ) -> bool:
        """Whether the device may be taken for claim ``ci``; if so it is counted until
        ``give_back``. Calls nest: each successful take is undone by one give_back."""
        quotas = self._quotas(ci, class_name)
        if not quotas:
            self.stack.append([])
            return True
        taken: list[_Taken] = []
        book = self.book
        for quota in quotas:
            if quota.selectors and not book.counts(quota, device.id):
                continue
            ref = quota.ref
            if book.blocks(quota):
                if self.refusal is None:
                    invalid = book.invalid_reason(quota)
                    self.refusal = (
                        f"DeviceQuota {quota.ref} is invalid ({invalid[0] if invalid else ''}): "
                        "allocations it limits wait until it is fixed"
                    )
                return False
            mine = self.per_claim.get((ref, ci))
            add = Usage(
                1,
                0 if mine is not None and mine.devices else 1,
                book.capacity_of(quota, device.id, consumed) if quota.capacity else {},
            )
            used = book.used(quota)
            pending = self.pending.get(ref)
            for resource, limit, hard in quota.limits:
                extra = add.amount(resource)
                if not extra:
                    continue
                claimed = mine.amount(resource) if mine else 0
                others = (pending.amount(resource) if pending else 0) - claimed
                if used.amount(resource) + others + claimed + extra > limit:
                    if self.refusal is None:
                        self.refusal = Refusal(
                            quota.ref,
                            resource,
                            _format(resource, used.amount(resource) + others, hard),
                            _format(resource, limit, hard),
                            _format(resource, claimed + extra, hard),
                        )
                    return False
            taken.append(_Taken(quota, ci, add))
        for item in taken:
            self.pending.setdefault(item.quota.ref, Usage()).add(item.usage)
            self.per_claim.setdefault((item.quota.ref, ci), Usage()).add(item.usage)
        self.stack.append(taken)
        return True

    def give_back(self) -> None:
        for item in self.stack.pop():
            self.pending[item.quota.ref].add(item.usage, -1)
            self.per_claim[(item.quota.ref, item.ci)].add(item.usage, -1)
