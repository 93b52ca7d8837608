"""Each DeviceTaintRule's condition: written at most once per period, and as Events where the
served rule has no status (discovery decides)."""

from __future__ import annotations

import asyncio
import types
from typing import Any

import pytest

from operators.controllers.taints import RULE_STATUS_PERIOD, TaintController, rulestatus
from operators.kube import DEVICE_TAINT_RULES, JsonDict

from ..fakes import DRIVER, FakeClient, one_device_cluster, put


def taint_rule() -> JsonDict:
    return {
        "apiVersion": f"{DEVICE_TAINT_RULES.group}/{DEVICE_TAINT_RULES.version}",
        "kind": "DeviceTaintRule",
        "metadata": {"name": "r", "uid": "uid-r", "resourceVersion": "1", "generation": 1},
        "spec": {
            "deviceSelector": {"driver": DRIVER},
            "taint": {"key": "k", "value": "v", "effect": "NoExecute"},
        },
    }


class _Stop(Exception):
    pass


async def run_status_loop(
    monkeypatch: Any, controller: TaintController, seconds: int, *, busy: bool = True
) -> None:
    """The rule-status loop for ``seconds`` of a fake clock; with ``busy`` the rule is marked
    changed every second with a new message (one more pod evicted)."""
    clock = [0.0]

    async def sleep(delay: float) -> None:
        if clock[0] >= seconds:
            raise _Stop
        clock[0] += delay
        if busy:
            controller.ledger.evicted_by_rule["r"] += 1
        controller.rule_status.mark(frozenset({"r"}))
        await asyncio.sleep(0)

    monkeypatch.setattr(rulestatus, "asyncio", types.SimpleNamespace(sleep=sleep))
    monkeypatch.setattr(rulestatus, "time", types.SimpleNamespace(monotonic=lambda: clock[0]))
    with pytest.raises(_Stop):
        await controller.rule_status.loop()


async def test_rule_status_is_written_at_most_once_per_period(monkeypatch: Any) -> None:
    """The rule is marked changed every second (a busy eviction): its status is written when
    first changed and then once per RULE_STATUS_PERIOD, not once a second."""
    client = FakeClient()
    runtime = one_device_cluster(client)
    put(runtime, DEVICE_TAINT_RULES, taint_rule())
    controller = TaintController(runtime)
    seconds = 25
    await run_status_loop(monkeypatch, controller, seconds)
    writes = client.writes(DEVICE_TAINT_RULES.path(None, "r") + "/status")
    assert len(writes) == 1 + (seconds - 1) // int(RULE_STATUS_PERIOD)  # at 1, 11, 21
    assert "r" in controller.rule_status.dirty  # the latest change still to be written


def served_without_status(runtime: Any) -> None:
    """The server serves DeviceTaintRules only at v1alpha3 (Kubernetes 1.34): no status."""
    informer = runtime.cache[DEVICE_TAINT_RULES]
    informer._version = informer.versions.index("v1alpha3")


async def test_a_rule_without_status_gets_its_condition_as_events(monkeypatch: Any) -> None:
    """No PATCH to a status subresource that does not exist (a 404 once a second); each new
    reason or message becomes one Event on the rule, at most once per RULE_STATUS_PERIOD."""
    client = FakeClient()
    runtime = one_device_cluster(client)
    put(runtime, DEVICE_TAINT_RULES, taint_rule())
    served_without_status(runtime)
    controller = TaintController(runtime)
    await run_status_loop(monkeypatch, controller, 25)
    assert not client.writes("/status")
    assert [e["message"] for e in client.events] == [
        "1 pod evicted since starting the controller.",
        "11 pods evicted since starting the controller.",
        "21 pods evicted since starting the controller.",
    ]
    first = client.events[0]
    assert first["reason"] == "Completed"
    assert first["involved"]["kind"] == "DeviceTaintRule"
    assert first["involved"]["apiVersion"].endswith("/v1alpha3")
    assert first["involved"]["metadata"]["uid"] == "uid-r"


async def test_a_rule_without_status_is_not_told_the_same_twice(monkeypatch: Any) -> None:
    client = FakeClient()
    runtime = one_device_cluster(client)
    put(runtime, DEVICE_TAINT_RULES, taint_rule())
    served_without_status(runtime)
    controller = TaintController(runtime)
    await run_status_loop(monkeypatch, controller, 25, busy=False)
    assert [e["message"] for e in client.events] == [
        "0 pods evicted since starting the controller."
    ]


@pytest.mark.parametrize(
    ("served", "to_status"),
    [
        (frozenset({"devicetaintrules", "devicetaintrules/status"}), True),  # 1.35
        (frozenset({"devicetaintrules"}), False),  # 1.34
    ],
)
async def test_discovery_decides_whether_a_v1alpha3_rule_has_a_status(
    monkeypatch: Any, served: frozenset[str], to_status: bool
) -> None:
    """Kubernetes 1.35 serves v1alpha3 rules with a status subresource, 1.34 without: what
    discovery says wins over the versions known to lack one."""
    client = FakeClient()
    client.subresources["v1alpha3"] = served
    runtime = one_device_cluster(client)
    put(runtime, DEVICE_TAINT_RULES, taint_rule())
    served_without_status(runtime)
    controller = TaintController(runtime)
    await run_status_loop(monkeypatch, controller, 5, busy=False)
    assert bool(client.writes("/status")) is to_status
    assert bool(client.events) is not to_status
