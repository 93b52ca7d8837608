"""Responsiveness: admission latency and pods/s of ordinary pods, with and without a pod whose
claim has a costly CEL selector in the cluster, side by side in one run (``python -m
bench.responsiveness``). Not a test: it prints figures.

One testbed, one operator with its webhook (as the production manifests run it). Phase
"quiet": ordinary opted-in pods are created one after another; each creation passes the
operator's webhook, so its latency is the admission latency users see. Phase "costly": the
same after a pod whose selector needs tens of seconds of CPU over the cluster's devices (four
nested ``all()``, under upstream's cost limit) was created, so its decision runs (and runs out
of its budget, again and again) while the ordinary pods arrive.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from collections.abc import Sequence
from typing import Any

from bench.level2 import (
    CLAIMS_ANNOTATION,
    DRALLOC,
    DRALLOC_GROUP,
    NAMESPACES,
    Operator,
    Testbed,
    gpu_cluster,
    install_crds,
    kinds,
    testbed_bin,
)
from operators.kube import PODS, KubeClient

ITEMS = "[" + ",".join(str(i) for i in range(10)) + "]"
COSTLY = (
    f"{ITEMS}.all(a, {ITEMS}.all(b, {ITEMS}.all(c, {ITEMS}.all(d, "
    'device.driver != "" && a + b + c + d >= 0))))'
)


def _objects(nodes: int, devices: int) -> list[dict[str, Any]]:
    out = gpu_cluster(nodes, devices)
    for name, selectors in (("plain", []), ("costly", [{"cel": {"expression": COSTLY}}])):
        out.append(
            {
                "apiVersion": "/".join(DRALLOC_GROUP),
                "kind": "ResourceClaimTemplate",
                "metadata": {"name": name, "namespace": "bench"},
                "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
                    "deviceClassName": "gpu", "selectors": selectors}}]}}},
            }
        )  # fmt: skip
    return out


def _pod(name: str, template: str) -> dict[str, Any]:
    entry = [{"name": "gpu", "resourceClaimTemplateName": template}]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "bench",
            "annotations": {CLAIMS_ANNOTATION: json.dumps(entry)},
        },
        "spec": {"containers": [{"name": "c", "image": "registry.invalid/pause"}]},
    }


async def _phase(client: KubeClient, prefix: str, count: int) -> dict[str, float]:
    latencies = []
    started = time.monotonic()
    for i in range(count):
        t0 = time.monotonic()
        await client.create(PODS, _pod(f"{prefix}-{i}", "plain"), "bench")
        latencies.append(time.monotonic() - t0)
    deadline = time.monotonic() + 300
    bound = 0
    while time.monotonic() < deadline:
        pods, _ = await client.list(PODS, "bench")
        bound = len(
            [
                p
                for p in pods
                if p["metadata"]["name"].startswith(f"{prefix}-") and p["spec"].get("nodeName")
            ]
        )
        if bound == count:
            break
        await asyncio.sleep(0.1)
    took = time.monotonic() - started
    latencies.sort()
    return {
        "admission_p50_ms": 1000 * statistics.median(latencies),
        "admission_p99_ms": 1000 * latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))],
        "admission_max_ms": 1000 * latencies[-1],
        "pods_per_second": bound / took if took else 0.0,
        "bound": bound,
    }


async def _run(count: int, nodes: int, devices: int, log: Any) -> dict[str, dict[str, float]]:
    testbed = Testbed.up(DRALLOC, testbed_bin())
    operator = None
    try:
        install_crds(testbed)
        testbed.create_nodes(nodes)
        client = await KubeClient.connect(str(testbed.kubeconfig))
        try:
            await client.create(
                NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "bench"}}
            )
            resources = kinds(DRALLOC_GROUP)
            for obj in _objects(nodes, devices):
                await client.create(resources[obj["kind"]], obj, obj["metadata"].get("namespace"))
            operator = Operator.start(testbed, webhook=True)
            print("responsiveness: quiet phase", file=log)
            quiet = await _phase(client, "quiet", count)
            await client.create(PODS, _pod("costly", "costly"), "bench")
            await asyncio.sleep(3.0)  # its claim exists; its decision is evaluating
            print("responsiveness: costly phase", file=log)
            costly = await _phase(client, "busy", count)
            timeouts = operator.log().count("allocation decision over budget")
        finally:
            await client.close()
        costly["decisions_over_budget"] = float(timeouts)
        return {"quiet": quiet, "with costly claim": costly}
    finally:
        if operator is not None:
            operator.stop()
        testbed.down()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.responsiveness", description=__doc__)
    parser.add_argument("--pods", type=int, default=40, help="ordinary pods per phase")
    parser.add_argument("--nodes", type=int, default=8)
    parser.add_argument("--devices", type=int, default=120, help="devices per node")
    args = parser.parse_args(argv)
    results = asyncio.run(_run(args.pods, args.nodes, args.devices, sys.stderr))
    quiet, costly = results["quiet"], results["with costly claim"]
    print(f"{'':<22} {'quiet':>10} {'costly claim':>14}")
    for key in ("admission_p50_ms", "admission_p99_ms", "admission_max_ms", "pods_per_second"):
        print(f"{key:<22} {quiet[key]:>10.1f} {costly[key]:>14.1f}")
    print(f"decisions over budget during the costly phase: {costly['decisions_over_budget']:.0f}")
    print(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
