"""Which lower-priority pods to preempt so that a pod gets its devices: kube-scheduler's
DefaultPreemption (1.37), asked about devices too.

kube-scheduler's preemption does not free DRA devices: its simulation removes the victims but
leaves their claims allocated, so a high-priority pod whose GPU a priority-0 notebook holds
waits for as long as the notebook runs. Here the caller's what-if (:class:`WhatIf`) frees the
victims' devices, their capacity and counters, and their share of the node's resources.

The choice is upstream's:

- Per node, every unit of lower priority is removed; if the pod does not fit even then, the
  node is no candidate. Then the units are reprieved one at a time, the most important first
  (higher priority, then a gang before a pod, a larger gang before a smaller, the earlier
  started before the later), those whose eviction would violate a disruption budget before the
  others: a unit the pod still fits without stays. What is left are the node's victims.
- Across nodes: the fewest budget violations, then the lowest highest-victim priority, the
  lowest sum of priorities, the fewest victims, the latest start of the highest-priority
  victims, and then the first node in the caller's order.

Budgets as upstream weighs them: each candidate pod, the most important first, spends one of
every budget covering it until one goes below zero (a violation); pods without labels, and
budgets with an empty selector, count for nothing; a unit with a violating pod is reprieved
first. The violations charged to a node are those of the victims chosen.

Beyond upstream: on a node with at most :data:`EXACT_UNITS` units, every set of them is weighed
too, in the same order, and the best that fits wins (the greedy reprieve can keep more victims
than needed; with few units the exact answer costs a few searches, fewer as sets that failed
rule out their subsets). Every node is weighed, where upstream samples a share of them.

A unit is one pod, or a gang's every member wherever it runs (a gang is preempted whole, or
not at all), of the priority of its most important member. Equal priority never preempts. A
node where pods on their way out free enough needs no victims at all (``NodeVictims`` with no
units): the caller holds those devices for the pod.
"""

from __future__ import annotations

import dataclasses
import datetime
import itertools
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import Protocol

EXACT_UNITS = 6
"""On a node with at most this many units, every set of them is weighed (2**6 at most)."""
PRIORITY_OFFSET = 2**31
"""Added to each priority before summing, as upstream: negative priorities sum as costs too."""


def started_at(text: str, now: float) -> float:
    """``status.startTime`` as seconds since the epoch (``now`` if the pod has not started,
    or the time is not one: upstream's rule); a time without a zone is UTC."""
    if not text:
        return now
    try:
        moment = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return now
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.UTC)
    return moment.timestamp()


