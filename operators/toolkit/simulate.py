"""What-if scenarios on a snapshot: add N pods like a template, taint a device.

Every run first settles the snapshot (pods that are pending get placed, the higher priority
first and then in a stable order, as the operator would), then applies the scenario and
reports what fits where, what is evicted, and what stays pending with the allocator's reason.
A pod that fits nowhere is told what priority preemption would do for it (which lower-priority
pods it would preempt, or why none); with ``preemption`` it is done: the victims go, the pod
takes its place, and the victims come back as pending pods (as their controllers would make
them again). ``fits`` is False when a pod
the scenario is about (added, or evicted and recreated) finds no node: the CLI turns that
into a non-zero exit status.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from operators.allocator.compiled import Taint, Toleration
from operators.allocator.features import Features
from operators.api.annotations import GANG_SIZE_MAX, GangTopology
from operators.api.podgroup import gang_too_large
from operators.cache.core import Pod
from operators.toolkit.cluster import Cluster, DeviceLine, Placement
from operators.toolkit.gangs import gang_key, place_gang
from operators.toolkit.pods import copy_of, made_up
from operators.toolkit.preempt import in_play, preemption_for
from operators.toolkit.snapshot import Snapshot
from operators.toolkit.usererrors import ToolkitError

ProgressHook = Callable[[int], None]


@dataclass(frozen=True)
class AddPods:
    """Add ``count`` pods whose claims come from a template or copy an existing pod's."""

    count: int
    namespace: str
    template: str | None = None
    """A ResourceClaimTemplate name: each pod gets one claim from it."""
    like_pod: str | None = None
    """A pod name: each new pod copies its claim entries and node constraints."""

    def describe(self) -> str:
        what = f"template {self.template}" if self.template else f"pod {self.like_pod}"
        return f"add {self.count} pod(s) of {what} in namespace {self.namespace}"


@dataclass(frozen=True)
class AddGang:
    """Add a gang of ``count`` pods of a template, placed all together or not at all."""

    count: int
    namespace: str
    template: str
    size: int | None = None
    """Members that must be placed at once (default: all ``count``)."""
    topology: GangTopology | None = None
    """What all placed members share one value of: a node label or a device attribute."""

    def describe(self) -> str:
        need = self.size or self.count
        return (
            f"add a gang of {self.count} pod(s) of template {self.template} in namespace "
            f"{self.namespace} (at least {need} placed together)"
        )


@dataclass(frozen=True)
class TaintDevice:
    """Taint one device (``driver/pool/device``), as a DeviceTaintRule would."""

    device: str
    effect: str = "NoExecute"
    key: str = "dralloc.dev/simulated"
    value: str = ""

    def describe(self) -> str:
        return f"taint device {self.device} with {self.key}:{self.effect}"

    @property
    def parts(self) -> tuple[str, str, str]:
        driver, _, rest = self.device.partition("/")
        pool, _, name = rest.rpartition("/")
        if not driver or not pool or not name:
            raise ToolkitError(f"device {self.device!r}: expected DRIVER/POOL/DEVICE")
        return driver, pool, name


@dataclass(frozen=True)
class AddQuota:
    """Add (or replace) a DeviceQuota, as if it had been applied before what follows."""

    body: dict[str, object]

    def describe(self) -> str:
        meta = self.body.get("metadata")
        name = meta.get("name") if isinstance(meta, dict) else None
        namespace = meta.get("namespace") if isinstance(meta, dict) else None
        return f"add DeviceQuota {namespace or 'default'}/{name}"


Scenario = AddPods | AddGang | TaintDevice | AddQuota


@dataclass(frozen=True)
class PodOutcome:
    pod: str
    origin: str
    """``pending`` (in the snapshot), ``added`` or ``evicted`` (recreated after eviction)."""
    node: str | None
    devices: tuple[DeviceLine, ...] = ()
    reason: str = ""


@dataclass(frozen=True)
class Eviction:
    pod: str
    claim: str
    device: str
    taint: str
    budget: str = ""
    """The PodDisruptionBudget that would refuse it with eviction_mode=evict ("" = none)."""


@dataclass(frozen=True)
class Preemption:
    """Lower-priority pods preempted for a pod's devices."""

    pod: str
    priority: int
    node: str
    victims: tuple[str, ...]
    """``namespace/name`` of each victim, the most important first."""
    victim_priorities: tuple[int, ...]
    budget_violations: int = 0
    """How many of the evictions a PodDisruptionBudget does not allow (upstream preempts
    them all the same when no node needs fewer)."""


