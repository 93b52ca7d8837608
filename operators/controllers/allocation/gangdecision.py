"""Gang allocation in the allocation loop: the pods of a gang are released together or not.

A pod names its gang with ``resource.dralloc.dev/gang`` and ``resource.dralloc.dev/gang-size``
(:mod:`operators.api.annotations`), or, where the API server serves upstream's Workload API,
with ``spec.schedulingGroup.podGroupName``: a PodGroup of its namespace whose policy is
``gang`` makes its pods a gang of that name with ``minCount`` as the size
(:mod:`operators.api.podgroup`; :func:`gang_of` says which applies). The annotations win
over the PodGroup: a pod with both is a member of the annotated gang only. A gang is named
per namespace, whichever way: an annotation naming a PodGroup joins its pods.

When any member comes up in the queue, the whole gang is decided at once:

1. the members are the gated, live pods of the namespace with that gang name; each must have
   its claims (the claim controller creates them from templates) and its node filter's
   candidates, as for a single pod;
2. the joint search (:func:`operators.allocator.gang.find_gang`) places at least gang-size
   members, or none; where a member belongs to a PodGroup, every gated member, or none
   (kube-scheduler 1.37 with GenericWorkload queues a PodGroup as one entity and keeps all of
   it waiting while any of its pods is gated, so a partial release would strand devices);
3. the commit, on the path a single pod's takes (:mod:`.commit`): first every placed
   member's claims, and only when all of them landed, each member's pod. No pod is released
   while another member's claims are not written, nor while a member is gone (read live
   right before the gates are lifted).

A crash or a conflict between the claim writes leaves some members' claims allocated and
reserved for their (still gated) pods. Truth lives in claims: the next decision reads those
members as placed where their claims say and searches only for the others. If the gang can no
longer be completed, the members' partial holdings are given back (their claims are
deallocated), so nothing is stranded while the gang waits.

Every member that waits, or a gang that cannot fit, gets the reason on its condition and in
an Event (written only when the reason changes). So does a pod whose PodGroup does not exist
(yet): it waits, as kube-scheduler waits for it, until the PodGroup's creation wakes it.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import structlog

from operators import metrics
from operators.allocator.errors import DecisionTimeout
from operators.allocator.gang import GangMember, GangPlacement, find_gang
from operators.api.annotations import (
    GANG_ANNOTATION,
    GANG_SIZE_ANNOTATION,
    SCHEDULING_GATE,
    GangRef,
)
from operators.api.models import ResourceClaim
from operators.api.podgroup import GROUP as WORKLOAD_GROUP
from operators.api.podgroup import VERSION as WORKLOAD_VERSION
from operators.api.podgroup import PodGroup, gang_too_large, resolve_gang
from operators.cache.core import POD_GANG_INDEX, Pod
from operators.cache.informer import Key
from operators.controllers import claimrules, claimstatus, podcondition
from operators.controllers.allocation.commit import Placed
from operators.controllers.allocation.outcomes import (
    Candidates,
    ClaimBusy,
    Entries,
    NotReady,
    StillWaiting,
    Unallocatable,
)
from operators.controllers.claimrules import is_allocated, pending
from operators.fencing import ALLOCATED_BY_ANNOTATION, AllocationRecord
from operators.kube import POD_GROUPS, Conflict, NotFound

if TYPE_CHECKING:
    from operators.controllers.allocation.controller import AllocationController

log = structlog.get_logger(__name__)

REASON_POD_GROUP_NOT_SERVED = "PodGroupNotServed"
POD_GROUP_GRACE = 1.0
"""Seconds a pod whose PodGroup does not exist waits before it is told (the PodGroup may be
created right after the pod, as workload controllers do)."""

GANG_SEARCH_EXTRA = 16
"""Members beyond the ones a gang still needs that its search looks at (first in name order),
to choose from where members differ: a gang of 4 with 4,000 gated members costs a search over
20 members' claims and node filters per decision, not over 4,000."""


