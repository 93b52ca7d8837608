"""Device taints: NoExecute taints (of a DeviceTaintRule, or in the slice) evict pods,
tolerationSeconds delays it."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import pytest

from .kube_helpers import Testbed, unique_name, wait_for
from .operator_fixtures import (
    OperatorProcess,
    Pool,
    events,
    get,
    make_pool,
    operator,
    pod,
    served,
    served_version,
    slice_manifest,
    template,
    wait_bound,
)

__all__ = ["operator"]

pytestmark = pytest.mark.api_modes

TAINT_KEY = "example.com/broken"


@dataclass(frozen=True)
class Rules:
    """DeviceTaintRules as the testbed serves them in the test's mode."""

    api_version: str
    resource: str
    """For kubectl, e.g. ``devicetaintrules.v1beta2.resource.k8s.io``."""
    has_status: bool
    """The served version has a status subresource (in-tree v1alpha3, Kubernetes 1.34, has
    none: the operator then reports on the rule with Events)."""

    def rule(self, pool: Pool, effect: str = "NoExecute") -> dict[str, Any]:
        return {
            "apiVersion": self.api_version,
            "kind": "DeviceTaintRule",
            "metadata": {"name": unique_name("rule")},
            "spec": {
                "deviceSelector": {"driver": pool.driver},
                "taint": {"key": TAINT_KEY, "value": "true", "effect": effect},
            },
        }


@pytest.fixture
def rules(testbed: Testbed, operator: OperatorProcess) -> Rules:
    """The test is skipped where DeviceTaintRules are not served (after the operator fixture:
    in crd mode it installs them)."""
    api_version = served_version(testbed, "devicetaintrules", testbed.api_mode.taint_rule_versions)
    group, version = api_version.split("/")
    has_status = served(testbed, "devicetaintrules/status", version)
    return Rules(api_version, f"devicetaintrules.{version}.{group}", has_status)


def exists(testbed: Testbed, namespace: str, name: str, uid: str | None = None) -> bool:
    obj = get(testbed, "pod", name, namespace)
    return obj is not None and (uid is None or obj["metadata"]["uid"] == uid)


def rule_condition(testbed: Testbed, rules: Rules, name: str, reason: str) -> dict[str, Any] | None:
    """The rule's EvictionInProgress condition, once it has this reason; where the served rule
    has no status, the operator's latest Event on the rule with this reason (no ``status``)."""
    obj = get(testbed, rules.resource, name)
    if not rules.has_status:
        uid = (obj or {}).get("metadata", {}).get("uid")
        said = [
            e
            for e in events(testbed, "default", name, reason)
            if e["involvedObject"].get("kind") == "DeviceTaintRule"
            and e["involvedObject"].get("uid") == uid
            and e.get("reportingComponent") == "dralloc"
        ]
        said.sort(key=lambda e: e.get("lastTimestamp") or "")
        return {"reason": reason, "message": said[-1]["message"]} if said else None
    for condition in ((obj or {}).get("status") or {}).get("conditions") or []:
        if condition["type"] == "EvictionInProgress" and condition["reason"] == reason:
            return dict(condition)
    return None


def refused_for_the_taint(testbed: Testbed, namespace: str, name: str, uid: str) -> bool:
    """The operator has tried to allocate this pod (this uid) and said why it cannot."""
    return any(
        e["involvedObject"].get("uid") == uid
        for e in events(testbed, namespace, name, "FailedAllocation")
    )


