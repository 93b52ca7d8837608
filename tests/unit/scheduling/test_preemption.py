"""Victim choice for device preemption: upstream's order of preference on hand-made cases, and
against a brute-force reference on small random clusters (the same cost, or the greedy
reprieve's valid and minimal set where the node has too many units to weigh them all)."""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Mapping, Sequence

from hypothesis import given, settings
from hypothesis import strategies as st

from operators.scheduling.preemption import (
    Choice,
    Unit,
    VictimPod,
    choose,
    victims_on_node,
    violations,
)


@dataclasses.dataclass(frozen=True)
class Budget:
    namespace: str
    app: str
    allowed: int

    def covers(self, namespace: str, labels: Mapping[str, str]) -> bool:
        return namespace == self.namespace and labels.get("app") == self.app


class Devices:
    """A node of ``total`` devices; each unit holds ``held[unit.key]`` of them there; the
    preemptor needs ``need`` free."""

    def __init__(self, node: str, total: int, need: int, held: Mapping[str, Mapping[str, int]]):
        self.node, self.need = node, need
        self.held = held
        self.free = total - sum(h.get(node, 0) for h in held.values())
        self.searches = 0

    def remove(self, unit: Unit) -> None:
        self.free += self.held[unit.key].get(self.node, 0)

    def restore(self, unit: Unit) -> None:
        self.free -= self.held[unit.key].get(self.node, 0)

    def fits(self) -> bool:
        self.searches += 1
        return self.free >= self.need


def pod(name: str, node: str, priority: int, started: float = 0.0, app: str = "") -> VictimPod:
    return VictimPod("ns", name, node, priority, started, {"app": app} if app else {})


def single(p: VictimPod) -> Unit:
    return Unit(p.ref, (p,))


def run(
    priority: int,
    totals: Mapping[str, int],
    need: int,
    units: Sequence[Unit],
    held: Mapping[str, Mapping[str, int]],
    budgets: Sequence[Budget] = (),
    exact_units: int = 8,
) -> Choice:
    nodes = list(totals)
    return choose(
        priority,
        nodes,
        lambda n: [u for u in units if held[u.key].get(n, 0) or any(p.node == n for p in u.pods)],
        lambda n: Devices(n, totals[n], need, held),
        budgets,
        exact_units=exact_units,
    )


def names(choice: Choice) -> list[str]:
    assert choice.victims is not None, choice.reason
    return [p.name for p in choice.victims.pods]


def test_the_lowest_priority_holder_of_the_device_is_preempted() -> None:
    notebook, inference = pod("notebook", "n1", 0), pod("inference", "n1", 500)
    units = [single(notebook), single(inference)]
    held = {notebook.ref: {"n1": 1}, inference.ref: {"n1": 1}}
    assert names(run(1000, {"n1": 2}, 1, units, held)) == ["notebook"]


def test_equal_priority_never_preempts_and_says_what_it_would_take() -> None:
    other = pod("other", "n1", 1000)
    choice = run(1000, {"n1": 1}, 1, [single(other)], {other.ref: {"n1": 1}})
    assert choice.victims is None
    assert "1 pod(s) of priority 1000 or more" in choice.reason
    assert "this pod's: 1000" in choice.reason


def test_nothing_to_gain_is_said_so() -> None:
    low = pod("low", "n1", 0)
    choice = run(1000, {"n1": 2}, 4, [single(low)], {low.ref: {"n1": 1}})
    assert choice.victims is None and "would not make room" in choice.reason


def test_a_victim_a_budget_protects_is_passed_over_while_another_exists() -> None:
    protected = pod("protected", "n1", 0, app="db")
    free = pod("free", "n2", 100)
    held = {protected.ref: {"n1": 1}, free.ref: {"n2": 1}}
    units = [single(protected), single(free)]
    # Without the budget the lower priority goes (node n1); with it, the other node.
    assert names(run(1000, {"n1": 1, "n2": 1}, 1, units, held)) == ["protected"]
    budget = Budget("ns", "db", allowed=0)
    assert names(run(1000, {"n1": 1, "n2": 1}, 1, units, held, [budget])) == ["free"]
    # With no other choice, the budget is violated (as upstream).
    only = run(1000, {"n1": 1}, 1, [single(protected)], {protected.ref: {"n1": 1}}, [budget])
    assert only.victims is not None and only.victims.violations == 1


