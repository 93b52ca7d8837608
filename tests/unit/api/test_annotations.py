"""The pod protocol payloads: parsing user input with clear errors, and writing ours."""

from __future__ import annotations

import json

import pytest

from operators.api import annotations as ann
from operators.api import parse_object
from operators.api.models import ResourceClaim
from tests.unit.api import samples


def test_names_follow_the_design() -> None:
    assert ann.CLAIMS_ANNOTATION == "resource.dralloc.dev/claims"
    assert ann.SCHEDULING_GATE == "resource.dralloc.dev/allocation"
    assert ann.CLAIM_STATUSES_ANNOTATION == "resource.dralloc.dev/claim-statuses"
    assert ann.DEVICES_ANNOTATION == "resource.dralloc.dev/devices"
    assert ann.POD_CLAIM_NAME_ANNOTATION == "resource.dralloc.dev/pod-claim-name"
    assert ann.FINALIZER == "resource.dralloc.dev/delete-protection"
    assert ann.ADMIN_ACCESS_LABEL == "resource.dralloc.dev/admin-access"


def test_claims_annotation_parses_both_entry_forms() -> None:
    text = json.dumps(
        [
            {"name": "gpu", "resourceClaimTemplateName": "one-gpu"},
            {"name": "shared", "resourceClaimName": "team-gpu"},
        ]
    )
    claims = ann.parse_pod_claims(text)
    assert [c.name for c in claims] == ["gpu", "shared"]
    assert claims[0].resource_claim_template_name == "one-gpu"
    assert claims[1].resource_claim_name == "team-gpu"
    assert json.loads(ann.format_pod_claims(claims)) == json.loads(text)


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        (None, "is empty; expected a JSON list"),
        ("  ", "is empty; expected a JSON list"),
        ("[{", "is not valid JSON"),
        ('{"name": "gpu"}', "must be a JSON list, not a JSON object"),
        ('"gpu"', "must be a JSON list, not a JSON string"),
        ("[1]", "[0]: must be a JSON object"),
        (
            '[{"name": "gpu"}]',
            "[0]: exactly one of resourceClaimName or resourceClaimTemplateName must be set",
        ),
        (
            '[{"name": "gpu", "resourceClaimName": "a", "resourceClaimTemplateName": "b"}]',
            "[0]: exactly one of resourceClaimName or resourceClaimTemplateName",
        ),
        ('[{"name": "GPU", "resourceClaimName": "a"}]', "[0].name: must be a DNS label"),
        ('[{"resourceClaimName": "a"}]', "[0].name: required value"),
        (
            '[{"name": "a", "resourceClaimName": "x"}, {"name": "a", "resourceClaimName": "y"}]',
            "[1].name: duplicate value 'a'",
        ),
    ],
)
def test_bad_claims_annotation_names_the_annotation_and_the_problem(
    text: str | None, problem: str
) -> None:
    with pytest.raises(ann.AnnotationError) as info:
        ann.parse_pod_claims(text)
    message = str(info.value)
    assert message.startswith("annotation resource.dralloc.dev/claims: ")
    assert problem in message
    assert info.value.annotation == ann.CLAIMS_ANNOTATION


def test_pod_claims_is_none_without_the_annotation() -> None:
    assert ann.pod_claims(None) is None
    assert ann.pod_claims({"other": "x"}) is None
    found = ann.pod_claims({ann.CLAIMS_ANNOTATION: '[{"name": "a", "resourceClaimName": "c"}]'})
    assert found is not None and found[0].resource_claim_name == "c"


def test_claim_statuses_keep_explicit_null() -> None:
    text = (
        '[{"name":"gpu","resourceClaimName":"pod-gpu-x"},{"name":"none","resourceClaimName":null}]'
    )
    statuses = ann.parse_claim_statuses(text)
    assert statuses[1].resource_claim_name is None
    assert ann.format_claim_statuses(statuses) == text


def test_claim_statuses_errors_name_their_annotation() -> None:
    with pytest.raises(
        ann.AnnotationError, match=r"^annotation resource\.dralloc\.dev/claim-statuses: \[0\]\.name"
    ):
        ann.parse_claim_statuses('[{"name": ""}]')


def test_devices_annotation_from_an_allocation_round_trips() -> None:
    claim = parse_object(samples.claim())
    assert isinstance(claim, ResourceClaim)
    assert claim.status is not None and claim.status.allocation is not None
    entry = ann.PodClaimDevices.from_allocation("gpu", "pod-gpu-x7k", claim.status.allocation)
    text = ann.format_pod_devices([entry])
    data = json.loads(text)
    assert data[0]["name"] == "gpu"
    assert data[0]["resourceClaimName"] == "pod-gpu-x7k"
    assert data[0]["devices"][0] == {
        "request": "gpu",
        "driver": "gpu.example.com",
        "pool": "node-1",
        "device": "gpu-0",
        "shareID": samples.SHARE_ID,
    }
    assert data[0]["devices"][1]["adminAccess"] is True
    assert [c["source"] for c in data[0]["config"]] == ["FromClass", "FromClaim"]
    assert ann.parse_pod_devices(text) == (entry,)


def test_devices_annotation_rejects_bad_device_names() -> None:
    text = '[{"name": "gpu", "resourceClaimName": "c", "devices": [{"request": "gpu", "driver": "d", "pool": "p", "device": "Bad"}]}]'
    with pytest.raises(
        ann.AnnotationError, match=r"\[0\]\.devices\[0\]\.device: must be a DNS label"
    ):
        ann.parse_pod_devices(text)