@dataclass(frozen=True)
class SimulationReport:
    scenario: str
    snapshot: str
    placed: tuple[PodOutcome, ...]
    pending: tuple[PodOutcome, ...]
    evictions: tuple[Eviction, ...]
    fits: bool
    seconds: float
    notes: tuple[str, ...] = field(default_factory=tuple)
    preemptions: tuple[Preemption, ...] = ()


def simulate(
    snapshot: Snapshot,
    scenarios: list[Scenario],
    *,
    features: Features | None = None,
    policy: str = "binpack",
    device_policy: str = "first-fit",
    progress: ProgressHook | None = None,
    max_gang_size: int = GANG_SIZE_MAX,
    preemption: bool = False,
) -> SimulationReport:
    """``max_gang_size``: the operator's setting; a larger gang is left pending with the
    operator's words, never placed. ``preemption``: the operator's setting; without it, a pod
    that could preempt is only told what it would preempt."""
    started = time.monotonic()
    cluster = Cluster(snapshot, features, policy, device_policy, max_gang_size=max_gang_size)
    tick = progress or (lambda _n: None)
    placed: list[PodOutcome] = []
    pending: list[PodOutcome] = []
    evictions: list[Eviction] = []
    notes: list[str] = []
    if not snapshot.nodes:
        notes.append(
            "the snapshot has no Node objects: nodes are taken from the ResourceSlices, "
            "and pod node selectors and node taints are not checked"
        )

    preemptions: list[Preemption] = []

    def place(pod: Pod, origin: str) -> bool:
        result: Placement = cluster.evaluate(pod)
        reason = result.reason
        if result.node is None:
            reason, victims = _preempt(cluster, pod, result.reason, apply=preemption)
            if victims is not None:
                preemptions.append(victims)
                result = cluster.evaluate(pod)
                reason = result.reason  # (if it still does not fit: why, now)
        if result.node is None:
            pending.append(PodOutcome(pod.ref, origin, None, reason=reason))
        else:
            cluster.commit(pod, result)
            placed.append(PodOutcome(pod.ref, origin, result.node, result.devices))
        tick(1)
        if preemptions and preemptions[-1].pod == pod.ref and victims_pods:
            recreate(list(preemptions[-1].victims))
        return result.node is not None

    victims_pods: dict[str, Pod] = {}

    def recreate(refs: list[str]) -> None:
        """The victims as their controllers make them again: pending, a gang's together."""
        again = [_recreated(p) for p in (victims_pods.pop(r, None) for r in refs) if p]
        together: dict[str, list[Pod]] = {}
        for pod in again:
            key = gang_key(cluster, pod)
            if key is None:
                place(pod, "preempted")
            else:
                together.setdefault(key, []).append(pod)
        for members in together.values():
            place_together(members, len(members), "preempted")

    def _preempt(
        cluster: Cluster, pod: Pod, reason: str, *, apply: bool
    ) -> tuple[str, Preemption | None]:
        """The pending reason, with what preemption would do; with ``apply`` the victims
        are released and the preemption returned."""
        if not in_play(cluster, pod):
            return reason, None
        choice = preemption_for(cluster, pod)
        chosen = choice.victims
        if chosen is None:
            return f"{reason} No preemption: {choice.reason}.", None
        if (node := choice.waits_for_leaving) is not None:
            return (
                f"{reason} Pods on their way out on node {node} free what it needs: it "
                "waits for them, preempting nobody.",
                None,
            )
        refs = tuple(p.ref for p in chosen.pods)
        if not apply:
            return (
                f"{reason} Preemption (off) would preempt {', '.join(refs)} on node {chosen.node}.",
                None,
            )
        for ref in refs:
            victim = cluster.pods.get(ref)
            if victim is not None:
                victims_pods[ref] = victim
            cluster.release_pod(ref)
        record = Preemption(
            pod.ref,
            pod.needs.priority,
            chosen.node,
            refs,
            tuple(p.priority for p in chosen.pods),
            chosen.violations,
        )
        return reason, record

    def place_together(
        pods: list[Pod], need: int, origin: str, topology: GangTopology | None = None
    ) -> bool:
        outcome = place_gang(cluster, pods, need, topology)
        done = {p.pod for p in outcome.placements}
        by_key = {pod.ref: pod for pod in pods}
        for result in outcome.placements:
            cluster.commit(by_key[result.pod], result)
            placed.append(PodOutcome(result.pod, origin, result.node, result.devices))
        for pod in pods:
            if pod.ref not in done:
                reason = outcome.reason or "the gang was placed without this member"
                pending.append(PodOutcome(pod.ref, origin, None, reason=reason))
        tick(len(pods))
        return bool(outcome.placements)

    # 1. Settle: pods of the snapshot that wait for devices (a gang's members together), the
    # higher priority first (a gang by its most important member); at one priority, single
    # pods before gangs, each in name order.
    gangs: dict[str, list[Pod]] = {}
    turns: list[tuple[int, int, str, Pod | None]] = []
    for pod in _waiting_pods(cluster):
        key = gang_key(cluster, pod)
        _, gang_problem = snapshot.gang_of(pod)
        if gang_problem:  # its PodGroup is missing, or dralloc cannot follow it
            pending.append(PodOutcome(pod.ref, "pending", None, reason=gang_problem))
            tick(1)
        elif key is None:
            turns.append((-pod.needs.priority, 0, pod.ref, pod))
        else:
            gangs.setdefault(key, []).append(pod)
    by_first: dict[str, list[Pod]] = {}
    for members in gangs.values():
        first = min(m.ref for m in members)
        by_first[first] = members
        turns.append((-max(m.needs.priority for m in members), 1, first, None))
    for _, _, first, single in sorted(turns, key=lambda t: (t[0], t[1], t[2])):
        if single is not None:
            place(single, "pending")
            continue
        members = by_first[first]
        member_gangs = [g for g in (snapshot.gang_of(m)[0] for m in members) if g is not None]
        largest = max(member_gangs, key=lambda g: g.size)
        size = largest.size
        too_large = gang_too_large(largest, max_gang_size)
        if too_large:
            pending.extend(PodOutcome(m.ref, "pending", None, reason=too_large) for m in members)
            tick(len(members))
            continue
        if any(m.pod_group for m in members):
            # As the operator: kube-scheduler queues a PodGroup's pods as one, so every
            # waiting member is placed, or none.
            size = max(size, len(members))
        topology = next((g.topology for g in member_gangs if g.topology), None)
        place_together(members, size, "pending", topology)
    # With a scenario, only its own pods decide: a pod of the snapshot that cannot be placed
    # anyway (e.g. it asks for more than any node has) says nothing about the what-if.
    fits = True if scenarios else not pending

    # 2. The scenarios, in the order given.
    for scenario in scenarios:
        if isinstance(scenario, AddPods):
            for pod in _new_pods(cluster, scenario):
                fits = place(pod, "added") and fits
        elif isinstance(scenario, AddGang):
            pods = _new_pods(
                cluster, AddPods(scenario.count, scenario.namespace, scenario.template)
            )
            need = scenario.size or scenario.count
            if not 1 <= need <= scenario.count:
                raise ToolkitError(f"the gang size must be from 1 to {scenario.count}")
            if need > max_gang_size:
                raise ToolkitError(
                    f"a gang of {need} is larger than the operator's max_gang_size "
                    f"({max_gang_size}): it would refuse every member"
                )
            fits = place_together(pods, need, "added", scenario.topology) and fits
        elif isinstance(scenario, AddQuota):
            cluster.state.upsert_quota(scenario.body)
        else:
            evicted = _taint(cluster, scenario, evictions)
            for pod in evicted:
                fits = place(_recreated(pod), "evicted") and fits
    refused = sum(1 for e in evictions if e.budget)
    if refused:
        notes.append(
            f"{refused} eviction(s) would be refused by a PodDisruptionBudget with "
            "eviction_mode=evict (the operator retries them until the budget allows); "
            "with eviction_mode=delete (the default) they happen as shown"
        )
    return SimulationReport(
        scenario="; ".join(s.describe() for s in scenarios) or "settle the snapshot",
        snapshot=snapshot.summary(),
        placed=tuple(placed),
        pending=tuple(pending),
        evictions=tuple(evictions),
        fits=fits,
        seconds=round(time.monotonic() - started, 3),
        notes=tuple(notes),
        preemptions=tuple(preemptions),
    )


