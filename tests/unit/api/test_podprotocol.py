"""Where pods ask for devices and what is recorded for them, per API mode."""

from __future__ import annotations

import json

import pytest

from operators.api.podprotocol import DRALLOC, KUBERNETES, protocol_for

ENTRY = {"name": "gpu", "resourceClaimTemplateName": "one-gpu"}


def test_each_mode_reads_only_its_own_request() -> None:
    by_annotation = {
        "metadata": {"annotations": {"resource.dralloc.dev/claims": json.dumps([ENTRY])}}
    }
    by_spec = {"metadata": {}, "spec": {"resourceClaims": [ENTRY]}}
    assert [c.name for c in DRALLOC.pod_claims(by_annotation)[0]] == ["gpu"]
    assert DRALLOC.pod_claims(by_spec) == ((), "")
    assert [c.name for c in KUBERNETES.pod_claims(by_spec)[0]] == ["gpu"]
    assert KUBERNETES.pod_claims(by_annotation) == ((), "")
    assert KUBERNETES.asks_for_claims(by_spec) and not KUBERNETES.asks_for_claims(by_annotation)


def test_fields_of_a_later_api_version_are_not_refused_in_tree() -> None:
    raw = {"spec": {"resourceClaims": [{**ENTRY, "someFutureField": {"x": 1}}]}}
    claims, error = KUBERNETES.pod_claims(raw)
    assert error == "" and claims[0].resource_claim_template_name == "one-gpu"


def test_in_tree_statuses_come_from_the_pod_status_only() -> None:
    status = [{"name": "gpu", "resourceClaimName": "p-gpu-x"}]
    raw = {
        "metadata": {"annotations": {"resource.dralloc.dev/claim-statuses": json.dumps(status)}},
        "status": {"resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": None}]},
    }
    (recorded,) = KUBERNETES.claim_statuses(raw)
    assert recorded.name == "gpu" and recorded.resource_claim_name is None
    (annotated,) = DRALLOC.claim_statuses(raw)
    assert annotated.resource_claim_name == "p-gpu-x"


def test_names_per_mode() -> None:
    assert KUBERNETES.finalizer == "resource.kubernetes.io/delete-protection"
    assert KUBERNETES.pod_claim_name_annotation == "resource.kubernetes.io/pod-claim-name"
    assert KUBERNETES.admin_access_label == "resource.kubernetes.io/admin-access"
    assert DRALLOC.finalizer == "resource.dralloc.dev/delete-protection"
    assert DRALLOC.pins_node and KUBERNETES.pins_node  # in-tree too: see pins_node
    assert protocol_for("resource.k8s.io") is KUBERNETES
    with pytest.raises(ValueError, match="expected one of"):
        protocol_for("resource.example.com")


def test_each_mode_says_where_a_pod_asks_and_records_its_claims() -> None:
    """The toolkit reads a snapshot's pods through these (strictly, naming the field)."""
    from operators.api.podprotocol import DRALLOC, KUBERNETES

    entries = [{"name": "gpu", "resourceClaimTemplateName": "one"}]
    statuses = [{"name": "gpu", "resourceClaimName": "p-gpu-x"}]
    in_tree = {"spec": {"resourceClaims": entries}, "status": {"resourceClaimStatuses": statuses}}
    text, where = KUBERNETES.claims_text(in_tree)
    assert (json.loads(text), where) == (entries, "spec.resourceClaims")
    recorded, where = KUBERNETES.statuses_text(in_tree)
    assert recorded is not None and json.loads(recorded) == statuses
    assert where == "status.resourceClaimStatuses"
    annotated = {
        "metadata": {
            "annotations": {
                "resource.dralloc.dev/claims": json.dumps(entries),
                "resource.dralloc.dev/claim-statuses": json.dumps(statuses),
            }
        }
    }
    text, where = DRALLOC.claims_text(annotated)
    assert (json.loads(text), where) == (
        entries,
        "metadata.annotations[resource.dralloc.dev/claims]",
    )
    assert DRALLOC.statuses_text({"metadata": {}}) == (
        None,
        "metadata.annotations[resource.dralloc.dev/claim-statuses]",
    )
    assert KUBERNETES.extended_resources and not DRALLOC.extended_resources
