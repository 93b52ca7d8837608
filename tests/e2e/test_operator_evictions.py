"""Taint eviction through the Eviction API (``eviction_mode=evict``): budgets hold.

The operator here runs with DRALLOC_EVICTION_MODE=evict and 4 evictions a minute. A pod
covered by a PodDisruptionBudget is not evicted while the budget refuses (the pod's Event
names the budget, the rule's condition counts the refusal); once the budget is raised the
retry evicts. The testbed's kube-controller-manager runs the disruption controller, so the API
server decides by the budget's computed status (``disruptionsAllowed``), as in a real
cluster. Evictions a budget refuses use no slot of the rate limit: free pods tainted beside
refused ones go at once.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

from .kube_helpers import Testbed, wait_for
from .operator_fixtures import (
    OperatorProcess,
    Pool,
    events,
    get,
    make_pool,
    pod,
    running_operator,
    template,
    wait_bound,
)
from .test_operator_taints import Rules, rule_condition, rules

__all__ = ["operator", "rules"]

pytestmark = pytest.mark.api_modes

MAX_PER_MINUTE = 4
PROTECTED = 5
FREE = 3  # one slot of the minute may be the first test's eviction
FREE_WITHIN_S = 30.0


@pytest.fixture(scope="module")
def operator(
    testbed: Testbed, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[OperatorProcess]:
    env = {
        "DRALLOC_EVICTION_MODE": "evict",
        "DRALLOC_MAX_EVICTIONS_PER_MINUTE": str(MAX_PER_MINUTE),
    }
    yield from running_operator(testbed, tmp_path_factory, env=env)


def guarded(testbed: Testbed, namespace: str, pool: Pool, count: int) -> None:
    """``count`` bound pods of the ReplicaSet ``guarded`` (one device each), under the budget
    ``keep-one`` (maxUnavailable 0), counted by the disruption controller."""
    labels = {"app": "guarded"}
    # A ReplicaSet (no controller makes its pods here): maxUnavailable counts against its
    # replicas, so the disruption controller needs the pods' controller to decide.
    testbed.apply(
        template(namespace, "one", pool),
        {
            "apiVersion": "apps/v1",
            "kind": "ReplicaSet",
            "metadata": {"name": "guarded", "namespace": namespace},
            "spec": {
                "replicas": count,
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {"containers": [{"name": "c", "image": "registry.invalid/fake"}]},
                },
            },
        },
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": "keep-one", "namespace": namespace},
            "spec": {"maxUnavailable": 0, "selector": {"matchLabels": labels}},
        },
    )
    owner = get(testbed, "replicaset", "guarded", namespace) or {}
    controller = {
        "apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "guarded",
        "uid": owner["metadata"]["uid"], "controller": True,
    }  # fmt: skip
    entry = [{"name": "dev", "resourceClaimTemplateName": "one"}]
    testbed.apply(*[
        pod(namespace, f"guarded-{i}", pool, entry, labels=labels, owner_references=[controller])
        for i in range(count)
    ])  # fmt: skip
    for i in range(count):
        wait_bound(testbed, namespace, f"guarded-{i}")


def test_a_disruption_budget_holds_the_eviction_until_it_allows_it(
    testbed: Testbed, operator: OperatorProcess, namespace: str, rules: Rules
) -> None:
    pool = make_pool(testbed, nodes=1, devices=1)
    guarded(testbed, namespace, pool, 1)

    def budget_status() -> dict[str, Any] | None:
        status = (get(testbed, "pdb", "keep-one", namespace) or {}).get("status") or {}
        return status if status.get("currentHealthy") == 1 else None

    status = wait_for("the disruption controller to count the pod", budget_status, timeout=60)
    assert (status["expectedPods"], status["disruptionsAllowed"]) == (1, 0), status
    uid = (get(testbed, "pod", "guarded-0", namespace) or {})["metadata"]["uid"]
    rule = rules.rule(pool)
    testbed.apply(rule)

    def refusal() -> str | None:
        for event in events(testbed, namespace, "guarded-0", "DeviceTaintManagerEviction"):
            if event["message"].startswith("Eviction refused by a disruption budget"):
                return str(event["message"])
        return None

    message = wait_for("the budget to refuse the eviction", refusal, timeout=40)
    assert "The disruption budget keep-one needs 1 healthy pods" in message, message
    counted = "1 eviction refused by a disruption budget (retrying)"

    def refusal_counted() -> dict[str, Any] | None:
        # The Event comes first; the rule's status is written on its own schedule after it
        # (the condition read at once may still be the one written before the refusal).
        found = rule_condition(testbed, rules, rule["metadata"]["name"], "PodsPendingEviction")
        return found if found is not None and counted in found["message"] else None

    wait_for("the rule to count the refused eviction", refusal_counted, timeout=30)
    still = get(testbed, "pod", "guarded-0", namespace)
    assert still is not None and still["metadata"]["uid"] == uid

    # Raised, not removed: one pod may now be unavailable, and the retry evicts it.
    testbed.kubectl(
        "patch", "pdb", "keep-one", f"--namespace={namespace}", "--type=merge",
        "-p", json.dumps({"spec": {"maxUnavailable": 1}}),
    )  # fmt: skip
    wait_for(
        "the retried eviction to go through",
        lambda: (
            (get(testbed, "pod", "guarded-0", namespace) or {}).get("metadata", {}).get("uid")
            != uid
        ),
        timeout=90,
    )
    done = wait_for(
        "the rule Completed",
        lambda: rule_condition(testbed, rules, rule["metadata"]["name"], "Completed"),
        timeout=40,
    )
    assert done["message"] == "1 pod evicted since starting the controller."
    testbed.kubectl("delete", rules.resource, rule["metadata"]["name"])


def test_evictions_a_budget_refuses_leave_the_rate_limit_to_the_others(
    testbed: Testbed, operator: OperatorProcess, namespace: str, rules: Rules
) -> None:
    """Four evictions a minute; five pods under a budget that refuses, three free ones. The
    refused attempts use no slot, so the free pods go at once (they once waited a minute,
    and one of them two: slots held by attempts a budget then refused)."""
    pool = make_pool(testbed, nodes=1, devices=PROTECTED + FREE)
    guarded(testbed, namespace, pool, PROTECTED)
    entry = [{"name": "dev", "resourceClaimTemplateName": "one"}]
    testbed.apply(*[pod(namespace, f"free-{i}", pool, entry) for i in range(FREE)])
    for i in range(FREE):
        wait_bound(testbed, namespace, f"free-{i}")
    wait_for(
        "the disruption controller to count the guarded pods",
        lambda: (
            ((get(testbed, "pdb", "keep-one", namespace) or {}).get("status") or {}).get(
                "currentHealthy"
            )
            == PROTECTED
        ),
        timeout=60,
    )
    rule = rules.rule(pool)
    tainted = time.monotonic()
    testbed.apply(rule)
    gone: dict[str, float] = {}

    def all_free_gone() -> bool:
        for i in range(FREE):
            name = f"free-{i}"
            if name not in gone and get(testbed, "pod", name, namespace) is None:
                gone[name] = time.monotonic() - tainted
        return len(gone) == FREE

    wait_for("the free pods evicted", all_free_gone, timeout=120, interval=0.5)
    print(
        f"\n[evictions] free pods evicted after (s): {sorted(round(t, 1) for t in gone.values())}"
    )
    # Within the minute a held slot once cost them (the rule's own delay is under a second).
    assert max(gone.values()) < FREE_WITHIN_S, gone
    for i in range(PROTECTED):
        assert get(testbed, "pod", f"guarded-{i}", namespace) is not None, "the budget let one go"
    testbed.kubectl("delete", rules.resource, rule["metadata"]["name"])