def work_size(snapshot: Snapshot, scenarios: list[Scenario]) -> int:
    """How many placements a run will try, for the progress bar."""
    waiting = sum(1 for p in snapshot.pods.values() if p.active and p.claims)
    added = sum(s.count for s in scenarios if isinstance(s, AddPods | AddGang))
    return waiting + added


def _waiting_pods(cluster: Cluster) -> list[Pod]:
    pods = [p for p in cluster.pods.values() if p.active and p.claims]
    waiting = [p for p in pods if not cluster.pod_is_allocated(p)]
    return sorted(waiting, key=lambda p: (-p.needs.priority, p.ref))


def _new_pods(cluster: Cluster, scenario: AddPods) -> list[Pod]:
    if scenario.count < 1:
        raise ToolkitError("the number of pods to add must be at least 1")
    if scenario.template:
        key = f"{scenario.namespace}/{scenario.template}"
        if key not in cluster.snapshot.templates:
            known = ", ".join(sorted(cluster.snapshot.templates)) or "none"
            raise ToolkitError(
                f"ResourceClaimTemplate {key} is not in the snapshot (known: {known})"
            )
        base = made_up(
            scenario.namespace,
            scenario.template,
            [{"name": "claim", "resourceClaimTemplateName": scenario.template}],
        )
        stem = scenario.template
    else:
        key = f"{scenario.namespace}/{scenario.like_pod}"
        found = cluster.snapshot.pods.get(key)
        if found is None:
            raise ToolkitError(f"Pod {key} is not in the snapshot")
        if not found.claims:
            raise ToolkitError(f"Pod {key} uses no claims; nothing to simulate")
        base = found
        stem = found.name
    return [copy_of(base, f"{stem}-sim-{index}") for index in range(scenario.count)]