@pytest.mark.parametrize(
    ("entry", "field"),
    [
        (
            {"name": "gpu", "resourceClaimName": "c", "resourceClaimname": "typo"},
            "resourceClaimname",
        ),
        ({"name": "gpu", "resourceClaimTemplateName": "t", "count": 2}, "count"),
    ],
)
def test_unknown_fields_in_a_claims_entry_are_refused_by_name(
    entry: dict[str, object], field: str
) -> None:
    with pytest.raises(ann.AnnotationError) as caught:
        ann.parse_pod_claims(json.dumps([{"name": "ok", "resourceClaimName": "x"}, entry]))
    message = str(caught.value)
    assert message.startswith("annotation resource.dralloc.dev/claims: ")
    assert f"[1].{field}: unknown field" in message, message


def test_gang_annotations_parse_to_a_name_and_a_size() -> None:
    assert ann.pod_gang({}) is None
    gang = ann.pod_gang({ann.GANG_ANNOTATION: "train", ann.GANG_SIZE_ANNOTATION: " 4 "})
    assert gang == ann.GangRef("train", 4)


@pytest.mark.parametrize(
    ("annotations", "named", "words"),
    [
        ({ann.GANG_ANNOTATION: "train"}, ann.GANG_ANNOTATION, "gang-size is not"),
        ({ann.GANG_SIZE_ANNOTATION: "2"}, ann.GANG_SIZE_ANNOTATION, "gang is not"),
        (
            {ann.GANG_ANNOTATION: "Train!", ann.GANG_SIZE_ANNOTATION: "2"},
            ann.GANG_ANNOTATION,
            "not a valid name",
        ),
        (
            {ann.GANG_ANNOTATION: "t", ann.GANG_SIZE_ANNOTATION: "two"},
            ann.GANG_SIZE_ANNOTATION,
            "whole number",
        ),
        (
            {ann.GANG_ANNOTATION: "t", ann.GANG_SIZE_ANNOTATION: "0"},
            ann.GANG_SIZE_ANNOTATION,
            "from 1 to",
        ),
        (
            {ann.GANG_ANNOTATION: "t", ann.GANG_SIZE_ANNOTATION: "99999"},
            ann.GANG_SIZE_ANNOTATION,
            "from 1 to",
        ),
    ],
)
def test_malformed_gang_annotations_name_the_annotation_and_the_problem(
    annotations: dict[str, str], named: str, words: str
) -> None:
    with pytest.raises(ann.AnnotationError) as caught:
        ann.pod_gang(annotations)
    assert caught.value.annotation == named
    assert words in str(caught.value)


def test_gang_topology_is_a_node_label_key() -> None:
    base = {ann.GANG_ANNOTATION: "t", ann.GANG_SIZE_ANNOTATION: "2"}
    gang = ann.pod_gang({**base, ann.GANG_TOPOLOGY_ANNOTATION: "topology.kubernetes.io/rack"})
    assert gang is not None
    assert gang.topology == ann.GangTopology("topology.kubernetes.io/rack")
    assert gang.topology is not None and not gang.topology.device_attribute
    assert str(gang.topology) == "topology.kubernetes.io/rack"
    with pytest.raises(ann.AnnotationError, match="not a valid node label key"):
        ann.pod_gang({**base, ann.GANG_TOPOLOGY_ANNOTATION: "rack name"})


@pytest.mark.parametrize(
    "name", ["gpu.example.com/nvlinkDomain", "dra.example.com/nvlink_clique_1", "x/_y"]
)
def test_gang_topology_by_device_attribute_is_written_attribute_colon_name(name: str) -> None:
    base = {ann.GANG_ANNOTATION: "t", ann.GANG_SIZE_ANNOTATION: "2"}
    gang = ann.pod_gang({**base, ann.GANG_TOPOLOGY_ANNOTATION: f"attribute:{name}"})
    assert gang is not None and gang.topology == ann.GangTopology(name, device_attribute=True)
    assert str(gang.topology) == f"attribute:{name}"  # the annotation's own spelling
    assert gang.topology.describe() == f"device attribute {name}"
    assert ann.GangTopology.parse(str(gang.topology)) == gang.topology


@pytest.mark.parametrize(
    ("value", "words"),
    [
        ("attribute:nvlinkDomain", "fully qualified device attribute name"),  # no domain
        ("attribute:", "fully qualified device attribute name"),
        ("attribute:gpu.example.com/nvlink-domain", "fully qualified device attribute name"),
        ("attribute:Gpu.Example.com/nvlinkDomain", "fully qualified device attribute name"),
        ("attribute:gpu.example.com/a/b", "fully qualified device attribute name"),
        ("attribute:gpu.example.com/" + "x" * 33, "fully qualified device attribute name"),
        ("attribute:" + "d" * 64 + "/x", "fully qualified device attribute name"),
        ("attribute: gpu.example.com/nvlinkDomain", "fully qualified device attribute name"),
        ("attr:gpu.example.com/nvlinkDomain", "not a valid node label key"),
        ("Attribute:gpu.example.com/nvlinkDomain", "not a valid node label key"),
        ("", "not a valid node label key"),
    ],
)
def test_malformed_gang_topologies_are_refused_naming_the_annotation(
    value: str, words: str
) -> None:
    base = {ann.GANG_ANNOTATION: "t", ann.GANG_SIZE_ANNOTATION: "2"}
    with pytest.raises(ann.AnnotationError) as caught:
        ann.pod_gang({**base, ann.GANG_TOPOLOGY_ANNOTATION: value})
    assert caught.value.annotation == ann.GANG_TOPOLOGY_ANNOTATION
    assert words in str(caught.value)
    assert "attribute:<domain>/<identifier>" in str(caught.value)  # says how to write one
