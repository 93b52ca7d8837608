"""Taint eviction through the Eviction API (``eviction_mode=evict``): budgets hold.

The operator here runs with DRALLOC_EVICTION_MODE=evict. A pod covered by a
PodDisruptionBudget is not evicted while the budget refuses (the pod's Event names the
budget, the rule's condition counts the refusal); once the budget is gone the retry evicts.
The testbed's kube-controller-manager runs no disruption controller, so a budget's status is
never computed and the API server refuses every eviction it covers ("still being processed"):
a budget that blocks for sure, then deleting it allows.
"""

from __future__ import annotations

from collections.abc import Iterator

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
    testbed.apply(template(namespace, "one", pool))
    testbed.apply(
        pod(namespace, "guarded", pool, [{"name": "dev", "resourceClaimTemplateName": "one"}],
            labels={"app": "guarded"}),
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": "keep-one", "namespace": namespace},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "guarded"}}},
        },
    )  # fmt: skip
    wait_bound(testbed, namespace, "guarded")
    uid = (get(testbed, "pod", "guarded", namespace) or {})["metadata"]["uid"]
    rule = rules.rule(pool)
    testbed.apply(rule)

    def refusal() -> str | None:
        for event in events(testbed, namespace, "guarded", "DeviceTaintManagerEviction"):
            if event["message"].startswith("Eviction refused by a disruption budget"):
                return str(event["message"])
        return None

    message = wait_for("the budget to refuse the eviction", refusal, timeout=40)
    assert "keep-one" in message, message
    condition = wait_for(
        "the rule to count the refused eviction",
        lambda: rule_condition(testbed, rules, rule["metadata"]["name"], "PodsPendingEviction"),
        timeout=30,
    )
    assert "1 eviction refused by a disruption budget (retrying)" in condition["message"]
    still = get(testbed, "pod", "guarded", namespace)
    assert still is not None and still["metadata"]["uid"] == uid

    testbed.kubectl("delete", "pdb", "keep-one", f"--namespace={namespace}")
    wait_for(
        "the retried eviction to go through",
        lambda: (
            (get(testbed, "pod", "guarded", namespace) or {}).get("metadata", {}).get("uid") != uid
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