def test_a_gang_is_preempted_whole_wherever_its_members_run() -> None:
    members = (pod("w0", "n1", 0), pod("w1", "n2", 0))
    gang = Unit("gang:ns/train", members, gang=True)
    held = {gang.key: {"n1": 1, "n2": 1}}
    choice = run(1000, {"n1": 1}, 1, [gang], held)
    assert names(choice) == ["w0", "w1"]


def test_a_gang_with_a_member_of_equal_priority_is_not_preempted() -> None:
    gang = Unit("gang:ns/train", (pod("w0", "n1", 0), pod("w1", "n1", 1000)), gang=True)
    assert run(1000, {"n1": 1}, 1, [gang], {gang.key: {"n1": 1}}).victims is None


def test_fewest_victims_then_latest_start() -> None:
    a, b, c = pod("a", "n1", 0), pod("b", "n1", 0), pod("c", "n2", 0, started=50.0)
    held = {a.ref: {"n1": 1}, b.ref: {"n1": 1}, c.ref: {"n2": 2}}
    units = [single(a), single(b), single(c)]
    assert names(run(1000, {"n1": 2, "n2": 2}, 2, units, held)) == ["c"]  # one pod, not two
    d = pod("d", "n1", 0, started=10.0)
    e = pod("e", "n2", 0, started=20.0)
    held2 = {d.ref: {"n1": 1}, e.ref: {"n2": 1}}
    # Equal otherwise: the node whose victim started last loses the least work.
    assert names(run(1000, {"n1": 1, "n2": 1}, 1, [single(d), single(e)], held2)) == ["e"]


def test_exact_weighing_keeps_fewer_victims_than_the_greedy_reprieve() -> None:
    """Two devices needed, all of one priority: the greedy reprieve keeps the most important
    pod (the earliest started, holding two) and takes the two small ones; weighing every set
    finds that the one big pod is the fewer victims."""
    big = pod("big", "n1", 5, started=0.0)
    s1, s2 = pod("s1", "n1", 5, started=1.0), pod("s2", "n1", 5, started=1.0)
    held = {big.ref: {"n1": 2}, s1.ref: {"n1": 1}, s2.ref: {"n1": 1}}
    units = [single(big), single(s1), single(s2)]
    assert names(run(1000, {"n1": 4}, 2, units, held, exact_units=0)) == ["s1", "s2"]
    assert names(run(1000, {"n1": 4}, 2, units, held)) == ["big"]


# --- against a brute-force reference ----------------------------------------------------


def true_violations(units: Sequence[Unit], budgets: Sequence[Budget]) -> int:
    """Upstream's counting, written out again: pods the most important first (priority, a gang
    before a pod, the larger gang, the earlier start), each spending one of each budget that
    covers it until one goes below zero; pods without labels spend nothing."""
    order = sorted(
        units, key=lambda u: (-max(p.priority for p in u.pods), -u.gang, -len(u.pods),
                              min(p.started for p in u.pods))
    )  # fmt: skip
    left = [b.allowed for b in budgets]
    count = 0
    for unit in order:
        for p in unit.pods:
            if not p.labels:
                continue
            for i, b in enumerate(budgets):
                if b.covers(p.namespace, p.labels):
                    left[i] -= 1
                    if left[i] < 0:
                        count += 1
                        break
    return count


def reference_cost(units: Sequence[Unit], budgets: Sequence[Budget]) -> tuple:
    """kube-scheduler's pickOneNodeForPreemption order, written out again."""
    pods = [p for u in units for p in u.pods]
    top = max(p.priority for p in pods)
    return (
        true_violations(units, budgets),
        top,
        sum(p.priority + 2**31 for p in pods),
        len(pods),
        -min(p.started for p in pods if p.priority == top),
    )


