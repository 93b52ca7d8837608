"""What one pod's allocation decision can come to: exceptions the decision raises and the
loop (:mod:`.controller`) answers, each with what it does next, and the node filter's answer
the decision chooses among.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

from operators.allocator.nodes import NodeInfo
from operators.api.models import ResourceClaim
from operators.cache.core import Node, PodResourceClaim
from operators.controllers import claimstatus

Entries = list[tuple[PodResourceClaim, ResourceClaim]]
"""A pod's claim entries, each with the claim it names, in the pod's order."""


class NotReady(Exception):
    """The pod cannot be considered yet (its claims are not all there); no message."""


class AlreadyAllocated(NotReady):
    """A bound pod whose claims are all allocated and reserved for it: nothing to allocate
    (the claim controller keeps its devices annotation in step with the claims)."""


@dataclasses.dataclass(frozen=True)
class Candidates:
    """The node filter's answer for one pod: what the device decision chooses among."""

    total: int
    """Nodes considered at all (all nodes; the pod's own node if it is bound)."""
    rejections: list[str]
    """Why the other nodes are out (the scheduler's words; a node may give several)."""
    nodes: list[Node]
    infos: Sequence[NodeInfo]
    """The allocator's view of ``nodes``; the one tuple of every node when all are in, so
    the allocator can keep what it learnt about them from pod to pod (first-fit's floor)."""
    admits: Callable[[NodeInfo], bool] | None = None
    """Set when the filter has not run yet (``nodes`` and ``rejections`` are empty, ``infos``
    are all nodes): the filter's verdict on one node, asked by the allocator only of nodes
    that could hold the devices. Reads the loop's caches, so only for a decision on the loop."""


class StillWaiting(Exception):
    """No node fits, as when last explained; the explanation is not recomputed yet."""


class ClaimBusy(Exception):
    """A claim of the pod is being written for another pod; look again in a moment."""


POD_REASON_UNALLOCATABLE = "Unallocatable"


class Unallocatable(Exception):
    """No node fits now: a one-line summary (pod condition), per-node-group details (Event),
    and what each claim concerned is told (its condition; by claim ``namespace/name``).
    ``pod_reason``: the pod condition's reason; any other than Unallocatable (a preemptor
    waiting for its victims) is told in a Normal Event of that reason, not a warning."""

    def __init__(
        self,
        summary: str,
        details: list[str] | None = None,
        *,
        reason: str = claimstatus.REASON_UNSCHEDULABLE,
        claims: dict[str, str] | None = None,
        pod_reason: str = POD_REASON_UNALLOCATABLE,
    ) -> None:
        super().__init__(summary)
        self.summary = summary
        self.details = details or []
        self.reason = reason
        self.claims = claims or {}
        self.pod_reason = pod_reason


class NeedsThread(Exception):
    """The decision did not end within the event loop's short slice: make it in the thread."""


class SliceUsed(Exception):
    """The pod's decision used up one slice of its budget; it goes to the back of the queue."""


class TooSlow(Unallocatable):
    """The decision ran out of its wall-clock budget: the pod is told and backs off (it is
    not woken by cluster changes, which would spend the budget again at once)."""
