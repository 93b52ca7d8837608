"""Errors of the allocator, with upstream's messages.

``AllocationError`` means the claims cannot be allocated anywhere as written
(bad class, bad CEL, too many devices, ...). ``NodeAllocationError`` means
only this node failed; other nodes may still work.
"""

from __future__ import annotations


class AllocationError(Exception):
    """Fatal for these claims: no node can help."""


class CapacityRequestError(AllocationError):
    """A capacity amount no device may take: negative, or too large for the range
    arithmetic of a request policy. Ends the allocation instead of skipping the device,
    so an out-of-range request cannot make the search try every device in turn."""


class NodeAllocationError(AllocationError):
    """This node failed for a reason worth reporting; try other nodes."""


class InvalidPoolsError(NodeAllocationError):
    def __init__(self, reasons: tuple[str, ...] = ()) -> None:
        detail = f" ({'; '.join(reasons)})" if reasons else ""
        super().__init__(f"invalid resource pools were encountered{detail}")
        self.reasons = reasons


class SearchAborted(NodeAllocationError):
    """The caller's deadline passed or it cancelled the search."""

    def __init__(self, cause: str) -> None:
        super().__init__(f"filter operation aborted: {cause}")


class SearchBudgetExceeded(NodeAllocationError):
    """The search tried more combinations than allowed (upstream's exponential cases)."""

    def __init__(self, node: str, budget: int) -> None:
        super().__init__(
            f"node {node}: search budget of {budget} steps exceeded while trying device "
            "combinations; simplify the claim's constraints or selectors, or raise the budget"
        )
        self.node = node
        self.budget = budget


class DecisionTimeout(Exception):
    """One decision (find_node for one pod) ran past its wall-clock deadline.

    Not an AllocationError: it says nothing about the claims or a node, only that this
    attempt took too long, so it leaves every cache as it was and goes straight to the
    caller, which tells the pod and tries again later.
    """

    def __init__(self, seconds: float) -> None:
        super().__init__(f"allocation search exceeded {seconds:g}s")
        self.seconds = seconds
