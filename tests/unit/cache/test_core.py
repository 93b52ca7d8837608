"""The pod view: gang annotations and the Workload API's PodGroup reference."""

from __future__ import annotations

from typing import Any

from operators.cache.core import DEVICES_ALLOCATED_CONDITION, parse_pod


def raw_pod(annotations: dict[str, str], spec: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "metadata": {"name": "p", "namespace": "ns", "uid": "u", "annotations": annotations},
        "spec": spec or {},
    }


def test_a_pod_names_its_gang_by_annotations() -> None:
    pod = parse_pod(
        raw_pod({"resource.dralloc.dev/gang": "train", "resource.dralloc.dev/gang-size": "4"})
    )
    assert pod.gang is not None and (pod.gang.name, pod.gang.size) == ("train", 4)
    assert pod.gang_keys() == [("ns", "train")]
    assert pod.gang_error == ""


def test_malformed_gang_annotations_become_a_reason_not_an_error() -> None:
    pod = parse_pod(raw_pod({"resource.dralloc.dev/gang": "train"}))
    assert pod.gang is None and pod.gang_keys() == []
    assert "resource.dralloc.dev/gang-size is not" in pod.gang_error


def test_the_workload_api_pod_group_is_seen() -> None:
    pod = parse_pod(raw_pod({}, {"schedulingGroup": {"podGroupName": "workers"}}))
    assert pod.pod_group == "workers" and pod.gang is None


def test_a_pod_of_a_pod_group_is_indexed_under_its_group() -> None:
    pod = parse_pod(raw_pod({}, {"schedulingGroup": {"podGroupName": "workers"}}))
    assert pod.gang is None and pod.gang_keys() == [("ns", "workers")]


def test_gang_annotations_win_over_the_pod_group() -> None:
    annotations = {"resource.dralloc.dev/gang": "train", "resource.dralloc.dev/gang-size": "2"}
    pod = parse_pod(raw_pod(annotations, {"schedulingGroup": {"podGroupName": "workers"}}))
    assert pod.gang_keys() == [("ns", "train")]


def test_malformed_annotations_do_not_fall_back_to_the_pod_group() -> None:
    annotations = {"resource.dralloc.dev/gang": "train"}
    pod = parse_pod(raw_pod(annotations, {"schedulingGroup": {"podGroupName": "workers"}}))
    assert pod.gang_error and pod.gang_keys() == []


def test_only_the_conditions_the_controllers_read_are_kept() -> None:
    raw = raw_pod({})
    raw["status"] = {
        "conditions": [
            {"type": "Ready", "status": "True"},
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"},
            {"type": DEVICES_ALLOCATED_CONDITION, "status": "True"},
        ]
    }
    pod = parse_pod(raw)
    assert [c["type"] for c in pod.conditions] == ["PodScheduled", DEVICES_ALLOCATED_CONDITION]


def test_the_pod_and_its_scheduler_view_share_one_labels_mapping() -> None:
    raw = raw_pod({})
    raw["metadata"]["labels"] = {"app": "a"}
    pod = parse_pod(raw)
    assert pod.labels == {"app": "a"} and pod.labels is pod.needs.labels


def test_pods_with_equal_tolerations_share_them() -> None:
    tolerations = [{"key": "node.kubernetes.io/not-ready", "operator": "Exists"}]
    first = parse_pod(raw_pod({}, {"tolerations": tolerations}))
    second = parse_pod(raw_pod({}, {"tolerations": [dict(t) for t in tolerations]}))
    other = parse_pod(raw_pod({}, {"tolerations": [{"operator": "Exists"}]}))
    assert first.needs.tolerations is second.needs.tolerations
    assert first.needs.tolerations == tuple(tolerations)
    assert other.needs.tolerations == ({"operator": "Exists"},)


def test_shared_tolerations_hold_nothing_of_a_pod_and_keep_its_order() -> None:
    raw = raw_pod({}, {"tolerations": [{"key": "k", "operator": "Exists"}]})
    first = parse_pod(raw)
    raw["spec"]["tolerations"][0]["key"] = "changed"
    assert first.needs.tolerations == ({"key": "k", "operator": "Exists"},)
    second = parse_pod(raw_pod({}, {"tolerations": [{"key": "k", "operator": "Exists"}]}))
    assert second.needs.tolerations == ({"key": "k", "operator": "Exists"},)
    reordered = parse_pod(raw_pod({}, {"tolerations": [{"operator": "Exists", "key": "k"}]}))
    assert list(reordered.needs.tolerations[0]) == ["operator", "key"]
