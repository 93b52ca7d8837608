"""Who made an allocation, and when a replica must stop because another allocator acts.

The Lease keeps one allocator acting, but only among replicas that use the *same* Lease.
Two operators told different Lease names or namespaces (a laptop's ``kopf run`` next to the
in-cluster Deployment) would both lead and hand out devices twice. So every pod dralloc
allocates records its allocator (:data:`ALLOCATED_BY_ANNOTATION`: the Lease, the holder and
its term, the Lease's transition count when it took it), and every replica watches those
records. Seeing another allocator's record, the replica decides with :func:`stands_down`:

- same Lease, later term: someone took the Lease over; this replica is stale and stops now
  (its own renewal would find out a moment later);
- another Lease: two allocators are configured; exactly one goes on, the one whose Lease
  sorts first, so the outcome does not depend on timing; the other stops, says so, and stays
  standing by while the other's records keep coming.

Where the fencing policy is installed, the API server is the first line: it refuses a replica
that does not hold the configured Lease every claim and allocation (:data:`NOT_THE_HOLDER`),
and the replica stops on that refusal too, before it writes anything else.
"""

from __future__ import annotations

import dataclasses
import json

from operators.kube import FENCING_REFUSAL

ALLOCATED_BY_ANNOTATION = "resource.dralloc.dev/allocated-by"
NOT_THE_HOLDER = FENCING_REFUSAL
"""What the API server's fencing policy (manifests/base/claim-allocation-fencing.yaml) says
when it refuses a replica that does not hold the Lease its claim or allocation: the first line
of fencing, before any record is seen."""


@dataclasses.dataclass(frozen=True)
class AllocatorMark:
    """An allocator: its Lease (``namespace/name``), the holder identity and its term; an
    operator without leader election has no Lease (``""``) and term 0."""

    lease: str
    holder: str
    term: int

    @classmethod
    def without_lease(cls, holder: str) -> AllocatorMark:
        """An operator run without leader election: its records still say that dralloc
        allocated the pod (a released gang member is allocated again alone on that word), but
        they fence nobody, having no Lease to compare."""
        return cls("", holder, 0)

    def describe(self) -> str:
        if not self.lease:
            return f"{self.holder} (no leader election)"
        return f"Lease {self.lease} held by {self.holder} (term {self.term})"


@dataclasses.dataclass(frozen=True)
class AllocationRecord:
    """What a pod's :data:`ALLOCATED_BY_ANNOTATION` says: who allocated it, and when (wall
    clock seconds: records older than a replica's own leadership say nothing about now)."""

    by: AllocatorMark
    at: float

    def render(self) -> str:
        return json.dumps(
            {"lease": self.by.lease, "holder": self.by.holder, "term": self.by.term,
             "at": round(self.at, 3)},
            separators=(",", ":"),
            sort_keys=True,
        )  # fmt: skip

    @classmethod
    def parse(cls, text: str | None) -> AllocationRecord | None:
        """None for a missing or malformed record (it is never trusted for anything else)."""
        if not text:
            return None
        try:
            data = json.loads(text)
            mark = AllocatorMark(str(data["lease"]), str(data["holder"]), int(data["term"]))
            return cls(mark, float(data["at"]))
        except (ValueError, TypeError, KeyError, AttributeError):
            return None


def stands_down(ours: AllocatorMark, theirs: AllocatorMark) -> bool:
    """Must the allocator ``ours`` stop, having seen a recent allocation made by ``theirs``?

    Exactly one of two allocators that see each other's records stands down. A record without
    a Lease stops nobody: there is no Lease to ask whether its allocator still acts.
    """
    if theirs == ours or not theirs.lease or not ours.lease:
        return False
    if theirs.lease == ours.lease:
        return (theirs.term, theirs.holder) > (ours.term, ours.holder)
    return theirs.lease < ours.lease
