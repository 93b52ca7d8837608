"""Hostile gangs and everyone else: how long single pods of another namespace wait to bind
while the members of a gang that can never fit arrive, and what each arriving member costs
the operator (``python -m bench.gang_arrival``). Not a test: it prints figures.

One control plane with dralloc's CRDs (in-tree DRA off), one operator (as ``make demo`` runs
it, without the webhook: pods are created with the scheduling gate), nodes of 8 GPUs. The
phases run one after another, each with a namespace of its own:

- ``no gang``: the reference, side by side in the same run: single pods alone;
- one phase per size in ``--sizes`` (100, 1,000 and 4,000 members by default): a gang whose
  declared size is the largest allowed (4096), so it never fits and its members stay gated
  while the operator decides about them. Members are created as fast as the API server takes
  them (16 requests in flight), and may only use the first node. With ``--declared-size 4``
  the gang is small instead: its first members are placed on that node, and the many others
  wait for room there (each arrival then meets a gang that reached its size).

During a phase a probe creates one single pod at a time in another namespace, times it from
its creation to its binding, and deletes it; it goes on until the members have all arrived
and at least ``--probes`` pods were timed. Figures per phase: members per second, the probes'
bind latency (p50, p99, max; and how many of the probes were created while members were
still arriving), the operator's CPU per arriving member (from the phase's start
until the operator is idle again: the members' decisions and condition writes included),
and the Events the gang's namespace got. The gang's namespace is then deleted and the
operator's CPU for that deletion is reported too.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
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
    cpu_seconds,
    gpu_cluster,
    install_crds,
    kinds,
    testbed_bin,
)
from operators.kube import PODS, KubeClient, NotFound, Resource

GPUS_PER_NODE = 8
DECLARED_SIZE = 4096
"""The largest gang size the annotation allows (and the operator's default limit): the gang
is taken seriously, and it can never be complete."""
PROBE_NAMESPACE = "probe"
EVENTS = Resource("", "v1", "events", "Event", True)
IDLE_CPU_S = 0.05
"""The operator is idle again when it used less CPU than this over one second."""


@dataclass(frozen=True)
class Phase:
    name: str
    members: int
    arrival_s: float
    probes: int
    probes_during: int
    """Of the probes, those created while members were still arriving (the others came
    after, while the operator may still be deciding about the members that came)."""
    bind_p50_s: float
    bind_p99_s: float
    bind_max_s: float
    slowest_probe: str
    """The slowest probe's pod and when it was created (seconds from the phase's start),
    to find it in the operator's log (``--operator-log``)."""
    operator_cpu_s: float
    cpu_ms_per_member: float | None
    events: int
    deletion_cpu_s: float


def _template(namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "/".join(DRALLOC_GROUP),
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "one-gpu", "namespace": namespace},
        "spec": {"spec": {"devices": {"requests": [
            {"name": "gpu", "exactly": {"deviceClassName": "gpu"}}]}}},
    }  # fmt: skip


def _pod(
    namespace: str, name: str, gang: str | None = None, size: int = DECLARED_SIZE
) -> dict[str, Any]:
    annotations = {
        CLAIMS_ANNOTATION: json.dumps([{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}])
    }
    spec: dict[str, Any] = {
        "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10.1"}],
        "schedulingGates": [{"name": GATE}],
    }
    if gang is not None:
        annotations["resource.dralloc.dev/gang"] = gang
        annotations["resource.dralloc.dev/gang-size"] = str(size)
        # Members may only use the first node: a gang that fits leaves the others' GPUs to
        # the single pods.
        spec["nodeSelector"] = {"kubernetes.io/hostname": "scheduler-perf-dra-0"}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "annotations": annotations},
        "spec": spec,
    }


def _quantile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


