"""Scenarios on the in-tree fixture (see fixtures/intree-cluster.yaml for the layout).

node-a: 4 GPUs, gpu-0..2 held by team-a/trainer. node-b: 4 free GPUs (zone west).
node-c: 4 free GPUs but a NoSchedule node taint. Each pair of GPUs shares a NUMA node.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from operators.toolkit.simulate import (
    AddPods,
    AddQuota,
    Scenario,
    TaintDevice,
    simulate,
    work_size,
)
from operators.toolkit.snapshot import Snapshot, build_snapshot
from operators.toolkit.sources import read_objects
from operators.toolkit.usererrors import ToolkitError

from .conftest import INTREE, find, load_items


@pytest.fixture
def snapshot() -> Snapshot:
    return build_snapshot(read_objects([INTREE]))


def test_settling_places_the_pending_pod_where_its_node_selector_allows(
    snapshot: Snapshot,
) -> None:
    report = simulate(snapshot, [])
    assert report.fits
    (west,) = report.placed
    assert (west.pod, west.origin, west.node) == ("team-a/west-pair", "pending", "node-b")
    devices = sorted(d.device for d in west.devices)
    assert len(devices) == 2
    numa = {int(d.rsplit("-", 1)[1]) // 2 for d in devices}
    assert len(numa) == 1, f"matchAttribute numa violated: {devices}"


def test_adding_pairs_fills_free_numa_pairs_then_reports_why_not(snapshot: Snapshot) -> None:
    report = simulate(snapshot, [AddPods(3, "team-a", template="numa-pair")])
    added = [p for p in report.placed if p.origin == "added"]
    pending = [p for p in report.pending if p.origin == "added"]
    # node-a has one free GPU, node-b two after west-pair, node-c is tainted: one pair fits.
    assert [p.node for p in added] == ["node-b"]
    assert len(pending) == 2
    assert not report.fits
    reason = pending[0].reason
    assert reason.startswith("0/3 nodes are available")
    assert "node(s) had untolerated taint {maintenance: }" in reason


def test_no_device_is_handed_out_twice(snapshot: Snapshot) -> None:
    report = simulate(snapshot, [AddPods(10, "team-a", template="one-gpu")])
    used = [d.device for p in report.placed for d in p.devices]
    assert len(used) == len(set(used))
    # 12 GPUs on schedulable nodes a and b minus trainer's 3 minus west-pair's 2.
    assert len([p for p in report.placed if p.origin == "added"]) == 3
    assert len(report.pending) == 7


def test_noexecute_taint_evicts_users_and_places_their_replacement(snapshot: Snapshot) -> None:
    report = simulate(snapshot, [TaintDevice("gpu.example.com/node-a/gpu-1")])
    assert [(e.pod, e.claim) for e in report.evictions] == [
        ("team-a/trainer", "team-a/trainer-gpus")
    ]
    replacement = next(p for p in report.placed if p.origin == "evicted")
    assert replacement.node == "node-a"
    assert "gpu.example.com/node-a/gpu-1" not in [d.device for d in replacement.devices]
    assert report.fits


def test_noschedule_taint_evicts_nobody_but_blocks_the_device(snapshot: Snapshot) -> None:
    scenarios: list[Scenario] = [
        TaintDevice("gpu.example.com/node-a/gpu-3", effect="NoSchedule"),
        AddPods(1, "team-a", template="one-gpu"),
    ]
    report = simulate(snapshot, scenarios)
    assert report.evictions == ()
    added = next(p for p in report.placed if p.origin == "added")
    assert added.node == "node-b"


def test_like_pod_copies_claims_and_node_constraints(snapshot: Snapshot) -> None:
    report = simulate(snapshot, [AddPods(2, "team-a", like_pod="west-pair")])
    added = [p for p in report.placed if p.origin == "added"]
    assert [p.node for p in added] == ["node-b"]  # zone west only: one more pair fits
    assert [p.origin for p in report.pending] == ["added"]


def test_tolerating_the_node_taint_opens_node_c(write_snapshot: Callable[..., Path]) -> None:
    items = load_items()
    pod = find(items, "Pod", "west-pair")
    pod["spec"]["nodeSelector"] = {}
    pod["spec"]["tolerations"] = [{"key": "maintenance", "operator": "Exists"}]
    snapshot = build_snapshot(read_objects([write_snapshot(items)]))
    report = simulate(snapshot, [AddPods(5, "team-a", like_pod="west-pair")])
    nodes = {p.node for p in report.placed}
    assert "node-c" in nodes


def test_allocated_pods_are_not_moved(snapshot: Snapshot) -> None:
    report = simulate(snapshot, [AddPods(1, "team-a", template="one-gpu")])
    assert "team-a/trainer" not in [p.pod for p in report.placed]


def test_bad_scenarios_are_explained(snapshot: Snapshot) -> None:
    with pytest.raises(ToolkitError, match="ResourceClaimTemplate team-a/absent is not in"):
        simulate(snapshot, [AddPods(1, "team-a", template="absent")])
    with pytest.raises(ToolkitError, match="not published by any ResourceSlice"):
        simulate(snapshot, [TaintDevice("gpu.example.com/node-a/gpu-9")])
    with pytest.raises(ToolkitError, match="DRIVER/POOL/DEVICE"):
        simulate(snapshot, [TaintDevice("gpu-9")])


def test_work_size_counts_waiting_and_added_pods(snapshot: Snapshot) -> None:
    # trainer and west-pair use claims; only scenario pods are added on top.
    assert work_size(snapshot, [AddPods(4, "team-a", template="one-gpu")]) == 6


def test_a_stuck_pod_of_the_snapshot_does_not_fail_a_scenario_that_fits(
    write_snapshot: Callable[..., Path],
) -> None:
    items = load_items()
    pod = find(items, "Pod", "west-pair")
    pod["spec"]["nodeSelector"] = {"zone": "nowhere"}  # no node has it: stays pending
    snapshot = build_snapshot(read_objects([write_snapshot(items)]))
    settled = simulate(snapshot, [])
    assert [p.pod for p in settled.pending] == ["team-a/west-pair"]
    assert not settled.fits
    report = simulate(snapshot, [AddPods(1, "team-a", template="one-gpu")])
    assert [p.origin for p in report.pending] == ["pending"]
    assert [p.origin for p in report.placed] == ["added"]
    assert report.fits


def gpu_quota(devices: int) -> dict[str, object]:
    return {
        "apiVersion": "resource.dralloc.dev/v1",
        "kind": "DeviceQuota",
        "metadata": {"name": "gpus", "namespace": "team-a"},
        "spec": {"deviceClassName": "gpu", "hard": {"devices": devices}},
    }


def test_an_added_quota_holds_back_the_pods_over_it(snapshot: Snapshot) -> None:
    # After settling, team-a holds 5 GPUs (trainer 3, west-pair 2): a quota of 6 lets one in.
    scenarios: list[Scenario] = [AddQuota(gpu_quota(6)), AddPods(2, "team-a", template="one-gpu")]
    report = simulate(snapshot, scenarios)
    assert [p.origin for p in report.placed if p.origin == "added"] == ["added"]
    (refused,) = [p for p in report.pending if p.origin == "added"]
    assert "DeviceQuota team-a/gpus: devices 6 of 6 used, claim needs 1" in refused.reason
    assert not report.fits
    assert report.scenario.startswith("add DeviceQuota team-a/gpus; ")


def budget(allowed: int, *, processed: bool = True) -> dict[str, object]:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "keep-trainer", "namespace": "team-a", "generation": 2},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "trainer"}}},
        "status": {"observedGeneration": 2 if processed else 1, "disruptionsAllowed": allowed},
    }


@pytest.mark.parametrize(
    ("pdb", "refused"),
    [
        (budget(0), "PodDisruptionBudget team-a/keep-trainer"),
        (budget(1), ""),
        (budget(1, processed=False), "PodDisruptionBudget team-a/keep-trainer"),
    ],
)
def test_taint_reports_the_evictions_a_budget_would_refuse(
    write_snapshot: Callable[..., Path], pdb: dict[str, object], refused: str
) -> None:
    items = load_items()
    find(items, "Pod", "trainer")["metadata"]["labels"] = {"app": "trainer"}
    snapshot = build_snapshot(read_objects([write_snapshot([*items, pdb])]))
    report = simulate(snapshot, [TaintDevice("gpu.example.com/node-a/gpu-1")])
    assert [(e.pod, e.budget) for e in report.evictions] == [("team-a/trainer", refused)]
    assert any("refused by a PodDisruptionBudget" in n for n in report.notes) == bool(refused)


def test_copies_of_an_extended_resource_pod_get_claims_of_their_own(
    write_snapshot: Callable[..., Path],
) -> None:
    """A pod whose extended resources became a claim of its own (the webhook's annotation):
    its simulated copies each get such a claim, not a share of the original's."""
    from operators.api.extendedresources import translate

    items = load_items()
    pod = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "x", "namespace": "team-a", "uid": "uid-x"},
        "spec": {"containers": [{"name": "main", "image": "pause", "resources": {
            "limits": {"example.com/gpu": "1"}}}]},
        "status": {"phase": "Pending"},
    }  # fmt: skip
    translation = translate(pod, {"example.com/gpu": "gpu"}, "abcde")
    assert translation is not None
    translation.apply(pod)
    claim = {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {"name": translation.claim.claim_name, "namespace": "team-a",
                     "uid": "uid-claim-x"},
        "spec": translation.claim.claim_spec(),
    }  # fmt: skip
    snapshot = build_snapshot(read_objects([write_snapshot([*items, pod, claim])]))
    # Free: 1 GPU on node-a, 4 on node-b of which west-pair takes 2; x takes one more.
    report = simulate(snapshot, [AddPods(2, "team-a", like_pod="x")])
    added = [p for p in report.placed if p.origin == "added"]
    assert len(added) == 2, report
    claims = {line.claim for p in added for line in p.devices}
    assert len(claims) == 2 and f"team-a/{translation.claim.claim_name}" not in claims, claims
    devices = [line.device for p in report.placed for line in p.devices]
    assert len(devices) == len(set(devices)), devices
    assert report.fits