def reference(
    priority: int,
    totals: Mapping[str, int],
    need: int,
    units: Sequence[Unit],
    held: Mapping[str, Mapping[str, int]],
    budgets: Sequence[Budget],
) -> tuple | None:
    """Every set of lower-priority units on every node: the cost of the cheapest that frees
    enough (None: none does)."""
    best: tuple | None = None
    for node, total in totals.items():
        used = sum(h.get(node, 0) for h in held.values())
        here = [u for u in units if held[u.key].get(node, 0) and u.priority < priority]
        for size in range(1, len(here) + 1):
            for subset in itertools.combinations(here, size):
                freed = sum(held[u.key][node] for u in subset)
                if total - used + freed < need:
                    continue
                cost = reference_cost(subset, budgets)
                if best is None or cost < best:
                    best = cost
    return best


@st.composite
def clusters(draw: st.DrawFn) -> tuple[int, dict[str, int], int, list[Unit], dict, list[Budget]]:
    nodes = [f"n{i}" for i in range(draw(st.integers(1, 3)))]
    totals = {n: draw(st.integers(1, 6)) for n in nodes}
    units: list[Unit] = []
    held: dict[str, dict[str, int]] = {}
    for i in range(draw(st.integers(0, 6))):
        members = draw(st.integers(1, 2))  # 2: a gang, its members on any nodes
        priority = draw(st.sampled_from([-5, 0, 10, 100, 1000]))
        pods: list[VictimPod] = []
        holds: dict[str, int] = {}
        for m in range(members):
            node = draw(st.sampled_from(nodes))
            left = totals[node] - sum(h.get(node, 0) for h in held.values()) - holds.get(node, 0)
            if left <= 0:
                continue
            holds[node] = holds.get(node, 0) + draw(st.integers(1, left))
            pods.append(
                pod(
                    f"p{i}-{m}",
                    node,
                    priority,
                    started=draw(st.sampled_from([1.0, 2.0, 3.0])),
                    app=draw(st.sampled_from(["", "db", "web"])),
                )
            )
        if not pods:
            continue
        unit = Unit(f"u{i}", tuple(pods), gang=members > 1) if members > 1 else single(pods[0])
        units.append(unit)
        held[unit.key] = holds
    # Two budgets may cover one pod ("db" pods are covered by both).
    budgets = [
        Budget("ns", "db", draw(st.integers(0, 2))),
        Budget("ns", "web", draw(st.integers(0, 2))),
        Budget("ns", "db", draw(st.integers(0, 2))),
    ]
    need = draw(st.integers(1, max(totals.values())))
    return draw(st.sampled_from([10, 100, 1000, 2000])), totals, need, units, held, budgets


@settings(max_examples=400, deadline=None)
@given(clusters())
def test_the_choice_costs_what_the_brute_force_optimum_costs(case: tuple) -> None:
    priority, totals, need, units, held, budgets = case
    # Only nodes where the pod does not fit now are asked (else there is nothing to preempt).
    crowded = {
        n: t for n, t in totals.items() if t - sum(h.get(n, 0) for h in held.values()) < need
    }
    best = reference(priority, crowded, need, units, held, budgets)
    choice = run(priority, crowded, need, units, held, budgets)
    if best is None:
        assert choice.victims is None and choice.reason
        return
    assert choice.victims is not None, choice.reason
    assert reference_cost(choice.victims.units, budgets) == best


@settings(max_examples=300, deadline=None)
@given(clusters())
def test_the_greedy_reprieve_alone_frees_enough_and_keeps_no_victim_it_does_not_need(
    case: tuple,
) -> None:
    priority, totals, need, units, held, budgets = case
    crowded = {
        n: t for n, t in totals.items() if t - sum(h.get(n, 0) for h in held.values()) < need
    }
    choice = run(priority, crowded, need, units, held, budgets, exact_units=0)
    if reference(priority, crowded, need, units, held, budgets) is None:
        assert choice.victims is None
        return
    chosen = choice.victims
    assert chosen is not None
    node = chosen.node
    assert chosen.violations == true_violations(chosen.units, budgets)
    assert all(u.priority < priority for u in chosen.units)
    used = sum(h.get(node, 0) for h in held.values())
    freed = [held[u.key].get(node, 0) for u in chosen.units]
    assert crowded[node] - used + sum(freed) >= need, "the pod fits without the victims"
    for i, unit in enumerate(chosen.units):
        others = sum(freed) - freed[i]
        assert crowded[node] - used + others < need, f"{unit.key} was not needed"