@dataclass(frozen=True)
class GangTold:
    """What the last full look at a gang told every member, and which newcomer may be told
    the same without another look (see ``_tell_as_told``)."""

    size: int
    topology: str
    message: str
    after: Key | None = None
    """None: the gang waits for members, and a newcomer is told so while fewer pods than its
    size name the gang. A key: the gang was searched and did not fit; a newcomer whose key
    sorts after this one (the last member searched by name) would not be searched either."""
    carrier: Key | None = None
    """The member whose Events say it for the gang (``_tell_gang``). When it leaves, the
    others are not decided again (``gated_member_left``), so another member is told in
    Events instead (``hand_over_events``, or a newcomer: ``_tell_as_told``): else a user
    would find no Event on any member."""
    carried: Unallocatable | None = None
    """What the carrier's Events say (the searched members' reason, details included; the
    members behind a search are told ``message``)."""


class _Ready:
    """One member that can take part in the search."""

    def __init__(self, pod: Pod, entries: Entries, candidates: Candidates) -> None:
        self.pod = pod
        self.entries = entries
        self.candidates = candidates

    @property
    def key(self) -> Key:
        return Key(self.pod.namespace, self.pod.name)


def _holdings(pod: Pod, entries: Entries) -> list[ResourceClaim]:
    """Claims allocated and reserved for this gated member (a gang write cut short)."""
    return [
        claim
        for _, claim in entries
        if is_allocated(claim) and claimrules.reserved_for(claim, pod.uid)
    ]


async def gang_of(controller: AllocationController, pod: Pod) -> GangRef | None:
    """The gang ``pod`` belongs to, or None if it is allocated on its own.

    Its gang annotations if it has them (malformed ones raise :class:`Unallocatable`),
    else the gang its PodGroup's policy makes. A PodGroup that does not exist raises
    :class:`StillWaiting` for :data:`POD_GROUP_GRACE` seconds, then :class:`Unallocatable`
    (the PodGroup's creation wakes the pod); one whose policy dralloc cannot follow raises
    :class:`Unallocatable`. Where the API server serves no PodGroups, the pod is allocated
    on its own and told so once."""
    group: PodGroup | None = None
    key = Key(pod.namespace, pod.name)
    if pod.gang is None and not pod.gang_error and pod.pod_group:
        groups = controller.runtime.cache[POD_GROUPS]
        if groups.not_served:
            await _tell_not_served(controller, pod)
            return None
        group = groups.get(Key(pod.namespace, pod.pod_group))
        if group is None:
            now = time.monotonic()
            if now - controller.pod_group_missing_since.setdefault(key, now) < POD_GROUP_GRACE:
                raise StillWaiting()
        else:
            controller.pod_group_missing_since.pop(key, None)
    # Malformed annotations, a missing PodGroup or one whose policy dralloc cannot follow:
    # told on this pod.
    gang, problem = resolve_gang(pod.gang, pod.gang_error, pod.namespace, pod.pod_group, group)
    if problem:
        raise Unallocatable(problem)
    too_large = gang_too_large(gang, controller.settings.max_gang_size) if gang else None
    if too_large:
        raise Unallocatable(too_large)
    return gang


def _member_gang(controller: AllocationController, pod: Pod) -> GangRef | None:
    """:func:`gang_of` for another member of a gang: None where that raises (the member's
    own decision tells it why)."""
    group: PodGroup | None = None
    if pod.gang is None and not pod.gang_error and pod.pod_group:
        group = controller.runtime.cache[POD_GROUPS].get(Key(pod.namespace, pod.pod_group))
    return resolve_gang(pod.gang, pod.gang_error, pod.namespace, pod.pod_group, group)[0]


