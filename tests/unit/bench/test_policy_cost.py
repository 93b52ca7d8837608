"""The policy-cost benchmark's pure parts: what it compares, and with what."""

from __future__ import annotations

from pathlib import Path

from bench import policy_cost
from tests.unit.packaging.admission import admit, operator_identity, policy_and_binding
from tests.unit.packaging.test_claim_allocation_policy import OPERATOR_SA


def test_a_versions_cost_is_the_median_of_its_differences_with_no_policies() -> None:
    figures = {
        "none": [14.0, 15.0, 14.5],
        "HEAD": [18.0, 20.0, 18.0],  # 4.0, 5.0, 3.5 above: median 4.0
    }
    text = policy_cost.table(figures)
    assert "| none | 14.500 | 14.000, 15.000, 14.500 | - |" in text, text
    assert "| HEAD | 18.000 | 18.000, 20.000, 18.000 | 4.000 |" in text, text


def test_a_revisions_manifests_are_extracted_with_the_crds_they_include(tmp_path: Path) -> None:
    manifests = policy_cost.manifests_of("HEAD", tmp_path)
    assert (manifests / "base" / "pod-protocol-policy.yaml").is_file()
    assert (manifests.parent / "crds").is_dir()  # the overlays include ../../crds
    assert policy_cost.manifests_of(str(manifests.parent), tmp_path) == manifests


def test_the_pods_writes_are_the_protocols_so_no_policy_refuses_them() -> None:
    """A refused write would end the run; the pod as created passes as a tenant's."""
    policy, _ = policy_and_binding("pod-protocol-policy.yaml")
    created = policy_cost.small_pod("p")
    assert admit(policy, operator_identity(), operation="CREATE", obj=created) is None
    assert {g["name"] for g in created["spec"]["schedulingGates"]} == {
        "resource.dralloc.dev/allocation",
        policy_cost.HOLD_GATE,
    }
    made = {**created, "metadata": {**created["metadata"], "uid": "u1", "resourceVersion": "1"}}
    claim = policy_cost.claim(made)
    (owner,) = claim["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["uid"], owner["controller"]) == ("Pod", "u1", True)
    writes, _ = policy_and_binding("operator-claim-writes.yaml")
    assert admit(writes, {}, operation="CREATE", obj=claim, user=OPERATOR_SA) is None
