"""The history checker on hand-written histories: each rule finds its planted violation, with
the revisions it began and ended at, and clean histories of the same shape pass."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import pytest

from robustness.checker import (
    ALLOCATED_FOR_GONE_POD,
    DEVICE_HELD_TWICE,
    GANG_RELEASED_PARTLY,
    POD_BOUND_WITHOUT_DEVICES,
    POD_NOT_EXPLAINED,
    PREEMPTED_WITHOUT_CAUSE,
    PREEMPTOR_WINDOW_S,
    QUOTA_EXCEEDED,
    RELEASE_RACE_S,
    Report,
    check,
)
from robustness.history import (
    Access,
    ClaimFacts,
    DeviceId,
    Event,
    EventType,
    Facts,
    Gap,
    HeldDevice,
    History,
    PodFacts,
    PodGroupFacts,
    QuotaFacts,
)
from robustness.run import load_history, save_history

NS = "ns"
GPU = "gpu"


def dev(n: int) -> DeviceId:
    return DeviceId("gpu.example.com", "node-0", f"dev-{n}")


def claim(
    name: str,
    *devices: int,
    reserved: Sequence[str] = (),
    access: Access = "exclusive",
    owner: str = "",
    device_class: str = GPU,
    nodes: Sequence[str] = (),
) -> ClaimFacts:
    return ClaimFacts(
        namespace=NS,
        name=name,
        uid=f"uid-{name}",
        devices=tuple(HeldDevice(dev(n), access, device_class) for n in devices),
        allocated=bool(devices),
        reserved_for=frozenset(reserved),
        owner_pod=owner,
        nodes=frozenset(nodes),
    )


def pod(
    name: str,
    *claims: str,
    node: str = "",
    gang: str = "",
    gang_size: int = 0,
    explained: bool = False,
    phase: str = "Pending",
    gated: bool = False,
) -> PodFacts:
    return PodFacts(
        namespace=NS,
        name=name,
        uid=name,
        node=node,
        gated=gated,
        phase=phase,
        direct_claims=tuple(claims),
        template_entries=(),
        claim_statuses={},
        extended_claim="",
        gang=gang,
        gang_size=gang_size,
        explained=explained,
    )


def quota(devices: int | None = None, claims: int | None = None) -> QuotaFacts:
    return QuotaFacts(NS, "q", GPU, selectors=False, hard_devices=devices, hard_claims=claims)


def history(*changes: Facts | tuple[EventType, Facts], settled: bool = False) -> History:
    """Events at revisions 1, 2, ... (a second apart), ADDED/MODIFIED unless a type is given."""
    events = []
    seen: set[str] = set()
    for rv, change in enumerate(changes, start=1):
        type_, facts = change if isinstance(change, tuple) else (None, change)
        kind = {
            ClaimFacts: "claim", PodFacts: "pod", QuotaFacts: "quota", PodGroupFacts: "podgroup"
        }[type(facts)]  # fmt: skip
        key = f"{kind}/{facts.key}"
        if type_ is None:
            type_ = "MODIFIED" if key in seen else "ADDED"
        seen.add(key)
        events.append(Event(rv=rv, kind=kind, type=type_, facts=facts, at=float(rv)))  # type: ignore[arg-type]
    return History(events=events, settled=settled)


def only(report: Report, rule: str) -> list[tuple[str, int, int | None]]:
    return [(v.subject, v.start_rv, v.end_rv) for v in report.violations if v.rule == rule]


# -- rule 1: a device held by two claims -----------------------------------------------------------


def test_two_claims_holding_one_device_for_a_while_is_found_with_its_length() -> None:
    report = check(
        history(claim("a", 0, reserved=["p"]), claim("b", 0, reserved=["q"]), claim("b", 1))
    )
    assert only(report, DEVICE_HELD_TWICE) == [(str(dev(0)), 2, 3)]
    (found,) = report.violations
    assert found.duration(report.end_at) == 1.0
    assert "ns/a, ns/b" in found.detail
    assert not report.ok


def test_a_device_moving_from_one_claim_to_another_is_clean() -> None:
    report = check(history(claim("a", 0), claim("a"), claim("b", 0), ("DELETED", claim("a"))))
    assert report.ok, report.violations


def test_a_deleted_claim_lets_go_of_its_devices() -> None:
    report = check(history(claim("a", 0), ("DELETED", claim("a", 0)), claim("b", 0)))
    assert report.ok, report.violations


def test_a_double_still_there_at_the_end_is_reported_open() -> None:
    report = check(history(claim("a", 0), claim("b", 0)))
    assert only(report, DEVICE_HELD_TWICE) == [(str(dev(0)), 2, None)]


def test_one_claim_holding_a_device_twice_is_a_double() -> None:
    report = check(history(claim("a", 0, 0)))
    assert only(report, DEVICE_HELD_TWICE) == [(str(dev(0)), 1, None)]


def test_admin_access_and_shares_are_not_doubles_as_upstream_allows_them() -> None:
    report = check(
        history(
            claim("a", 0),
            claim("admin", 0, access="admin"),
            claim("s1", 1, access="share"),
            claim("s2", 1, access="share"),
        )
    )
    assert report.ok, report.violations


def test_a_share_beside_an_exclusive_hold_is_a_double() -> None:
    report = check(history(claim("a", 0), claim("s", 0, access="share")))
    assert only(report, DEVICE_HELD_TWICE) == [(str(dev(0)), 2, None)]


def test_events_are_judged_in_revision_order_not_arrival_order() -> None:
    # Pods and claims come from separate watches; the recorder merges them by revision.
    made = history(claim("a", 0), claim("a"), claim("b", 0))
    made.events.reverse()
    assert check(made).ok


# -- rule 2: a bound pod without its devices -------------------------------------------------------


def test_a_pod_bound_before_its_claim_is_reserved_for_it_is_found() -> None:
    report = check(
        history(
            pod("p", "c"),
            claim("c", 0),
            pod("p", "c", node="n"),
            claim("c", 0, reserved=["p"]),
        )
    )
    assert only(report, POD_BOUND_WITHOUT_DEVICES) == [(f"{NS}/p", 3, 4)]
    assert "not reserved" in report.violations[0].detail


def test_the_protocols_order_is_clean() -> None:
    report = check(
        history(
            pod("p", "c"),
            claim("c", 0, reserved=["p"]),
            pod("p", "c", node="n"),
            ("DELETED", pod("p", "c", node="n")),
            claim("c", 0),
            claim("c"),
        )
    )
    assert report.ok, report.violations


def test_a_claim_released_under_a_bound_pod_is_found() -> None:
    report = check(history(claim("c", 0, reserved=["p"]), pod("p", "c", node="n"), claim("c")))
    assert only(report, POD_BOUND_WITHOUT_DEVICES) == [(f"{NS}/p", 3, None)]


def test_a_bound_pod_whose_template_claim_is_unknown_is_found() -> None:
    bare = replace(pod("p", node="n"), template_entries=("gpu",))
    named = replace(bare, claim_statuses={"gpu": "p-gpu"})
    report = check(history(bare, claim("p-gpu", 0, reserved=["p"]), named))
    assert only(report, POD_BOUND_WITHOUT_DEVICES) == [(f"{NS}/p", 1, 3)]


def test_a_terminal_pod_may_lose_its_reservation() -> None:
    report = check(
        history(
            claim("c", 0, reserved=["p"]),
            pod("p", "c", node="n"),
            pod("p", "c", node="n", phase="Succeeded"),
            claim("c"),
        )
    )
    assert report.ok, report.violations


def test_a_pod_bound_away_from_its_devices_node_is_found() -> None:
    report = check(history(claim("c", 0, reserved=["p"], nodes=["n1"]), pod("p", "c", node="n2")))
    assert only(report, POD_BOUND_WITHOUT_DEVICES) == [(f"{NS}/p", 2, None)]
    assert "allocated on n1" in report.violations[0].detail
    assert check(history(claim("c", 0, reserved=["p"], nodes=["n1"]), pod("p", "c", node="n1"))).ok


# -- rule 3: gangs -------------------------------------------------------------------------------


def member(name: str, node: str = "", gated: bool | None = None) -> PodFacts:
    """A gang member; gated until it is bound unless said otherwise."""
    held = not node if gated is None else gated
    return pod(name, f"{name}-c", node=node, gang="g", gang_size=2, gated=held)


def test_a_member_bound_while_another_has_no_devices_is_found() -> None:
    report = check(
        history(
            member("m1"),
            member("m2"),
            claim("m1-c", 0, reserved=["m1"]),
            member("m1", node="n"),
            claim("m2-c", 1, reserved=["m2"]),
        )
    )
    assert only(report, GANG_RELEASED_PARTLY) == [(f"{NS}/g", 4, 5)]


def group_member(name: str, node: str = "") -> PodFacts:
    """A pod of PodGroup "train" (its size is the PodGroup's), gated until bound."""
    return pod(name, f"{name}-c", node=node, gang="podgroup:train", gated=not node)


def test_a_pod_group_gang_is_judged_by_the_groups_min_count() -> None:
    group = PodGroupFacts(NS, "train", min_count=3)
    two_released = check(
        history(
            group, group_member("m1"), group_member("m2"),
            claim("m1-c", 0, reserved=["m1"]), claim("m2-c", 1, reserved=["m2"]),
            group_member("m1", node="n"),
        )
    )  # fmt: skip
    assert only(two_released, GANG_RELEASED_PARTLY) == [(f"{NS}/podgroup:train", 6, None)]
    assert "2 of 3 members" in two_released.violations[0].detail
    whole = check(
        history(
            group, *(group_member(f"m{i}") for i in range(3)),
            *(claim(f"m{i}-c", i, reserved=[f"m{i}"]) for i in range(3)),
            group_member("m0", node="n"),
        )
    )  # fmt: skip
    assert whole.ok, whole.violations


def test_a_pod_group_member_released_before_its_group_is_seen_is_found() -> None:
    """Until the PodGroup exists its size is unknown: no member may go."""
    report = check(
        history(group_member("m1"), claim("m1-c", 0, reserved=["m1"]), group_member("m1", "n"))
    )
    assert only(report, GANG_RELEASED_PARTLY) == [(f"{NS}/podgroup:train", 3, None)]


def test_the_pods_of_a_pod_group_without_a_gang_policy_are_no_gang() -> None:
    report = check(
        history(
            PodGroupFacts(NS, "train", min_count=None),
            group_member("m1"),
            claim("m1-c", 0, reserved=["m1"]),
            group_member("m1", node="n"),
        )
    )
    assert report.ok, report.violations


def test_a_member_bound_before_the_gang_is_whole_is_found() -> None:
    report = check(history(member("m1"), claim("m1-c", 0, reserved=["m1"]), member("m1", node="n")))
    assert only(report, GANG_RELEASED_PARTLY) == [(f"{NS}/g", 3, None)]
    assert "1 of 2 members" in report.violations[0].detail


def test_a_gang_whole_before_release_and_torn_before_its_first_bind_is_found() -> None:
    # Both members' claims written, then m2 is deleted before the pods are released: m1
    # bound alone is a torn gang, although the gang was whole a moment before.
    report = check(
        history(
            member("m1"),
            member("m2"),
            claim("m1-c", 0, reserved=["m1"]),
            claim("m2-c", 1, reserved=["m2"]),
            ("DELETED", member("m2")),
            member("m1", node="n"),
        )
    )
    assert only(report, GANG_RELEASED_PARTLY) == [(f"{NS}/g", 6, None)]


def test_a_member_deleted_as_the_gates_are_lifted_is_a_race_dralloc_cannot_win() -> None:
    """m2 is deleted between dralloc's live look at the members and m1's gate lifted, a few
    milliseconds after the claims were written: no violation (dralloc reports the gang
    torn). A member that came meanwhile, or a deletion long before, is still found."""

    def released_after(gap: float, *extra: Facts) -> Report:
        events = history(
            member("m1"), member("m2"),
            claim("m1-c", 0, reserved=["m1"]), claim("m2-c", 1, reserved=["m2"]),
            ("DELETED", member("m2")), *extra, member("m1", gated=False),
        ).events  # fmt: skip
        base = events[3].at
        for index in range(4, len(events)):
            events[index] = replace(events[index], at=base + gap * (index - 3) / (len(events) - 4))
        return check(History(events=events))

    assert only(released_after(0.05), GANG_RELEASED_PARTLY) == []
    assert only(released_after(RELEASE_RACE_S * 2), GANG_RELEASED_PARTLY) == [(f"{NS}/g", 6, None)]
    late = released_after(0.05, member("m3"))
    assert only(late, GANG_RELEASED_PARTLY) == [(f"{NS}/g", 7, None)]


def test_a_gang_given_back_and_released_again_partly_is_found() -> None:
    report = check(
        history(
            member("m1"),
            member("m2"),
            claim("m1-c", 0, reserved=["m1"]),
            claim("m2-c", 1, reserved=["m2"]),
            claim("m1-c"),  # given back before any member ran
            claim("m2-c"),
            claim("m1-c", 0, reserved=["m1"]),
            member("m1", node="n"),
        )
    )
    assert only(report, GANG_RELEASED_PARTLY) == [(f"{NS}/g", 8, None)]


def test_a_member_deleted_between_the_release_and_the_binding_does_not_tear_the_gang() -> None:
    report = check(
        history(
            member("m1"),
            member("m2"),
            claim("m1-c", 0, reserved=["m1"]),
            claim("m2-c", 1, reserved=["m2"]),
            member("m1", gated=False),
            member("m2", gated=False),  # both released whole
            ("DELETED", member("m2", gated=False)),
            member("m1", node="n"),
        )
    )
    assert report.ok, report.violations


def test_a_released_member_deleted_while_the_others_are_released_does_not_tear_the_gang() -> None:
    # dralloc ungates members one after another; the user deletes the first in between.
    report = check(
        history(
            member("m1"),
            member("m2"),
            claim("m1-c", 0, reserved=["m1"]),
            claim("m2-c", 1, reserved=["m2"]),
            member("m1", gated=False),
            ("DELETED", member("m1", gated=False)),
            member("m2", gated=False),
            member("m2", node="n"),
        )
    )
    assert report.ok, report.violations


def test_a_member_released_from_its_gate_alone_is_found_before_it_is_bound() -> None:
    report = check(
        history(
            member("m1"), member("m2"), claim("m1-c", 0, reserved=["m1"]),
            member("m1", gated=False),
        )
    )  # fmt: skip
    assert only(report, GANG_RELEASED_PARTLY) == [(f"{NS}/g", 4, None)]


def test_members_that_never_had_a_gate_tear_the_gang_only_when_bound() -> None:
    """Created while the webhook was away: nothing held them back, so nobody released them;
    only binding one while another lacks its devices tears the gang."""
    never = check(history(member("m1", gated=False), member("m2", gated=False), claim("m1-c", 0)))
    assert only(never, GANG_RELEASED_PARTLY) == []
    bound = check(
        history(
            member("m1", gated=False), member("m2", gated=False),
            claim("m1-c", 0, reserved=["m1"]), member("m1", node="n"),
        )
    )  # fmt: skip
    assert only(bound, GANG_RELEASED_PARTLY) == [(f"{NS}/g", 4, None)]


def test_a_whole_gang_may_lose_a_member_after_release() -> None:
    report = check(
        history(
            member("m1"),
            member("m2"),
            claim("m1-c", 0, reserved=["m1"]),
            claim("m2-c", 1, reserved=["m2"]),
            member("m1", node="n"),
            member("m2", node="n"),
            ("DELETED", member("m2", node="n")),
            claim("m2-c"),
        )
    )
    assert report.ok, report.violations


# -- rule 4: quota -------------------------------------------------------------------------------


def test_an_allocation_above_the_quota_is_found() -> None:
    report = check(history(quota(devices=1), claim("a", 0), claim("b", 1), claim("b")))
    assert only(report, QUOTA_EXCEEDED) == [(f"{NS}/q", 3, 4)]


def test_the_claims_limit_is_kept_too() -> None:
    report = check(history(quota(claims=1), claim("a", 0), claim("b", 1)))
    assert only(report, QUOTA_EXCEEDED) == [(f"{NS}/q", 3, None)]


def test_a_quota_lowered_below_usage_is_not_an_allocation_over_it() -> None:
    report = check(history(quota(devices=2), claim("a", 0), claim("b", 1), quota(devices=1)))
    assert report.ok, report.violations


def test_an_allocation_while_above_a_lowered_quota_is_found() -> None:
    report = check(
        history(quota(devices=2), claim("a", 0), claim("b", 1), quota(devices=1), claim("c", 2))
    )
    assert only(report, QUOTA_EXCEEDED) == [(f"{NS}/q", 5, None)]


def test_devices_of_other_classes_and_admin_access_do_not_count() -> None:
    report = check(
        history(
            quota(devices=1),
            claim("a", 0),
            claim("b", 1, device_class="nic"),
            claim("c", 2, access="admin"),
        )
    )
    assert report.ok, report.violations


# -- rule 5: the end state -----------------------------------------------------------------------


def test_a_pending_pod_at_the_end_needs_a_condition_and_a_warning() -> None:
    plain = history(pod("p", "c"), claim("c"), settled=True)
    assert only(check(plain), POD_NOT_EXPLAINED) == [(f"{NS}/p", 2, None)]
    explained = history(pod("p", "c", explained=True), claim("c"), settled=True)
    assert "a Warning Event" in check(explained).violations[0].detail
    explained.warned = frozenset({f"{NS}/p"})
    assert check(explained).ok


def test_a_gang_member_is_warned_through_its_gang() -> None:
    """dralloc posts a reason the whole gang shares on its first member: the others need a
    condition of their own, and a Warning Event on some member of the same gang."""
    members = [
        pod(name, f"c-{name}", gang=gang, gang_size=3, explained=True, gated=True)
        for name, gang in (("g0", "g"), ("g1", "g"), ("h0", "h"))
    ]
    run = history(*members, *(claim(f"c-{m.name}") for m in members), settled=True)
    run.warned = frozenset({f"{NS}/g0"})
    assert only(check(run), POD_NOT_EXPLAINED) == [(f"{NS}/h0", 6, None)]


def test_an_unsettled_run_has_no_end_state_to_judge() -> None:
    assert check(history(pod("p", "c"), claim("c"), settled=False)).ok


def test_a_claim_left_allocated_for_a_gone_pod_is_found() -> None:
    report = check(
        history(
            claim("c", 0, reserved=["p"], owner="p"),
            pod("p", "c", node="n"),
            ("DELETED", pod("p", "c", node="n")),
            settled=True,
        )
    )
    assert only(report, ALLOCATED_FOR_GONE_POD) == [(f"{NS}/c", 3, None)]


def test_a_bound_pod_with_its_devices_ends_clean() -> None:
    report = check(history(claim("c", 0, reserved=["p"]), pod("p", "c", node="n"), settled=True))
    assert report.ok, report.violations


# -- gaps ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("gap", "closed_by_relist", "uncertain"),
    [((1, 3), True, True), ((1, 3), False, False), ((3, 4), True, False)],
)
def test_a_double_that_began_in_a_gap_and_that_a_relist_ended_is_unverifiable(
    gap: tuple[int, int], closed_by_relist: bool, uncertain: bool
) -> None:
    # a's deletion was only learnt from a relist at rv 4: it may have come before b's rv 2.
    made = history(claim("a", 0), claim("b", 0), ("DELETED", claim("a", 0)))
    made.events[-1] = replace(made.events[-1], relisted=closed_by_relist)
    made.gaps = [Gap("claim", *gap)]
    report = check(made)
    assert [v.uncertain for v in report.violations] == [uncertain]
    assert report.ok is uncertain


