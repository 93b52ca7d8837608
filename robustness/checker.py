"""The rules a recorded history must keep, checked at every revision.

The checker replays the history in revision order and keeps the cluster's state as the
watches showed it. After each event it re-judges only what the event can change (the devices
of a changed claim, the pods naming it, its namespace's quotas; a changed pod and its gang),
so a history of a long run is checked in one pass.

A rule broken at some revision opens an *episode*, closed at the first revision where it
holds again; an episode still open at the end is reported as open. This is what "at any
moment" means: two claims holding one device for 3 s and then not is a violation, found with
its length, even though the end state is clean.

Rules (``RULES``):

1. ``device-held-twice``: at no revision do two claims hold one device, except where upstream
   allows it (admin access holds nothing; shares of a multi-allocatable device may sit beside
   each other, never beside an exclusive hold). One claim holding a device twice counts too.
2. ``pod-bound-without-devices``: no bound, non-terminal pod names a claim that is missing,
   not allocated, not reserved for its UID, or allocated for another node (or a template
   entry whose claim is not known).
3. ``gang-released-partly``: no gang member is released (its gate gone, or bound) unless
   the gang was whole when its first member was released: every member present (as many as
   its size) with its claims allocated and reserved. Members that end after that do not tear
   it (a member deleted between the release and its binding, or while dralloc releases the
   others, included); nor does one whose deletion lands between dralloc's last look and its
   first gate lifted: within ``RELEASE_RACE_S`` of the gang's last whole revision, with no
   member come since (dralloc reads the members live right before it lifts their gates, and
   no write across pods is atomic: a deletion in between is a race only the user can lose,
   and dralloc reports the gang torn). Once every member is gone, a gang of that name is
   judged afresh. A
   member that never had a gate (created while the webhook was away) counts as released only
   once it is bound: nothing held it back, so only its binding can tear the gang. A gang
   named by a Workload API PodGroup has its ``minCount`` as size (a PodGroup not seen yet:
   no member may be released; one without a gang policy is no gang).
4. ``quota-exceeded``: no allocation makes a namespace's usage of a DeviceQuota go above its
   hard limit (devices, claims). A quota lowered below usage by its owner is not a
   violation; an allocation that raises usage while it is above is.
5. At the end of a settled run: ``pod-not-explained``, every pod with claims is bound with its
   devices, or carries a condition saying why and has a Warning Event (a gang member: it or
   another member of its gang, where dralloc posts a reason the whole gang shares);
   ``allocated-for-gone-pod``, no allocated claim is reserved for, or owned by, a pod that no
   longer exists.
6. ``preempted-without-cause``: a pod dralloc marks as a preemption victim has a lower
   priority than a pod with claims that waits (not bound, its ``preemptionPolicy`` not
   ``Never``) at that revision, or stopped waiting in the ``PREEMPTOR_WINDOW_S`` before (the
   preemptor may be deleted or bound by then): equal priority never preempts, nor does a
   pod that may not, nor a victim its preemptor.
"""

from __future__ import annotations

from collections import defaultdict, deque
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Final

from robustness.history import (
    POD_GROUP_GANG,
    TERMINAL_PHASES,
    ClaimFacts,
    DeviceId,
    Event,
    Gap,
    History,
    PodFacts,
    PodGroupFacts,
    QuotaFacts,
)

DEVICE_HELD_TWICE: Final = "device-held-twice"
POD_BOUND_WITHOUT_DEVICES: Final = "pod-bound-without-devices"
GANG_RELEASED_PARTLY: Final = "gang-released-partly"
QUOTA_EXCEEDED: Final = "quota-exceeded"
POD_NOT_EXPLAINED: Final = "pod-not-explained"
ALLOCATED_FOR_GONE_POD: Final = "allocated-for-gone-pod"
RELEASE_RACE_S: Final = 0.5
"""Seconds from a gang's last whole revision within which a member's deletion may race its
release (rule 3): dralloc's live read and its gate lifts take milliseconds (the race the
suite saw: 20 ms from the claims written to the release); a member deleted earlier, which
dralloc must have seen gone, is still found."""
PREEMPTED_WITHOUT_CAUSE: Final = "preempted-without-cause"
PREEMPTOR_WINDOW_S: Final = 60.0
"""How long a pod that stopped waiting still counts as a victim's possible preemptor (the
decision, the nomination and the victims' marks take seconds, and the traffic deletes pods
at random, the preemptor among them)."""
RULES: Final = (
    DEVICE_HELD_TWICE,
    POD_BOUND_WITHOUT_DEVICES,
    GANG_RELEASED_PARTLY,
    QUOTA_EXCEEDED,
    POD_NOT_EXPLAINED,
    ALLOCATED_FOR_GONE_POD,
    PREEMPTED_WITHOUT_CAUSE,
)