def _taint(cluster: Cluster, scenario: TaintDevice, evictions: list[Eviction]) -> list[Pod]:
    driver, pool, device = scenario.parts
    known = {
        f"{s.spec.driver}/{s.spec.pool.name}/{d.name}"
        for s in cluster.snapshot.resource_slices.values()
        for d in s.spec.devices
    }
    if scenario.device not in known:
        raise ToolkitError(f"device {scenario.device} is not published by any ResourceSlice")
    cluster.state.upsert_taint_rule(
        {
            "metadata": {"name": "dralloc-simulated-taint"},
            "spec": {
                "deviceSelector": {"driver": driver, "pool": pool, "device": device},
                "taint": {"key": scenario.key, "value": scenario.value, "effect": scenario.effect},
            },
        }
    )
    if scenario.effect != "NoExecute":
        return []
    taint = Taint(scenario.key, scenario.value, scenario.effect)
    shown = f"{scenario.key}:{scenario.effect}"
    victims: dict[str, Pod] = {}
    room = {key: budget.allowed for key, budget in cluster.snapshot.budgets.items()}
    for claim_key, allocation in sorted(cluster.allocations.items()):
        for result in (allocation.get("devices") or {}).get("results") or []:
            if (result.get("driver"), result.get("pool"), result.get("device")) != (
                driver,
                pool,
                device,
            ):
                continue
            if _tolerated(result.get("tolerations") or [], taint):
                continue
            for pod_key in sorted(cluster.consumers.get(claim_key, ())):
                pod = cluster.pods.get(pod_key)
                budget = _refusing_budget(cluster, pod, room) if pod_key not in victims else ""
                evictions.append(Eviction(pod_key, claim_key, scenario.device, shown, budget))
                if pod is not None:
                    victims[pod_key] = pod
    for pod_key in victims:
        cluster.release_pod(pod_key)
    return list(victims.values())


def _refusing_budget(cluster: Cluster, pod: Pod | None, room: dict[str, int]) -> str:
    """The first budget covering the pod that has no disruption left (as the Eviction API
    decides); otherwise every covering budget spends one."""
    if pod is None:
        return ""
    labels = pod.labels
    covering = [
        key
        for key, b in sorted(cluster.snapshot.budgets.items())
        if b.covers(pod.namespace, labels)
    ]
    for key in covering:
        if room[key] <= 0:
            return f"PodDisruptionBudget {key}"
    for key in covering:
        room[key] -= 1
    return ""


def _tolerated(tolerations: list[dict[str, object]], taint: Taint) -> bool:
    return any(
        Toleration(
            str(t.get("key") or ""),
            str(t.get("operator") or "Equal"),
            str(t.get("value") or ""),
            str(t.get("effect") or ""),
        ).tolerates(taint)
        for t in tolerations
    )


def _recreated(pod: Pod) -> Pod:
    """The replacement a controller would create: same claims, new generated claims."""
    return copy_of(pod, f"{pod.name}-new", keep_claims=True)
