"""Which pods occupy which node, kept up to date from pod events rather than recomputed.

The filters need, per node, the sum of the requests of the pods there, their count and
their host ports, and, for inter-pod affinity and topology spread, the pods themselves.
Scanning every pod for every decision would make each decision cost as much as the
cluster; instead :class:`ClusterUsage` moves a pod's share when the pod changes. It also
counts pods the allocator has just placed and not yet seen come back through the watch
(``assume``), so two pods decided back to back never both take a node's last cpu.
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Hashable, Iterator

from operators.scheduling.model import HostPort, PodNeeds


@dataclasses.dataclass
class NodeTotals:
    """What the pods on one node hold."""

    requested: dict[str, int] = dataclasses.field(default_factory=dict)
    pods: int = 0
    ports: collections.Counter[HostPort] = dataclasses.field(default_factory=collections.Counter)
    members: dict[Hashable, PodNeeds] = dataclasses.field(default_factory=dict)

    def add(self, key: Hashable, pod: PodNeeds) -> None:
        self.members[key] = pod
        self.pods += 1
        for name, value in pod.requests.items():
            self.requested[name] = self.requested.get(name, 0) + value
        if pod.host_ports:  # few pods have any (an empty update is not free)
            self.ports.update(pod.host_ports)

    def remove(self, key: Hashable, pod: PodNeeds) -> None:
        del self.members[key]
        self.pods -= 1
        for name, value in pod.requests.items():
            left = self.requested.get(name, 0) - value
            if left:
                self.requested[name] = left
            else:
                self.requested.pop(name, None)
        if pod.host_ports:
            self.ports.subtract(pod.host_ports)
        for port in pod.host_ports:
            if self.ports[port] <= 0:
                del self.ports[port]

    def port_conflict(self, wanted: tuple[HostPort, ...], own: tuple[HostPort, ...] = ()) -> bool:
        """Whether a wanted port collides with one held here (``own``: the pod's, if it is
        already counted here)."""
        used = self.ports - collections.Counter(own) if own else self.ports
        return any(want.conflicts(port) for want in wanted for port in used)


_EMPTY = NodeTotals()


class ClusterUsage:
    """Pods by the node they occupy (see :attr:`PodNeeds.placed_node`), with totals."""

    def __init__(self) -> None:
        self._placed: dict[Hashable, tuple[str, PodNeeds]] = {}
        self._nodes: dict[str, NodeTotals] = {}
        self._assumed: dict[Hashable, str] = {}
        self._seen: dict[Hashable, PodNeeds] = {}
        # Pods with required anti-affinity terms: every decision must ask them whether
        # they repel the new pod, so they are kept apart from the (many) others.
        self.repelling: dict[Hashable, tuple[str, PodNeeds]] = {}
        self.generation = 0
        """Moves whenever any pod's share moves (callers cache per-pod work on it)."""

    def update(self, key: Hashable, pod: PodNeeds | None) -> None:
        """The pod as the watch shows it now (None: gone)."""
        if pod is None:
            self._seen.pop(key, None)
            self._assumed.pop(key, None)
            self._move(key, None)
            return
        self._seen[key] = pod
        node = pod.placed_node
        if node:
            self._assumed.pop(key, None)  # the watch caught up with our decision
        elif pod.terminal or pod.deleting:
            self._assumed.pop(key, None)
        else:
            node = self._assumed.get(key, "")
        self._move(key, (node, pod) if node else None)

    def assume(self, key: Hashable, pod: PodNeeds, node: str) -> None:
        """The allocator just chose ``node`` for the pod: count it there from now on."""
        self._assumed[key] = node
        self._seen.setdefault(key, pod)
        self._move(key, (node, self._seen[key]))

    def forget(self, key: Hashable) -> None:
        """The choice was not written after all: the pod is where the watch says."""
        if self._assumed.pop(key, None) is not None:
            self.update(key, self._seen.get(key))

    def _move(self, key: Hashable, to: tuple[str, PodNeeds] | None) -> None:
        before = self._placed.pop(key, None)
        if before is not None:
            node, pod = before
            totals = self._nodes[node]
            totals.remove(key, pod)
            if not totals.members:
                del self._nodes[node]
            self.repelling.pop(key, None)
        if to is not None:
            node, pod = to
            self._placed[key] = to
            there = self._nodes.get(node)
            if there is None:
                there = self._nodes[node] = NodeTotals()
            there.add(key, pod)
            if pod.anti_affinity:
                self.repelling[key] = to
        if before != to:
            self.generation += 1

    def on_node(self, node: str) -> NodeTotals:
        return self._nodes.get(node, _EMPTY)

    def node_of(self, key: Hashable) -> str:
        placed = self._placed.get(key)
        return placed[0] if placed else ""

    def placed(self) -> Iterator[tuple[Hashable, str, PodNeeds]]:
        """Every counted pod with its node."""
        for key, (node, pod) in self._placed.items():
            yield key, node, pod
