"""How much does validating a ResourceSlice cost on the watch hot path?

Builds a 128-device slice shaped like the one in the python-stack reference (§4: five
typed attributes and one capacity per device, metadata with labels, ownerReferences and
managedFields) and prints microseconds per slice for `json.loads` (the floor every watch
event pays anyway), `ResourceSlice.model_validate`, `parse_object`, and, if installed,
kubernetes_asyncio's own deserialisation. Also the cost of parsing one Quantity.
Run: python bench/parse_bench.py [--rounds N]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from operators.api import parse_object
from operators.api.models import ResourceSlice
from operators.api.quantity import Quantity


class _Plain(BaseModel):
    """The reference's plain mirror: same shape, no constraints, no cross-field rules."""

    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="ignore", frozen=True
    )


class _PlainAttribute(_Plain):
    int_value: int | None = Field(None, alias="int")
    bool_value: bool | None = Field(None, alias="bool")
    string: str | None = None
    version: str | None = None


class _PlainCapacity(_Plain):
    value: str


class _PlainDevice(_Plain):
    name: str
    attributes: dict[str, _PlainAttribute] = {}
    capacity: dict[str, _PlainCapacity] = {}


class _PlainPool(_Plain):
    name: str
    generation: int
    resource_slice_count: int


class _PlainSpec(_Plain):
    driver: str
    pool: _PlainPool
    node_name: str | None = None
    devices: list[_PlainDevice] = []


class _PlainOwner(_Plain):
    api_version: str
    kind: str
    name: str
    uid: str
    controller: bool | None = None


class _PlainMeta(_Plain):
    name: str | None = None
    uid: str | None = None
    resource_version: str | None = None
    labels: dict[str, str] = {}
    owner_references: list[_PlainOwner] = []


class PlainSlice(_Plain):
    api_version: str
    kind: str
    metadata: _PlainMeta
    spec: _PlainSpec


def make_slice(devices: int = 128) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {
            "name": "node-1-gpu.example.com-abcde",
            "uid": "0b9f6a1e-1c1b-4c38-9a9e-6d2f4f4d0c11",
            "resourceVersion": "123456",
            "generation": 1,
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "labels": {"app": "driver", "node": "node-1"},
            "ownerReferences": [
                {
                    "apiVersion": "v1",
                    "kind": "Node",
                    "name": "node-1",
                    "uid": "u-1",
                    "controller": True,
                }
            ],
            "managedFields": [
                {
                    "manager": "driver",
                    "operation": "Apply",
                    "apiVersion": "resource.k8s.io/v1",
                    "fieldsType": "FieldsV1",
                    "fieldsV1": {"f:spec": {}},
                }
            ],
        },
        "spec": {
            "driver": "gpu.example.com",
            "pool": {"name": "node-1", "generation": 1, "resourceSliceCount": 1},
            "nodeName": "node-1",
            "devices": [
                {
                    "name": f"gpu-{i}",
                    "attributes": {
                        "model": {"string": "LATEST-GPU-MODEL"},
                        "uuid": {"string": f"gpu-18db0e85-99e9-c746-8531-ffeb86328b{i:02x}"},
                        "index": {"int": i},
                        "driverVersion": {"version": "1.2.3"},
                        "gpu.example.com/healthy": {"bool": True},
                    },
                    "capacity": {"memory": {"value": "80Gi"}},
                }
                for i in range(devices)
            ],
        },
    }


def timed(fn: Callable[[], object], rounds: int) -> float:
    """Best (minimum) microseconds per call over `rounds` batches: robust to a busy machine."""
    samples = []
    for _ in range(rounds):
        n = 50
        start = time.perf_counter()
        for _ in range(n):
            fn()
        samples.append((time.perf_counter() - start) / n * 1e6)
    return min(samples)


def timed_together(candidates: dict[str, Callable[[], object]], rounds: int) -> dict[str, float]:
    """Best microseconds per call of each candidate, measured in interleaved rounds.

    Interleaving keeps the ratios meaningful when other work on the machine comes and goes.
    """
    best = dict.fromkeys(candidates, float("inf"))
    for _ in range(rounds):
        for name, fn in candidates.items():
            best[name] = min(best[name], timed(fn, 1))
    return best


async def _time_kubernetes_asyncio(data: bytes, rounds: int) -> float | None:
    """The generated client's deserialisation, for comparison (None if unavailable)."""
    try:
        from kubernetes_asyncio.client import ApiClient
    except ImportError:
        print("kubernetes_asyncio not installed; skipping its figure")
        return None

    class _Response:
        def __init__(self, body: bytes) -> None:
            self.data = body

    client = ApiClient()
    try:
        response = _Response(data)
        deserialize: Callable[[object, str], object] = client.deserialize  # type: ignore[assignment]
        return timed(lambda: deserialize(response, "V1ResourceSlice"), rounds)
    except Exception as exc:  # the client's internals differ between releases
        print(f"kubernetes_asyncio deserialize failed: {exc!r}")
        return None
    finally:
        await client.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()

    raw = make_slice()
    data = json.dumps(raw).encode()
    print(f"ResourceSlice with 128 devices, {len(data) / 1024:.1f} KiB of JSON")

    best = timed_together(
        {
            "json": lambda: json.loads(data),
            "plain": lambda: PlainSlice.model_validate(raw),
            "validate": lambda: ResourceSlice.model_validate(raw),
            "json_validate": lambda: ResourceSlice.model_validate(json.loads(data)),
            "parse": lambda: parse_object(raw),
        },
        args.rounds,
    )
    t_json, t_plain, t_validate = best["json"], best["plain"], best["validate"]
    t_json_validate, t_parse = best["json_validate"], best["parse"]
    print(f"{'json.loads(bytes)':44s} {t_json:8.0f} us")
    print(
        f"{'plain pydantic mirror (upstream types shape)':44s} {t_plain:8.0f} us  "
        f"({t_plain / t_json:.2f}x json.loads)"
    )
    print(
        f"{'ResourceSlice.model_validate(dict)':44s} {t_validate:8.0f} us  "
        f"({t_validate / t_json:.2f}x json.loads, {t_validate / t_plain:.2f}x plain mirror)"
    )
    print(f"{'json.loads + model_validate':44s} {t_json_validate:8.0f} us")
    print(f"{'parse_object(dict)':44s} {t_parse:8.0f} us")

    model = ResourceSlice.model_validate(raw)
    t_dump = timed(model.to_kube, args.rounds)
    print(f"{'to_kube() (model_dump json mode)':44s} {t_dump:8.0f} us")

    t_k8s = asyncio.run(_time_kubernetes_asyncio(data, max(1, args.rounds // 2)))
    if t_k8s is not None:
        print(
            f"{'kubernetes_asyncio deserialize V1ResourceSlice':44s} {t_k8s:8.0f} us  ({t_k8s / t_validate:.1f}x ours)"
        )

    samples = ["80Gi", "100m", "1.5Gi", "1e3", "4096", "0.25"]
    n = 20000
    start = time.perf_counter()
    for _ in range(n):
        for s in samples:
            Quantity._parse_uncached(s)
    t_q = (time.perf_counter() - start) / (n * len(samples)) * 1e6
    start = time.perf_counter()
    for _ in range(n):
        for s in samples:
            Quantity.parse(s)
    t_qc = (time.perf_counter() - start) / (n * len(samples)) * 1e6
    print(f"{'Quantity parse (uncached / memoised)':44s} {t_q:8.2f} / {t_qc:.2f} us")


if __name__ == "__main__":
    main()
