"""A snapshot's pods are the operator's own view, parsed by the same function; the toolkit adds
strictness (malformed input is an error naming the field) and simulated copies."""

from __future__ import annotations

import json
from typing import Any

import pytest

from operators.api.extendedresources import ENTRY_NAME, translate
from operators.api.podprotocol import DRALLOC, KUBERNETES
from operators.cache.core import parse_pod as operator_view
from operators.toolkit.pods import copy_of, made_up, parse_pod
from operators.toolkit.usererrors import ObjectRef, SnapshotError

REF = ObjectRef("snapshot.yaml", kind="Pod", namespace="ns", name="p")


def intree_pod(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"namespace": "ns", "name": "p", "uid": "u1", "labels": {"app": "a"}},
        "spec": {
            "nodeName": "n1",
            "nodeSelector": {"zone": "west"},
            "containers": [{"name": "c", "resources": {"requests": {"cpu": "2"}}}],
            "resourceClaims": [
                {"name": "gpu", "resourceClaimTemplateName": "t"},
                {"name": "shared", "resourceClaimName": "s"},
            ],
            **spec,
        },
        "status": {
            "phase": "Running",
            "resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": "p-gpu-x"}],
        },
    }


def dralloc_pod(annotations: dict[str, str]) -> dict[str, Any]:
    claims = json.dumps([{"name": "gpu", "resourceClaimTemplateName": "t"}])
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "namespace": "ns",
            "name": "p",
            "uid": "u1",
            "annotations": {"resource.dralloc.dev/claims": claims, **annotations},
        },
        "spec": {"containers": [{"name": "c"}]},
    }


@pytest.mark.parametrize(
    ("body", "protocol"), [(intree_pod(), KUBERNETES), (dralloc_pod({}), DRALLOC)]
)
def test_a_snapshot_pod_is_the_operators_view_of_it(body: dict[str, Any], protocol: Any) -> None:
    """Either mode, found from the pod itself: the same claims, statuses and filters' view
    as the allocation controller reads."""
    pod = parse_pod(REF, body)
    assert pod == operator_view(body, protocol)
    assert pod.protocol is protocol


def test_a_malformed_gang_annotation_names_its_field() -> None:
    with pytest.raises(SnapshotError) as caught:
        parse_pod(REF, dralloc_pod({"resource.dralloc.dev/gang-size": "many"}))
    assert caught.value.field.startswith("metadata.annotations[resource.dralloc.dev/gang")


def test_malformed_claim_statuses_name_their_field() -> None:
    body = dralloc_pod({"resource.dralloc.dev/claim-statuses": "not json"})
    with pytest.raises(SnapshotError) as caught:
        parse_pod(REF, body)
    assert caught.value.field == "metadata.annotations[resource.dralloc.dev/claim-statuses]"


def test_a_copy_has_its_own_name_no_node_and_no_recorded_claim() -> None:
    original = parse_pod(REF, intree_pod())
    copy = copy_of(original, "p-sim-0")
    assert (copy.name, copy.uid, copy.node_name) == ("p-sim-0", "simulated-ns-p-sim-0", "")
    assert (copy.needs.name, copy.needs.node_name, copy.needs.gated) == ("p-sim-0", "", True)
    assert copy.needs.node_selector == {"zone": "west"}, "its node filters are the original's"
    assert copy.claim_statuses == () and copy.claim_name(copy.claims[0]) is None
    assert copy.claim_name(copy.claims[1]) == "s", "a named claim is shared, as the pod says"


def test_a_copy_makes_its_own_claim_for_the_originals_extended_resources() -> None:
    body = intree_pod(resourceClaims=[])
    body["spec"]["containers"][0]["resources"] = {"limits": {"example.com/gpu": "1"}}
    translation = translate(body, {"example.com/gpu": "gpu"}, "abcde")
    assert translation is not None
    translation.apply(body)
    original = parse_pod(REF, body)
    assert original.extended is not None
    [entry] = original.claims
    assert entry.name == ENTRY_NAME and entry.resource_claim_name == original.extended.claim_name
    assert copy_of(original, "c").claims[0].resource_claim_name is None
    replacement = copy_of(original, "p-new", keep_claims=True)
    assert replacement.claims[0].resource_claim_name == original.extended.claim_name


def test_a_made_up_pod_is_read_by_the_same_parser() -> None:
    pod = made_up("ns", "stand-in", [{"name": "claim", "resourceClaimName": "c"}])
    assert pod.protocol is DRALLOC and pod.active and not pod.node_name
    assert [pod.claim_name(e) for e in pod.claims] == ["c"]
