"""Prioritized-list rank of an allocation, scored as kube-scheduler's DRA plugin does.

With firstAvailable, a node where a request gets its first alternative must
beat a node where it only gets a later one. Upstream's Score adds, per claim
and per firstAvailable request, ``8 - index`` of the subrequest the
allocation used (8 is the most subrequests a request may list); plain
requests add nothing. The totals are compared across nodes, higher first.
find_node ranks by this score before its own policy.
"""

from __future__ import annotations

from collections.abc import Sequence

from operators.allocator.compiled import CompiledClaim
from operators.allocator.results import ClaimAllocation

MAX_SUBREQUESTS = 8  # FirstAvailableDeviceRequestMaxSize


def subrequest_points(index: int) -> int:
    """What choosing the subrequest at ``index`` is worth."""
    return MAX_SUBREQUESTS - index


def best_possible_score(claims: Sequence[CompiledClaim]) -> int:
    """Score when every firstAvailable request gets its first subrequest."""
    return sum(
        subrequest_points(0) for claim in claims for r in claim.requests if r.first_available
    )


def allocation_score(
    claims: Sequence[CompiledClaim], allocations: Sequence[ClaimAllocation]
) -> int:
    """The score of allocations (one per claim, in order) of the claims."""
    score = 0
    for claim, allocation in zip(claims, allocations, strict=False):
        points: dict[str, int] | None = None  # made only for a claim with alternatives
        for request in claim.requests:
            if request.first_available:
                if points is None:
                    points = {}
                for index, sub in enumerate(request.first_available):
                    points[sub.full_name] = subrequest_points(index)
        if not points:
            continue
        used = {device.request for device in allocation.devices}
        score += sum(points[name] for name in used if name in points)
    return score