@dataclass(frozen=True)
class Violation:
    rule: str
    subject: str
    """What broke it: a device, a pod, a gang (``namespace/gang``), a quota."""
    detail: str
    """What was wrong when it began."""
    start_rv: int
    start_at: float
    end_rv: int | None = None
    """The first revision where the rule held again; None when it never did."""
    end_at: float | None = None
    closed_by_relist: str = ""
    """The kind whose relist synthesised the event that ended it (it may have ended
    earlier), or "" when a watched event did."""
    uncertain: bool = False
    """It began inside a stretch the recorder did not see and a relist ended it: its end is
    known only as late as the relist, so it may have ended before it began (a claim deleted
    in the gap is placed at the list's revision): it may not be real."""

    def duration(self, end_of_run: float) -> float:
        """How long it lasted, in seconds (to the end of the run when still open)."""
        return (end_of_run if self.end_at is None else self.end_at) - self.start_at

    def __str__(self) -> str:
        until = "still at the end" if self.end_rv is None else f"until rv {self.end_rv}"
        flag = " (unverifiable: recorder gap)" if self.uncertain else ""
        return f"{self.rule} {self.subject} from rv {self.start_rv} {until}{flag}: {self.detail}"


@dataclass
class Report:
    violations: list[Violation]
    events: int
    end_at: float

    @property
    def certain(self) -> list[Violation]:
        return [v for v in self.violations if not v.uncertain]

    @property
    def ok(self) -> bool:
        return not self.certain

    def by_rule(self) -> dict[str, int]:
        counts = dict.fromkeys(RULES, 0)
        for violation in self.certain:
            counts[violation.rule] += 1
        return counts

    def longest(self) -> dict[str, float]:
        """Per rule, the longest time it was broken, in seconds."""
        found = dict.fromkeys(RULES, 0.0)
        for violation in self.certain:
            found[violation.rule] = max(found[violation.rule], violation.duration(self.end_at))
        return found


@dataclass
class _Open:
    detail: str
    start_rv: int
    start_at: float


@dataclass
class _State:
    claims: dict[str, ClaimFacts] = field(default_factory=dict)
    pods: dict[str, PodFacts] = field(default_factory=dict)
    quotas: dict[str, QuotaFacts] = field(default_factory=dict)
    pod_groups: dict[str, PodGroupFacts] = field(default_factory=dict)
    holders: dict[DeviceId, dict[str, list[str]]] = field(default_factory=lambda: defaultdict(dict))
    """Device -> claim key -> how that claim holds it (one entry per result)."""
    users: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))
    """Claim key -> keys of the pods naming it."""
    gangs: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))
    """``namespace/gang`` -> member pod keys."""
    released: set[str] = field(default_factory=set)
    whole: dict[str, tuple[float, frozenset[str]]] = field(default_factory=dict)
    """Gang -> when it was last whole and its members then (rule 3's release race)."""
    ever_gated: set[str] = field(default_factory=set)
    """UIDs of the pods seen with a gate."""
    """Gangs that were whole when a member was bound, and have had a bound member since."""
    namespace_claims: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))
    owned: dict[str, dict[str, str]] = field(default_factory=lambda: defaultdict(dict))
    """Pod UID -> claim entry -> the key of the claim made for it (its owner reference and
    ``pod-claim-name``): the truth where the pod does not name it yet."""
    pod_by_uid: dict[str, str] = field(default_factory=dict)
    waiting: dict[str, int] = field(default_factory=dict)
    """Pod key -> priority of the pods with claims that wait now and may preempt (rule 6)."""
    waited: deque[tuple[float, int]] = field(default_factory=deque)
    """(when it stopped, priority) of the pods that stopped waiting, for
    ``PREEMPTOR_WINDOW_S`` (rule 6)."""


