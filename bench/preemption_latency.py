"""Preemption on a full cluster: how long a high-priority pod takes from its creation to its
binding when its device must be freed first (``python -m bench.preemption_latency``). Not a
test: it prints figures.

One control plane with dralloc's CRDs (in-tree DRA off), one operator with ``--preemption``
(as ``make demo`` runs it, without the webhook: pods are created with the scheduling gate),
``--nodes`` nodes of 8 GPUs, every GPU held by a pod of priority 0 (one GPU each). Two phases,
side by side in the same run, each timing ``--probes`` pods of priority 1000 that need one GPU,
one at a time, from creation to binding:

- ``room``: the reference. A filler pod is deleted first and the probe waits until its GPU is
  free (no preemption is needed, only the allocation);
- ``full``: the cluster is full; the probe preempts one filler (chosen, marked, deleted; its
  claim released) and then takes its GPU.

Figures per phase: bind p50, p99, max; the ratio of the full phase to the room phase; and the
victims per probe (fillers deleted by the operator).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any, TextIO

from bench.level2 import (
    CLAIMS_ANNOTATION,
    CONCURRENCY,
    DRALLOC,
    DRALLOC_GROUP,
    GATE,
    NAMESPACES,
    Operator,
    Testbed,
    gpu_cluster,
    install_crds,
    kinds,
    testbed_bin,
)
from operators.kube import PODS, KubeClient, NotFound, Resource

GPUS_PER_NODE = 8
NAMESPACE = "work"
PRIORITY_CLASSES = Resource("scheduling.k8s.io", "v1", "priorityclasses", "PriorityClass", False)


@dataclass(frozen=True)
class Phase:
    name: str
    probes: int
    bind_p50_s: float
    bind_p99_s: float
    bind_max_s: float
    victims: int


def _quantile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def _pod(name: str, priority_class: str) -> dict[str, Any]:
    claims = [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": NAMESPACE,
            "annotations": {CLAIMS_ANNOTATION: json.dumps(claims)},
        },
        "spec": {
            "priorityClassName": priority_class,
            "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10.1"}],
            "schedulingGates": [{"name": GATE}],
        },
    }


class Bench:
    def __init__(self, client: KubeClient, log: TextIO) -> None:
        self.client = client
        self.log = log
        self.resources = kinds(DRALLOC_GROUP)

    async def setup(self) -> None:
        await self.client.create(
            NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}
        )
        template = {
            "apiVersion": "/".join(DRALLOC_GROUP),
            "kind": "ResourceClaimTemplate",
            "metadata": {"name": "one-gpu", "namespace": NAMESPACE},
            "spec": {"spec": {"devices": {"requests": [
                {"name": "gpu", "exactly": {"deviceClassName": "gpu"}}]}}},
        }  # fmt: skip
        await self.client.create(self.resources["ResourceClaimTemplate"], template, NAMESPACE)
        for name, value in (("filler", 0), ("urgent", 1000)):
            body = {
                "apiVersion": "scheduling.k8s.io/v1",
                "kind": "PriorityClass",
                "metadata": {"name": name},
                "value": value,
            }
            await self.client.create(PRIORITY_CLASSES, body)

    async def bound(self, name: str, limit_s: float = 300.0) -> None:
        deadline = time.monotonic() + limit_s
        while time.monotonic() < deadline:
            pod = await self.client.get(PODS, name, NAMESPACE)
            if pod["spec"].get("nodeName"):
                return
            await asyncio.sleep(0.05)
        raise RuntimeError(f"pod {name} not bound within {limit_s} s")

    async def gone(self, name: str, limit_s: float = 300.0) -> None:
        deadline = time.monotonic() + limit_s
        while time.monotonic() < deadline:
            try:
                await self.client.get(PODS, name, NAMESPACE)
            except NotFound:
                return
            await asyncio.sleep(0.05)
        raise RuntimeError(f"pod {name} not gone within {limit_s} s")

    async def fill(self, names: Sequence[str]) -> None:
        semaphore = asyncio.Semaphore(CONCURRENCY)

        async def one(name: str) -> None:
            async with semaphore:
                await self.client.create(PODS, _pod(name, "filler"), NAMESPACE)
                await self.bound(name)

        await asyncio.gather(*(one(n) for n in names))

    async def fillers(self) -> list[str]:
        pods, _ = await self.client.list(PODS, NAMESPACE)
        return sorted(
            p["metadata"]["name"]
            for p in pods
            if p["metadata"]["name"].startswith("filler-")
            and not p["metadata"].get("deletionTimestamp")
        )

    async def probe(self, name: str) -> float:
        started = time.monotonic()
        await self.client.create(PODS, _pod(name, "urgent"), NAMESPACE)
        await self.bound(name)
        return time.monotonic() - started

    async def phase(self, name: str, probes: int, make_room: bool) -> Phase:
        print(f"preemption_latency: phase {name!r}", file=self.log)
        latencies: list[float] = []
        before = len(await self.fillers())
        freed = 0
        for i in range(probes):
            if make_room:
                victim = (await self.fillers())[0]
                await self.client.delete(PODS, victim, namespace=NAMESPACE)
                await self.gone(victim)
                freed += 1
            latencies.append(await self.probe(f"{name}-{i:03d}"))
        await asyncio.sleep(1.0)
        after = len(await self.fillers())
        return Phase(
            name=name,
            probes=len(latencies),
            bind_p50_s=statistics.median(latencies),
            bind_p99_s=_quantile(latencies, 0.99),
            bind_max_s=max(latencies),
            victims=before - after - freed,
        )


async def run(nodes: int, probes: int, log: TextIO) -> list[Phase]:
    testbed = Testbed.up(DRALLOC, testbed_bin())
    operator = None
    try:
        install_crds(testbed)
        testbed.create_nodes(nodes)
        client = await KubeClient.connect(str(testbed.kubeconfig), user_agent="dralloc-bench")
        try:
            resources = kinds(DRALLOC_GROUP)
            for obj in gpu_cluster(nodes, GPUS_PER_NODE):
                await client.create(resources[obj["kind"]], obj)
            operator = Operator.start(testbed, extra=["--preemption"])
            bench = Bench(client, log)
            await bench.setup()
            await bench.fill([f"filler-{i:04d}" for i in range(nodes * GPUS_PER_NODE)])
            room = await bench.phase("room", probes, make_room=True)
            full = await bench.phase("full", probes, make_room=False)
            return [room, full]
        finally:
            await client.close()
    finally:
        if operator is not None:
            operator.stop()
        testbed.down()


def table(phases: Sequence[Phase]) -> str:
    reference = phases[0].bind_p50_s
    lines = [
        "| phase | probes | bind p50 s | bind p99 s | bind max s | p50 vs room | victims per probe |",
        "|---|---|---|---|---|---|---|",
    ]
    for p in phases:
        lines.append(
            f"| {p.name} | {p.probes} | {p.bind_p50_s:.2f} | {p.bind_p99_s:.2f} "
            f"| {p.bind_max_s:.2f} | {p.bind_p50_s / reference:.2f}x "
            f"| {p.victims / p.probes:.2f} |"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.preemption_latency", description=__doc__)
    parser.add_argument("--nodes", type=int, default=8)
    parser.add_argument("--probes", type=int, default=20)
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args(argv)
    phases = asyncio.run(run(args.nodes, args.probes, sys.stderr))
    print(table(phases))
    if args.json:
        with open(args.json, "w") as out:
            json.dump([asdict(p) for p in phases], out, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