def test_another_kinds_gap_does_not_make_a_watched_double_unverifiable() -> None:
    made = history(claim("a", 0), claim("b", 0), ("DELETED", claim("a", 0)))
    made.events[-1] = replace(made.events[-1], relisted=True)
    made.gaps = [Gap("quota", 0, 10), Gap("claim", 2, 3)]  # the claims' gap began after rv 2
    assert not check(made).ok


def test_the_report_counts_by_rule_and_gives_the_longest_episode() -> None:
    report = check(history(claim("a", 0), claim("b", 0), claim("b"), claim("c", 0), claim("d", 0)))
    assert report.by_rule()[DEVICE_HELD_TWICE] == 2
    assert report.longest()[DEVICE_HELD_TWICE] == 1.0


def test_a_members_claim_is_found_by_its_owner_before_the_pod_names_it() -> None:
    # crd mode: the pod's claim-statuses annotation comes with the pod's release patch, after
    # its claim was allocated; the claim's owner reference and pod-claim-name say whose it is.
    def templated(name: str, node: str = "") -> PodFacts:
        return replace(
            pod(name, node=node, gang="g", gang_size=2, gated=not node), template_entries=("dev",)
        )

    def made(name: str, n: int, entry: str = "dev") -> ClaimFacts:
        return replace(claim(f"{name}-dev", n, reserved=[name], owner=name), pod_claim_name=entry)

    whole = history(
        templated("m1"), templated("m2"), made("m1", 0), made("m2", 1), templated("m1", node="n")
    )
    assert check(whole).ok, check(whole).violations
    other_entry = history(
        templated("m1"), templated("m2"), made("m1", 0), made("m2", 1, entry="other"),
        templated("m1", node="n"),
    )  # fmt: skip
    assert only(check(other_entry), GANG_RELEASED_PARTLY) == [(f"{NS}/g", 5, None)]


