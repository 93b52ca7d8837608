"""Each example of manifests/examples, applied to the testbed with the operator running.

The examples are written for two kwok nodes named kwok-node-0 and kwok-node-1 and the fake
driver gpu.example.com (8 GPUs per node); this module creates those nodes, applies the
examples as a user would (`kubectl apply -k`), and checks what each one promises. It
deletes what it created at the end, so a reused testbed stays clean.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from .kube_helpers import REPO_ROOT, Testbed, wait_for
from .operator_fixtures import DEVICES_ANNOTATION, OperatorProcess, operator  # noqa: F401

EXAMPLES = REPO_ROOT / "manifests" / "examples"
NS = "dralloc-examples"
MONITORING = "dralloc-monitoring"
QUOTA_NS = "dralloc-quota-example"
PACKING_NS = "dralloc-packing-example"
GROUP = "resource.dralloc.dev"
WAIT_S = 90.0


@pytest.fixture(scope="module")
def examples(testbed: Testbed, operator: OperatorProcess) -> Iterator[Testbed]:  # noqa: F811
    testbed.create_nodes(2, {}, prefix="kwok-node")
    testbed.kubectl("apply", "-k", str(EXAMPLES))
    try:
        yield testbed
    finally:
        testbed.kubectl(
            "delete",
            "-k",
            str(EXAMPLES / "device-taint" / "rule"),
            "--ignore-not-found",
            check=False,
        )
        testbed.kubectl(
            "delete", "namespace", NS, MONITORING, QUOTA_NS, "--wait=false", check=False
        )
        testbed.kubectl(
            "delete",
            "-k",
            str(EXAMPLES / "packing"),
            "--ignore-not-found",
            "--wait=false",
            check=False,
        )
        testbed.kubectl(
            "delete",
            "-k",
            str(EXAMPLES / "driver"),
            "--ignore-not-found",
            "--wait=false",
            check=False,
        )


def pod_devices(testbed: Testbed, namespace: str, name: str) -> list[dict[str, Any]]:
    """The devices annotation of a pod once it is bound, as a flat list of devices."""

    def allocated() -> list[dict[str, Any]] | None:
        pod = testbed.get("pod", name, "-n", namespace)
        if pod is None or not pod["spec"].get("nodeName"):
            return None
        raw = (pod["metadata"].get("annotations") or {}).get(DEVICES_ANNOTATION)
        if not raw:
            return None
        return [
            {**d, "claim": c["resourceClaimName"]} for c in json.loads(raw) for d in c["devices"]
        ]

    devices: list[dict[str, Any]] = wait_for(
        f"pod {namespace}/{name} allocated and bound", allocated, timeout=WAIT_S
    )
    return devices


def node_of(testbed: Testbed, namespace: str, name: str) -> str:
    pod = testbed.get("pod", name, "-n", namespace)
    assert pod is not None
    return str(pod["spec"]["nodeName"])


def attributes(testbed: Testbed, pool: str, device: str) -> dict[str, Any]:
    listing = testbed.get(f"resourceslices.{GROUP}")
    assert listing is not None
    for item in listing["items"]:
        if item["spec"]["pool"]["name"] == pool and item["spec"]["driver"] == "gpu.example.com":
            for entry in item["spec"]["devices"]:
                if entry["name"] == device:
                    return {k: next(iter(v.values())) for k, v in entry["attributes"].items()}
    raise AssertionError(f"device {pool}/{device} not published")


def claim(testbed: Testbed, namespace: str, name: str) -> dict[str, Any]:
    found = testbed.get(f"resourceclaims.{GROUP}", name, "-n", namespace)
    assert found is not None, f"claim {namespace}/{name} missing"
    return found


def test_one_gpu(examples: Testbed) -> None:
    devices = pod_devices(examples, NS, "one-gpu")
    assert len(devices) == 1
    (device,) = devices
    assert device["pool"] == node_of(examples, NS, "one-gpu")
    status = claim(examples, NS, device["claim"])["status"]
    assert [r["name"] for r in status["reservedFor"]] == ["one-gpu"]


def test_numa_pair_shares_a_numa_node(examples: Testbed) -> None:
    devices = pod_devices(examples, NS, "numa-pair")
    assert len(devices) == 2
    numa = {attributes(examples, d["pool"], d["device"])["numa"] for d in devices}
    assert len(numa) == 1, devices


def claims_table_cell(testbed: Testbed, namespace: str, name: str, column: str) -> str | None:
    """One cell of `kubectl get resourceclaims` (the CRD's printer columns), or None while
    it is empty. Cells are aligned under their headers; a header may hold a space."""
    table = testbed.kubectl("get", f"resourceclaims.{GROUP}", "-n", namespace).stdout
    header, *rows = table.splitlines()
    begin = header.index(column)
    following = header[begin + len(column) :].split()
    end = header.index(following[0], begin + len(column)) if following else None
    row = next((r for r in rows if r.split()[0] == name), None)
    cell = (row[begin:end] if row else "").strip()
    return cell if cell and cell != "<none>" else None


def test_kubectl_get_shows_every_device_of_a_claim(examples: Testbed) -> None:
    # The API server's printer takes only the first value of a JSONPath, so the Devices
    # column reads the operator's status.allocatedDevices instead of results[*].device.
    devices = pod_devices(examples, NS, "numa-pair")
    assert len(devices) == 2
    (claim_name,) = {d["claim"] for d in devices}
    names = sorted(d["device"] for d in devices)
    cell = wait_for(
        f"the devices of {claim_name} in kubectl get",
        lambda: claims_table_cell(examples, NS, claim_name, "DEVICES"),
        timeout=WAIT_S,
    )
    assert sorted(cell.split(",")) == names, cell


def test_kubectl_get_shows_every_pod_of_a_shared_claim(examples: Testbed) -> None:
    # Likewise Reserved For reads status.reservedForNames, not reservedFor[*].name.
    pods = [f"shared-gpu-{i}" for i in range(3)]
    for name in pods:
        pod_devices(examples, NS, name)

    def all_three() -> str | None:
        cell = claims_table_cell(examples, NS, "shared-gpu", "RESERVED FOR")
        return cell if cell and len(cell.split(",")) == len(pods) else None

    cell = wait_for("every pod of shared-gpu in kubectl get", all_three, timeout=WAIT_S)
    assert sorted(cell.split(",")) == pods, cell


@pytest.mark.parametrize(
    ("field", "lie"),
    [("reservedForNames", "shared-gpu-0,intruder"), ("allocatedDevices", "gpu-0,gpu-99")],
)
def test_the_api_server_refuses_a_summary_that_lies(
    examples: Testbed, field: str, lie: str
) -> None:
    """The CRD's CEL rules tie the summaries kubectl shows to the lists they summarize: not
    even a cluster admin can make them say something else."""
    for i in range(3):
        pod_devices(examples, NS, f"shared-gpu-{i}")
    before = claim(examples, NS, "shared-gpu")["status"]
    assert before.get(field), f"the operator wrote no {field}"
    refused = examples.kubectl(
        "patch", f"resourceclaims.{GROUP}", "shared-gpu", "-n", NS, "--subresource=status",
        "--type=merge", "-p", json.dumps({"status": {field: lie}}), check=False,
    )  # fmt: skip
    assert refused.returncode != 0, f"a lying {field} was stored"
    assert f"{field} must " in refused.stderr, refused.stderr
    assert claim(examples, NS, "shared-gpu")["status"][field] == before[field]
    # The truth is accepted (the rules do not refuse what the operator writes).
    truth = examples.kubectl(
        "patch", f"resourceclaims.{GROUP}", "shared-gpu", "-n", NS, "--subresource=status",
        "--type=merge", "-p", json.dumps({"status": {field: before[field]}}), check=False,
    )  # fmt: skip
    assert truth.returncode == 0, truth.stderr


def test_a_list_cannot_change_under_its_summary(examples: Testbed) -> None:
    """A write that changes reservedFor but leaves reservedForNames as it was is refused too:
    the summary can be dropped or rewritten, never left stale."""
    for i in range(3):
        pod_devices(examples, NS, f"shared-gpu-{i}")
    reserved = claim(examples, NS, "shared-gpu")["status"]["reservedFor"]
    refused = examples.kubectl(
        "patch", f"resourceclaims.{GROUP}", "shared-gpu", "-n", NS, "--subresource=status",
        "--type=merge", "-p", json.dumps({"status": {"reservedFor": reserved[:-1]}}),
        "--dry-run=server", check=False,
    )  # fmt: skip
    assert refused.returncode != 0, "reservedFor changed under its summary"
    assert "reservedForNames must be the names of" in refused.stderr, refused.stderr


def test_prioritized_list_takes_its_first_alternative(examples: Testbed) -> None:
    """firstAvailable is an order: kwok-node-1's H100s are free, so "large" must be taken.

    Accepting "two-small" as well would pass on an allocator that ignores the order.
    """
    devices = pod_devices(examples, NS, "prioritized-list")
    assert [d["request"] for d in devices] == ["gpu/large"], devices
    (device,) = devices
    assert device["pool"] == "kwok-node-1" == node_of(examples, NS, "prioritized-list")
    assert attributes(examples, device["pool"], device["device"])["model"].startswith("H100")
    results = claim(examples, NS, device["claim"])["status"]["allocation"]["devices"]["results"]
    assert [(r["request"], r["device"]) for r in results] == [("gpu/large", device["device"])]


def test_admin_access_sees_every_gpu_of_its_node(examples: Testbed) -> None:
    devices = pod_devices(examples, MONITORING, "gpu-monitor")
    assert node_of(examples, MONITORING, "gpu-monitor") == "kwok-node-0"
    assert sorted(d["device"] for d in devices) == [f"gpu-{i}" for i in range(8)]
    assert all(d.get("adminAccess") for d in devices)


def test_no_device_is_allocated_twice_outside_admin_access(examples: Testbed) -> None:
    for name in ("one-gpu", "numa-pair", "prioritized-list", "shared-gpu-0", "pinned-gpu"):
        pod_devices(examples, NS, name)
    listing = examples.get(f"resourceclaims.{GROUP}", "-A")
    assert listing is not None
    seen: dict[tuple[str, str], str] = {}
    for item in listing["items"]:
        allocation = (item.get("status") or {}).get("allocation")
        for result in (allocation or {}).get("devices", {}).get("results", []):
            if result.get("adminAccess") or result["driver"] != "gpu.example.com":
                continue
            key = (result["pool"], result["device"])
            owner = f"{item['metadata']['namespace']}/{item['metadata']['name']}"
            assert key not in seen, f"{key} allocated to {seen.get(key)} and {owner}"
            seen[key] = owner


def test_noexecute_device_taint_evicts_the_pinned_pod(examples: Testbed) -> None:
    devices = pod_devices(examples, NS, "pinned-gpu")
    assert [(d["pool"], d["device"]) for d in devices] == [("kwok-node-0", "gpu-7")]
    examples.kubectl("apply", "-k", str(EXAMPLES / "device-taint" / "rule"))
    wait_for(
        "pod pinned-gpu evicted by the NoExecute DeviceTaintRule",
        lambda: examples.get("pod", "pinned-gpu", "-n", NS) is None,
        timeout=WAIT_S,
    )


def test_device_quota_lets_two_h100s_in_and_holds_back_the_third(examples: Testbed) -> None:
    devices = pod_devices(examples, QUOTA_NS, "h100-pair")
    assert {d["pool"] for d in devices} == {"kwok-node-1"}

    def refusal() -> str | None:
        found = examples.get(
            "events", "-n", QUOTA_NS,
            "--field-selector=involvedObject.name=h100-trio,reason=FailedAllocation",
        )  # fmt: skip
        for event in (found or {}).get("items") or []:
            if f"DeviceQuota {QUOTA_NS}/h100-memory: memory " in event["message"]:
                return str(event["message"])
        return None

    message = wait_for("h100-trio told about the quota", refusal, timeout=WAIT_S)
    assert "of 160Gi used, claim needs" in message, message
    trio = examples.get("pod", "h100-trio", "-n", QUOTA_NS)
    assert trio is not None and not trio["spec"].get("nodeName")

    def used() -> dict[str, Any] | None:
        quota = examples.get(f"devicequotas.{GROUP}", "h100-memory", "-n", QUOTA_NS) or {}
        return (quota.get("status") or {}).get("used")

    wait_for(
        "the quota's usage", lambda: (used() or {}).get("capacity") == {"memory": "160Gi"},
        timeout=WAIT_S,
    )  # fmt: skip


def test_toolkit_reads_the_live_cluster(examples: Testbed) -> None:
    """`dralloc explain/simulate --live` see what the operator did (list calls only)."""
    pod_devices(examples, NS, "numa-pair")
    base = [sys.executable, "-m", "operators.cli"]
    explained = subprocess.run(
        [*base, "explain", "pod/numa-pair", "-n", NS, "--live", "-o", "json"],
        capture_output=True, text=True, timeout=120, check=False, env=examples.env(),
    )  # fmt: skip
    assert explained.returncode == 0, explained.stderr
    result = json.loads(explained.stdout)
    assert result["status"] == "allocated"
    assert result["node"] == node_of(examples, NS, "numa-pair")
    # 16 GPUs in all: 17 more single-GPU pods cannot fit, whatever is allocated now.
    simulated = subprocess.run(
        [*base, "simulate", "--live", "--add-pods", "17", "--template", f"{NS}/one-gpu", "-o", "json"],
        capture_output=True, text=True, timeout=120, check=False, env=examples.env(),
    )  # fmt: skip
    assert simulated.returncode == 1, simulated.stderr
    report = json.loads(simulated.stdout)
    assert report["fits"] is False
    assert any(p["origin"] == "added" for p in report["pending"])


def test_gang_members_are_released_together(examples: Testbed) -> None:
    held = []
    for i in range(3):
        devices = pod_devices(examples, NS, f"trainer-{i}")
        assert len(devices) == 1, devices
        held += [(d["pool"], d["device"]) for d in devices]
    assert len(set(held)) == 3, held


def test_packing_example_under_first_fit_breaks_both_gpus_of_a_node(examples: Testbed) -> None:
    """The operator runs the default device policy, first-fit: the two 1g notebooks land on
    different GPUs of kwok-node-0 (pack would put both on gpu-0; tests/unit/toolkit/
    test_packing_example.py), so only kwok-node-1's two GPUs are left whole and a third
    whole-GPU worker does not fit."""
    taken = []
    for name in ("notebook-0", "notebook-1"):
        devices = pod_devices(examples, PACKING_NS, name)
        assert node_of(examples, PACKING_NS, name) == "kwok-node-0"
        taken += [(d["pool"], d["device"]) for d in devices]
    assert sorted(taken) == [("kwok-node-0", "gpu-0-1g-0"), ("kwok-node-0", "gpu-1-1g-0")]
    base = [sys.executable, "-m", "operators.cli"]
    simulated = subprocess.run(
        [*base, "simulate", "--live", "--add-pods", "3", "--template",
         f"{PACKING_NS}/trainer-whole", "-o", "json"],
        capture_output=True, text=True, timeout=120, check=False, env=examples.env(),
    )  # fmt: skip
    assert simulated.returncode == 1, simulated.stderr
    report = json.loads(simulated.stdout)
    workers = [p for p in report["placed"] if p["origin"] == "added"]
    assert sorted(d["device"] for p in workers for d in p["devices"]) == [
        "mig.example.com/kwok-node-1/gpu-0-whole",
        "mig.example.com/kwok-node-1/gpu-1-whole",
    ]
    assert [p["origin"] for p in report["pending"] if p["pod"].startswith(PACKING_NS)] == ["added"]