class Checker:
    """Replays a history; ``check`` is the whole of its public use."""

    def __init__(self) -> None:
        self.state = _State()
        self.open: dict[tuple[str, str], _Open] = {}
        self.closed: list[Violation] = []
        self.rv = 0
        self.at = 0.0
        self.relisted = ""

    # -- episodes -------------------------------------------------------------------------------

    def _judge(self, rule: str, subject: str, broken: str | None) -> None:
        """``broken``: why the rule does not hold for ``subject`` now, or None when it does."""
        key = (rule, subject)
        current = self.open.get(key)
        if broken is not None and current is None:
            self.open[key] = _Open(broken, self.rv, self.at)
        elif broken is None and current is not None:
            del self.open[key]
            self.closed.append(
                Violation(
                    rule, subject, current.detail, current.start_rv, current.start_at,
                    self.rv, self.at, closed_by_relist=self.relisted,
                )
            )  # fmt: skip

    # -- applying events ------------------------------------------------------------------------

    def apply(self, event: Event) -> None:
        self.rv, self.at = event.rv, event.at
        self.relisted = event.kind if event.relisted else ""
        facts = event.facts
        if isinstance(facts, ClaimFacts):
            self._apply_claim(facts, deleted=event.type == "DELETED")
        elif isinstance(facts, PodFacts):
            self._apply_pod(facts, deleted=event.type == "DELETED")
        elif isinstance(facts, PodGroupFacts):
            self._apply_pod_group(facts, deleted=event.type == "DELETED")
        else:
            self._apply_quota(facts, deleted=event.type == "DELETED")

    def _apply_claim(self, claim: ClaimFacts, *, deleted: bool) -> None:
        state = self.state
        old = state.claims.get(claim.key)
        before = self._quota_usage(claim.namespace)
        for held in old.devices if old else ():
            state.holders[held.device].pop(claim.key, None)
        if old is not None and old.owner_pod:
            state.owned[old.owner_pod].pop(old.pod_claim_name, None)
        if not deleted and claim.owner_pod:
            state.owned[claim.owner_pod][claim.pod_claim_name] = claim.key
        if deleted:
            state.claims.pop(claim.key, None)
            state.namespace_claims[claim.namespace].discard(claim.key)
        else:
            state.claims[claim.key] = claim
            state.namespace_claims[claim.namespace].add(claim.key)
            for held in claim.devices:
                state.holders[held.device].setdefault(claim.key, []).append(held.access)
        touched = {h.device for h in (old.devices if old else ())}
        if not deleted:
            touched |= {h.device for h in claim.devices}
        for device in sorted(touched):
            self._judge_device(device)
        pods = set(state.users.get(claim.key, ()))
        for owner in {c.owner_pod for c in (old, claim) if c is not None and c.owner_pod}:
            if owner in state.pod_by_uid:
                pods.add(state.pod_by_uid[owner])
        for pod_key in sorted(pods):
            self._judge_pod(pod_key)
        self._judge_quotas(claim.namespace, before)

    def _apply_pod(self, pod: PodFacts, *, deleted: bool) -> None:
        state = self.state
        old = state.pods.get(pod.key)
        if old is not None:
            for name in old.claim_names()[0]:
                state.users[f"{old.namespace}/{name}"].discard(old.key)
            if old.gang:
                state.gangs[f"{old.namespace}/{old.gang}"].discard(old.key)
        if old is not None:
            state.pod_by_uid.pop(old.uid, None)
        if deleted:
            state.pods.pop(pod.key, None)
            state.ever_gated.discard(pod.uid)
        else:
            state.pods[pod.key] = pod
            state.pod_by_uid[pod.uid] = pod.key
            if pod.gated:
                state.ever_gated.add(pod.uid)
            for name in pod.claim_names()[0]:
                state.users[f"{pod.namespace}/{name}"].add(pod.key)
            if pod.gang:
                state.gangs[f"{pod.namespace}/{pod.gang}"].add(pod.key)
        self._judge_pod(pod.key)
        for gang in {f"{p.namespace}/{p.gang}" for p in (old, pod) if p is not None and p.gang}:
            self._judge_gang(gang)
        self._judge_preemption(pod, old, deleted=deleted)

    def _apply_pod_group(self, group: PodGroupFacts, *, deleted: bool) -> None:
        if deleted:
            self.state.pod_groups.pop(group.key, None)
        else:
            self.state.pod_groups[group.key] = group
        self._judge_gang(f"{group.namespace}/{POD_GROUP_GANG}{group.name}")

    def _apply_quota(self, quota: QuotaFacts, *, deleted: bool) -> None:
        before = self._quota_usage(quota.namespace)
        if deleted:
            self.state.quotas.pop(quota.key, None)
        else:
            self.state.quotas[quota.key] = quota
        self._judge_quotas(quota.namespace, before, raised_by_claims=False)

    # -- rule 1 ---------------------------------------------------------------------------------

    def _judge_device(self, device: DeviceId) -> None:
        holds = self.state.holders.get(device) or {}
        exclusive = sorted(k for k, access in holds.items() for a in access if a == "exclusive")
        shared = sorted(k for k, access in holds.items() if "share" in access)
        broken = None
        if len(exclusive) > 1 or (exclusive and shared):
            broken = f"held by {', '.join(exclusive + shared)}"
        self._judge(DEVICE_HELD_TWICE, str(device), broken)

    # -- rule 2 ---------------------------------------------------------------------------------

    def _unsatisfied(self, pod: PodFacts) -> str | None:
        return unsatisfied(pod, self.state.claims, self.state.owned)

    def _judge_pod(self, key: str) -> None:
        pod = self.state.pods.get(key)
        broken = None
        if pod is not None and pod.bound and pod.has_claims:
            why = self._unsatisfied(pod)
            if why is not None:
                broken = f"bound to {pod.node}, but {why}"
        self._judge(POD_BOUND_WITHOUT_DEVICES, key, broken)
        if pod is not None and pod.gang:
            self._judge_gang(f"{pod.namespace}/{pod.gang}")

    # -- rule 3 ---------------------------------------------------------------------------------

    def _gang_size(self, gang: str, members: list[PodFacts]) -> int | None:
        """Members the gang needs (None: it is no gang, a PodGroup of another policy)."""
        namespace, _, name = gang.partition("/")
        if not name.startswith(POD_GROUP_GANG):
            return max((m.gang_size for m in members), default=0) or len(members)
        group = self.state.pod_groups.get(f"{namespace}/{name.removeprefix(POD_GROUP_GANG)}")
        if group is None:
            return len(members) + 1  # not known yet: nothing may be released
        return group.min_count

    def _judge_gang(self, gang: str) -> None:
        members = [self.state.pods[k] for k in sorted(self.state.gangs.get(gang, ()))]
        size = self._gang_size(gang, members)
        if size is None:
            self._judge(GANG_RELEASED_PARTLY, gang, None)
            return
        waiting = [m.name for m in members if self._unsatisfied(m) is not None]
        whole = bool(members) and len(members) >= size and not waiting
        # Released: nothing holds it back from kube-scheduler any more (its gate gone, or
        # bound).
        released = [
            m.name for m in members if m.bound or (not m.gated and m.uid in self.state.ever_gated)
        ]
        keys = frozenset(m.key for m in members)
        if whole:
            self.state.whole[gang] = (self.at, keys)
        if not members:
            self.state.released.discard(gang)  # all gone: a gang of that name starts afresh
            self.state.whole.pop(gang, None)
        elif released and (whole or self._lost_a_race(gang, keys)):
            self.state.released.add(gang)  # released whole; members may end from now on
        broken = None
        if released and gang not in self.state.released:
            broken = (
                f"{', '.join(released)} released with {len(members)} of {size} members present"
                + (f", {', '.join(waiting)} without devices" if waiting else "")
            )
        self._judge(GANG_RELEASED_PARTLY, gang, broken)

    def _lost_a_race(self, gang: str, members: frozenset[str]) -> bool:
        """The gang was whole moments ago and has only lost members since: one was deleted
        while dralloc lifted the gates (see rule 3)."""
        last = self.state.whole.get(gang)
        return last is not None and self.at - last[0] <= RELEASE_RACE_S and members <= last[1]

    # -- rule 4 ---------------------------------------------------------------------------------

    def _quota_usage(self, namespace: str) -> dict[str, tuple[int, int]]:
        """Quota key -> (devices, claims) the namespace's claims hold of it."""
        usage: dict[str, tuple[int, int]] = {}
        quotas = [q for q in self.state.quotas.values() if q.namespace == namespace]
        for quota in quotas:
            if quota.selectors:
                continue
            devices = claims = 0
            for key in self.state.namespace_claims.get(namespace, ()):
                counted = sum(
                    1
                    for held in self.state.claims[key].devices
                    if held.access != "admin" and held.device_class == quota.device_class
                )
                devices += counted
                claims += 1 if counted else 0
            usage[quota.key] = (devices, claims)
        return usage

    def _judge_quotas(
        self, namespace: str, before: dict[str, tuple[int, int]], *, raised_by_claims: bool = True
    ) -> None:
        after = self._quota_usage(namespace)
        for key, (devices, claims) in sorted(after.items()):
            quota = self.state.quotas[key]
            over = (quota.hard_devices is not None and devices > quota.hard_devices) or (
                quota.hard_claims is not None and claims > quota.hard_claims
            )
            was_devices, was_claims = before.get(key, (0, 0))
            raised = raised_by_claims and (devices > was_devices or claims > was_claims)
            subject_open = (QUOTA_EXCEEDED, key) in self.open
            if over and (raised or subject_open):
                self._judge(
                    QUOTA_EXCEEDED,
                    key,
                    f"{devices} devices in {claims} claims against hard "
                    f"devices={quota.hard_devices} claims={quota.hard_claims}",
                )
            else:
                self._judge(QUOTA_EXCEEDED, key, None)
        for rule, key in list(self.open):
            if rule == QUOTA_EXCEEDED and key.startswith(f"{namespace}/") and key not in after:
                self._judge(QUOTA_EXCEEDED, key, None)

    # -- rule 6 ---------------------------------------------------------------------------------

    def _judge_preemption(self, pod: PodFacts, old: PodFacts | None, *, deleted: bool) -> None:
        state = self.state
        while state.waited and state.waited[0][0] < self.at - PREEMPTOR_WINDOW_S:
            state.waited.popleft()
        waits = (
            not deleted
            and pod.has_claims
            and not pod.bound
            and pod.preempts
            and pod.phase not in TERMINAL_PHASES
        )
        before = state.waiting.pop(pod.key, None)
        if waits:
            state.waiting[pod.key] = pod.priority
        elif before is not None:
            state.waited.append((self.at, before))
        if deleted or not pod.preempted or (old is not None and old.preempted):
            return
        priorities = [*state.waiting.values(), *(priority for _, priority in state.waited)]
        if not any(priority > pod.priority for priority in priorities):
            self.closed.append(
                Violation(
                    PREEMPTED_WITHOUT_CAUSE, pod.key,
                    f"priority {pod.priority}, and no pod of a higher priority that may preempt "
                    f"waits, or did in the {PREEMPTOR_WINDOW_S:.0f} s before",
                    self.rv, self.at, self.rv, self.at, closed_by_relist=self.relisted,
                )
            )  # fmt: skip

    # -- rule 5 ---------------------------------------------------------------------------------

    def end_state(self, warned: frozenset[str]) -> list[Violation]:
        found = []
        pods = self.state.pods
        live = {p.uid for p in pods.values()}
        warned_pods = warned_through_gangs(pods.values(), warned)
        for key, pod in sorted(pods.items()):
            if not pod.has_claims or pod.phase in ("Succeeded", "Failed"):
                continue
            if pod.bound and self._unsatisfied(pod) is None:
                continue
            has_warning = key in warned_pods
            if pod.explained and has_warning:
                continue
            why = "not bound" if not pod.bound else str(self._unsatisfied(pod))
            lacks = [
                what
                for what, has in (
                    ("a condition", pod.explained),
                    ("a Warning Event", has_warning),
                )
                if not has
            ]
            found.append(
                Violation(
                    POD_NOT_EXPLAINED, key,
                    f"{why}, without {' and '.join(lacks)}" + (f" ({pod.why})" if pod.why else ""),
                    self.rv, self.at,
                )
            )  # fmt: skip
        for key, claim in sorted(self.state.claims.items()):
            if not claim.allocated:
                continue
            gone = sorted(uid for uid in claim.reserved_for if uid not in live)
            if claim.owner_pod and claim.owner_pod not in live:
                gone.append(f"owner {claim.owner_pod}")
            if gone:
                found.append(
                    Violation(
                        ALLOCATED_FOR_GONE_POD, key, f"allocated for gone pods {', '.join(gone)}",
                        self.rv, self.at,
                    )
                )  # fmt: skip
        return found


