"""Gangs: dralloc's joint search against per-pod first-fit, on the same random workloads.

Run with ``python -m bench.gang_bench`` (``--quick`` for a small run, ``--markdown PATH`` to
write the table). Each workload is a cluster of N nodes with 8 GPUs each, part of them in use
already, and a stream of gangs (2 to 32 members, 1 to 8 GPUs per member, mixed). Both
strategies replay the same stream on identical fresh states:

- per-pod first-fit, what in-tree DRA does: each member on its own, first fit, devices kept as
  soon as a member is placed and never given back, so a gang that does not fit whole is
  half-placed and holds devices. Run twice: through upstream's allocator (bench/upstream, the
  way kube-scheduler's DynamicResources plugin runs it, per pod; ``-devices`` gives the
  devices each member got, ``-times`` the seconds each member took) and through dralloc
  (find_node with the first-fit node policy). The two must place every member on the same
  node with the same devices; the table note says whether they did;
- ``dralloc gang``: ``find_gang`` (binpack, joint search): all members or none.

Figures: gangs placed whole; gangs satisfiable when their turn came (the free GPUs, counted
per node, had room for every member: all GPUs are alike, so that is exact) and how many of
those the strategy missed; gangs half-placed (and the GPUs they hold); the decision time per
gang (mean; p95 and max for gangs of 32 members; a per-pod gang's time is the sum of its
members'). The ratio line compares dralloc's two in the same run. Not a test: nothing is
asserted.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.goprogram import GoProgramUnavailable, go_binary, run_scenario
from bench.scenario import placement_digest
from operators.allocator import AllocatorState, NodeInfo, UsedDevice
from operators.allocator.gang import GangMember, find_gang

DRIVER = "gpu.example.com"
GPUS_PER_NODE = 8
UPSTREAM_BUILD = Path(__file__).resolve().parent / "upstream" / "build"


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
    # Per-pod runs only, per member in stream order: (pod, node or "") and the devices taken
    # (driver/pool/device), to check upstream's and dralloc's placements are the same.
    placements: list[tuple[str, str]] = field(default_factory=list)
    taken: list[tuple[str, ...]] = field(default_factory=list)


GPU_CLASS: dict[str, Any] = {"metadata": {"name": "gpu"}, "spec": {}}


def node_names(w: Workload) -> list[str]:
    return [f"node-{i:04d}" for i in range(w.nodes)]


def node_slice(node: str) -> dict[str, Any]:
    return {
        "metadata": {"name": f"{node}-gpus"},
        "spec": {
            "driver": DRIVER,
            "nodeName": node,
            "pool": {"name": node, "generation": 0, "resourceSliceCount": 1},
            "devices": [{"name": f"gpu-{d}"} for d in range(GPUS_PER_NODE)],
        },
    }


def used_devices(w: Workload) -> list[tuple[str, str]]:
    """The GPUs in use before the stream, as (node, device)."""
    rng = random.Random(w.seed)
    return [
        (node, f"gpu-{d}")
        for node in node_names(w)
        for d in range(GPUS_PER_NODE)
        if rng.random() < w.used_share
    ]


def cluster(w: Workload) -> tuple[AllocatorState, list[NodeInfo]]:
    state = AllocatorState()
    state.upsert_class(GPU_CLASS)
    nodes = [NodeInfo(name) for name in node_names(w)]
    for node in nodes:
        state.upsert_slice(node_slice(node.name))
    for node_name, device in used_devices(w):
        state.allocated.add(UsedDevice(device=(DRIVER, node_name, device)))
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
    # Mode spelled out: upstream's allocator gets no API defaulting here.
    exactly = {"deviceClassName": "gpu", "allocationMode": "ExactCount", "count": count}
    request = {"name": "gpus", "exactly": exactly}
    return {
        "metadata": {"name": name, "namespace": "bench"},
        "spec": {"devices": {"requests": [request]}},
    }


def satisfiable(state: AllocatorState, nodes: list[NodeInfo], gang: list[tuple[str, int]]) -> bool:
    """Whether the gang fits whole on the state as it is."""
    free = dict.fromkeys((n.name for n in nodes), GPUS_PER_NODE)
    for _, pool, _ in state.allocated.exclusive:
        free[pool] -= 1
    return fits_whole(free, gang)


def fits_whole(free: dict[str, int], gang: list[tuple[str, int]]) -> bool:
    """Whether the gang fits whole with ``free`` GPUs per node: every GPU is alike and the
    members of a gang ask for the same count, so a node with F free GPUs takes F // count
    members."""
    count = gang[0][1]
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
        taken: list[tuple[str, ...]] = []
        for name, count in gang:
            body = claim(name, count)
            found = state.find_node([body], nodes, "first-fit", explain=False)
            devices: tuple[str, ...] = ()
            if found.node is not None:
                state.assume(body, found.allocations[0])
                placed += 1
                held += count
                devices = tuple("/".join(d.device_id) for d in found.allocations[0].devices)
            out.placements.append((pod_name(name), found.node or ""))
            taken.append(devices)
        _record(out, gang, time.perf_counter() - started)
        out.taken += taken
        _judge(out, fits, placed == len(gang))
        _count(out, placed, len(gang), held)
    return out


def pod_name(member: str) -> str:
    return f"bench/{member}"


def _count(out: Figures, placed: int, size: int, held: int) -> None:
    if placed == size:
        out.whole += 1
    elif placed:
        out.half += 1
        out.held_by_half += held
    else:
        out.none += 1


def upstream_scenario(w: Workload) -> dict[str, Any]:
    """The workload as a scenario for bench/upstream: the GPUs in use as allocated claims (one
    per node), then one step per member, in stream order, each with its own new claim."""
    in_use: dict[str, list[str]] = {}
    for node, device in used_devices(w):
        in_use.setdefault(node, []).append(device)
    preallocated = []
    for node, devices in in_use.items():
        results = [
            {"request": "gpus", "driver": DRIVER, "pool": node, "device": d} for d in devices
        ]
        body = claim(f"in-use-{node}", len(devices))
        body["status"] = {"allocation": {"devices": {"results": results}}}
        preallocated.append(body)
    steps = [
        {
            "pod": pod_name(name),
            "claims": [f"bench/{name}"],
            "newClaims": [claim(name, count)],
            "release": [],
        }
        for gang in stream(w)
        for name, count in gang
    ]
    names = node_names(w)
    return {
        "name": f"gang-{w.nodes}-{w.seed}",
        "nodes": [{"metadata": {"name": n}} for n in names],
        "slices": [node_slice(n) for n in names],
        "classes": [GPU_CLASS],
        "sharedClaims": [],
        "preallocated": preallocated,
        "initSteps": [],
        "measureSteps": steps,
    }


def run_upstream(w: Workload, binary: Path) -> tuple[Figures, str]:
    """Upstream's allocator on the stream, per pod: its figures, counted from the devices
    each member got and the seconds each took, and the digest of its (pod, node) pairs."""
    with tempfile.TemporaryDirectory(prefix="dralloc-gang-") as tmp:
        path = Path(tmp) / "scenario.json"
        path.write_text(json.dumps(upstream_scenario(w), separators=(",", ":")))
        data = run_scenario(binary, path, f"gang stream {w.name}", args=["-devices", "-times"])
    taken = [tuple(step) for step in data["devices"]]
    return upstream_figures(w, taken, [float(t) for t in data["times"]]), str(data["digest"])


def upstream_figures(w: Workload, taken: list[tuple[str, ...]], times: list[float]) -> Figures:
    """Figures of a per-pod run from the devices each member took (in stream order) and the
    seconds each took: what per_pod counts from its state."""
    free = dict.fromkeys(node_names(w), GPUS_PER_NODE)
    for node, _ in used_devices(w):
        free[node] -= 1
    out = Figures()
    i = 0
    for gang in stream(w):
        fits = fits_whole(free, gang)
        members = taken[i : i + len(gang)]
        _record(out, gang, sum(times[i : i + len(gang)]))
        i += len(gang)
        for (name, _), devices in zip(gang, members, strict=True):
            node = devices[0].split("/")[1] if devices else ""
            out.placements.append((pod_name(name), node))
            for device_id in devices:
                free[device_id.split("/")[1]] -= 1
        out.taken += members
        placed = sum(1 for devices in members if devices)
        _judge(out, fits, placed == len(gang))
        _count(out, placed, len(gang), sum(len(devices) for devices in members if devices))
    if i != len(taken):
        raise RuntimeError(f"upstream-bench answered {len(taken)} steps for {i} members")
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


@dataclass
class Row:
    w: Workload
    pod: Figures  # per-pod first-fit, dralloc
    gang: Figures  # dralloc gang
    upstream: Figures | None = None  # per-pod first-fit, upstream; None when not run
    upstream_digest: str = ""  # of upstream's (pod, node) pairs

    def same_placements(self) -> bool:
        """Whether upstream placed every member on the node dralloc first-fit chose (digest of
        the (pod, node) pairs) with the same devices."""
        return (
            self.upstream is not None
            and self.upstream_digest == placement_digest(self.pod.placements)
            and self.upstream.taken == self.pod.taken
        )


def table(rows: list[Row]) -> str:
    lines = [
        "| workload | strategy | placed whole | satisfiable (missed) | half-placed (GPUs held) | "
        "not placed | ms/gang mean | ms/32-gang p95 | ms/32-gang max |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        strategies = [("per-pod first-fit (dralloc)", row.pod), ("dralloc gang", row.gang)]
        if row.upstream is not None:
            strategies.insert(0, ("per-pod first-fit (upstream)", row.upstream))
        for label, f in strategies:
            lines.append(
                f"| {row.w.name} | {label} | {f.whole} | {f.satisfiable} ({f.missed}) | "
                f"{f.half} ({f.held_by_half}) | {f.none} | "
                f"{_ms(f.seconds, 'mean')} | {_ms(f.seconds_32, 'p95')} | "
                f"{_ms(f.seconds_32, 'max')} |"
            )
    return "\n".join(lines)


def upstream_note(rows: list[Row], why_not: str = "") -> str:
    """What the table says about upstream's row: run or not, and placements identical."""
    compared = [row for row in rows if row.upstream is not None]
    if not compared:
        return f"Upstream's allocator was not run ({why_not or 'no answer'}), so per-pod first-fit is dralloc's only."
    differ = [row.w.name for row in compared if not row.same_placements()]
    if not differ:
        same = (
            "on every workload, dralloc per-pod first-fit placed every member on the same node "
            "with the same devices as upstream (digest of every (pod, node) pair, and the "
            "devices of every member), so the two rows differ only in time"
        )
    else:
        same = "PLACEMENTS DIFFER from dralloc per-pod first-fit on: " + "; ".join(differ)
    return (
        "Per-pod first-fit (upstream) is bench/upstream: upstream's allocator "
        "(k8s.io/dynamic-resource-allocation/structured) per member, as kube-scheduler's "
        "DynamicResources plugin runs it (a new allocator over all slices per pod, then nodes "
        "in name order until one fits), devices kept, no rollback, from the same state; "
        f"{same}. Its times are the Go program's per member, summed per gang; it walks the "
        "nodes one at a time, where kube-scheduler runs Filter over nodes in parallel, so they "
        "are a sequential cost, not a scheduler's wall time."
    )


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
    why_not = ""
    try:
        binary: Path | None = go_binary(UPSTREAM_BUILD, "DRALLOC_UPSTREAM_BENCH")
    except GoProgramUnavailable as err:
        why_not = str(err)
        print(f"upstream first-fit not run: {err}", file=sys.stderr)
        binary = None
    rows = []
    for w in workloads:
        row = Row(w, per_pod(w), joint(w))
        if binary is not None:
            row.upstream, row.upstream_digest = run_upstream(w, binary)
        rows.append(row)
        pod, gang = row.pod, row.gang
        same = (
            "not run"
            if row.upstream is None
            else ("placements identical" if row.same_placements() else "PLACEMENTS DIFFER")
        )
        print(
            f"{w.name}: whole {pod.whole} -> {gang.whole}, half-placed {pod.half} -> "
            f"{gang.half}, ms/gang {_ms(pod.seconds, 'mean')} -> {_ms(gang.seconds, 'mean')} "
            f"(ratio {statistics.fmean(gang.seconds) / statistics.fmean(pod.seconds):.2f}); "
            f"upstream per-pod: {same}",
            flush=True,
        )
    text = table(rows)
    note = upstream_note(rows, why_not)
    print(text)
    print(note)
    if args.markdown:
        run = "python -m bench.gang_bench" + (" --quick" if args.quick else "")
        args.markdown.write_text(
            "# Gangs: dralloc's joint search vs per-pod first-fit\n\n"
            f"`{run} --markdown bench/results/gang.md` (see the module "
            "docstring for the workloads). One run on a shared 2-core machine: times are "
            "noisy, placements are not.\n\n" + text + "\n\n" + note + "\n"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
