from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from operators.api.podprotocol import DRALLOC, KUBERNETES
from operators.toolkit.snapshot import build_snapshot
from operators.toolkit.sources import read_objects
from operators.toolkit.usererrors import SnapshotError

from .conftest import FIXTURES, INTREE, find, load_items

REPO = Path(__file__).resolve().parents[3]


def test_intree_snapshot_is_indexed() -> None:
    snapshot = build_snapshot(read_objects([INTREE]))
    assert snapshot.api_groups == {"resource.k8s.io"}
    assert sorted(snapshot.resource_slices) == ["node-a-gpus", "node-b-gpus", "node-c-gpus"]
    assert snapshot.node_names == ["node-a", "node-b", "node-c"]
    assert snapshot.skipped == {"Deployment": 1}
    west = snapshot.pods["team-a/west-pair"]
    assert west.protocol is KUBERNETES
    assert west.claims[0].resource_claim_template_name == "numa-pair"
    assert west.needs.node_selector == {"zone": "west"}
    assert snapshot.nodes["node-c"].taints[0].effect == "NoSchedule"


def test_examples_are_a_valid_dralloc_snapshot() -> None:
    snapshot = build_snapshot(read_objects([REPO / "manifests" / "examples"]))
    assert snapshot.api_groups == {"resource.dralloc.dev"}
    assert snapshot.nodes == {}
    assert snapshot.node_names == ["kwok-node-0", "kwok-node-1"]  # from the slices
    assert snapshot.admin_namespaces == {"dralloc-monitoring"}
    assert all(p.protocol is DRALLOC for p in snapshot.pods.values())


def test_bad_field_names_file_object_and_field_path() -> None:
    with pytest.raises(SnapshotError) as caught:
        build_snapshot(read_objects([FIXTURES / "bad-field.yaml"]))
    error = caught.value
    assert error.field == "spec.devices.requests[0].name"
    message = str(error)
    assert "bad-field.yaml (object #2)" in message
    assert "ResourceClaim team-a/broken" in message


def test_bad_pod_annotation_names_the_annotation() -> None:
    with pytest.raises(SnapshotError) as caught:
        build_snapshot(read_objects([FIXTURES / "bad-annotation.json"]))
    assert caught.value.field == "metadata.annotations[resource.dralloc.dev/claims]"
    assert "Pod team-a/typo" in str(caught.value)
    assert "exactly one of resourceClaimName or resourceClaimTemplateName" in str(caught.value)


def test_unknown_api_version_of_a_dra_kind_is_refused(
    write_snapshot: Callable[..., Path],
) -> None:
    items = load_items()
    find(items, "DeviceClass", "gpu")["apiVersion"] = "resource.k8s.io/v1beta1"
    with pytest.raises(SnapshotError) as caught:
        build_snapshot(read_objects([write_snapshot(items)]))
    assert caught.value.field == "apiVersion"
    assert "DeviceClass gpu" in str(caught.value)


def test_duplicate_objects_name_both_places(write_snapshot: Callable[..., Path]) -> None:
    items = load_items()
    first = write_snapshot(items, "first.yaml")
    second = write_snapshot([find(items, "ResourceSlice", "node-b-gpus")], "second.yaml")
    with pytest.raises(SnapshotError) as caught:
        build_snapshot(read_objects([first, second]))
    message = str(caught.value)
    assert "second.yaml (object #1): ResourceSlice node-b-gpus" in message
    assert "first seen in" in message and "first.yaml" in message


def test_a_tolerant_build_leaves_out_the_bad_object_and_keeps_the_rest() -> None:
    skipped: list[SnapshotError] = []
    snapshot = build_snapshot(
        read_objects([FIXTURES / "bad-field.yaml"]), on_invalid=skipped.append
    )
    assert [e.field for e in skipped] == ["spec.devices.requests[0].name"]
    assert "team-a/broken" not in snapshot.claims
    assert len(snapshot.refs) >= 1


def test_a_tolerant_build_keeps_the_first_of_duplicate_objects(
    write_snapshot: Callable[..., Path],
) -> None:
    items = load_items()
    first = write_snapshot(items, "first.yaml")
    second = write_snapshot([find(items, "ResourceSlice", "node-b-gpus")], "second.yaml")
    skipped: list[SnapshotError] = []
    snapshot = build_snapshot(read_objects([first, second]), on_invalid=skipped.append)
    assert len(skipped) == 1 and "first seen in" in str(skipped[0])
    assert "first.yaml" in snapshot.refs[("ResourceSlice", "node-b-gpus")].location
