"""Fragmentation: the ``pack`` device policy against first-fit on partitionable GPUs.

Run with ``python -m bench.fragmentation_bench`` (``--quick``, ``--markdown PATH``). Each node
has 4 GPUs modelled as MIG does it: 8 memory slices per GPU (a counter each, in the GPU's
counter set) and partitions at aligned positions: 1g (one slice, 8 positions), 2g (4), 4g
(2) and a whole GPU (all 8), listed by profile and position and then GPU (so that slice
order alone does not pack). A churn sequence (one arrival per step, mostly small partitions and some whole-GPU
requests, each ending after a random lifetime; the same sequence for both) is replayed
through:

- ``first-fit``: dralloc's default, upstream's order (the conformance table checks it is the
  same as in-tree DRA's allocator);
- ``pack``: the device policy of ``operators/allocator/packing.py``.

Both pick nodes the same way (first-fit node policy), so the difference is device choice
alone. Figures: requests placed per size, and whole GPUs left free (averaged over the
sequence). With ``--markdown PATH``, a plot of whole GPUs left free over time, step by step,
next to it (PATH with ``.png``): upstream's from the devices its allocator took at each step
(``bench/upstream -devices``), dralloc's from its own. Not a test: nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.goprogram import GoProgramUnavailable, go_binary, run_scenario
from bench.scenario import placement_digest
from operators.allocator import AllocatorState, NodeInfo

DRIVER = "gpu.example.com"
GPUS_PER_NODE = 4
SLICES = 8
PROFILES = {"1g": 1, "2g": 2, "4g": 4, "whole": 8}
# The demand the churn keeps up, as a share of the memory slices: near full, so that device
# choice decides what still fits.
LOAD = 0.95
ARRIVALS = [("1g", 0.45), ("2g", 0.25), ("4g", 0.15), ("whole", 0.15)]
LARGE = ("4g", "whole")
# (device policy, node policy): dralloc's default device choice (upstream's), then pack, each
# with first-fit nodes (upstream's) and with binpack (device geometry, geometry.py).
VARIANTS = [
    ("first-fit", "first-fit"),
    ("pack", "first-fit"),
    ("first-fit", "binpack"),
    ("pack", "binpack"),
]
UPSTREAM_BUILD = Path(__file__).resolve().parent / "upstream" / "build"


@dataclass(frozen=True)
class Sequence:
    nodes: int
    steps: int
    seed: int


@dataclass
class Figures:
    asked: dict[str, int] = field(default_factory=lambda: dict.fromkeys(PROFILES, 0))
    placed: dict[str, int] = field(default_factory=lambda: dict.fromkeys(PROFILES, 0))
    whole_free: list[int] = field(default_factory=list)  # every 10th step (the table's mean)
    whole_free_steps: list[int] = field(default_factory=list)  # after every step (the plot)
    taken: list[tuple[str, ...]] = field(default_factory=list)  # per step: driver/pool/device
    placements: list[tuple[str, str]] = field(default_factory=list)  # (pod, node or "")
    # Large requests refused while the free slices would have held them, split over GPUs
    # (no GPU had that many free slices): what no device choice at arrival time can undo.
    split: int = 0

    @property
    def large(self) -> int:
        return sum(self.placed[p] for p in LARGE)


def node_slices(node: str) -> list[dict[str, Any]]:
    pool = {"name": node, "generation": 0, "resourceSliceCount": 2}
    devices = []
    # Listed by profile and position, then GPU: the order in which first-fit spreads small
    # partitions over every GPU (NVIDIA driver #932: 1g pods land on all GPUs).
    for profile, size in PROFILES.items():
        for start in range(0, SLICES, size):
            for gpu in range(GPUS_PER_NODE):
                devices.append(
                    {
                        "name": f"gpu-{gpu}-{profile}-{start}",
                        "attributes": {"profile": {"string": profile}},
                        "consumesCounters": [
                            {
                                "counterSet": f"gpu-{gpu}",
                                "counters": {
                                    f"s{k}": {"value": "1"} for k in range(start, start + size)
                                },
                            }
                        ],
                    }
                )
    counters = [
        {"name": f"gpu-{g}", "counters": {f"s{k}": {"value": "1"} for k in range(SLICES)}}
        for g in range(GPUS_PER_NODE)
    ]
    common = {"driver": DRIVER, "nodeName": node, "pool": pool}
    return [
        {"metadata": {"name": f"{node}-counters"}, "spec": {**common, "sharedCounters": counters}},
        {"metadata": {"name": f"{node}-gpus"}, "spec": {**common, "devices": devices}},
    ]


def profile_class(profile: str) -> dict[str, Any]:
    expr = f'device.attributes["{DRIVER}"].profile == "{profile}"'
    return {"metadata": {"name": profile}, "spec": {"selectors": [{"cel": {"expression": expr}}]}}


def claim(name: str, profile: str) -> dict[str, Any]:
    # Mode and count spelled out: upstream's allocator gets no API defaulting here.
    exactly = {"deviceClassName": profile, "allocationMode": "ExactCount", "count": 1}
    request = {"name": "gpu", "exactly": exactly}
    return {
        "metadata": {"name": name, "namespace": "bench"},
        "spec": {"devices": {"requests": [request]}},
    }


def replay(seq: Sequence, device_policy: str, node_policy: str) -> Figures:
    state = AllocatorState(device_policy=device_policy)
    nodes = [NodeInfo(f"node-{i:03d}") for i in range(seq.nodes)]
    for node in nodes:
        for slice_ in node_slices(node.name):
            state.upsert_slice(slice_)
    for profile in PROFILES:
        state.upsert_class(profile_class(profile))
    out = Figures()
    running: dict[int, dict[str, Any]] = {}
    for step, (arrival, profile, ends) in enumerate(events(seq)):
        for ended in ends:
            body = running.pop(ended, None)
            if body is not None:
                state.release(body)
        body = claim(f"c{arrival}", profile)
        out.asked[profile] += 1
        found = state.find_node([body], nodes, node_policy, explain=False)
        out.placements.append((_pod(arrival), found.node or ""))
        taken: tuple[str, ...] = ()
        if found.node is not None:
            state.assume(body, found.allocations[0])
            running[arrival] = body
            out.placed[profile] += 1
            taken = tuple("/".join(d.device_id) for d in found.allocations[0].devices)
        elif profile in LARGE and _split_room(state, nodes, PROFILES[profile]):
            out.split += 1
        out.taken.append(taken)
        free = _whole_gpus_free(state, nodes)
        out.whole_free_steps.append(free)
        if step % 10 == 0:
            out.whole_free.append(free)
    return out


def _pod(arrival: int) -> str:
    return f"bench/p{arrival}"


def upstream_scenario(seq: Sequence) -> dict[str, Any]:
    """The same churn as a scenario for bench/upstream (upstream's allocator, first fit over
    nodes in name order, as kube-scheduler's Filter runs it)."""
    steps = []
    for arrival, profile, ends in events(seq):
        body = claim(f"c{arrival}", profile)
        steps.append(
            {
                "pod": _pod(arrival),
                "claims": [f"bench/c{arrival}"],
                "newClaims": [body],
                "release": [f"bench/c{ended}" for ended in ends],
            }
        )
    names = [f"node-{i:03d}" for i in range(seq.nodes)]
    return {
        "name": f"fragmentation-{seq.nodes}-{seq.seed}",
        "nodes": [{"metadata": {"name": n}} for n in names],
        "slices": [s for n in names for s in node_slices(n)],
        "classes": [profile_class(p) for p in PROFILES],
        "sharedClaims": [],
        "preallocated": [],
        "initSteps": [],
        "measureSteps": steps,
    }


@dataclass(frozen=True)
class Upstream:
    """Upstream's allocator on a sequence."""

    placed: int
    digest: str  # of every (request, node) pair
    taken: list[tuple[str, ...]]  # per step: the devices taken, driver/pool/device


def run_upstream(seq: Sequence, binary: Path) -> Upstream:
    with tempfile.TemporaryDirectory(prefix="dralloc-frag-") as tmp:
        path = Path(tmp) / "scenario.json"
        path.write_text(json.dumps(upstream_scenario(seq), separators=(",", ":")))
        data = run_scenario(
            binary, path, f"fragmentation sequence seed {seq.seed}", args=["-devices"]
        )
    taken = [tuple(step) for step in data["devices"]]
    return Upstream(int(data["measure"]["pods"]), str(data["digest"]), taken)


def whole_free_series(seq: Sequence, taken: list[tuple[str, ...]]) -> list[int]:
    """Whole GPUs free after each step, from the devices taken at each step (what replay
    counts from its state, for an allocator whose state is not at hand)."""
    running: dict[int, tuple[str, ...]] = {}
    series = []
    for (arrival, _profile, ends), devices in zip(events(seq), taken, strict=True):
        for ended in ends:
            running.pop(ended, None)
        if devices:
            running[arrival] = devices
        busy = set()
        for held in running.values():
            for device_id in held:
                driver, pool, device = device_id.split("/")
                if driver == DRIVER:
                    busy.add((pool, device.split("-")[1]))
        series.append(seq.nodes * GPUS_PER_NODE - len(busy))
    return series


def events(seq: Sequence) -> list[tuple[int, str, list[int]]]:
    """The churn, fixed in advance so both policies see the same one: per step an arrival
    (its number and profile) and the arrivals whose lifetime ends then (a request that was
    not placed simply has nothing to release)."""
    rng = random.Random(seq.seed)
    mean_size = sum(PROFILES[p] * w for p, w in ARRIVALS) / sum(w for _, w in ARRIVALS)
    slices = seq.nodes * GPUS_PER_NODE * SLICES
    lifetime = max(2, int(2 * LOAD * slices / mean_size))  # uniform from 1: mean half of it
    ending: dict[int, list[int]] = {}
    out = []
    for step in range(seq.steps):
        profile = rng.choices([p for p, _ in ARRIVALS], [w for _, w in ARRIVALS])[0]
        ending.setdefault(step + rng.randint(1, lifetime), []).append(step)
        out.append((step, profile, ending.pop(step, [])))
    return out


def _split_room(state: AllocatorState, nodes: list[NodeInfo], size: int) -> bool:
    """Whether the free slices add up to ``size`` though no GPU has that many free."""
    used: dict[tuple[str, str], int] = {}
    for driver, pool, device in state.allocated.exclusive:
        if driver == DRIVER:
            _, gpu, profile, _ = device.split("-")
            used[pool, gpu] = used.get((pool, gpu), 0) + PROFILES[profile]
    free = [SLICES - used.get((n.name, str(g)), 0) for n in nodes for g in range(GPUS_PER_NODE)]
    return max(free) < size <= sum(free)


def _whole_gpus_free(state: AllocatorState, nodes: list[NodeInfo]) -> int:
    """GPUs no partition of which is in use (a whole-GPU request could take each)."""
    busy = set()
    for driver, pool, device in state.allocated.exclusive:
        if driver == DRIVER:
            busy.add((pool, device.split("-")[1]))
    return sum(1 for n in nodes for g in range(GPUS_PER_NODE) if (n.name, str(g)) not in busy)


@dataclass
class Row:
    seq: Sequence
    runs: dict[tuple[str, str], Figures]
    upstream: Upstream | None  # None when the Go program is missing

    @property
    def first_fit(self) -> Figures:
        return self.runs[VARIANTS[0]]

    def upstream_note(self) -> str:
        if self.upstream is None:
            return "not run"
        same = self.upstream.digest == placement_digest(self.first_fit.placements)
        return "placements identical" if same else "PLACEMENTS DIFFER"

    def same_devices(self) -> bool:
        """Whether upstream and dralloc first-fit took the same devices at every step."""
        return self.upstream is not None and self.upstream.taken == self.first_fit.taken


def table(rows: list[Row]) -> str:
    sizes = list(PROFILES)
    head = " | ".join(f"{p} placed/asked" for p in sizes)
    lines = [
        f"| sequence | devices / nodes | {head} | 4g+whole vs upstream | "
        "4g+whole refused, room split over GPUs | whole GPUs free (mean) |",
        "|---|---|" + "---|" * len(sizes) + "---|---|---|",
    ]
    for row in rows:
        seq = row.seq
        label = f"{seq.nodes} nodes, {seq.steps} steps, seed {seq.seed}"
        base = row.first_fit.large
        if row.upstream is not None:
            cells = " | ".join("" for _ in sizes)
            lines.append(
                f"| {label} | upstream first-fit / first-fit | {cells} | "
                f"{row.upstream.placed} placed in all; dralloc first-fit: {row.upstream_note()} | | |"
            )
        for (device, node), f in row.runs.items():
            cells = " | ".join(f"{f.placed[p]}/{f.asked[p]}" for p in sizes)
            gain = f.large - base
            versus = f"{f.large} ({gain:+d}, {100 * gain / base:+.1f}%)" if base else str(f.large)
            lines.append(
                f"| {label} | dralloc {device} / {node} | {cells} | {versus} | {f.split} | "
                f"{statistics.fmean(f.whole_free):.1f} |"
            )
    return "\n".join(lines)


# The plot's curves are means over this many steps: a step moves the count by a GPU or two.
SMOOTH = 50
# (label, colour, line width, style): upstream wide and pale under dralloc first-fit, which
# coincides with it when both took the same devices.
STYLES = {
    ("upstream", "first-fit", "first-fit"): ("0.7", 4.0, "-"),
    ("dralloc", "first-fit", "first-fit"): ("tab:blue", 1.2, "--"),
    ("dralloc", "pack", "first-fit"): ("tab:orange", 1.2, "-"),
    ("dralloc", "first-fit", "binpack"): ("tab:green", 1.2, "-"),
    ("dralloc", "pack", "binpack"): ("tab:red", 1.6, "-"),
}


def moving_mean(values: list[int], window: int = SMOOTH) -> list[float]:
    """Mean of the last ``window`` values at each step (fewer at the start)."""
    out = []
    total = 0
    for i, value in enumerate(values):
        total += value
        if i >= window:
            total -= values[i - window]
        out.append(total / min(i + 1, window))
    return out


def plot(rows: list[Row], path: Path) -> Path | None:
    """Whole GPUs free over time, a panel per sequence; None without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    columns = 2 if len(rows) > 1 else 1
    lines = -(-len(rows) // columns)
    fig, axes = plt.subplots(lines, columns, figsize=(7 * columns, 4 * lines), squeeze=False)
    for ax, row in zip(axes.flat, rows, strict=False):
        seq = row.seq
        curves: list[tuple[tuple[str, str, str], list[int]]] = []
        if row.upstream is not None:
            upstream = whole_free_series(seq, row.upstream.taken)
            curves.append((("upstream", "first-fit", "first-fit"), upstream))
        for (device, node), figures in row.runs.items():
            curves.append((("dralloc", device, node), figures.whole_free_steps))
        steady = []
        for key, series in curves:
            colour, width, style = STYLES[key]
            smooth = moving_mean(series)
            steady += smooth[len(smooth) // 5 :]
            ax.plot(
                range(1, len(smooth) + 1), smooth, color=colour, linewidth=width,
                linestyle=style, label=f"{key[0]} {key[1]} / {key[2]}",
            )  # fmt: skip
        total = seq.nodes * GPUS_PER_NODE
        # The first steps start from every GPU free; the scale is the churn's steady part.
        ax.set_ylim(0, min(total, max(steady) * 1.4 + 1))
        ax.set_title(
            f"{seq.nodes} nodes ({total} GPUs), {seq.steps} steps, seed {seq.seed}", fontsize=10
        )
        ax.set_xlabel("step (one arrival each)")
        ax.set_ylabel(f"whole GPUs free ({SMOOTH}-step mean)")
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(rows) :]:
        ax.set_visible(False)
    handles, labels = axes.flat[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=len(labels), fontsize=8)
    fig.suptitle("Whole GPUs left free over time (device policy / node policy)")
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def plot_note(rows: list[Row], picture: Path) -> str:
    compared = [row for row in rows if row.upstream is not None]
    same = sum(1 for row in compared if row.same_devices())
    if not compared:
        upstream = "upstream's allocator was not run."
    elif same == len(compared):
        upstream = (
            "upstream's curve is drawn from the devices its allocator took at each step; "
            "dralloc first-fit / first-fit took the same devices at every step of every "
            "sequence, so its curve lies on upstream's."
        )
    else:
        upstream = (
            "upstream's curve is drawn from the devices its allocator took at each step; "
            f"dralloc first-fit / first-fit took the same devices at every step on {same} of "
            f"{len(compared)} sequences."
        )
    return (
        f"\n![Whole GPUs left free over time]({picture.name})\n\n"
        f"Whole GPUs left free over time (`{picture.name}`): after every step, as a "
        f"{SMOOTH}-step mean; every GPU is free at step 0, so the scale is cut to the "
        f"churn's steady part. The table's mean samples every 10th step; {upstream}\n"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one small sequence")
    parser.add_argument("--markdown", type=Path, help="also write the table here")
    args = parser.parse_args(argv)
    sequences = (
        [Sequence(4, 300, 1)]
        if args.quick
        else [Sequence(8, 1500, seed) for seed in (1, 2, 3)] + [Sequence(32, 3000, 4)]
    )
    try:
        binary: Path | None = go_binary(UPSTREAM_BUILD, "DRALLOC_UPSTREAM_BENCH")
    except GoProgramUnavailable as err:
        print(f"upstream first-fit not run: {err}", file=sys.stderr)
        binary = None
    rows = []
    for seq in sequences:
        runs = {(d, n): replay(seq, d, n) for d, n in VARIANTS}
        row = Row(seq, runs, run_upstream(seq, binary) if binary else None)
        rows.append(row)
        figures = ", ".join(f"{d}/{n} {f.large}" for (d, n), f in runs.items())
        print(
            f"{seq.nodes} nodes, {seq.steps} steps, seed {seq.seed}: 4g+whole placed: {figures}; "
            f"upstream: {row.upstream_note()}",
            flush=True,
        )
    text = table(rows)
    print(text)
    if args.markdown:
        picture = plot(rows, args.markdown.with_suffix(".png"))
        if picture is None:
            print("no plot: matplotlib is not installed", file=sys.stderr)
        args.markdown.write_text(
            "# Fragmentation: device and node policies vs upstream first-fit\n\n"
            "`python -m bench.fragmentation_bench --markdown bench/results/fragmentation.md` "
            "(see the module docstring for the sequences). The upstream row is bench/upstream "
            "(upstream's allocator, nodes first-fit in name order) on the same sequence; "
            "dralloc first-fit / first-fit made the same placement for every request when it "
            "says so (digest of every (request, node) pair), so its per-size counts are "
            "upstream's. Gains are in 4g and whole-GPU requests placed against that row.\n\n"
            + text
            + "\n"
            + (plot_note(rows, picture) if picture is not None else "")
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
