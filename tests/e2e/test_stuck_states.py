"""Every stuck state is visible (issue 13), on the real control plane with the operator.

- ``[]`` as the claims annotation (in-tree mode: as ``spec.resourceClaims``) asks for nothing:
  the webhook does not gate the pod, and kube-scheduler binds it like any other.
- A pod created with ``spec.nodeName`` is bound already: the webhook does not add the gate
  (the API server would refuse the pod for it), and dralloc allocates on that node.
- A ``resourceClaimName`` that does not exist leaves the pod gated with an Event and a pod
  condition naming the claim; creating the claim then lets it run.
"""

from __future__ import annotations

import json

import pytest

from .kube_helpers import Testbed, wait_for
from .operator_fixtures import (
    DEVICES_ANNOTATION,
    GATE,
    GROUP,
    claim,
    claims_in,
    events,
    get,
    make_pool,
    operator,
    pod,
    template,
    wait_bound,
)
from .reliability_helpers import pod_condition

__all__ = ["operator"]

pytestmark = pytest.mark.api_modes

CONDITION = f"{GROUP}/DevicesAllocated"


def gates(testbed: Testbed, namespace: str, name: str) -> list[str]:
    found = get(testbed, "pod", name, namespace) or {}
    return [g["name"] for g in (found.get("spec") or {}).get("schedulingGates") or []]


def test_an_empty_claims_list_is_not_gated(
    testbed: Testbed, operator: object, namespace: str
) -> None:
    pool = make_pool(testbed, nodes=1, devices=1, prefix="empty")
    body = pod(namespace, "nothing", pool, [])
    assert testbed.api_mode.pod_claims(body) == []
    testbed.apply(body)
    assert gates(testbed, namespace, "nothing") == []
    assert wait_bound(testbed, namespace, "nothing") == pool.nodes[0]


def test_a_pod_created_with_node_name_is_admitted_and_allocated_there(
    testbed: Testbed, operator: object, namespace: str
) -> None:
    pool = make_pool(testbed, nodes=2, devices=1, prefix="bound")
    testbed.apply(template(namespace, "one", pool))
    node = pool.nodes[1]
    body = pod(
        namespace, "placed", pool, [{"name": "dev", "resourceClaimTemplateName": "one"}],
        nodeName=node,
    )  # fmt: skip
    created = testbed.kubectl("create", "-f", "-", input=json.dumps(body), check=False)
    assert created.returncode == 0, created.stderr
    assert gates(testbed, namespace, "placed") == []

    def allocated() -> dict[str, object] | None:
        found = get(testbed, "pod", "placed", namespace) or {}
        raw = (found.get("metadata") or {}).get("annotations", {}).get(DEVICES_ANNOTATION)
        return json.loads(raw)[0] if raw else None

    entry = wait_for("devices of the pod created with nodeName", allocated, timeout=60)
    (generated,) = claims_in(testbed, namespace)
    status = generated["status"]
    assert entry["resourceClaimName"] == generated["metadata"]["name"]
    assert status["allocation"]["devices"]["results"][0]["pool"] == node
    uid = (get(testbed, "pod", "placed", namespace) or {})["metadata"]["uid"]
    assert [r["uid"] for r in status["reservedFor"]] == [uid]


def test_a_missing_claim_is_reported_on_the_pod_naming_it(
    testbed: Testbed, operator: object, namespace: str
) -> None:
    pool = make_pool(testbed, nodes=1, devices=1, prefix="missing")
    testbed.apply(pod(namespace, "orphan", pool, [{"name": "dev", "resourceClaimName": "nowhere"}]))
    expected = f'resourceclaim "nowhere" not found in namespace "{namespace}"'

    def reported() -> str:
        found = get(testbed, "pod", "orphan", namespace)
        condition = pod_condition(found, CONDITION) or {}
        return str(condition.get("message") or "") if condition.get("status") == "False" else ""

    message = wait_for("the missing claim on the pod's condition", reported, timeout=60)
    assert expected in message and 'claim entry "dev"' in message, message
    messages = [e["message"] for e in events(testbed, namespace, "orphan", "FailedAllocation")]
    assert any(expected in m for m in messages), messages
    assert gates(testbed, namespace, "orphan") == [GATE]
    # The user creates the claim: the pod gets it and runs.
    testbed.apply(claim(namespace, "nowhere", pool))
    assert wait_bound(testbed, namespace, "orphan") == pool.nodes[0]
