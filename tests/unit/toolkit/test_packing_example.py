"""manifests/examples/packing/ does what its comments say, under each device policy.

Two notebooks take a 1g partition each; then three workers ask for a whole GPU each (the
example's `dralloc simulate --add-pods 3 --template .../trainer-whole`). first-fit breaks
both GPUs of kwok-node-0 and the third worker finds none; pack keeps kwok-node-0's gpu-1
whole and all three fit. Run on the example alone and on every example at once (the other
examples must not change the outcome).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from operators.toolkit.simulate import AddPods, SimulationReport, simulate
from operators.toolkit.snapshot import build_snapshot
from operators.toolkit.sources import read_objects

EXAMPLES = Path(__file__).resolve().parents[3] / "manifests" / "examples"
NS = "dralloc-packing-example"
DRIVER = "mig.example.com"
NOTEBOOKS = (f"{NS}/notebook-0", f"{NS}/notebook-1")
SOURCES = {"the example": [EXAMPLES / "packing"], "every example": [EXAMPLES]}


def run(source: str, device_policy: str) -> SimulationReport:
    snapshot = build_snapshot(read_objects(SOURCES[source]))
    workers = AddPods(3, NS, template="trainer-whole")
    return simulate(snapshot, [workers], device_policy=device_policy)


def partitions(report: SimulationReport) -> dict[str, list[str]]:
    """Pod -> its devices as POOL/DEVICE, for the pods of the example."""
    return {
        p.pod: [d.device.removeprefix(f"{DRIVER}/") for d in p.devices]
        for p in report.placed
        if p.pod.startswith(f"{NS}/")
    }


def whole_gpus_broken(placed: dict[str, list[str]]) -> set[str]:
    """POOL/gpu-N of every GPU a partition is taken from."""
    return {device.rsplit("-", 2)[0] for devices in placed.values() for device in devices}


@pytest.mark.parametrize("source", list(SOURCES))
def test_first_fit_spreads_the_notebooks_and_the_third_worker_finds_no_gpu(source: str) -> None:
    report = run(source, "first-fit")
    placed = partitions(report)
    notebooks = {pod: placed[pod] for pod in NOTEBOOKS}
    assert notebooks == {
        f"{NS}/notebook-0": ["kwok-node-0/gpu-0-1g-0"],
        f"{NS}/notebook-1": ["kwok-node-0/gpu-1-1g-0"],
    }
    assert whole_gpus_broken(notebooks) == {"kwok-node-0/gpu-0", "kwok-node-0/gpu-1"}
    workers = [p for p in report.placed if p.origin == "added"]
    assert sorted(d.device for p in workers for d in p.devices) == [
        f"{DRIVER}/kwok-node-1/gpu-0-whole",
        f"{DRIVER}/kwok-node-1/gpu-1-whole",
    ]
    (pending,) = [p for p in report.pending if p.origin == "added"]
    assert pending.pod == f"{NS}/trainer-whole-sim-2"
    assert f'class "{DRIVER}" lack capacity or counters' in pending.reason
    assert not report.fits


@pytest.mark.parametrize("source", list(SOURCES))
def test_pack_keeps_a_whole_gpu_free_and_every_worker_fits(source: str) -> None:
    report = run(source, "pack")
    placed = partitions(report)
    notebooks = {pod: placed[pod] for pod in NOTEBOOKS}
    assert notebooks == {
        f"{NS}/notebook-0": ["kwok-node-0/gpu-0-1g-0"],
        f"{NS}/notebook-1": ["kwok-node-0/gpu-0-1g-1"],
    }
    assert whole_gpus_broken(notebooks) == {"kwok-node-0/gpu-0"}
    workers = [p for p in report.placed if p.origin == "added"]
    assert sorted(d.device for p in workers for d in p.devices) == [
        f"{DRIVER}/kwok-node-0/gpu-1-whole",
        f"{DRIVER}/kwok-node-1/gpu-0-whole",
        f"{DRIVER}/kwok-node-1/gpu-1-whole",
    ]
    assert not [p for p in report.pending if p.pod.startswith(f"{NS}/")]
    assert report.fits


def test_the_policies_differ_on_the_example() -> None:
    """The point of the example: were pack to choose as first-fit does, it shows nothing."""
    first_fit, pack = (run("the example", policy) for policy in ("first-fit", "pack"))
    assert partitions(first_fit) != partitions(pack)
    assert (first_fit.fits, pack.fits) == (False, True)
