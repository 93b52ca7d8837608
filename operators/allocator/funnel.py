"""Why claims do not fit: a funnel per node and request, and short lines.

For each node and each request (each subrequest of a firstAvailable
request), devices are counted stage by stage: reachable and matching the
class, passing the request's selectors, free, usable by the node's kubelet
(skipNodeOperations), tolerated (taints), sharing a compatibility group with
the devices allocated on their counter sets, and with enough capacity and
counters left. The first stage that drops below what the
request wants is the reason. Nodes with the same reason are grouped, so a
500-node cluster gives one aggregate line and a few detail lines.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from operators.allocator import capacity as cap
from operators.allocator.allocated import AllocatedDevices
from operators.allocator.compatibility import Common, allocated_common, groups_of
from operators.allocator.compiled import (
    CompiledClaim,
    CompiledClass,
    CompiledDevice,
    CompiledRequest,
    DeviceId,
    Taint,
)
from operators.allocator.features import Features
from operators.allocator.nodes import OPTIONAL_NODE_OPERATIONS, NodeInfo
from operators.allocator.pools import Pool
from operators.allocator.quantities import Nanos
from operators.allocator.selectors import (
    SelectorCompileError,
    SelectorEvaluator,
    SelectorRuntimeError,
)

STAGES = ("in_class", "selected", "free", "operable", "tolerated", "compatible", "fitting")


@dataclass(frozen=True, slots=True)
class RequestFunnel:
    """Device counts for one request on one node, stage by stage."""

    claim: str
    request: str  # "req" or "req/sub"
    class_name: str
    wanted: int | None  # None: allocationMode All (at least one)
    in_class: int
    selected: int
    free: int
    operable: int  # free, and not skipping node operations the node cannot do without
    tolerated: int
    compatible: int  # compatibility groups (counts as tolerated where no pool has any)
    fitting: int
    has_selectors: bool = False
    cel_error: str | None = None
    missing_class: bool = False

    @property
    def needed(self) -> int:
        return 1 if self.wanted is None else self.wanted

    def blocking_stage(self) -> str | None:
        """The first stage with fewer devices than wanted, or None."""
        if self.missing_class:
            return "in_class"
        for stage in STAGES:
            if getattr(self, stage) < self.needed:
                return stage
        return None

    def summary(self) -> str:
        """Short reason, equal for nodes that fail the same way (for grouping)."""
        stage = self.blocking_stage()
        cls, need = f'class "{self.class_name}"', self.needed
        if self.missing_class:
            return f'device class "{self.class_name}" does not exist'
        if self.cel_error and getattr(self, stage or "fitting") == 0:
            return f"CEL error: {self.cel_error}"
        if stage == "in_class":
            return (
                f"no device of {cls}"
                if self.in_class == 0
                else f"not enough devices of {cls} (need {need})"
            )
        if stage == "selected":
            return f'no device of {cls} passes request "{self.request}" selectors (need {need})'
        if stage == "free":
            return (
                f"no free device of {cls} (need {need})"
                if self.free == 0
                else f"not enough free devices of {cls} (need {need})"
            )
        if stage == "operable":
            return (
                f"devices of {cls} skip node operations, which needs the "
                f"DRAOptionalNodeOperations gate and a node declaring it (need {need})"
            )
        if stage == "tolerated":
            return f"devices of {cls} have untolerated taints (need {need})"
        if stage == "compatible":
            return (
                f"devices of {cls} share no compatibility group with the devices allocated "
                f"on their counter sets (need {need})"
            )
        if stage == "fitting":
            return f"devices of {cls} lack capacity or counters (need {need})"
        return (
            "devices fit one by one but not together (constraints, or requests competing for them)"
        )

    def line(self) -> str:
        """e.g. 'request "gpu": 8 devices match class "a100", 1 free, 2 wanted'."""
        if self.missing_class:
            return f'request "{self.request}": device class "{self.class_name}" does not exist'
        parts = [f'{self.in_class} devices match class "{self.class_name}"']
        if self.has_selectors:
            parts.append(f"{self.selected} pass the request's selectors")
        parts.append(f"{self.free} free")
        if self.operable != self.free:
            parts.append(f"{self.operable} not skipping node operations the node lacks")
        if self.tolerated != self.operable:
            parts.append(f"{self.tolerated} tolerated")
        if self.compatible != self.tolerated:
            parts.append(f"{self.compatible} compatible with the devices allocated beside them")
        if self.fitting != self.compatible:
            parts.append(f"{self.fitting} with capacity and counters left")
        parts.append("all wanted" if self.wanted is None else f"{self.wanted} wanted")
        text = f'request "{self.request}": ' + ", ".join(parts)
        if self.cel_error:
            text += f" (CEL error: {self.cel_error})"
        return text


@dataclass(frozen=True, slots=True)
class NodeReason:
    node: str
    summary: str
    requests: tuple[RequestFunnel, ...]
    error: str | None = None  # a node-level error (invalid pools, search budget, ...)

    def line(self) -> str:
        if self.error:
            return f"{self.node}: {self.error}"
        blocking = [r for r in self.requests if r.blocking_stage() is not None]
        if blocking:
            return f"{self.node}: {blocking[0].line()}"
        return f"{self.node}: {self.summary}"


@dataclass(frozen=True, slots=True)
class Explanation:
    """Why no node could take the claims."""

    nodes_total: int
    reasons: tuple[NodeReason, ...]
    fatal_error: str | None = None

    def aggregate_line(self) -> str:
        if self.fatal_error:
            return f"0/{self.nodes_total} nodes: {self.fatal_error}"
        if not self.reasons:
            return f"0/{self.nodes_total} nodes are available"
        counts = Counter(r.summary for r in self.reasons)
        parts = [
            f"{n} {summary}"
            for summary, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
        ]
        return f"0/{self.nodes_total} nodes: " + ", ".join(parts)

    def lines(self, per_group: int = 3) -> list[str]:
        """The aggregate line, then one detail line per group of identical nodes."""
        out = [self.aggregate_line()]
        groups: dict[str, list[NodeReason]] = {}
        for reason in self.reasons:
            groups.setdefault(reason.summary, []).append(reason)
        for members in sorted(groups.values(), key=lambda m: (-len(m), m[0].node)):
            names = ", ".join(r.node for r in members[:per_group])
            more = f" (+{len(members) - per_group} more)" if len(members) > per_group else ""
            detail = members[0].line().split(": ", 1)[1]
            out.append(f"{names}{more}: {detail}")
        return out

    def __str__(self) -> str:
        return "\n".join(self.lines())


class Explainer:
    """Computes funnels; shares the state's caches (selector results, pools)."""

    def __init__(
        self,
        features: Features,
        evaluator: SelectorEvaluator,
        classes: Callable[[str], CompiledClass | None],
        allocated: AllocatedDevices,
        extra_taints: Callable[[DeviceId], tuple[Taint, ...]],
    ) -> None:
        self.features = features
        self.evaluator = evaluator
        self.classes = classes
        self.allocated = allocated
        self.extra_taints = extra_taints

    def node_reason(
        self,
        claims: Sequence[CompiledClaim],
        node: NodeInfo,
        pools: Sequence[Pool],
        error: str | None = None,
    ) -> NodeReason:
        funnels = []
        for claim in claims:
            for request in claim.requests:
                variants = request.first_available or (
                    (request.exactly,) if request.exactly else ()
                )
                options = [self.funnel(claim, r, node, pools) for r in variants if r is not None]
                if not options:
                    continue
                # A firstAvailable request is blocked only if every subrequest is.
                passing = [f for f in options if f.blocking_stage() is None]
                funnels.extend(passing[:1] if passing else options)
        blocked = [f for f in funnels if f.blocking_stage() is not None]
        shortfall = _class_shortfall(funnels)
        if error:
            summary = error
        elif blocked:
            summary = blocked[0].summary()
        elif shortfall:
            summary = shortfall
        elif any(pool.compatibility_groups for pool in pools):
            # Devices taken together must share compatibility groups, which no single
            # device's funnel shows.
            summary = (
                "devices fit one by one but not together (constraints, compatibility groups, "
                "or requests competing for them)"
            )
        else:
            summary = (
                "devices fit one by one but not together (constraints, or requests competing "
                "for them)"
            )
        return NodeReason(node.name, summary, tuple(funnels), error)

    def funnel(
        self, claim: CompiledClaim, request: CompiledRequest, node: NodeInfo, pools: Sequence[Pool]
    ) -> RequestFunnel:
        wanted = request.count if request.mode == "ExactCount" else None
        cls = self.classes(request.class_name)
        if cls is None:
            return RequestFunnel(
                claim.ref,
                request.full_name,
                request.class_name,
                wanted,
                in_class=0,
                selected=0,
                free=0,
                operable=0,
                tolerated=0,
                compatible=0,
                fitting=0,
                missing_class=True,
            )
        counts = dict.fromkeys(STAGES, 0)
        error: str | None = None
        for pool in pools:
            if not pool.usable:
                continue
            available = self._available_counters(pool)
            common = allocated_common(pool, self.allocated) if pool.compatibility_groups else None
            for slice_ in pool.slices:
                for device in slice_.devices:
                    stage, problem = self._stage(device, cls, request, node, available, common)
                    error = error or problem
                    for name in STAGES[: STAGES.index(stage)] if stage else STAGES:
                        counts[name] += 1
        return RequestFunnel(
            claim.ref,
            request.full_name,
            cls.name,
            wanted,
            in_class=counts["in_class"],
            selected=counts["selected"],
            free=counts["free"],
            operable=counts["operable"],
            tolerated=counts["tolerated"],
            compatible=counts["compatible"],
            fitting=counts["fitting"],
            has_selectors=bool(request.selectors),
            cel_error=error,
        )

    def _stage(
        self,
        device: CompiledDevice,
        cls: CompiledClass,
        request: CompiledRequest,
        node: NodeInfo,
        available: Mapping[str, Mapping[str, Nanos]],
        common: Mapping[str, Common] | None = None,
    ) -> tuple[str | None, str | None]:
        """The first stage the device fails (None if it passes all), and a CEL error.

        ``common``: what the allocated devices on each counter set of the device's pool have
        in common, when the pool has compatibility groups."""
        if device.binding_conditions and not self.features.device_binding_conditions:
            return "in_class", None
        if device.slice_per_device and not device.reachable_from(node):
            return "in_class", None
        for stage, selectors in (("in_class", cls.selectors), ("selected", request.selectors)):
            for selector in selectors:
                if selector.expression is None:
                    return stage, "unsupported selector type"
                try:
                    if not self.evaluator.matches(selector.expression, device):
                        return stage, None
                except (SelectorCompileError, SelectorRuntimeError) as err:
                    return stage, str(err)
        if not request.admin_access and self.allocated.in_use(device.id):
            return "free", None
        if device.skip_node_operations and not (
            self.features.optional_node_operations
            and OPTIONAL_NODE_OPERATIONS in node.declared_features
        ):
            return "operable", None
        if self.features.device_taints:
            for taint in (*device.taints, *self.extra_taints(device.id)):
                if taint.effect in ("NoSchedule", "NoExecute") and not any(
                    t.tolerates(taint) for t in request.tolerations
                ):
                    return "tolerated", None
        if common is not None and device.consumes_counters and not self._shared_more(device):
            for i, (set_name, _) in enumerate(device.consumes_counters):
                found = common.get(set_name)
                if found is not None and not found.admits(groups_of(device, i)):
                    return "compatible", None
        if self.features.consumable_capacity and not cap.fits(
            request.capacity_requests,
            device,
            self.allocated.capacity_in_use(device.id),
            None,
            self.features.fractional_capacity_range,
        ):
            return "fitting", None
        if device.consumes_counters:
            if not self.features.partitionable_devices:
                return "fitting", None
            for set_name, counters in device.consumes_counters:
                left = available.get(set_name, {})
                if any(left.get(name, 0) < amount for name, amount in counters.items()):
                    return "fitting", None
        return None, None

    def _shared_more(self, device: CompiledDevice) -> bool:
        """One more share of a device in use: its groups are among the allocated ones
        already, and the search does not check them again (nor its counters)."""
        return (
            self.features.consumable_capacity
            and device.allow_multiple
            and self.allocated.capacity_in_use(device.id) is not None
        )

    def _available_counters(self, pool: Pool) -> dict[str, dict[str, Nanos]]:
        available = {name: dict(counters) for name, counters in pool.counter_sets.items()}
        if not available:
            return available
        for slice_ in (*pool.slices, *pool.slices_elsewhere):
            for device in slice_.devices:
                if device.consumes_counters and self.allocated.is_allocated(device.id):
                    for set_name, counters in device.consumes_counters:
                        target = available.get(set_name, {})
                        for name, amount in counters.items():
                            if name in target:
                                target[name] -= amount
        return available


def _class_shortfall(funnels: Sequence[RequestFunnel]) -> str | None:
    """Requests of one class that fit one by one but together want more devices than exist."""
    wanted: dict[str, int] = {}
    fitting: dict[str, int] = {}
    for funnel in funnels:
        if funnel.wanted is not None:
            wanted[funnel.class_name] = wanted.get(funnel.class_name, 0) + funnel.wanted
            fitting[funnel.class_name] = max(fitting.get(funnel.class_name, 0), funnel.fitting)
    for name, need in wanted.items():
        if fitting[name] < need:
            return f'not enough devices of class "{name}" for all requests together (need {need}, {fitting[name]} usable)'
    return None


def group_nodes(reasons: Iterable[NodeReason]) -> dict[str, list[str]]:
    """Summary -> node names (identical nodes grouped)."""
    out: dict[str, list[str]] = {}
    for reason in reasons:
        out.setdefault(reason.summary, []).append(reason.node)
    return out
