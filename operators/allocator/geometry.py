"""Node choice by device geometry: ``binpack`` on partitionable devices.

Counting free matching devices (what ``binpack`` ranks by) says nothing on partitionable
devices: a 1g partition of an untouched GPU and one of a half-used GPU both count as one
free device, yet taking the first breaks a whole GPU that a later whole-GPU request needs.
Taking the first node that fits does exactly that whenever that node still has an untouched
GPU and a later one has a partly used GPU with room.

So when the devices a search picks consume counters, ``binpack`` compares the fitting nodes
first by the prioritized-list score (as always), then by how many of those devices come from
a counter set (a physical device) that nothing used before, fewest first, then by the node
name among the nodes compared (free counts mean nothing here; name order keeps filling the
same nodes, as first fit does). Which devices of a node are taken is the device policy's business (``pack`` picks the
best fit there, ``packing.py``).

Comparing needs a search per fitting node, so it stops at the first node (in rank order) that
breaks no whole device with the score it promised, or after ``WINDOW`` fitting nodes: deterministic, and bounded however big the cluster.
A pod whose devices consume no counters is placed exactly as before (the first node that fits
in rank order).

Measured (bench/fragmentation_bench.py): comparing by best fit across nodes too (the least
left on the touched devices) placed fewer large requests than name order, and so did stopping
at the first node for a whole-GPU request (which breaks a GPU wherever it goes, so the window
is searched and the lowest name taken): neither is done.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from operators.allocator.allocated import AllocatedDevices
from operators.allocator.compiled import DeviceId
from operators.allocator.packing import CounterSets, device_key
from operators.allocator.pools import Pool, counters_left
from operators.allocator.results import ClaimAllocation

# Fitting nodes compared at most per pod (each costs one search).
WINDOW = 16


def whole_devices_broken(
    pools: Sequence[Pool], allocated: AllocatedDevices, results: Sequence[ClaimAllocation]
) -> int | None:
    """How many of the allocation's devices come from a counter set untouched before it, or
    None when none of its devices consumes counters."""
    chosen = chosen_ids(results)
    broken = 0
    seen = False
    for pool in pools:
        if not pool.counter_sets:
            continue
        available: CounterSets | None = None
        for slice_ in pool.slices:
            for device in slice_.devices:
                if device.id not in chosen or not device.consumes_counters:
                    continue
                if available is None:
                    available = counters_left(pool, allocated)
                seen = True
                broken += device_key(device, pool.counter_sets, available, ())[0]
    return broken if seen else None


def chosen_ids(results: Sequence[ClaimAllocation]) -> set[DeviceId]:
    return {d.device_id for allocation in results for d in allocation.devices}


@dataclass
class GeometryChoice:
    """The best fitting node seen so far under the geometry order (see the module docstring)."""

    best: tuple[tuple[int, int, str], str, list[ClaimAllocation]] | None = None
    offered: int = 0
    done: bool = False  # no later node can do better, or the window is used up

    def offer(
        self,
        actual: tuple[int, int, str],
        promised: tuple[int, int, str],
        node: str,
        broken: int,
        results: list[ClaimAllocation],
    ) -> None:
        """A fitting node: its actual and its optimistic rank key (-score, policy value,
        name). Later candidates promise no better score than this one did."""
        self.offered += 1
        ranked = (actual[0], broken, actual[2])
        if self.best is None or ranked < self.best[0]:
            self.best = (ranked, node, results)
        perfect = broken == 0 and actual[0] <= promised[0]
        self.done = perfect or self.offered >= WINDOW
