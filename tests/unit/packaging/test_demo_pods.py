"""scripts/demo_pods.py: the demo ends once the examples that should get devices have them and
those meant to wait were told why, and lists the latter in a line each."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[3]


def demo_pods() -> ModuleType:
    spec = importlib.util.spec_from_file_location("demo_pods", REPO / "scripts" / "demo_pods.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while it loads
    spec.loader.exec_module(module)
    return module


def example_pod(name: str, *, placed: bool, waits: str = "", told: str = "") -> dict[str, Any]:
    annotations = {"resource.dralloc.dev/claims": "[]"}
    if placed:
        devices = [
            {"name": "gpu", "devices": [{"request": "gpu", "pool": "n1", "device": "gpu-0"}]}
        ]
        annotations["resource.dralloc.dev/devices"] = json.dumps(devices)
    if waits:
        annotations["examples.dralloc.dev/waits"] = waits
    status = {"conditions": [{"type": "resource.dralloc.dev/DevicesAllocated", "message": told}]}
    return {
        "metadata": {"namespace": "ex", "name": name, "annotations": annotations},
        "spec": {"nodeName": "n1"} if placed else {},
        "status": status if told else {},
    }


def test_a_pod_meant_to_wait_is_not_waited_for_and_says_what_it_was_told() -> None:
    module = demo_pods()
    pods = [
        example_pod("one-gpu", placed=True),
        example_pod("h100-trio", placed=False, waits="its quota is full", told="quota h100-memory"),
    ]
    found = module.report(pods)
    assert found.done
    [line] = found.meant_to_wait
    assert "ex/h100-trio waits" in line and "its quota is full" in line
    assert "quota h100-memory" in line
    assert "gpu=n1/gpu-0" in found.table()


def test_a_pod_that_should_have_devices_keeps_the_demo_waiting() -> None:
    module = demo_pods()
    found = module.report([example_pod("one-gpu", placed=False), example_pod("b", placed=True)])
    assert not found.done and found.waiting == ["ex/one-gpu"]
    assert not module.report([]).done, "no example pod at all is not done"


def test_a_pod_meant_to_wait_keeps_the_demo_waiting_until_it_is_told_why() -> None:
    """The operator explains a waiting pod after a short grace: a demo that ended before it
    printed 'not told anything yet' where the reason belongs (seen in `make demo`)."""
    module = demo_pods()
    pods = [example_pod("one-gpu", placed=True), example_pod("trio", placed=False, waits="full")]
    found = module.report(pods)
    assert not found.done and found.untold == ["ex/trio"]
    assert "not told anything yet" in found.meant_to_wait[0]


def test_every_example_pod_that_cannot_get_devices_says_so() -> None:
    """The examples' own pods meant to wait are annotated (h100-trio: its DeviceQuota is full)."""
    annotated = {}
    for path in sorted((REPO / "manifests" / "examples").rglob("*.yaml")):
        for document in yaml.safe_load_all(path.read_text()):
            if isinstance(document, dict) and document.get("kind") == "Pod":
                annotations = document["metadata"].get("annotations") or {}
                if "examples.dralloc.dev/waits" in annotations:
                    annotated[document["metadata"]["name"]] = path.name
    assert annotated == {"h100-trio": "device-quota.yaml"}