def test_a_pod_spends_budgets_until_the_first_it_violates_and_unlabelled_pods_none() -> None:
    """Upstream's counting: X (covered by a spent budget and by one with room) violates
    once and spends nothing more, so Y still fits the second budget; a pod without labels
    is covered by nobody."""
    x = single(VictimPod("ns", "x", "n1", 0, 0.0, {"app": "db"}))
    y = single(VictimPod("ns", "y", "n1", 0, 1.0, {"app": "web"}))
    budgets: list[Budget | BudgetBoth] = [Budget("ns", "db", 0), BudgetBoth("ns", 1)]
    assert violations([x, y], budgets) == 1
    bare = single(VictimPod("ns", "bare", "n1", 0, 0.0, {}))
    assert violations([bare], [BudgetBoth("ns", 0)]) == 0


@dataclasses.dataclass(frozen=True)
class BudgetBoth:
    """A budget over the "db" and the "web" pods."""

    namespace: str
    allowed: int

    def covers(self, namespace: str, labels: Mapping[str, str]) -> bool:
        return namespace == self.namespace and labels.get("app") in ("db", "web")


def test_a_node_where_pods_on_their_way_out_free_enough_needs_no_victims() -> None:
    held = {"ns/low": {"n1": 1}}
    found = victims_on_node("n1", [], Devices("n1", 2, 1, held))
    assert found is not None and not found.units and found.violations == 0
    assert victims_on_node("n1", [], Devices("n1", 1, 1, held)) is None


def test_weighing_every_set_leaves_the_what_if_as_it_found_it() -> None:
    units = [single(pod(f"p{i}", "n1", 0, started=float(i))) for i in range(4)]
    held = {u.key: {"n1": 1} for u in units}
    what_if = Devices("n1", 4, 2, held)
    found = victims_on_node("n1", units, what_if)
    assert found is not None and len(found.units) == 2
    assert what_if.free == 0, "every unit is counted as in place again"


def test_the_greedy_reprieve_takes_budget_violating_units_back_first() -> None:
    """Upstream's order: the unit a budget protects is reprieved before a more important one,
    so the unprotected one goes."""
    older = pod("older", "n1", 0, started=0.0)
    protected = pod("protected", "n1", 0, started=5.0, app="db")
    held = {older.ref: {"n1": 1}, protected.ref: {"n1": 1}}
    units = [single(older), single(protected)]
    choice = run(1000, {"n1": 2}, 1, units, held, [Budget("ns", "db", 0)], exact_units=0)
    assert names(choice) == ["older"]


def test_a_gang_is_more_important_than_a_pod_of_its_priority() -> None:
    """At one priority and start, a gang is reprieved before a single pod (upstream's rank)."""
    alone = pod("alone", "n1", 0)
    gang = Unit("gang:ns/g", (pod("g0", "n1", 0), pod("g1", "n1", 0)), gang=True)
    held = {alone.ref: {"n1": 1}, gang.key: {"n1": 2}}
    assert names(run(1000, {"n1": 3}, 1, [single(alone), gang], held, exact_units=0)) == ["alone"]


def test_negative_priorities_sum_as_costs_too() -> None:
    """One victim of priority -5 costs less than two, as upstream offsets priorities before
    summing them (without the offset two negative ones would sum lower)."""
    a, b, c = pod("a", "n1", -5), pod("b", "n2", -5), pod("c", "n2", -5)
    held = {a.ref: {"n1": 2}, b.ref: {"n2": 1}, c.ref: {"n2": 1}}
    units = [single(a), single(b), single(c)]
    assert names(run(0, {"n1": 2, "n2": 2}, 2, units, held)) == ["a"]
