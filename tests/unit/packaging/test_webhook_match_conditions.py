"""Which pods the API server sends to the gate webhooks in in-tree mode (their
matchConditions, in the in-tree component and the chart), evaluated offline with dralloc's
CEL: pods with claims to the fail-closed gate, pods without claims that have a limit with a
domain (a DRA extended resource, or a device plugin's) to the fail-open one, never both."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from operators.cel.program import evaluate

from .test_helm_chart import only, template

ROOT = Path(__file__).resolve().parents[3]
PATCH = ROOT / "manifests" / "components" / "in-tree" / "webhook-spec-claims.yaml"
GATE = "scheduling-gate.resource.dralloc.dev"
EXTENDED = "extended-resources.resource.dralloc.dev"


def component_conditions() -> dict[str, str]:
    ops = yaml.safe_load(PATCH.read_text())
    (replace,) = [op for op in ops if op["op"] == "replace"]
    (added,) = [op for op in ops if op["op"] == "add"]
    return {
        GATE: replace["value"][0]["expression"],
        added["value"]["name"]: added["value"]["matchConditions"][0]["expression"],
    }


def pod(**spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c"}], **spec}}


def limited(**limits: str) -> dict[str, Any]:
    return {"name": "c", "resources": {"requests": {"cpu": "1"}, "limits": dict(limits)}}


CLAIMS = [{"name": "gpu", "resourceClaimTemplateName": "t"}]


@pytest.mark.parametrize(
    ("obj", "sent_to"),
    [
        (pod(), None),
        (pod(containers=[limited(cpu="1", memory="1Gi")]), None),
        (pod(resourceClaims=[]), None),
        (pod(resourceClaims=CLAIMS), GATE),
        (pod(resourceClaims=CLAIMS, containers=[limited(**{"nvidia.com/gpu": "1"})]), GATE),
        (pod(containers=[limited(**{"example.com/gpu": "1"})]), EXTENDED),
        (pod(containers=[limited(**{"deviceclass.resource.kubernetes.io/gpu": "1"})]), EXTENDED),
        (pod(initContainers=[limited(**{"example.com/gpu": "1"})]), EXTENDED),
        (pod(initContainers=[limited(cpu="1")]), None),
    ],
)
def test_each_pod_goes_to_one_webhook_at_most(obj: dict[str, Any], sent_to: str | None) -> None:
    conditions = component_conditions()
    assert set(conditions) == {GATE, EXTENDED}
    sent = [
        name for name, expression in conditions.items() if evaluate(expression, {"object": obj})
    ]
    assert sent == ([sent_to] if sent_to else [])


def test_the_chart_sends_the_same_pods_with_the_same_failure_policies() -> None:
    objects = template("--set", "apiGroup=resource.k8s.io")
    hooks = only(objects, "MutatingWebhookConfiguration", "dralloc")["webhooks"]
    chart = {h["name"]: " ".join(h["matchConditions"][0]["expression"].split()) for h in hooks}
    component = {k: " ".join(v.split()) for k, v in component_conditions().items()}
    assert chart == component
    assert {h["name"]: h["failurePolicy"] for h in hooks} == {GATE: "Fail", EXTENDED: "Ignore"}
    assert hooks[0]["clientConfig"] == hooks[1]["clientConfig"]