class Bench:
    def __init__(
        self, client: KubeClient, operator: Operator, log: TextIO, declared_size: int
    ) -> None:
        self.declared_size = declared_size
        self.client = client
        self.operator = operator
        self.log = log
        self.resources = kinds(DRALLOC_GROUP)

    def operator_cpu(self) -> float:
        return cpu_seconds({"operator": self.operator.process.pid}).get("operator", 0.0)

    async def namespace(self, name: str) -> None:
        body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
        await self.client.create(NAMESPACES, body)
        await self.client.create(self.resources["ResourceClaimTemplate"], _template(name), name)

    async def idle(self, limit_s: float = 180.0) -> None:
        """Until the operator used less than IDLE_CPU_S over a second (or limit_s)."""
        deadline = time.monotonic() + limit_s
        before = self.operator_cpu()
        while time.monotonic() < deadline:
            await asyncio.sleep(1.0)
            now = self.operator_cpu()
            if now - before < IDLE_CPU_S:
                return
            before = now

    async def probe(self, index: int) -> float:
        """One single pod in the probe namespace, from its creation to its binding (s)."""
        name = f"single-{index}"
        started = time.monotonic()
        await self.client.create(PODS, _pod(PROBE_NAMESPACE, name), PROBE_NAMESPACE)
        deadline = started + 300.0
        while time.monotonic() < deadline:
            pod = await self.client.get(PODS, name, PROBE_NAMESPACE)
            if pod["spec"].get("nodeName"):
                break
            await asyncio.sleep(0.05)
        else:
            raise RuntimeError(f"probe {name} not bound within 300 s")
        took = time.monotonic() - started
        await self.client.delete(PODS, name, namespace=PROBE_NAMESPACE)
        return took

    async def arrive(self, namespace: str, members: int) -> None:
        semaphore = asyncio.Semaphore(CONCURRENCY)

        async def one(index: int) -> None:
            async with semaphore:
                body = _pod(namespace, f"m{index:05d}", "hostile", self.declared_size)
                await self.client.create(PODS, body, namespace)

        await asyncio.gather(*(one(i) for i in range(members)))

    async def delete_namespace(self, name: str) -> None:
        await self.client.delete(NAMESPACES, name)
        deadline = time.monotonic() + 600.0
        while time.monotonic() < deadline:
            try:
                await self.client.get(NAMESPACES, name)
            except NotFound:
                return
            await asyncio.sleep(0.5)
        raise RuntimeError(f"namespace {name} not gone within 600 s")

    async def phase(self, name: str, members: int, probes: int, start_index: int) -> Phase:
        namespace = f"gang-{members}"
        await self.namespace(namespace)
        print(f"gang_arrival: phase {name!r}", file=self.log)
        cpu_before = self.operator_cpu()
        started = time.monotonic()
        arrival = asyncio.create_task(self.arrive(namespace, members))
        arrival_s = 0.0
        latencies: list[float] = []
        during = 0
        index = start_index
        slowest = ""
        while not arrival.done() or len(latencies) < probes:
            during += not arrival.done()
            created = time.monotonic() - started
            latencies.append(await self.probe(index))
            if latencies[-1] == max(latencies):
                slowest = f"{PROBE_NAMESPACE}/single-{index} created at +{created:.1f} s"
            index += 1
            if arrival.done() and not arrival_s:
                arrival_s = time.monotonic() - started
        await arrival
        arrival_s = arrival_s or time.monotonic() - started
        await self.idle()
        cpu = self.operator_cpu() - cpu_before
        events, _ = await self.client.list(EVENTS, namespace)
        cpu_before_deletion = self.operator_cpu()
        await self.delete_namespace(namespace)
        await self.idle()
        return Phase(
            name=name,
            members=members,
            arrival_s=arrival_s,
            probes=len(latencies),
            probes_during=during,
            bind_p50_s=statistics.median(latencies) if latencies else float("nan"),
            bind_p99_s=_quantile(latencies, 0.99),
            bind_max_s=max(latencies) if latencies else float("nan"),
            slowest_probe=slowest,
            operator_cpu_s=cpu,
            cpu_ms_per_member=1000 * cpu / members if members else None,
            events=len(events),
            deletion_cpu_s=self.operator_cpu() - cpu_before_deletion,
        )


async def run(
    sizes: Sequence[int],
    nodes: int,
    probes: int,
    log: TextIO,
    declared_size: int = DECLARED_SIZE,
    keep_log: str | None = None,
) -> list[Phase]:
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
            operator = Operator.start(testbed)
            bench = Bench(client, operator, log, declared_size)
            await bench.namespace(PROBE_NAMESPACE)
            phases = [await bench.phase("no gang", 0, probes, 0)]
            for size in sizes:
                phases.append(
                    await bench.phase(f"gang of {size}", size, probes, 1000 * len(phases))
                )
            return phases
        finally:
            await client.close()
    finally:
        if operator is not None:
            operator.stop()
            if keep_log is not None:
                shutil.copyfile(operator.log_path, keep_log)
        testbed.down()


def table(phases: Sequence[Phase]) -> str:
    reference = phases[0].bind_p50_s
    lines = [
        "| phase | members | members/s | probes (during arrival) | bind p50 s | bind p99 s | bind max s "
        "| p50 vs no gang | operator CPU ms/member | Events | deletion CPU s |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for p in phases:
        rate = f"{p.members / p.arrival_s:.0f}" if p.members else "-"
        per_member = f"{p.cpu_ms_per_member:.2f}" if p.cpu_ms_per_member is not None else "-"
        lines.append(
            f"| {p.name} | {p.members} | {rate} | {p.probes} ({p.probes_during}) | {p.bind_p50_s:.2f} "
            f"| {p.bind_p99_s:.2f} | {p.bind_max_s:.2f} | {p.bind_p50_s / reference:.2f}x "
            f"| {per_member} | {p.events} | {p.deletion_cpu_s:.1f} |"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.gang_arrival", description=__doc__)
    parser.add_argument(
        "--sizes", type=int, nargs="+", default=[100, 1000, 4000], help="members per gang"
    )
    parser.add_argument("--nodes", type=int, default=8)
    parser.add_argument("--probes", type=int, default=20, help="single pods timed per phase")
    parser.add_argument(
        "--declared-size",
        type=int,
        default=DECLARED_SIZE,
        help="the gangs' gang-size annotation (below the members: a small gang whose surplus "
        "members wait for room, the rest placed as they fit)",
    )
    parser.add_argument("--json", help="also write the figures to this file")
    parser.add_argument("--operator-log", help="keep the operator's log (JSON lines) here")
    parser.add_argument("--markdown", help="also write the table, with how it was made, here")
    args = parser.parse_args(argv)
    phases = asyncio.run(
        run(
            args.sizes,
            args.nodes,
            args.probes,
            sys.stderr,
            args.declared_size,
            args.operator_log,
        )
    )
    print(table(phases))
    if args.markdown:
        with open(args.markdown, "w") as out:
            out.write(
                "# Hostile gangs: single pods of another namespace while a gang's members "
                "arrive\n\n`python -m bench.gang_arrival "
                f"--sizes {' '.join(map(str, args.sizes))} --nodes {args.nodes} "
                f"--declared-size {args.declared_size} "
                f"--probes {args.probes}` (see the module docstring). One run on a shared "
                "2-core machine: times are noisy.\n\n" + table(phases) + "\n"
            )
    if args.json:
        with open(args.json, "w") as out:
            json.dump([asdict(p) for p in phases], out, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
