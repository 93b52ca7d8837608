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
sequence). Not a test: nothing is asserted.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from operators.allocator import AllocatorState, NodeInfo

DRIVER = "gpu.example.com"
GPUS_PER_NODE = 4
SLICES = 8
PROFILES = {"1g": 1, "2g": 2, "4g": 4, "whole": 8}
# The demand the churn keeps up, as a share of the memory slices: near full, so that device
# choice decides what still fits.
LOAD = 0.95
ARRIVALS = [("1g", 0.45), ("2g", 0.25), ("4g", 0.15), ("whole", 0.15)]


@dataclass(frozen=True)
class Sequence:
    nodes: int
    steps: int
    seed: int


@dataclass
class Figures:
    asked: dict[str, int] = field(default_factory=lambda: dict.fromkeys(PROFILES, 0))
    placed: dict[str, int] = field(default_factory=lambda: dict.fromkeys(PROFILES, 0))
    whole_free: list[int] = field(default_factory=list)


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
    request = {"name": "gpu", "exactly": {"deviceClassName": profile}}
    return {
        "metadata": {"name": name, "namespace": "bench"},
        "spec": {"devices": {"requests": [request]}},
    }


def replay(seq: Sequence, policy: str) -> Figures:
    state = AllocatorState(device_policy=policy)
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
        if profile is not None:
            body = claim(f"c{arrival}", profile)
            out.asked[profile] += 1
            found = state.find_node([body], nodes, "first-fit", explain=False)
            if found.node is not None:
                state.assume(body, found.allocations[0])
                running[arrival] = body
                out.placed[profile] += 1
        if step % 10 == 0:
            out.whole_free.append(_whole_gpus_free(state, nodes))
    return out


def events(seq: Sequence) -> list[tuple[int, str | None, list[int]]]:
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


def _whole_gpus_free(state: AllocatorState, nodes: list[NodeInfo]) -> int:
    """GPUs no partition of which is in use (a whole-GPU request could take each)."""
    busy = set()
    for driver, pool, device in state.allocated.exclusive:
        if driver == DRIVER:
            busy.add((pool, device.split("-")[1]))
    return sum(1 for n in nodes for g in range(GPUS_PER_NODE) if (n.name, str(g)) not in busy)


def table(rows: list[tuple[Sequence, Figures, Figures]]) -> str:
    sizes = list(PROFILES)
    head = " | ".join(f"{p} placed/asked" for p in sizes)
    lines = [
        f"| sequence | policy | {head} | whole GPUs free (mean) |",
        "|---|---|" + "---|" * len(sizes) + "---|",
    ]
    for seq, first, pack in rows:
        for label, f in (("first-fit", first), ("pack", pack)):
            cells = " | ".join(f"{f.placed[p]}/{f.asked[p]}" for p in sizes)
            lines.append(
                f"| {seq.nodes} nodes, {seq.steps} steps, seed {seq.seed} | {label} | {cells} | "
                f"{statistics.fmean(f.whole_free):.1f} |"
            )
    return "\n".join(lines)


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
    rows = []
    for seq in sequences:
        first, pack = replay(seq, "first-fit"), replay(seq, "pack")
        rows.append((seq, first, pack))
        big = ("4g", "whole")
        gained = sum(pack.placed[p] for p in big) - sum(first.placed[p] for p in big)
        print(
            f"{seq.nodes} nodes, {seq.steps} steps, seed {seq.seed}: 4g+whole placed "
            f"{sum(first.placed[p] for p in big)} -> {sum(pack.placed[p] for p in big)} "
            f"({gained:+d})",
            flush=True,
        )
    text = table(rows)
    print(text)
    if args.markdown:
        args.markdown.write_text(
            "# Fragmentation: device policy pack vs first-fit\n\n"
            "`python -m bench.fragmentation_bench --markdown bench/results/fragmentation.md` "
            "(see the module docstring for the sequences).\n\n" + text + "\n"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
