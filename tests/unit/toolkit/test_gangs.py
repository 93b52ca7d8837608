"""Gangs in the toolkit: ``simulate --add-gang`` and settling place members together or
not at all; ``explain`` of a member shows the gang's view. On the in-tree fixture, after
settling, 3 GPUs are free on schedulable nodes (1 on node-a, 2 on node-b)."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from operators.toolkit.errors import SnapshotError, ToolkitError
from operators.toolkit.explain import explain
from operators.toolkit.simulate import AddGang, AddPods, simulate
from operators.toolkit.snapshot import Snapshot, build_snapshot
from operators.toolkit.sources import read_objects

from .conftest import INTREE, find, load_items

GANG = "resource.dralloc.dev/gang"
GANG_SIZE = "resource.dralloc.dev/gang-size"


@pytest.fixture
def snapshot() -> Snapshot:
    return build_snapshot(read_objects([INTREE]))


def test_a_gang_that_fits_is_placed_whole(snapshot: Snapshot) -> None:
    report = simulate(snapshot, [AddGang(3, "team-a", "one-gpu")])
    added = [p for p in report.placed if p.origin == "added"]
    assert report.fits and len(added) == 3
    assert sorted(p.node or "" for p in added) == ["node-a", "node-b", "node-b"]


def test_a_gang_too_big_places_nobody_where_pods_one_by_one_would_half_place(
    snapshot: Snapshot,
) -> None:
    one_by_one = simulate(snapshot, [AddPods(4, "team-a", template="one-gpu")])
    assert len([p for p in one_by_one.placed if p.origin == "added"]) == 3
    report = simulate(snapshot, [AddGang(4, "team-a", "one-gpu")])
    assert not report.fits
    assert not [p for p in report.placed if p.origin == "added"]
    pending = [p for p in report.pending if p.origin == "added"]
    assert len(pending) == 4
    assert all("at most 3 of the gang's 4 members fit at once" in p.reason for p in pending)


def test_a_gang_size_below_the_count_places_those_that_fit(snapshot: Snapshot) -> None:
    report = simulate(snapshot, [AddGang(4, "team-a", "one-gpu", size=3)])
    assert report.fits
    assert len([p for p in report.placed if p.origin == "added"]) == 3
    with pytest.raises(ToolkitError, match="gang size"):
        simulate(snapshot, [AddGang(2, "team-a", "one-gpu", size=3)])


def gang_pods(items: list[dict[str, Any]], count: int, size: str) -> list[dict[str, Any]]:
    base = find(items, "Pod", "west-pair")
    pods = []
    for i in range(count):
        pod = copy.deepcopy(base)
        pod["metadata"] |= {
            "name": f"w{i}",
            "uid": f"uid-w{i}",
            "annotations": {GANG: "train", GANG_SIZE: size},
        }
        pod["spec"]["resourceClaims"][0]["resourceClaimTemplateName"] = "one-gpu"
        del pod["spec"]["nodeSelector"]
        pods.append(pod)
    return pods


def test_settling_and_explain_treat_pending_members_as_one_gang(
    write_snapshot: Callable[..., Path],
) -> None:
    items = load_items()
    # Settling places west-pair (2 of node-b's GPUs), leaving 3 GPUs for 4 members; explain
    # counts only allocated claims (5 GPUs free), which is still one short of 6.
    items += gang_pods(items, 4, "6") + gang_pods(items, 6, "6")[4:]
    snapshot = build_snapshot(read_objects([write_snapshot(items)]))
    report = simulate(snapshot, [])
    assert [p.pod for p in report.placed] == ["team-a/west-pair"]
    assert sorted(p.pod for p in report.pending) == [f"team-a/w{i}" for i in range(6)]
    result = explain(snapshot, "pod/w0", "team-a")
    assert 'gang "train": 6 of 6 members present' in result.gang
    assert "cannot be placed together" in result.gang


def test_malformed_gang_annotations_are_refused_by_name(
    write_snapshot: Callable[..., Path],
) -> None:
    items = load_items()
    items += gang_pods(items, 1, "many")
    with pytest.raises(SnapshotError, match="gang-size"):
        build_snapshot(read_objects([write_snapshot(items)]))
