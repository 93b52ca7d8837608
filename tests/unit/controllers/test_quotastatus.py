"""What a DeviceQuota's status says: usage in the limits' notation, the Valid condition, and the
Exceeded condition (with an Event) when usage is over a limit."""

from __future__ import annotations

from typing import Any

from operators.allocator.quota import QuotaStatus, Usage
from operators.api.models import DeviceQuota
from operators.controllers.quotastatus import (
    QuotaStatusWriter,
    over_limits,
    used_json,
    valid_condition,
)
from operators.kube import DEVICE_QUOTAS

from .fakes import FakeClient

GI = 2**30 * 10**9  # nano-units of 1Gi


def quota() -> DeviceQuota:
    return DeviceQuota.model_validate(
        {
            "metadata": {"name": "gpus", "namespace": "team-a"},
            "spec": {
                "deviceClassName": "gpu",
                "hard": {"devices": 4, "capacity": {"memory": "160Gi"}},
            },
        }
    )


def test_usage_is_written_in_the_notation_of_the_limit() -> None:
    used = Usage(devices=2, claims=1, capacity={"memory": 144 * GI})
    assert used_json(quota(), used) == {"devices": 2, "claims": 1, "capacity": {"memory": "144Gi"}}
    assert used_json(quota(), Usage())["capacity"] == {"memory": "0"}


def test_the_valid_condition_says_what_an_invalid_quota_does() -> None:
    assert valid_condition(QuotaStatus(Usage(), None, False))[:2] == ("True", "Enforced")
    status, reason, message = valid_condition(
        QuotaStatus(Usage(), "selector #0: CEL compile error: x", True, "InvalidSelector")
    )
    assert (status, reason) == ("False", "InvalidSelector")
    assert message.endswith("allocations of the class in this namespace wait until it is fixed")
    status, reason, message = valid_condition(
        QuotaStatus(Usage(), 'deviceclass "gpu" not found', False, "UnknownDeviceClass")
    )
    assert (status, reason) == ("False", "UnknownDeviceClass")
    assert message == 'deviceclass "gpu" not found; the quota limits nothing'


def test_each_limit_usage_is_over_is_named() -> None:
    assert over_limits(quota(), Usage(devices=4, capacity={"memory": 160 * GI})) == []
    over = over_limits(quota(), Usage(devices=5, claims=9, capacity={"memory": 161 * GI}))
    assert over == ["devices: 5 used, hard 4", "memory: 161Gi used, hard 160Gi"]


class Events:
    def __init__(self) -> None:
        self.posted: list[tuple[str, str, str, bool]] = []

    async def post(
        self, involved: Any, reason: str, message: str, *, warning: bool = False
    ) -> None:
        self.posted.append((involved["metadata"]["name"], reason, message, warning))


async def test_a_quota_over_its_limit_says_so_in_a_condition_and_once_in_an_event() -> None:
    """Lowered below what is allocated, a quota must not keep saying only Valid=True."""
    client, events = FakeClient(), Events()
    raw = quota().to_kube()
    raw["metadata"]["resourceVersion"] = "1"
    client.remember(DEVICE_QUOTAS, raw)
    writer = QuotaStatusWriter(client, {}, None, None, events=events)  # type: ignore[arg-type]
    over = QuotaStatus(Usage(devices=6), None, False)
    await writer._write(DeviceQuota.from_kube(raw), over)
    (patch,) = client.writes("devicequotas/gpus/status")
    found = {c["type"]: c for c in patch.body["status"]["conditions"]}
    assert (found["Valid"]["status"], found["Exceeded"]["status"]) == ("True", "True")
    assert "devices: 6 used, hard 4" in found["Exceeded"]["message"]
    assert [(name, reason, warning) for name, reason, _, warning in events.posted] == [
        ("gpus", "OverLimit", True)
    ]
    # Written back as the watch shows it: still over (by more), nothing new is said.
    raw["status"] = patch.body["status"]
    await writer._write(DeviceQuota.from_kube(raw), QuotaStatus(Usage(devices=7), None, False))
    assert len(events.posted) == 1
    # Back within: the condition says so.
    await writer._write(DeviceQuota.from_kube(raw), QuotaStatus(Usage(devices=3), None, False))
    last = {
        c["type"]: c
        for c in client.writes("devicequotas/gpus/status")[-1].body["status"]["conditions"]
    }
    assert (last["Exceeded"]["status"], last["Exceeded"]["reason"]) == ("False", "WithinLimits")