def test_a_saved_history_loads_back_and_checks_the_same(tmp_path: Path) -> None:
    made = history(
        claim("a", 0, reserved=["p"], nodes=["n"]), pod("p", "a", node="n"), claim("b", 0)
    )
    save_history(made, tmp_path / "history.jsonl")
    loaded = load_history(tmp_path / "history.jsonl")
    assert loaded.events == made.ordered()
    assert check(loaded).violations == check(made).violations


# -- rule 6: a preemption victim had a waiting pod of a higher priority ---------------------------


def victim(priority: int = 0, preempted: bool = True) -> PodFacts:
    return replace(pod("victim", "c-v", node="n1"), priority=priority, preempted=preempted)


def waiting(name: str, priority: int, preempts: bool = True) -> PodFacts:
    return replace(pod(name, f"c-{name}"), priority=priority, preempts=preempts)


def claims_of_both() -> list[ClaimFacts]:
    return [claim("c-v", 0, reserved=["victim"], nodes=["n1"]), claim("c-hi")]


def test_a_victim_of_a_waiting_higher_pod_keeps_the_rule() -> None:
    report = check(
        history(*claims_of_both(), victim(preempted=False), waiting("hi", 1000), victim(), victim())
    )
    assert only(report, PREEMPTED_WITHOUT_CAUSE) == []


