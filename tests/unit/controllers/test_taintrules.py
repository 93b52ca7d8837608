"""Eviction deadlines and DeviceTaintRule messages."""

from __future__ import annotations

import datetime
from typing import Any

from operators.api.models import DeviceTaintRule, ResourceClaim, ResourceSlice
from operators.controllers import taintrules
from operators.controllers.taintrules import EffectiveTaint

T0 = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)


def slice_(name: str, generation: int, devices: list[dict[str, Any]]) -> ResourceSlice:
    return ResourceSlice.model_validate({
        "metadata": {"name": name},
        "spec": {"driver": "d.example.com", "nodeName": "n1",
                 "pool": {"name": "p", "generation": generation, "resourceSliceCount": 1},
                 "devices": devices},
    })  # fmt: skip


def rule(selector: dict[str, str] | None, effect: str = "NoExecute") -> DeviceTaintRule:
    spec: dict[str, Any] = {
        "taint": {"key": "k", "value": "v", "effect": effect, "timeAdded": T0.isoformat()}
    }
    if selector is not None:
        spec["deviceSelector"] = selector
    return DeviceTaintRule.model_validate(
        {"metadata": {"name": "r", "generation": 1}, "spec": spec}
    )


def test_only_newest_generation_and_matching_rules_count() -> None:
    old = slice_("old", 1, [{"name": "a", "taints": [{"key": "stale", "effect": "NoExecute"}]}])
    new = slice_("new", 2, [{"name": "a"}, {"name": "b"}])
    table = taintrules.device_taints([old, new], [rule({"device": "b"})])
    assert table[("d.example.com", "p", "a")] == []
    assert [t.rule for t in table[("d.example.com", "p", "b")]] == ["r"]
    everything = taintrules.device_taints([new], [rule({"driver": "d.example.com"})])
    assert all(len(taints) == 1 for taints in everything.values())


def test_deadlines() -> None:
    taint = EffectiveTaint("k", "v", "NoExecute", T0)
    assert taintrules.taint_deadline(taint, [], T0) == T0
    five = {"key": "k", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 5}
    ten = {**five, "tolerationSeconds": 10}
    assert taintrules.taint_deadline(taint, [ten, five], T0) == T0 + datetime.timedelta(seconds=5)
    forever = {"key": "k", "operator": "Exists", "effect": "NoExecute"}
    assert taintrules.taint_deadline(taint, [five, forever], T0) is None
    negative = {**five, "tolerationSeconds": -3}
    assert taintrules.taint_deadline(taint, [negative], T0) == T0
    other = {"key": "other", "operator": "Exists"}
    assert taintrules.taint_deadline(taint, [other], T0) == T0
    assert taintrules.taint_deadline(EffectiveTaint("k", "v", "NoSchedule", T0), [], T0) is None


def test_claim_eviction_uses_result_tolerations() -> None:
    claim = ResourceClaim.model_validate({
        "metadata": {"namespace": "ns", "name": "c"},
        "spec": {},
        "status": {"allocation": {"devices": {"results": [
            {"request": "r", "driver": "d.example.com", "pool": "p", "device": "a",
             "tolerations": [{"key": "k", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 30}]},
            {"request": "r", "driver": "d.example.com", "pool": "p", "device": "b"},
        ]}}},
    })  # fmt: skip
    taint = EffectiveTaint("k", "v", "NoExecute", T0, rule="r")
    only_a = {("d.example.com", "p", "a"): [taint]}
    eviction = taintrules.claim_eviction(claim, only_a, T0)
    assert eviction is not None and eviction.deadline == T0 + datetime.timedelta(seconds=30)
    both = {**only_a, ("d.example.com", "p", "b"): [taint]}
    assert taintrules.claim_eviction(claim, both, T0).deadline == T0  # type: ignore[union-attr]
    assert taintrules.claim_eviction(claim, {}, T0) is None


def test_rule_messages() -> None:
    assert taintrules.pending_message(1, 1) == "1 pod needs to be evicted in 1 namespace."
    assert (
        taintrules.pending_message(2, 2) == "2 pods need to be evicted in 2 different namespaces."
    )
    assert taintrules.completed_message(2) == "2 pods evicted since starting the controller."
    assert taintrules.rule_condition(rule({"pool": "p"}), pending_pods=0, pending_namespaces=0, evicted=1) == (
        "False", "Completed", "1 pod evicted since starting the controller."
    )  # fmt: skip
    status, reason, _ = taintrules.rule_condition(
        rule({"pool": "p"}, "NoSchedule"), pending_pods=0, pending_namespaces=0, evicted=0
    )
    assert (status, reason) == ("False", "OtherEffect")
    _, reason, message = taintrules.rule_condition(
        rule({"pool": "p"}, "None"),
        pending_pods=0,
        pending_namespaces=0,
        evicted=0,
        simulation=(4, 2, 1, 1),
    )
    assert reason == "NoEffect"
    assert message.startswith(
        "4 published devices selected. 2 allocated devices selected. 1 pods would be evicted"
    )


def test_refused_evictions_are_counted_while_pending() -> None:
    status, reason, message = taintrules.rule_condition(
        rule({"pool": "p"}), pending_pods=2, pending_namespaces=1, evicted=1, blocked=1
    )
    assert (status, reason) == ("True", "PodsPendingEviction")
    assert message == (
        "2 pods need to be evicted in 1 namespace. 1 eviction refused by a disruption budget"
        " (retrying); 1 pod evicted since starting the controller."
    )