def check_member_alone(pod: Pod, gang: GangRef) -> None:
    """Raise :class:`Unallocatable` unless a gang member neither gated nor bound may be
    allocated on its own.

    One that passed the gate by may not: allocated alone, kube-scheduler would bind it while
    the others wait (a gang released in part). One dralloc released with its gang (its
    allocation record says so: only the operator may write it) and whose claims were cleared
    since may, as any released pod: kube-scheduler's PostFilter clears a claim when its view
    has no node for the pod (a node it has not seen yet), and the gang was placed already.
    Unless the gang has a topology: placed alone, the member could land outside the value its
    gang shares, so it is told instead."""
    if AllocationRecord.parse(pod.annotations.get(ALLOCATED_BY_ANNOTATION)) is None:
        raise Unallocatable(
            f"gang {gang.name}: this member has no {SCHEDULING_GATE} gate (created while the "
            "webhook was away, or the gate removed by hand); a gang is placed only while all "
            "its members are gated, so this pod is not allocated alone: delete it and create "
            "it again"
        )
    if gang.topology is not None:
        raise Unallocatable(
            f"gang {gang.name}: this member's claims were cleared after its gang was placed "
            "(kube-scheduler does that to a pod it finds no node for); placed alone it could "
            f"leave the {gang.topology.describe()} its gang shares, so it is not: delete it "
            "and create it again (its controller, if it has one, makes it anew at the gate)"
        )


def member_changed(old: Pod | None, new: Pod | None) -> bool:
    """Whether a pod event may change its gang's decision, so that the other members must
    decide again: a member left (deleted, finished, moved to another gang) or was released,
    or one came that is never gated (a pod without claims, such as a job's launcher, counts
    as released at once; a gated newcomer decides for the gang itself). A pod of a PodGroup
    counts as a member whatever the group's policy (the event is rare: transitions only)."""
    if old is None:
        return new is not None and bool(new.gang_keys()) and not new.gated and not new.done
    if not old.gang_keys():
        return False
    if new is None or new.gang_keys() != old.gang_keys() or new.gang != old.gang:
        return True
    # Transitions only: a released member's own updates (it starts, runs, reports) change
    # nothing for the others, and a gang of N pods would otherwise cost N requeues (and,
    # for members still waiting, a gang search) per status update of every member.
    released = old.gated and not new.gated
    return released or (new.done and not old.done) or (new.deleting and not old.deleting)


def gang_members(
    controller: AllocationController, pod: Pod, gang: GangRef
) -> tuple[list[tuple[Pod, GangRef]], int]:
    """The live, gated pods of the gang, in name order, each with the gang as it names it
    (annotations or PodGroup), and how many live members were released already and hold
    their devices (they count as placed: a gang write cut short between two pod writes is
    finished by placing only the members still gated). A member without claims (a job's
    launcher) holds what it needs at once; one that passed the gate by with its claims not
    allocated for it holds nothing (it is not allocated alone: see
    ``check_member_alone``), so it does not make up the gang's size."""
    keys = controller.pods.index_keys(POD_GANG_INDEX, (pod.namespace, gang.name))
    gated: list[tuple[Pod, GangRef]] = []
    released = 0
    for key in sorted(keys):
        member = controller.pods.get(key)
        if member is None or member.done or member.deleting:
            continue
        ref = gang if key == Key(pod.namespace, pod.name) else _member_gang(controller, member)
        if ref is None or ref.name != gang.name:
            continue  # annotated into another gang, or its PodGroup is no gang
        if member.gated:
            gated.append((member, ref))
        elif _holds_its_devices(controller, member):
            released += 1
    return gated, released


def _holds_its_devices(controller: AllocationController, member: Pod) -> bool:
    """Every claim of the member is allocated and reserved for it (an entry that needs no
    claim aside)."""
    for entry in member.claims:
        name = member.claim_name(entry)
        if name == "":
            continue  # no claim is needed for this entry
        claim = controller.claims.get(Key(member.namespace, name)) if name else None
        if claim is None or not claimrules.reserved_for(claim, member.uid):
            return False
    return True


