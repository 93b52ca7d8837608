"""What a DeviceQuota's status says: usage in the limits' notation, and the Valid condition."""

from __future__ import annotations

from operators.allocator.quota import QuotaStatus, Usage
from operators.api.models import DeviceQuota
from operators.controllers.quotastatus import used_json, valid_condition

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
