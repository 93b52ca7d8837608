"""Taint eviction through the Eviction API (``eviction_mode=evict``): budgets hold.

The operator here runs with DRALLOC_EVICTION_MODE=evict. A pod covered by a
PodDisruptionBudget is not evicted while the budget refuses (the pod's Event names the
budget, the rule's condition counts the refusal); once the budget is raised the retry
evicts. The testbed's kube-controller-manager runs the disruption controller, so the API
server decides by the budget's computed status (``disruptionsAllowed``), as in a real
cluster.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from .kube_helpers import Testbed, wait_for
from .operator_fixtures import (
    OperatorProcess,
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


@pytest.fixture(scope="module")
def operator(
    testbed: Testbed, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[OperatorProcess]:
    yield from running_operator(testbed, tmp_path_factory, env={"DRALLOC_EVICTION_MODE": "evict"})


def test_a_disruption_budget_holds_the_eviction_until_it_allows_it(
    testbed: Testbed, operator: OperatorProcess, namespace: str, rules: Rules
) -> None:
    pool = make_pool(testbed, nodes=1, devices=1)
    labels = {"app": "guarded"}
    # A ReplicaSet of one (no controller makes its pods here): maxUnavailable counts against
    # its replicas, so the disruption controller needs the pod's controller to decide.
    testbed.apply(
        template(namespace, "one", pool),
        {
            "apiVersion": "apps/v1",
            "kind": "ReplicaSet",
            "metadata": {"name": "guarded", "namespace": namespace},
            "spec": {
                "replicas": 1,
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
    testbed.apply(
        pod(namespace, "guarded-0", pool, [{"name": "dev", "resourceClaimTemplateName": "one"}],
            labels=labels, owner_references=[controller])
    )  # fmt: skip
    wait_bound(testbed, namespace, "guarded-0")

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
    condition = wait_for(
        "the rule to count the refused eviction",
        lambda: rule_condition(testbed, rules, rule["metadata"]["name"], "PodsPendingEviction"),
        timeout=30,
    )
    assert "1 eviction refused by a disruption budget (retrying)" in condition["message"]
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