def _holds_any(controller: AllocationController, member: Pod) -> bool:
    """Some claim of the member is allocated (for it or not)."""
    for entry in member.claims:
        name = member.claim_name(entry)
        claim = controller.claims.get(Key(member.namespace, name)) if name else None
        if claim is not None and is_allocated(claim):
            return True
    return False


async def sync_gang(controller: AllocationController, pod: Pod, gang: GangRef) -> None:
    """Decide for the whole gang of ``pod`` (see the module docstring)."""
    if await _tell_as_told(controller, pod, gang):
        return
    forget_told(controller, pod.namespace, gang.name)
    named, released = gang_members(controller, pod, gang)
    members = [member for member, _ in named]
    # Members released already count as placed; the rest must make up the gang size (at
    # least one: once the size is reached, later members are placed as they fit).
    need = max(gang.size - released, 1)
    # kube-scheduler (GenericWorkload) queues the pods of a PodGroup as one entity, which
    # stays gated while any of them is: members released while another waits at dralloc's
    # gate would hold devices for pods it never schedules. So where a member belongs to a
    # PodGroup, every gated member is placed, or none.
    whole = any(member.pod_group for member in members)
    if whole:
        need = max(need, len(members))
    keys = [Key(m.namespace, m.name) for m in members]
    if any(k in controller.commits.in_flight or k in controller.writer.written for k in keys):
        raise ClaimBusy()  # a member's writes are on their way: look again shortly
    for what, values in (
        ("gang size", {str(ref.size) for _, ref in named}),
        ("gang topology", {str(ref.topology) for _, ref in named}),
    ):
        if len(values) > 1:
            message = (
                f"{gang.label}: its members disagree on the {what} "
                f"({', '.join(sorted(values))}); give every member the same value"
            )
            await _tell_gang(controller, members, Unallocatable(message))
            return
    if len(members) < need:
        # Too few members for the gang: no search could place it, and none runs (nor the
        # members' node filters) until one more comes; each arrival costs a look at the
        # members' claims and, for the newcomer, one condition write.
        await _wait_for_members(controller, gang, members, released)
        return
    # The search looks at the first members only (see GANG_SEARCH_EXTRA); those behind them
    # are told that they wait behind (``_tell_behind``), and come into the search as the
    # first ones are placed.
    # A PodGroup's members go together, so all of them.
    # Members holding devices (a cut-short gang write) are always searched, so that what
    # they hold is counted as placed or given back.
    if whole:
        searched, behind = members, []
    else:
        holding: list[Pod] = []
        others: list[Pod] = []
        for member in members:
            (holding if _holds_any(controller, member) else others).append(member)
        cut = max(need + GANG_SEARCH_EXTRA, len(holding))
        searched, behind = (holding + others)[:cut], (holding + others)[cut:]
    ready: list[_Ready] = []
    unready: list[Pod] = []
    own_reasons: set[str] = set()  # members told a reason of their own (kept, not overwritten)
    for member in searched:
        try:
            entries = controller.decider.resolve_claims(member)
            ready.append(_Ready(member, entries, controller.decider.candidates(member, entries)))
        except (NotReady, StillWaiting):
            unready.append(member)  # its claims are still being created
        except Unallocatable as reason:
            await _tell_all(controller, [member], reason)
            unready.append(member)
            own_reasons.add(member.uid)
    gang_members_in_search = [
        GangMember(str(r.key), [claim for _, claim in pending(r.entries)], r.candidates.infos)
        for r in ready
    ]
    try:
        found: GangPlacement = await controller.thread.run(
            functools.partial(
                find_gang,
                controller.state,
                gang_members_in_search,
                need,
                str(controller.settings.node_policy),
                budget_seconds=controller.settings.decision_budget or None,
                topology=gang.topology,
            )
        )
    except DecisionTimeout:
        found = GangPlacement(
            need,
            len(ready),
            reason=f"the gang search exceeded {controller.settings.decision_budget:g}s",
            budget_exhausted=True,
        )
    if not found.fits:
        metrics.ALLOCATIONS.labels(result="unallocatable").inc()
        await _give_back(controller, [(r.pod, r.entries) for r in ready])
        # No member counts in the text: every member's condition is rewritten when what it
        # says changes, not on each arrival (`dralloc explain` counts the members).
        notes = []
        if whole and need > gang.size - released:
            notes.append(f"minCount {gang.size}, but all its gated members go together")
        if unready:
            notes.append("some members wait for their claims")
        if behind:  # no count of those present: it would rewrite every member on each arrival
            notes.append(f"the search looks at {len(searched)} of its members at a time")
        noted = f" ({'; '.join(notes)})" if notes else ""
        message = f"{gang.label}{noted}: {found.reason}"
        details = [
            f"member {name}: {placement.explanation.lines()[0]}"
            for name, placement in found.blocking.items()
            if placement.explanation is not None and placement.explanation.lines()
        ]
        if whole and need > gang.size - released:
            details.insert(
                0,
                f"all {len(members)} gated members are placed together: kube-scheduler "
                "schedules a PodGroup only once none of its pods is gated",
            )
        said = Unallocatable(message, details)
        carrier = await _tell_gang(
            controller, [m for m in searched if m.uid not in own_reasons], said
        )
        await _tell_behind(controller, pod.namespace, gang, behind)
        # Holders come first in the search: its last member holds nothing unless all do.
        last = searched[-1] if searched else None
        if behind and last is not None and not _holds_any(controller, last):
            controller.gangs_told[(pod.namespace, gang.name)] = GangTold(
                gang.size,
                str(gang.topology),
                _behind_words(gang),
                after=Key(last.namespace, last.name),
                carrier=carrier,
                carried=said,
            )
        # One member stands for the gang (any member's sync decides for all of them): a
        # cluster change then costs one gang decision, not one per member.
        controller.waiting.add(keys[0])
        controller.queue.retry(keys[0])  # safety net; cluster changes wake it sooner
        return
    by_name = {str(r.key): r for r in ready}
    placed = [
        Placed(by_name[p.member].pod, by_name[p.member].entries, p.node, list(p.allocations))
        for p in found.placed
    ]
    left_out = [r.pod for r in ready if str(r.key) not in {p.member for p in found.placed}]
    if left_out or behind:
        # One stands for the gang among the pods cluster changes wake (its decision places
        # the others too), and the words count nobody: members left out are told once,
        # with one Event, not rewritten (and woken) at each placement.
        first = (left_out or behind)[0]
        controller.waiting.add(Key(first.namespace, first.name))
    if left_out:
        await _tell_gang(
            controller,
            left_out,
            Unallocatable(
                f"{gang.label}: members were placed as they fit; this one waits for room"
            ),
        )
    await _tell_behind(controller, pod.namespace, gang, behind)
    log.info(
        "gang placed",
        gang=f"{pod.namespace}/{gang.name}",
        members=[str(p.key) for p in placed],
        searches=found.searches,
    )
    await controller.commits.start(placed, f"{pod.namespace}/{gang.name}")


