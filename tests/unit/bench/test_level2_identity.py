"""Level 2's operator as installed: what of the manifests it is given (its account, roles,
the admission policies and their parameters; not the Deployment or the webhooks)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from bench import level2

REPO = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize("overlay", ["", "overlays/in-tree"])
def test_the_identity_is_the_deployments_account_lease_and_policies(overlay: str) -> None:
    try:
        bin_dir = level2.testbed_bin()
    except level2.Level2Unavailable as error:
        pytest.skip(f"kubectl unavailable: {error}")
    rendered = subprocess.run(
        [str(bin_dir / "kubectl"), "kustomize", str(REPO / "manifests" / overlay)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    parts = level2.installed_parts(yaml.safe_load_all(rendered), overlay)
    assert (parts.account, parts.namespace, parts.lease) == (
        "dralloc-operator",
        "dralloc-system",
        "dralloc-operator",
    )
    assert {o["kind"] for o in parts.objects} == level2.INSTALLED_KINDS
    policies = {o["metadata"]["name"] for o in parts.objects if o["kind"].endswith("Policy")}
    assert {"dralloc-operator-pod-writes", "dralloc-operator-claim-writes"} <= policies
    params = [o for o in parts.objects if o["kind"] == "ConfigMap"]
    assert [o["metadata"]["name"] for o in params] == ["dralloc-operator-identity"]


def test_manifests_without_one_deployment_are_refused() -> None:
    deployment = {
        "kind": "Deployment",
        "metadata": {"name": "d", "namespace": "ns"},
        "spec": {"template": {"spec": {"serviceAccountName": "sa", "containers": [{}]}}},
    }
    for rendered in ([], [deployment, deployment]):
        with pytest.raises(level2.Level2Unavailable, match="Deployments, not one"):
            level2.installed_parts(rendered, "here")
    parts = level2.installed_parts([None, deployment, {"kind": "Secret"}], "here")
    assert (parts.account, parts.namespace, parts.lease, parts.objects) == (
        "sa",
        "ns",
        "dralloc-operator",
        [],
    )
