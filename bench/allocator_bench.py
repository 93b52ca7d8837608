"""scheduler_perf DRA workloads through the allocator alone; prints pods/s.

Run with ``python -m bench.allocator_bench`` (``--only NAME`` to filter,
``--quick`` for the small workloads). For each workload two placement loops
run on identical fresh states:

- ``scheduler``: what kube-scheduler does per pod: try candidate nodes (each
  pod starts where the previous one left off) with the per-node search until
  one fits, then record the allocation (assume), as upstream's Filter does;
- ``find_node``: ``AllocatorState.find_node`` (index prefilter, binpack).

The ratio find_node/scheduler is printed next to both figures. Steady-state
workloads delete each pod as soon as it is placed (its claim is released),
so utilisation stays at the level the init claims set.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from collections.abc import Callable
from typing import Any

from bench.workloads import (
    NODE_LABELS,
    WORKLOADS,
    Workload,
    backtracking_slices,
    claim,
    device_class,
    empty_class,
    node_names,
    partitionable_slices,
    resource_slice,
    taint_all_rule,
)
from operators.allocator import AllocatorState, NodeInfo

Placer = Callable[[AllocatorState, list[dict[str, Any]], list[NodeInfo]], str | None]


def build_state(w: Workload) -> tuple[AllocatorState, list[NodeInfo]]:
    state = AllocatorState()
    names = node_names(w)
    if w.kind == "gpu":
        for name in names[: w.nodes_with_dra]:
            state.upsert_slice(resource_slice(name, w.devices_per_node))
    else:
        build = partitionable_slices if w.kind == "partitionable" else backtracking_slices
        for i in range(w.resource_slices):
            for slice_obj in build(i):
                state.upsert_slice(slice_obj)
    state.upsert_class(device_class())
    if w.first_available:
        state.upsert_class(empty_class("no-such-class"))
    if w.tolerations:
        state.upsert_taint_rule(taint_all_rule())
    labelled = [NodeInfo(n, NODE_LABELS) for n in names[: w.nodes_with_dra]]
    return state, labelled + [NodeInfo(n) for n in names[w.nodes_with_dra :]]


class SchedulerLoop:
    """Per pod: candidate nodes in turn (rotating start), full search on each, first fit."""

    def __init__(self) -> None:
        self.next_start = 0

    def __call__(
        self, state: AllocatorState, claims: list[dict[str, Any]], nodes: list[NodeInfo]
    ) -> str | None:
        count = len(nodes)
        for offset in range(count):
            node = nodes[(self.next_start + offset) % count]
            results = state.allocate(claims, node)
            if results is not None:
                self.next_start = (self.next_start + offset + 1) % count
                for c, r in zip(claims, results, strict=True):
                    state.assume(c, r)
                return node.name
        return None


def find_node_placer(
    state: AllocatorState, claims: list[dict[str, Any]], nodes: list[NodeInfo]
) -> str | None:
    placement = state.find_node(claims, nodes, explain=False)
    if placement.node is None:
        return None
    for c, r in zip(claims, placement.allocations, strict=True):
        state.assume(c, r)
    return placement.node


def prefill(state: AllocatorState, w: Workload, nodes: list[NodeInfo]) -> None:
    """allocResourceClaims: claims one at a time, nodes shuffled, first node that works."""
    rng = random.Random(42)
    with_dra = nodes[: w.nodes_with_dra]
    for i in range(w.init_pods):
        c = claim("init", f"test-claim-{i}", w)
        order = with_dra[:]
        rng.shuffle(order)
        for node in order:
            results = state.allocate([c], node)
            if results is not None:
                state.assume(c, results[0])
                break


def warm_up(state: AllocatorState, w: Workload, nodes: list[NodeInfo], placer: Placer) -> None:
    """Place and release one pod, so one-off costs (CEL views, indexes) are not timed."""
    c = claim("warm-up", "pod", w)
    if placer(state, [c], nodes) is not None:
        state.release(c)


def run(w: Workload, placer: Placer) -> tuple[int, float, int]:
    """(pods placed in the measured phase, seconds, unschedulable pods)."""
    state, nodes = build_state(w)
    warm_up(state, w, nodes, placer)
    if w.steady_state:
        prefill(state, w, nodes)
        placed = failed = 0
        start = time.perf_counter()
        deadline = start + w.duration
        i = 0
        while time.perf_counter() < deadline:
            c = claim("test", f"pod-{i}", w)
            i += 1
            if placer(state, [c], nodes) is None:
                failed += 1
            else:
                placed += 1
                state.release(c)  # steady state: a pod is deleted as soon as it is scheduled
        return placed, time.perf_counter() - start, failed
    for i in range(w.init_pods // w.pods_per_claim):
        placer(state, [claim("init", f"claim-{i}", w)], nodes)
    placed = failed = 0
    start = time.perf_counter()
    for i in range(w.measure_pods // w.pods_per_claim):
        node = placer(state, [claim("test", f"claim-{i}", w)], nodes)
        if node is None:
            failed += w.pods_per_claim
        else:
            # The other pods sharing the claim only need its node: nothing to allocate.
            placed += w.pods_per_claim
    return placed, time.perf_counter() - start, failed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", help="run workloads whose name contains this text")
    parser.add_argument("--quick", action="store_true", help="skip the 500-node workloads")
    args = parser.parse_args(argv)
    selected = [
        w
        for w in WORKLOADS
        if (not args.only or args.only in w.name) and not (args.quick and w.nodes_with_dra >= 500)
    ]
    run(WORKLOADS[0], SchedulerLoop())  # warm-up: CEL compile caches are per process
    print(
        f"{'workload':<66} {'pods':>6} {'scheduler pods/s':>17} {'find_node pods/s':>17} {'ratio':>6} {'failed':>6}"
    )
    for w in selected:
        ref_pods, ref_secs, ref_failed = run(w, SchedulerLoop())
        pods, secs, failed = run(w, find_node_placer)
        ref_rate = ref_pods / ref_secs if ref_secs else float("inf")
        rate = pods / secs if secs else float("inf")
        ratio = rate / ref_rate if ref_rate else float("nan")
        print(
            f"{w.name:<66} {pods:>6} {ref_rate:>17.0f} {rate:>17.0f} {ratio:>6.2f} {failed + ref_failed:>6}"
        )
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