async def _give_back(controller: AllocationController, members: list[tuple[Pod, Entries]]) -> None:
    """A gang that cannot be completed holds nothing: claims a cut-short gang write
    allocated for its members are released (conditional writes; a conflict retries)."""
    for pod, entries in members:
        for claim in _holdings(pod, entries):
            log.info("gang member gives back its devices", pod=pod.ref, claim=claim.metadata.name)
            with contextlib.suppress(Conflict, NotFound):
                await claimstatus.release_claim(
                    controller.runtime.client,
                    controller.claims,
                    controller.runtime.protocol,
                    claim,
                    pod.uid,
                )


async def _tell_as_told(controller: AllocationController, pod: Pod, gang: GangRef) -> bool:
    """A gated newcomer told what its gang's last full look told every member, without a
    look at the others (each arrival of a thousand members would otherwise cost a look at all
    those present: quadratic in the members). See ``GangTold`` for when that holds: while
    the gang waits for members, or for a newcomer that sorts behind the members a search
    that did not fit looked at. Anything else that may change the decision (a member
    released or never gated, the operator restarted) forgets it (``forget_told``), and
    cluster changes wake the member that stands for the gang, which sorts first.

    The newcomer's own claims are looked at: a reason of its own wins, and what it holds is
    given back (a newcomer holding devices behind a searched gang is looked at fully)."""
    told = controller.gangs_told.get((pod.namespace, gang.name))
    if told is None or (told.size, told.topology) != (gang.size, str(gang.topology)):
        return False
    if told.after is None:
        if controller.pods.index_count(POD_GANG_INDEX, (pod.namespace, gang.name)) >= gang.size:
            return False
    elif Key(pod.namespace, pod.name) <= told.after or _holds_any(controller, pod):
        return False
    try:
        entries = controller.decider.resolve_claims(pod)
    except (NotReady, StillWaiting):
        return True  # its claims are still being created; its next event brings it back
    except Unallocatable as reason:
        await _tell_all(controller, [pod], reason)
        return True
    await _give_back(controller, [(pod, entries)])
    with contextlib.suppress(Conflict, NotFound):
        await controller.reporter.explain(pod, Unallocatable(told.message), events=False)
    if not _carrier_waits(controller, told, gang.name):
        # The carrier left before it was recorded (during the look's writes): no handover
        # was asked for, so this member carries the gang's Events from now on.
        await controller.reporter.post_events(pod, told.carried or Unallocatable(told.message))
        key = (pod.namespace, gang.name)
        if controller.gangs_told.get(key) is told:
            controller.gangs_told[key] = replace(told, carrier=Key(pod.namespace, pod.name))
    return True


