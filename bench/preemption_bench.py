"""Victim choice for device preemption on random full clusters (``python -m bench.preemption_bench``).
Not a test: it prints figures.

Each workload is a cluster of ``--nodes`` nodes of 8 GPUs (two per NUMA node), every GPU held
by a running pod of 1, 2 or 4 GPUs with a random priority (0, 100 or 500, and random start
times), some covered by a PodDisruptionBudget with no disruption left; and a pending pod of
priority 1000 that needs 2, 4 or 8 GPUs. For each, the choice the toolkit and the operator
make (``operators.scheduling.preemption``, with the real allocator's what-if) is timed and
compared, side by side in the same run, with:

- upstream's greedy reprieve alone (``exact_units=0``: kube-scheduler's DefaultPreemption);
- the optimum by upstream's own order of preference (every set of victims on every node).

Figures: how often each matches the optimum, the victims and budget violations they cost in
all, and the time per choice (p50, p99).
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from collections.abc import Sequence
from typing import Any

from operators.toolkit.cluster import Cluster
from operators.toolkit.preempt import preemption_for
from operators.toolkit.snapshot import build_snapshot
from operators.toolkit.sources import RawObject
from operators.toolkit.usererrors import ObjectRef

DRIVER = "gpu.example.com"
API = "resource.k8s.io/v1"
GPUS = 8
NOW = 1_800_000_000.0


def workload(rng: random.Random, nodes: int) -> tuple[list[dict[str, Any]], int]:
    """The objects of one random full cluster and its pending pod; the GPUs that pod needs."""
    items: list[dict[str, Any]] = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "w"}},
        {
            "apiVersion": API,
            "kind": "DeviceClass",
            "metadata": {"name": "gpu"},
            "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]},
        },
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": "protected", "namespace": "w", "generation": 1},
            "spec": {"selector": {"matchLabels": {"tier": "protected"}}},
            "status": {"disruptionsAllowed": 0, "observedGeneration": 1},
        },
    ]
    serial = 0
    for n in range(nodes):
        node = f"node-{n}"
        items.append({"apiVersion": "v1", "kind": "Node", "metadata": {"name": node,
                      "labels": {"kubernetes.io/hostname": node}}, "spec": {}})  # fmt: skip
        items.append({
            "apiVersion": API, "kind": "ResourceSlice", "metadata": {"name": f"{node}-gpus"},
            "spec": {"driver": DRIVER, "nodeName": node,
                     "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                     "devices": [{"name": f"gpu-{i}", "attributes": {"numa": {"int": i // 2}}}
                                 for i in range(GPUS)]},
        })  # fmt: skip
        free = list(range(GPUS))
        while free:
            size = rng.choice([s for s in (1, 2, 4) if s <= len(free)])
            taken, free = free[:size], free[size:]
            serial += 1
            name = f"p{serial}"
            results = [
                {"request": "gpu", "driver": DRIVER, "pool": node, "device": f"gpu-{i}"}
                for i in taken
            ]
            items.append({
                "apiVersion": API, "kind": "ResourceClaim",
                "metadata": {"name": f"{name}-gpu", "namespace": "w", "uid": f"c-{name}"},
                "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
                    "deviceClassName": "gpu", "allocationMode": "ExactCount", "count": size}}]}},
                "status": {"allocation": {"devices": {"results": results}, "nodeSelector": {
                    "nodeSelectorTerms": [{"matchFields": [
                        {"key": "metadata.name", "operator": "In", "values": [node]}]}]}},
                    "reservedFor": [{"resource": "pods", "name": name, "uid": f"u-{name}"}]},
            })  # fmt: skip
            labels = {"tier": "protected"} if rng.random() < 0.2 else {"tier": "batch"}
            started = f"2026-12-0{rng.randint(1, 6)}T0{rng.randint(0, 9)}:00:00Z"
            items.append({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": name, "namespace": "w", "uid": f"u-{name}",
                             "labels": labels},
                "spec": {"nodeName": node, "priority": rng.choice([0, 100, 500]),
                         "containers": [{"name": "c", "image": "pause"}],
                         "resourceClaims": [{"name": "gpu", "resourceClaimName": f"{name}-gpu"}]},
                "status": {"phase": "Running", "startTime": started},
            })  # fmt: skip
    need = rng.choice([2, 4, 8])
    items.append({
        "apiVersion": API, "kind": "ResourceClaim",
        "metadata": {"name": "vip-gpu", "namespace": "w", "uid": "c-vip"},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
            "deviceClassName": "gpu", "allocationMode": "ExactCount", "count": need}}]}},
    })  # fmt: skip
    items.append({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "vip", "namespace": "w", "uid": "u-vip"},
        "spec": {"priority": 1000, "containers": [{"name": "c", "image": "pause"}],
                 "resourceClaims": [{"name": "gpu", "resourceClaimName": "vip-gpu"}]},
        "status": {"phase": "Pending"},
    })  # fmt: skip
    return items, need


def run(workloads: int, nodes: int, seed: int, out: Any) -> None:
    rng = random.Random(seed)
    rows: dict[str, dict[str, Any]] = {
        name: {"matches": 0, "victims": 0, "violations": 0, "ms": []}
        for name in ("dralloc", "upstream greedy", "optimum")
    }
    choices = 0
    for _ in range(workloads):
        items, _need = workload(rng, nodes)
        objects = [
            RawObject(ObjectRef("bench", kind=i["kind"], name=i["metadata"]["name"]), i)
            for i in items
        ]
        snapshot = build_snapshot(objects)
        pod = snapshot.pods["w/vip"]
        preemption_for(Cluster(snapshot), pod, NOW, exact_units=0)  # selectors compiled once
        found: dict[str, Any] = {}
        for name, exact in (("dralloc", None), ("upstream greedy", 0), ("optimum", GPUS)):
            cluster = Cluster(snapshot)
            started = time.perf_counter()
            if exact is None:
                choice = preemption_for(cluster, pod, NOW)
            else:
                choice = preemption_for(cluster, pod, NOW, exact_units=exact)
            rows[name]["ms"].append((time.perf_counter() - started) * 1000)
            found[name] = choice.victims
        best = found["optimum"]
        if best is None:
            continue
        choices += 1
        for name, victims in found.items():
            assert victims is not None, name
            rows[name]["matches"] += victims.cost() == best.cost()
            rows[name]["victims"] += len(victims.pods)
            rows[name]["violations"] += victims.violations
    print(
        f"{workloads} random full clusters of {nodes} nodes x {GPUS} GPUs (seed {seed}); "
        f"{choices} with a choice",
        file=out,
    )
    print("", file=out)
    print("| choice | same cost as the optimum | victims in all | budget violations | ms per choice p50 / p99 |", file=out)  # fmt: skip
    print("|---|---|---|---|---|", file=out)
    for name, row in rows.items():
        times = sorted(row["ms"])
        p99 = times[min(len(times) - 1, int(len(times) * 0.99))]
        print(
            f"| {name} | {row['matches']}/{choices} | {row['victims']} | {row['violations']} "
            f"| {statistics.median(times):.1f} / {p99:.1f} |",
            file=out,
        )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workloads", type=int, default=200)
    parser.add_argument("--nodes", type=int, default=8)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    run(args.workloads, args.nodes, args.seed, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