@pytest.mark.parametrize(
    ("name", "priority", "preempts"), [("equal", 0, True), ("never", 1000, False)]
)
def test_a_victim_of_an_equal_pod_or_of_one_that_may_not_preempt_is_found(
    name: str, priority: int, preempts: bool
) -> None:
    report = check(
        history(
            *claims_of_both(), victim(preempted=False), waiting(name, priority, preempts), victim()
        )
    )
    assert only(report, PREEMPTED_WITHOUT_CAUSE) == [("ns/victim", 5, 5)]


def test_the_preemptor_may_be_gone_when_the_victim_is_marked_but_not_long_gone() -> None:
    def run(gap: float) -> Report:
        events = history(
            *claims_of_both(), victim(preempted=False), waiting("hi", 1000),
            ("DELETED", waiting("hi", 1000)), victim(),
        ).events  # fmt: skip
        events[-1] = replace(events[-1], at=events[-2].at + gap)
        return check(History(events=events))

    assert only(run(PREEMPTOR_WINDOW_S - 2), PREEMPTED_WITHOUT_CAUSE) == []
    assert only(run(PREEMPTOR_WINDOW_S + 2), PREEMPTED_WITHOUT_CAUSE) == [("ns/victim", 6, 6)]


def test_a_preemptor_that_waits_without_a_write_for_long_still_counts() -> None:
    """Its condition is written once; it preempts minutes later (victims finished first)."""
    events = history(
        *claims_of_both(), waiting("hi", 1000), victim(preempted=False), victim()
    ).events  # fmt: skip
    events[-1] = replace(events[-1], at=events[-2].at + 5 * PREEMPTOR_WINDOW_S)
    assert only(check(History(events=events)), PREEMPTED_WITHOUT_CAUSE) == []