def _waits_in(controller: AllocationController, member: Pod | None, gang: str) -> bool:
    """The pod is a gated, live member of the gang ``gang`` (as its own annotations or
    PodGroup resolve it)."""
    if member is None or not member.gated or member.deleting or member.done:
        return False
    ref = _member_gang(controller, member)
    return ref is not None and ref.name == gang


def _carrier_waits(controller: AllocationController, told: GangTold, gang: str) -> bool:
    carrier = told.carrier
    return carrier is not None and _waits_in(controller, controller.pods.get(carrier), gang)


def forget_told(controller: AllocationController, namespace: str, gang: str) -> None:
    """The gang's next decision looks at every member again (see ``_tell_as_told``)."""
    controller.gangs_told.pop((namespace, gang), None)


def told_already(controller: AllocationController, namespace: str, gang: str) -> bool:
    """Every member was told by the gang's last full look, which it waits or did not fit.

    No member holds devices the gang's writes gave it then: that look gave them back, and
    any search since (the only way to new gang writes) would have forgotten it."""
    return (namespace, gang) in controller.gangs_told


def gated_member_left(old: Pod | None, new: Pod | None) -> bool:
    """A gated member left its gang (deleted, or moved to another): of a gang told already,
    it changes nothing the others were told (the words count no members; fewer members fit
    no better) and gives nothing back, so the others need not decide again (a namespace of
    a thousand members deleted would otherwise cost a look at all of them per deletion)."""
    return old is not None and old.gated and (new is None or new.gated)


