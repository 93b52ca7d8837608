"""Gangs: dralloc's joint search against per-pod first-fit, on the same random workloads.

Run with ``python -m bench.gang_bench`` (``--quick`` for a small run, ``--markdown PATH`` to
write the table). Each workload is a cluster of N nodes with 8 GPUs each, part of them in use
already, and a stream of gangs (2 to 32 members, 1 to 8 GPUs per member, mixed). Both
strategies replay the same stream on identical fresh states:

- ``per-pod``: what in-tree DRA does: each member on its own, first-fit (find_node with the
  first-fit node policy, upstream's per-node search), devices kept as soon as a member is
  placed, so a gang that does not fit whole is half-placed and holds devices;
- ``gang``: ``find_gang`` (binpack, joint search): all members or none.

Figures: gangs placed whole; gangs satisfiable when their turn came (the free GPUs, counted
per node, had room for every member: all GPUs are alike, so that is exact) and how many of
those the strategy missed; gangs half-placed (and the GPUs they hold); the decision time per
gang (mean; p95 and max for gangs of 32 members). The ratio line compares the two in the
same run. Not a test: nothing is asserted.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from operators.allocator import AllocatorState, NodeInfo, UsedDevice
from operators.allocator.gang import GangMember, find_gang

DRIVER = "gpu.example.com"
GPUS_PER_NODE = 8


@dataclass(frozen=True)
class Workload:
    nodes: int
    gangs: int
    seed: int
    used_share: float  # GPUs in use before the stream

    @property
    def name(self) -> str:
        return f"{self.nodes} nodes, {self.gangs} gangs, {int(self.used_share * 100)}% used"


@dataclass
class Figures:
    whole: int = 0
    half: int = 0
    none: int = 0
    held_by_half: int = 0  # GPUs held by half-placed gangs
    seconds: list[float] = field(default_factory=list)
    seconds_32: list[float] = field(default_factory=list)
    satisfiable: int = 0  # gangs that could be placed whole when their turn came
    missed: int = 0  # of those, gangs not placed whole


def cluster(w: Workload) -> tuple[AllocatorState, list[NodeInfo]]:
    state = AllocatorState()
    state.upsert_class({"metadata": {"name": "gpu"}, "spec": {}})
    rng = random.Random(w.seed)
    nodes = [NodeInfo(f"node-{i:04d}") for i in range(w.nodes)]
    for node in nodes:
        devices = [{"name": f"gpu-{d}"} for d in range(GPUS_PER_NODE)]
        state.upsert_slice(
            {
                "metadata": {"name": f"{node.name}-gpus"},
                "spec": {
                    "driver": DRIVER,
                    "nodeName": node.name,
                    "pool": {"name": node.name, "generation": 0, "resourceSliceCount": 1},
                    "devices": devices,
                },
            }
        )
        for d in range(GPUS_PER_NODE):
            if rng.random() < w.used_share:
                state.allocated.add(UsedDevice(device=(DRIVER, node.name, f"gpu-{d}")))
    return state, nodes


def stream(w: Workload) -> list[list[tuple[str, int]]]:
    """Gangs as lists of (member name, GPUs per member)."""
    rng = random.Random(w.seed + 1)
    gangs = []
    for g in range(w.gangs):
        size = rng.choice([2, 4, 8, 16, 32])
        per_member = rng.choice([1, 2, 4, 8])
        gangs.append([(f"g{g}-m{m}", per_member) for m in range(size)])
    return gangs


def claim(name: str, count: int) -> dict[str, Any]:
    request = {"name": "gpus", "exactly": {"deviceClassName": "gpu", "count": count}}
    return {
        "metadata": {"name": name, "namespace": "bench"},
        "spec": {"devices": {"requests": [request]}},
    }


def satisfiable(state: AllocatorState, nodes: list[NodeInfo], gang: list[tuple[str, int]]) -> bool:
    """Whether the gang fits whole on the state as it is: every GPU is alike and the members
    of a gang ask for the same count, so a node with F free GPUs takes F // count members."""
    count = gang[0][1]
    free = dict.fromkeys((n.name for n in nodes), GPUS_PER_NODE)
    for _, pool, _ in state.allocated.exclusive:
        free[pool] -= 1
    return sum(f // count for f in free.values()) >= len(gang)


def _judge(out: Figures, fits: bool, placed_whole: bool) -> None:
    if fits:
        out.satisfiable += 1
        if not placed_whole:
            out.missed += 1


def per_pod(w: Workload) -> Figures:
    state, nodes = cluster(w)
    out = Figures()
    for gang in stream(w):
        fits = satisfiable(state, nodes, gang)
        started = time.perf_counter()
        placed = 0
        held = 0
        for name, count in gang:
            body = claim(name, count)
            found = state.find_node([body], nodes, "first-fit", explain=False)
            if found.node is not None:
                state.assume(body, found.allocations[0])
                placed += 1
                held += count
        _record(out, gang, time.perf_counter() - started)
        _judge(out, fits, placed == len(gang))
        if placed == len(gang):
            out.whole += 1
        elif placed:
            out.half += 1
            out.held_by_half += held
        else:
            out.none += 1
    return out


def joint(w: Workload) -> Figures:
    state, nodes = cluster(w)
    out = Figures()
    for gang in stream(w):
        members = [GangMember(name, [claim(name, count)], nodes) for name, count in gang]
        fits = satisfiable(state, nodes, gang)
        started = time.perf_counter()
        found = find_gang(state, members, len(members), "binpack")
        _record(out, gang, time.perf_counter() - started)
        _judge(out, fits, found.fits)
        if found.fits:
            out.whole += 1
            by_name = {m.name: m for m in members}
            for placed in found.placed:
                state.assume(by_name[placed.member].claims[0], placed.allocations[0])
        else:
            out.none += 1
    return out


def _record(out: Figures, gang: list[tuple[str, int]], seconds: float) -> None:
    out.seconds.append(seconds)
    if len(gang) == 32:
        out.seconds_32.append(seconds)


def _ms(values: list[float], how: str) -> str:
    if not values:
        return "-"
    if how == "mean":
        value = statistics.fmean(values)
    elif how == "p95":
        value = sorted(values)[min(len(values) - 1, int(len(values) * 0.95))]
    else:
        value = max(values)
    return f"{value * 1000:.1f}"


def table(rows: list[tuple[Workload, Figures, Figures]]) -> str:
    lines = [
        "| workload | strategy | placed whole | satisfiable (missed) | half-placed (GPUs held) | "
        "not placed | ms/gang mean | ms/32-gang p95 | ms/32-gang max |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for w, pod, gang in rows:
        for label, f in (("per-pod first-fit", pod), ("dralloc gang", gang)):
            lines.append(
                f"| {w.name} | {label} | {f.whole} | {f.satisfiable} ({f.missed}) | "
                f"{f.half} ({f.held_by_half}) | {f.none} | "
                f"{_ms(f.seconds, 'mean')} | {_ms(f.seconds_32, 'p95')} | "
                f"{_ms(f.seconds_32, 'max')} |"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small workloads only")
    parser.add_argument("--markdown", type=Path, help="also write the table here")
    args = parser.parse_args(argv)
    if args.quick:
        workloads = [Workload(100, 30, 1, 0.3)]
    else:
        workloads = [
            Workload(100, 60, 1, 0.3),
            Workload(100, 60, 2, 0.6),
            Workload(500, 150, 3, 0.3),
            Workload(500, 150, 4, 0.6),
        ]
    rows = []
    for w in workloads:
        pod, gang = per_pod(w), joint(w)
        rows.append((w, pod, gang))
        print(
            f"{w.name}: whole {pod.whole} -> {gang.whole}, half-placed {pod.half} -> "
            f"{gang.half}, ms/gang {_ms(pod.seconds, 'mean')} -> {_ms(gang.seconds, 'mean')} "
            f"(ratio {statistics.fmean(gang.seconds) / statistics.fmean(pod.seconds):.2f})",
            flush=True,
        )
    text = table(rows)
    print(text)
    if args.markdown:
        args.markdown.write_text(
            "# Gangs: dralloc's joint search vs per-pod first-fit\n\n"
            "`python -m bench.gang_bench --markdown bench/results/gang.md` (see the module "
            "docstring for the workloads).\n\n" + text + "\n"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
