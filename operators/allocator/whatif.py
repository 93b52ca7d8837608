"""The allocator's answer with some claims' devices freed: preemption's what-if.

Preemption asks "would the pod fit this node if these pods were gone?" many times over, one
victim added or taken back at a time. :class:`FreedDevices` answers it on a copy of the
counted usage: the devices, shared capacity and counters of the freed claims read as free in
its searches, and nothing in the state changes (the operator's decision thread keeps using
it). DeviceQuota charges are not freed: a pod that waits for its namespace's quota is not
helped by preemption here, so preemption never lets a namespace exceed its quota.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from operators.allocator.allocated import AllocatedDevices
from operators.allocator.errors import AllocationError
from operators.allocator.nodes import NodeInfo
from operators.allocator.results import ClaimAllocation
from operators.allocator.search import Search
from operators.allocator.state import AllocatorState, ClaimLike


class FreedDevices:
    def __init__(self, state: AllocatorState) -> None:
        self.state = state
        used = state.allocated
        self.allocated = AllocatedDevices(
            dict(used.exclusive),
            {device: set(ids) for device, ids in used.shares.items()},
            {device: dict(totals) for device, totals in used.capacity.items()},
        )
        self.searches = 0

    def free(self, claim: str) -> None:
        """Count the claim's devices as free (``namespace/name``)."""
        for item in self.state.usage_of(claim):
            self.allocated.remove(item)

    def hold(self, claim: str) -> None:
        """Count them as held again."""
        for item in self.state.usage_of(claim):
            self.allocated.add(item)

    def free_nomination(self, owner: str) -> None:
        """Count the devices nominated for ``owner`` as free: its own decision."""
        for item in self.state.nominated(owner):
            self.allocated.remove(item)

    def allocate(self, claims: Sequence[ClaimLike], node: NodeInfo) -> list[ClaimAllocation] | None:
        """The allocation of ``claims`` on ``node`` as things stand here (None: no fit)."""
        self.searches += 1
        state = self.state
        inputs = dataclasses.replace(state.search_inputs(), allocated=self.allocated)
        search = Search(
            claims=state.compile_claims(claims),
            node=node,
            pools=state.pools_for(node),
            inputs=inputs,
        )
        try:
            return search.run()
        except AllocationError:
            return None

    def fits(self, claims: Sequence[ClaimLike], node: NodeInfo) -> bool:
        """Whether ``claims`` (none allocated yet) can all be allocated on ``node`` now."""
        return not claims or self.allocate(claims, node) is not None