async def _wait_for_members(
    controller: AllocationController, gang: GangRef, members: list[Pod], released: int
) -> None:
    """Fewer members than the gang needs: said on each (unchanged words write nothing), and
    what a cut-short gang write left with the members is given back."""
    holders: list[tuple[Pod, Entries]] = []
    own_reasons: set[str] = set()  # members told a reason of their own (kept, not overwritten)
    for member in members:
        try:
            entries = controller.decider.resolve_claims(member)
        except (NotReady, StillWaiting):
            continue  # its claims are still being created
        except Unallocatable as reason:
            await _tell_all(controller, [member], reason)
            own_reasons.add(member.uid)
            continue
        if _holdings(member, entries):
            holders.append((member, entries))
    await _give_back(controller, holders)
    already = f", {released} of them released already" if released else ""
    message = (
        f"{gang.label} waits for its members: it is placed once {gang.size} are present"
        f"{already}; fewer are now (`dralloc explain` counts them)"
    )
    said = Unallocatable(message)
    carrier = await _tell_gang(controller, [m for m in members if m.uid not in own_reasons], said)
    controller.gangs_told[(members[0].namespace, gang.name)] = GangTold(
        gang.size, str(gang.topology), message, carrier=carrier, carried=said
    )
    # Arrivals and departures requeue the gang (the pod watch), and so does the arrival of a
    # member that is never gated (one without claims, a launcher): counted as released. One
    # member also stands for the gang among the waiting pods, with a backoff retry, as a
    # safety net; its decision is this cheap one while too few are present.
    first = Key(members[0].namespace, members[0].name)
    controller.waiting.add(first)
    controller.queue.retry(first)


async def _tell_gang(
    controller: AllocationController, pods: list[Pod], reason: Unallocatable
) -> Key | None:
    """A reason of the whole gang on every member's condition, and in Events on the first
    member only: a gang of a thousand members posts one Event per change, not a thousand.
    The first member's Events are posted whether or not its own condition changed (a member
    that became first when another left has none yet); the recorder drops repeats. Returns
    the member that carries the Events."""
    for index, member in enumerate(pods):
        with contextlib.suppress(Conflict, NotFound):
            await controller.reporter.explain(member, reason, events=False)
        if index == 0:
            await controller.reporter.post_events(member, reason)
    return Key(pods[0].namespace, pods[0].name) if pods else None


HANDOVER_DELAY_S = 1.0
"""Seconds between the departure of the member carrying a gang's Events and the Events on
another: members deleted within that time (a job or namespace deleted, in name order) cost
one handover, not one Event per departure."""


def carrier_left(controller: AllocationController, namespace: str, gang: str, left: Key) -> None:
    """A member left a gang told already; if it carried the gang's Events, another member
    will (see ``GangTold.carrier``)."""
    told = controller.gangs_told.get((namespace, gang))
    if told is None or told.carrier != left:
        return
    writers = controller.commits.writers
    handover = hand_over_events(controller, namespace, gang, told)
    try:
        if writers is None:
            raise RuntimeError("the controller never ran")
        writers.create_task(handover)
    except RuntimeError:  # not running (standing by): the gang's next decision looks again
        handover.close()
        forget_told(controller, namespace, gang)


async def hand_over_events(
    controller: AllocationController, namespace: str, gang: str, told: GangTold
) -> None:
    """After ``HANDOVER_DELAY_S``, the gang's words in Events on its first waiting member,
    which carries them from then on; nothing when the gang was decided again meanwhile (that
    decision told a member in Events) or no member waits any more."""
    await asyncio.sleep(HANDOVER_DELAY_S)
    if controller.gangs_told.get((namespace, gang)) is not told:
        return
    gated = [
        member
        for key in controller.pods.index_keys(POD_GANG_INDEX, (namespace, gang))
        if _waits_in(controller, member := controller.pods.get(key), gang) and member is not None
    ]
    if not gated:
        return
    carrier = min(gated, key=lambda member: member.name)
    try:
        await controller.reporter.post_events(carrier, told.carried or Unallocatable(told.message))
    except Exception:  # a bug here must not end the writers' scope; the gang's next decision tells
        log.exception("gang events not handed over", gang=f"{namespace}/{gang}")
        return
    if controller.gangs_told.get((namespace, gang)) is told:
        controller.gangs_told[(namespace, gang)] = replace(
            told, carrier=Key(namespace, carrier.name)
        )