@dataclasses.dataclass(frozen=True)
class VictimPod:
    """A running pod that could be preempted."""

    namespace: str
    name: str
    node: str
    priority: int
    started: float
    """When it started (seconds since the epoch; the caller's now if unknown, as upstream)."""
    labels: Mapping[str, str] = dataclasses.field(default_factory=dict)
    uid: str = ""

    @property
    def ref(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclasses.dataclass(frozen=True)
class Unit:
    """What is preempted at once: one pod, or every member of a gang."""

    key: str
    pods: tuple[VictimPod, ...]
    gang: bool = False

    @property
    def priority(self) -> int:
        return max(pod.priority for pod in self.pods)

    @property
    def started(self) -> float:
        return min(pod.started for pod in self.pods)


class DisruptionBudget(Protocol):
    """A PodDisruptionBudget as preemption weighs it."""

    @property
    def allowed(self) -> int:
        """``status.disruptionsAllowed``."""
        ...

    def covers(self, namespace: str, labels: Mapping[str, str]) -> bool: ...


class WhatIf(Protocol):
    """The caller's view of one node with some units taken away: their devices, capacity and
    counters freed, and their share of the node's resources and ports."""

    def remove(self, unit: Unit) -> None: ...

    def restore(self, unit: Unit) -> None: ...

    def fits(self) -> bool:
        """Whether the preemptor fits the node now (devices and every other filter)."""
        ...


def more_important(unit: Unit) -> tuple[int, int, int, float]:
    """Sort key, most important first: priority, a gang, its size, the earliest start."""
    return (-unit.priority, -int(unit.gang), -len(unit.pods), unit.started)


@dataclasses.dataclass(frozen=True)
class NodeVictims:
    """The units to preempt on one node, most important first."""

    node: str
    units: tuple[Unit, ...]
    violations: int
    """How many of the victims' evictions a disruption budget does not allow."""

    @property
    def pods(self) -> tuple[VictimPod, ...]:
        return tuple(pod for unit in self.units for pod in unit.pods)

    @property
    def highest_priority(self) -> int:
        return max((pod.priority for pod in self.pods), default=-PRIORITY_OFFSET)

    def cost(self) -> tuple[int, int, int, int, float]:
        """Upstream's order of preference, the smallest first."""
        pods = self.pods
        highest = self.highest_priority
        earliest = min((p.started for p in pods if p.priority == highest), default=0.0)
        return (
            self.violations,
            highest,
            sum(p.priority + PRIORITY_OFFSET for p in pods),
            len(pods),
            -earliest,
        )


def violating_pods(units: Iterable[Unit], budgets: Sequence[DisruptionBudget]) -> dict[str, int]:
    """Unit key -> how many of its pods' evictions a budget does not allow, the units taken
    the most important first and sharing the budgets' allowances (upstream's
    FilterVictimsWithPDBViolation: a pod spends one of each covering budget in turn, and is
    violating at the first that goes below zero; a pod without labels spends nothing)."""
    left = [budget.allowed for budget in budgets]
    out: dict[str, int] = {}
    for unit in sorted(units, key=more_important):
        count = 0
        for pod in unit.pods:
            if not pod.labels:
                continue
            for i, budget in enumerate(budgets):
                if budget.covers(pod.namespace, pod.labels):
                    left[i] -= 1
                    if left[i] < 0:
                        count += 1
                        break
        out[unit.key] = count
    return out


def violations(units: Iterable[Unit], budgets: Sequence[DisruptionBudget]) -> int:
    """How many of these units' pods' evictions a budget does not allow, together."""
    return sum(violating_pods(units, budgets).values())


def victims_on_node(
    node: str,
    units: Sequence[Unit],
    what_if: WhatIf,
    budgets: Sequence[DisruptionBudget] = (),
    *,
    exact_units: int = EXACT_UNITS,
) -> NodeVictims | None:
    """The victims on ``node`` among ``units`` (all of lower priority than the preemptor), or
    None if the preemptor does not fit even without all of them. ``what_if`` starts with
    every unit in place and is left so."""
    ordered = sorted(units, key=more_important)
    for unit in ordered:
        what_if.remove(unit)
    if not what_if.fits():
        for unit in ordered:
            what_if.restore(unit)
        return None
    if not ordered:
        return NodeVictims(node, (), 0)  # what is on its way out frees enough
    flagged = violating_pods(ordered, budgets)
    violating = [u for u in ordered if flagged[u.key]]
    kept = [u for u in ordered if not flagged[u.key]]
    victims: list[Unit] = []
    for unit in [*violating, *kept]:
        what_if.restore(unit)
        if not what_if.fits():
            what_if.remove(unit)
            victims.append(unit)
    for unit in victims:
        what_if.restore(unit)
    greedy = _node_victims(node, victims, budgets)
    if len(ordered) > exact_units or not victims:
        return greedy
    return _exact(node, ordered, what_if, budgets, greedy)


def _node_victims(
    node: str, units: Iterable[Unit], budgets: Sequence[DisruptionBudget]
) -> NodeVictims:
    chosen = tuple(sorted(units, key=more_important))
    return NodeVictims(node, chosen, violations(chosen, budgets))


def _exact(
    node: str,
    units: Sequence[Unit],
    what_if: WhatIf,
    budgets: Sequence[DisruptionBudget],
    greedy: NodeVictims,
) -> NodeVictims:
    """The cheapest set of units the preemptor fits without, if cheaper than ``greedy``."""
    candidates = [
        _node_victims(node, subset, budgets)
        for size in range(1, len(units) + 1)
        for subset in itertools.combinations(units, size)
    ]
    best = greedy.cost()
    failed: list[frozenset[str]] = []
    for candidate in sorted(candidates, key=NodeVictims.cost):
        if candidate.cost() >= best:
            break
        keys = frozenset(u.key for u in candidate.units)
        if any(keys <= earlier for earlier in failed):
            continue  # fewer removed than a set that did not make room: no room either
        for unit in candidate.units:
            what_if.remove(unit)
        fits = what_if.fits()
        for unit in candidate.units:
            what_if.restore(unit)
        if fits:
            return candidate
        failed.append(keys)
    return greedy


def pick(candidates: Iterable[NodeVictims]) -> NodeVictims | None:
    """Upstream's choice among the nodes' victims (ties: the first in the given order)."""
    best: NodeVictims | None = None
    for candidate in candidates:
        if best is None or candidate.cost() < best.cost():
            best = candidate
    return best


@dataclasses.dataclass(frozen=True)
class Choice:
    """What preemption comes to for one pod: victims on a node, or why there are none."""

    victims: NodeVictims | None
    reason: str = ""
    """Why nothing is preempted ('' when victims were chosen)."""

    @property
    def waits_for_leaving(self) -> str | None:
        """The node where pods already on their way out free what the pod needs, so that
        it preempts nobody and waits for them (victims chosen, but none); else None."""
        if self.victims is None or self.victims.pods:
            return None
        return self.victims.node


def choose(
    priority: int,
    nodes: Sequence[str],
    units_on: Callable[[str], Sequence[Unit]],
    what_if: Callable[[str], WhatIf],
    budgets: Sequence[DisruptionBudget] = (),
    *,
    exact_units: int = EXACT_UNITS,
    freeing: Collection[str] = frozenset(),
) -> Choice:
    """The victims for a pod of ``priority`` among ``nodes`` (those its other filters allow,
    in the caller's order); ``units_on(node)`` are the units holding something there.
    ``freeing``: nodes where pods on their way out hold devices (the what-if counts them
    free), weighed even with no unit to remove."""
    candidates: list[NodeVictims] = []
    for node in nodes:
        lower = [u for u in units_on(node) if u.priority < priority]
        if not lower and node not in freeing:
            continue
        found = victims_on_node(node, lower, what_if(node), budgets, exact_units=exact_units)
        if found is not None:
            candidates.append(found)
    chosen = pick(candidates)
    if chosen is not None:
        return Choice(chosen)
    # What it would take if priority were no object: said, not done.
    blocked_by: list[NodeVictims] = []
    for node in nodes:
        units = units_on(node)
        if any(u.priority >= priority for u in units):
            needed = victims_on_node(node, units, what_if(node), budgets, exact_units=0)
            if needed is not None and needed.units:
                blocked_by.append(needed)
    if not blocked_by:
        return Choice(None, "preempting lower-priority pods would not make room on any node")
    least = min(blocked_by, key=lambda v: sum(1 for p in v.pods if p.priority >= priority))
    held = [p for p in least.pods if p.priority >= priority]
    if not held:
        return Choice(None, "preempting lower-priority pods would not make room on any node")
    lowest = min(p.priority for p in held)
    return Choice(
        None,
        f"it would need to preempt {len(held)} pod(s) of priority {lowest} or more "
        f"(on node {least.node}), and only lower priorities are preempted "
        f"(this pod's: {priority})",
    )