def test_no_execute_rule_evicts_but_spares_a_new_pod_of_the_same_name(
    testbed: Testbed, operator: OperatorProcess, namespace: str, rules: Rules
) -> None:
    pool = make_pool(testbed, nodes=1, devices=1)
    testbed.apply(template(namespace, "one", pool))
    entry = [{"name": "dev", "resourceClaimTemplateName": "one"}]
    testbed.apply(pod(namespace, "victim", pool, entry))
    wait_bound(testbed, namespace, "victim")
    old = get(testbed, "pod", "victim", namespace)
    assert old is not None
    old_uid = old["metadata"]["uid"]

    rule = rules.rule(pool)
    testbed.apply(rule)
    wait_for("the pod to be evicted", lambda: not exists(testbed, namespace, "victim", old_uid))
    marks = [e for e in events(testbed, namespace, "victim", "DeviceTaintManagerEviction")]
    assert any(e["message"] == "Marking for deletion" for e in marks), marks

    # A new pod of the same name: the tainted device cannot be allocated to it, and the
    # eviction that was meant for the old pod must not touch it.
    testbed.apply(pod(namespace, "victim", pool, entry))
    wait_for("the new pod to exist", lambda: exists(testbed, namespace, "victim"))
    new_uid = get(testbed, "pod", "victim", namespace)["metadata"]["uid"]  # type: ignore[index]
    assert new_uid != old_uid
    # Not "still there after a few seconds": first proof that the operator has processed the
    # new pod after the taint (it refused it the tainted device) and finished with the rule
    # (nothing pending, one pod evicted), then the new pod must still be there.
    wait_for(
        "the operator to refuse the new pod the tainted device",
        lambda: refused_for_the_taint(testbed, namespace, "victim", new_uid),
        timeout=40,
    )
    condition = wait_for(
        "the rule's EvictionInProgress condition Completed",
        lambda: rule_condition(testbed, rules, rule["metadata"]["name"], "Completed"),
        timeout=40,
    )
    assert condition.get("status", "False") == "False"  # no status: an Event, which has none
    assert condition["message"] == "1 pod evicted since starting the controller."
    assert exists(testbed, namespace, "victim", new_uid)
    testbed.kubectl("delete", rules.resource, rule["metadata"]["name"])


def test_toleration_seconds_delays_eviction(
    testbed: Testbed, operator: OperatorProcess, namespace: str, rules: Rules
) -> None:
    pool = make_pool(testbed, nodes=1, devices=1)
    toleration = {
        "key": TAINT_KEY,
        "operator": "Exists",
        "effect": "NoExecute",
        # Long enough that a loaded machine (CI runs two control planes at once) reports the
        # pending eviction well before it: at 6 s, 5 s to report were once not enough.
        "tolerationSeconds": 12,
    }
    testbed.apply(template(namespace, "tolerant", pool, tolerations=[toleration]))
    testbed.apply(
        pod(namespace, "patient", pool, [{"name": "dev", "resourceClaimTemplateName": "tolerant"}])
    )
    wait_bound(testbed, namespace, "patient")

    rule = rules.rule(pool)
    testbed.apply(rule)
    tainted_at = time.monotonic()
    # Not "still there after 3 s": first proof that the operator has processed the taint (the
    # rule reports the eviction it scheduled), then the pod must still be there.
    pending = wait_for(
        "the rule to report the pending eviction",
        lambda: rule_condition(testbed, rules, rule["metadata"]["name"], "PodsPendingEviction"),
        timeout=10,
    )
    assert pending["message"] == "1 pod needs to be evicted in 1 namespace."
    assert exists(testbed, namespace, "patient"), "evicted before tolerationSeconds ran out"
    assert time.monotonic() - tainted_at < 12.0, "checked too late to prove anything"
    wait_for("the pod to be evicted", lambda: not exists(testbed, namespace, "patient"), timeout=30)
    assert time.monotonic() - tainted_at >= 11.0
    testbed.kubectl("delete", rules.resource, rule["metadata"]["name"])


def test_no_execute_taint_in_the_slice_evicts(
    testbed: Testbed, operator: OperatorProcess, namespace: str
) -> None:
    pool = make_pool(testbed, nodes=1, devices=1)
    testbed.apply(template(namespace, "one", pool))
    testbed.apply(
        pod(namespace, "victim", pool, [{"name": "dev", "resourceClaimTemplateName": "one"}])
    )
    wait_bound(testbed, namespace, "victim")
    uid = get(testbed, "pod", "victim", namespace)["metadata"]["uid"]  # type: ignore[index]

    # The driver taints its device (a new generation of its pool's slice).
    tainted = slice_manifest(pool.driver, pool.nodes[0], 1, mode=pool.mode)
    tainted["spec"]["pool"]["generation"] = 2
    tainted["spec"]["devices"][0]["taints"] = [
        {"key": TAINT_KEY, "value": "true", "effect": "NoExecute"}
    ]
    testbed.apply(tainted)
    wait_for("the pod to be evicted", lambda: not exists(testbed, namespace, "victim", uid))
    marks = [e for e in events(testbed, namespace, "victim", "DeviceTaintManagerEviction")]
    assert any(e["message"] == "Marking for deletion" for e in marks), marks