def _unverifiable(violation: Violation, gaps: Iterable[Gap]) -> bool:
    return any(
        gap.kind == violation.closed_by_relist and gap.after_rv < violation.start_rv <= gap.until_rv
        for gap in gaps
    )


def check(history: History) -> Report:
    """Every violation of ``RULES`` in the history, with how long each lasted."""
    checker = Checker()
    events = history.ordered()
    for event in events:
        checker.apply(event)
    violations = list(checker.closed)
    for (rule, subject), current in sorted(checker.open.items()):
        violations.append(
            Violation(rule, subject, current.detail, current.start_rv, current.start_at)
        )
    if history.settled:
        violations += checker.end_state(history.warned)
    marked = [replace(v, uncertain=_unverifiable(v, history.gaps)) for v in violations]
    marked.sort(key=lambda v: (v.start_rv, v.rule, v.subject))
    end_at = events[-1].at if events else 0.0
    return Report(marked, len(events), end_at)


def warned_through_gangs(pods: Iterable[PodFacts], warned: Collection[str]) -> frozenset[str]:
    """The pods with a Warning Event: their own, or, for a gang member, one on any member of
    its gang (dralloc posts a reason the whole gang shares on its first member)."""
    members = list(pods)
    gangs = {f"{p.namespace}/{p.gang}" for p in members if p.gang and p.key in warned}
    return frozenset(
        p.key for p in members if p.key in warned or (p.gang and f"{p.namespace}/{p.gang}" in gangs)
    )


def unsatisfied(
    pod: PodFacts, claims: Mapping[str, ClaimFacts], owned: Mapping[str, Mapping[str, str]]
) -> str | None:
    """Why the pod's claims are not all allocated and reserved for it (on its node), or None.

    ``claims`` by "namespace/name"; ``owned``: by pod UID, the claims generated for it by pod
    claim name (a template entry the pod does not record yet is found through its owner)."""
    names, missing = pod.claim_names()
    keys = [f"{pod.namespace}/{name}" for name in names]
    made = owned.get(pod.uid, {})
    unknown = [entry for entry in missing if entry not in made]
    if unknown:
        return f"no claim recorded for entries {', '.join(unknown)}"
    keys += [made[entry] for entry in missing]
    for key in keys:
        name = key.split("/", 1)[1]
        claim = claims.get(key)
        if claim is None:
            return f"claim {name} does not exist"
        if not claim.allocated:
            return f"claim {name} is not allocated"
        if pod.uid not in claim.reserved_for:
            return f"claim {name} is not reserved for the pod"
        if pod.node and claim.nodes and pod.node not in claim.nodes:
            return f"claim {name} is allocated on {', '.join(sorted(claim.nodes))}"
    return None
