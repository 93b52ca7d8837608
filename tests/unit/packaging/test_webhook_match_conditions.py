"""Which pods the API server sends to the gate webhook in in-tree mode (its matchConditions,
in the in-tree component and the chart), evaluated offline with dralloc's CEL."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from operators.cel.program import evaluate

ROOT = Path(__file__).resolve().parents[3]
PATCH = ROOT / "manifests" / "components" / "in-tree" / "webhook-spec-claims.yaml"


def in_tree_condition() -> str:
    ops = yaml.safe_load(PATCH.read_text())
    (replace,) = [op for op in ops if op["op"] == "replace"]
    (condition,) = replace["value"]
    return str(condition["expression"])


def pod(**spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c"}], **spec}}


def limited(**limits: str) -> dict[str, Any]:
    return {"name": "c", "resources": {"requests": {"cpu": "1"}, "limits": dict(limits)}}


@pytest.mark.parametrize(
    ("obj", "sent"),
    [
        (pod(), False),
        (pod(containers=[limited(cpu="1", memory="1Gi")]), False),
        (pod(resourceClaims=[]), False),
        (pod(resourceClaims=[{"name": "gpu", "resourceClaimTemplateName": "t"}]), True),
        # A DRA extended resource: the webhook turns it into a claim.
        (pod(containers=[limited(**{"example.com/gpu": "1"})]), True),
        (pod(containers=[limited(**{"deviceclass.resource.kubernetes.io/gpu": "1"})]), True),
        (pod(initContainers=[limited(**{"example.com/gpu": "1"})]), True),
        (pod(initContainers=[limited(cpu="1")]), False),
    ],
)
def test_pods_asking_for_claims_or_extended_resources_are_sent(
    obj: dict[str, Any], sent: bool
) -> None:
    assert evaluate(in_tree_condition(), {"object": obj}) is sent


def test_the_chart_sends_the_same_pods() -> None:
    chart = (ROOT / "charts" / "dralloc" / "templates" / "webhook.yaml").read_text()
    expected = " ".join(in_tree_condition().split())
    assert expected in " ".join(chart.split())