def _behind_words(gang: GangRef) -> str:
    return (
        f"{gang.label}: more of its members are gated than its search looks at once; this "
        "one waits behind the first by name, whose conditions say why the gang waits "
        "(`dralloc explain` shows the whole gang)"
    )


BEHIND_WRITES = 8
"""Condition writes in flight at once when the members behind a search are told."""


async def _tell_behind(
    controller: AllocationController, namespace: str, gang: GangRef, members: list[Pod]
) -> None:
    """The members behind those a search looked at, told in words that stay the same
    whatever the search found (no Events): a decision that goes from "does not fit" to
    "placed some" and back rewrites the searched members' conditions, not thousands.

    Members whose condition says so already cost a look; the others are written by a
    background task, a few at a time, so that the allocation worker goes on with other
    namespaces' pods meanwhile (a gang of 4,000 that got these words at once held it for
    18 s). A later decision of the gang replaces a task still writing."""
    reason = Unallocatable(_behind_words(gang))
    stale = [m for m in members if (podcondition.current(m) or {}).get("message") != reason.summary]
    key = (namespace, gang.name)
    running = controller.gangs_telling.pop(key, None)  # even with nobody behind now
    if running is not None:
        running.cancel()
    if not stale:
        return
    assert controller.commits.writers is not None
    controller.gangs_telling[key] = controller.commits.writers.create_task(
        _write_behind(controller, key, stale, reason)
    )


async def _write_behind(
    controller: AllocationController,
    key: tuple[str, str],
    members: list[Pod],
    reason: Unallocatable,
) -> None:
    slots = asyncio.Semaphore(BEHIND_WRITES)
    failed: list[Exception] = []

    async def one(member: Pod) -> None:
        async with slots:
            try:
                await controller.reporter.explain(member, reason, events=False)
            except (Conflict, NotFound):
                pass  # the member changed or left; its next decision tells it
            except Exception as error:  # each write fails alone; the others go on
                failed.append(error)

    try:
        await asyncio.gather(*(one(member) for member in members))
    finally:
        if controller.gangs_telling.get(key) is asyncio.current_task():
            del controller.gangs_telling[key]
    if failed:  # told again by the gang's next decision
        log.warning(
            "gang members not told",
            gang=f"{key[0]}/{key[1]}",
            failed=len(failed),
            error=str(failed[0])[:300],
        )


async def _tell_all(
    controller: AllocationController, pods: list[Pod], reason: Unallocatable
) -> None:
    """The reason on every member (condition and Event; unchanged reasons write nothing)."""
    for member in pods:
        with contextlib.suppress(Conflict, NotFound):
            await controller.reporter.explain(member, reason)


async def _tell_not_served(controller: AllocationController, pod: Pod) -> None:
    """A pod of a PodGroup where dralloc reads none: say once (per pod) that it is allocated
    on its own, and how to make its group a gang all the same."""
    if pod.uid in controller.pod_groups_told:
        return
    controller.pod_groups_told.add(pod.uid)
    message = (
        f'pod belongs to PodGroup "{pod.pod_group}", but dralloc reads no PodGroups here '
        f"({WORKLOAD_GROUP}/{WORKLOAD_VERSION} is not served, or the operator's role may not "
        "list them), so it allocates this pod on its own. To allocate the group all or "
        f'nothing, annotate its pods with {GANG_ANNOTATION}: "{pod.pod_group}" and '
        f"{GANG_SIZE_ANNOTATION}: the group's minCount"
    )
    log.info("pod of an unread PodGroup allocated alone", pod=pod.ref, pod_group=pod.pod_group)
    await controller.runtime.events.post(pod.involved(), REASON_POD_GROUP_NOT_SERVED, message)
