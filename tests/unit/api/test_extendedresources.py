"""DRA extended resources as one ordinary claim of the pod: the mapping, the translation and
the annotation that records it."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from operators.api.deviceclass import DeviceClass
from operators.api.extendedresources import (
    ENTRY_NAME,
    EXTENDED_RESOURCES_ANNOTATION,
    BackingClass,
    ExtendedResourceError,
    class_mapping,
    parse_annotation,
    translate,
)
from operators.settings import Settings
from operators.webhooks import extended_translation

GPU = "example.com/gpu"


def pod(*containers: dict[str, Any], init: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": list(containers)}
    if init is not None:
        spec["initContainers"] = init
    return {"metadata": {"name": "train", "namespace": "ns"}, "spec": spec}


def container(name: str, **asked: str) -> dict[str, Any]:
    requests = {"cpu": "1", **asked}
    return {"name": name, "resources": {"requests": requests, "limits": dict(asked)}}


def test_every_class_backs_its_implicit_name_and_the_newest_wins_an_explicit_one() -> None:
    mapping = class_mapping(
        [
            BackingClass("gpu-old", GPU, "2026-01-01T00:00:00+00:00"),
            BackingClass("gpu-new", GPU, "2026-02-01T00:00:00+00:00"),
            BackingClass("nic", None, "2026-01-01T00:00:00+00:00"),
        ]
    )
    assert mapping == {
        GPU: "gpu-new",
        "deviceclass.resource.kubernetes.io/gpu-old": "gpu-old",
        "deviceclass.resource.kubernetes.io/gpu-new": "gpu-new",
        "deviceclass.resource.kubernetes.io/nic": "nic",
    }


def test_classes_made_in_the_same_second_go_to_the_first_by_name() -> None:
    second = "2026-01-01T00:00:00+00:00"
    classes = [BackingClass("zeta", GPU, second), BackingClass("alpha", GPU, second)]
    assert class_mapping(classes)[GPU] == "alpha"
    assert class_mapping(reversed(classes))[GPU] == "alpha"


def test_requests_become_one_claim_with_a_request_per_container_and_resource() -> None:
    nic = "deviceclass.resource.kubernetes.io/nic"
    original = pod(
        container("main", **{GPU: "2", nic: "1"}),
        container("side"),
        init=[container("setup", **{GPU: "1"})],
    )
    given = copy.deepcopy(original)
    translation = translate(given, {GPU: "gpu", nic: "nic"}, "ab12c")
    assert given == original  # the input is not changed
    assert translation is not None
    claim = translation.claim
    assert claim.claim_name == "train-extended-resources-ab12c"
    # init containers count first; j is the resource's place among the sorted requests
    # (cpu, deviceclass..., example.com/gpu).
    assert [(r.name, r.container, r.resource, r.device_class_name, r.count)
            for r in claim.requests] == [
        ("container-0-request-1", "setup", GPU, "gpu", 1),
        ("container-1-request-1", "main", nic, "nic", 1),
        ("container-1-request-2", "main", GPU, "gpu", 2),
    ]  # fmt: skip
    translation.apply(given)
    spec = given["spec"]
    assert spec["resourceClaims"] == [
        {"name": ENTRY_NAME, "resourceClaimName": "train-extended-resources-ab12c"}
    ]
    main = spec["containers"][0]["resources"]
    assert main["requests"] == {"cpu": "1"}
    assert "limits" not in main  # it held only the extended resources
    assert main["claims"] == [
        {"name": ENTRY_NAME, "request": "container-1-request-1"},
        {"name": ENTRY_NAME, "request": "container-1-request-2"},
    ]
    assert spec["containers"][1] == original["spec"]["containers"][1]
    assert spec["initContainers"][0]["resources"]["claims"] == [
        {"name": ENTRY_NAME, "request": "container-0-request-1"}
    ]
    recorded = parse_annotation(given["metadata"]["annotations"][EXTENDED_RESOURCES_ANNOTATION])
    assert recorded == claim
    assert claim.claim_spec()["devices"]["requests"][2] == {
        "name": "container-1-request-2",
        "exactly": {"deviceClassName": "gpu", "allocationMode": "ExactCount", "count": 2},
    }


def test_a_limit_alone_is_the_request_and_existing_entries_are_kept() -> None:
    asked = {"name": "main", "resources": {"limits": {GPU: "1"}}}
    entries = [{"name": "nic", "resourceClaimTemplateName": "nic"}]
    given = pod(asked)
    given["spec"]["resourceClaims"] = entries
    translation = translate(given, {GPU: "gpu"}, "zzzzz")
    assert translation is not None
    assert translation.resource_claims[0] == entries[0]
    assert translation.containers[0]["resources"] == {
        "claims": [{"name": ENTRY_NAME, "request": "container-0-request-0"}]
    }


def test_pods_without_class_backed_requests_are_not_changed() -> None:
    assert translate(pod(container("main", **{GPU: "1"})), {}, "x") is None
    assert translate(pod(container("main")), {GPU: "gpu"}, "x") is None
    assert translate(pod(container("main", **{GPU: "0"})), {GPU: "gpu"}, "x") is None


@pytest.mark.parametrize(
    ("asked", "message"),
    [
        ("500m", "not a whole number"),
        ("33", "at most 32"),
        ("lots", "not a quantity"),
    ],
)
def test_what_no_claim_can_serve_is_refused_with_the_reason(asked: str, message: str) -> None:
    with pytest.raises(ExtendedResourceError, match=message):
        translate(pod(container("main", **{GPU: asked})), {GPU: "gpu"}, "x")


def test_more_devices_than_one_claim_holds_in_all_is_refused() -> None:
    many = pod(container("a", **{GPU: "20"}), container("b", **{GPU: "20"}))
    with pytest.raises(ExtendedResourceError, match="40 devices in all"):
        translate(many, {GPU: "gpu"}, "x")


def test_the_entry_name_is_dralloc_s() -> None:
    taken = pod(container("main", **{GPU: "1"}))
    taken["spec"]["resourceClaims"] = [{"name": ENTRY_NAME, "resourceClaimName": "mine"}]
    with pytest.raises(ExtendedResourceError, match="dralloc's"):
        translate(taken, {GPU: "gpu"}, "x")


def test_claim_names_from_long_or_generated_pod_names_stay_dns_labels() -> None:
    long = pod(container("main", **{GPU: "1"}))
    long["metadata"] = {"generateName": "a" * 80 + "-", "namespace": "ns"}
    translation = translate(long, {GPU: "gpu"}, "q1w2e")
    assert translation is not None
    name = translation.claim.claim_name
    assert len(name) <= 63 and name.endswith("-extended-resources-q1w2e")
    assert translate(long, {GPU: "gpu"}, "0123456789") is not None  # the webhook's 10


@pytest.mark.parametrize(
    "payload",
    [
        "{",
        json.dumps({"claimName": "c", "requests": []}),
        json.dumps({"claimName": "c", "requests": [
            {"name": "r", "container": "m", "resource": GPU, "deviceClassName": "g",
             "count": 0}]}),
        json.dumps({"claimName": "c", "requests": [
            {"name": "r", "container": "m", "resource": GPU, "deviceClassName": "g",
             "count": 20},
            {"name": "r", "container": "n", "resource": GPU, "deviceClassName": "g",
             "count": 1}]}),
        json.dumps({"claimName": "c", "requests": [
            {"name": f"r{i}", "container": "m", "resource": GPU, "deviceClassName": "g",
             "count": 9} for i in range(4)]}),
    ],
)  # fmt: skip
def test_a_forged_or_broken_annotation_is_refused(payload: str) -> None:
    with pytest.raises(ExtendedResourceError, match=EXTENDED_RESOURCES_ANNOTATION):
        parse_annotation(payload)


def test_implicit_names_of_long_class_names_translate() -> None:
    implicit = "deviceclass.resource.kubernetes.io/" + "g" * 40 + ".example-class"
    translation = translate(pod(container("main", **{implicit: "1"})), {implicit: "c"}, "x")
    assert translation is not None
    assert translation.claim.requests[0].resource == implicit


def test_the_webhook_leaves_classes_kube_scheduler_serves() -> None:
    classes = [
        DeviceClass.model_validate({"metadata": {"name": "gpu"}, "spec": {
            "extendedResourceName": GPU}}),
        DeviceClass.model_validate({"metadata": {"name": "fpga"}, "spec": {
            "extendedResourceName": "example.com/fpga"}}),
    ]  # fmt: skip
    settings = Settings(api_group="resource.k8s.io", scheduler_extended_classes="fpga")
    asked = pod(container("main", **{GPU: "1", "example.com/fpga": "1"}))
    translation = extended_translation(asked, classes, settings)
    assert translation is not None
    assert [r.resource for r in translation.claim.requests] == [GPU]
    assert translation.containers[0]["resources"]["limits"] == {"example.com/fpga": "1"}
    only_fpga = pod(container("main", **{"example.com/fpga": "1"}))
    assert extended_translation(only_fpga, classes, settings) is None
    assert settings.translates_extended_resources
    assert not Settings(
        api_group="resource.k8s.io", claims_controller=False
    ).translates_extended_resources
    assert not Settings().translates_extended_resources
