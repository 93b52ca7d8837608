"""The raw objects the informer keeps for writers that send them back whole."""

from __future__ import annotations

import copy
from typing import Any

from operators.cache.core import SCHEDULING_GATE, gated_by_dralloc, parse_pod
from operators.cache.informer import Informer, Key
from operators.cache.rawkept import RawKept
from operators.kube import PODS, JsonDict

MANAGED = [{"manager": "kubectl", "operation": "Update", "fieldsV1": {"f:spec": {}}}]


def pod(name: str, rv: str, gates: tuple[str, ...] = (SCHEDULING_GATE,)) -> JsonDict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "ns",
            "uid": f"uid-{name}",
            "resourceVersion": rv,
            "managedFields": copy.deepcopy(MANAGED),
        },
        "spec": {
            "containers": [{"name": "c", "image": "i"}],
            "schedulingGates": [{"name": g} for g in gates],
            "futureField": {"kept": True},
        },
    }


def informer(limit: int = 10) -> Informer[Any]:
    kept = RawKept(gated_by_dralloc, limit=limit)
    return Informer(None, PODS, parse_pod, raw_kept=kept)  # type: ignore[arg-type]


def test_a_pod_under_dralloc_s_gate_is_kept_whole_but_for_its_managed_fields() -> None:
    pods = informer()
    event = pod("p", "4")
    pods.apply("ADDED", event)
    kept = pods.raw(Key("ns", "p"))
    assert kept is not None
    assert kept["spec"] == event["spec"], "what the models drop is sent back too"
    assert kept["metadata"] == {
        "name": "p",
        "namespace": "ns",
        "uid": "uid-p",
        "resourceVersion": "4",
    }
    assert event["metadata"]["managedFields"] == MANAGED, "the event's object was changed"
    # A newer version replaces it; the gate lifted, nothing is written with it any more.
    pods.apply("MODIFIED", pod("p", "5"))
    assert pods.raw(Key("ns", "p"))["metadata"]["resourceVersion"] == "5"  # type: ignore[index]
    pods.apply("MODIFIED", pod("p", "6", gates=("someone-else",)))
    assert pods.raw(Key("ns", "p")) is None


def test_a_deleted_pod_is_not_kept() -> None:
    pods = informer()
    pods.apply("ADDED", pod("p", "4"))
    pods.apply("DELETED", pod("p", "5"))
    assert pods.raw(Key("ns", "p")) is None
    pods.apply("ADDED", pod("q", "6"))
    pods.replace([])  # a relist without it
    assert pods.raw(Key("ns", "q")) is None


def test_only_the_most_recently_changed_are_kept() -> None:
    pods = informer(limit=3)
    for i in range(5):
        pods.apply("ADDED", pod(f"p{i}", str(10 + i)))
    pods.apply("MODIFIED", pod("p2", "20"))
    kept = [f"p{i}" for i in range(5) if pods.raw(Key("ns", f"p{i}")) is not None]
    assert kept == ["p2", "p3", "p4"]


def test_without_a_keeper_nothing_is_kept() -> None:
    pods: Informer[Any] = Informer(None, PODS, parse_pod)  # type: ignore[arg-type]
    pods.apply("ADDED", pod("p", "4"))
    assert pods.get(Key("ns", "p")) is not None and pods.raw(Key("ns", "p")) is None
