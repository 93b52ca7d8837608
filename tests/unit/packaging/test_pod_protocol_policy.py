"""The pod-protocol ValidatingAdmissionPolicy of manifests/base, evaluated offline.

The policy's CEL is plain Kubernetes CEL over ``object``, ``oldObject``, ``request`` and
``params``; dralloc's own CEL implementation (operators/cel) evaluates it here the way the API
server does: matchConditions first (any false skips the policy), then the variables in order,
then each validation, whose messageExpression is what the user is told. tests/e2e/test_trust.py
runs the same policy on a real API server.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
import yaml

from operators.api.annotations import (
    CLAIM_STATUSES_ANNOTATION,
    CLAIMS_ANNOTATION,
    DEVICES_ANNOTATION,
    SCHEDULING_GATE,
)

from .admission import BASE, USER, admit

OPERATOR_SA = "system:serviceaccount:dralloc-system:dralloc-operator"
DEVICES = json.dumps(
    [
        {
            "name": "gpu",
            "resourceClaimName": "victim-gpu-abcde",
            "devices": [
                {"request": "gpu", "driver": "gpu.example.com", "pool": "n", "device": "g"}
            ],
        }
    ]
)
STATUSES = json.dumps([{"name": "gpu", "resourceClaimName": "victim-gpu-abcde"}])


POLICY_FILE = "pod-protocol-policy.yaml"


def pod(
    annotations: dict[str, str] | None = None, gates: list[str] | None = None
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "team-a"},
        "spec": {"containers": [{"name": "c", "image": "i"}]},
    }
    if annotations is not None:
        body["metadata"]["annotations"] = annotations
    if gates is not None:
        body["spec"]["schedulingGates"] = [{"name": g} for g in gates]
    return body


from operators.fencing import ALLOCATED_BY_ANNOTATION  # noqa: E402

CLAIMS = {CLAIMS_ANNOTATION: '[{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}]'}


def test_the_policy_names_the_protocol_constants(policy: dict[str, Any]) -> None:
    text = json.dumps(policy)
    for name in (
        DEVICES_ANNOTATION,
        CLAIM_STATUSES_ANNOTATION,
        ALLOCATED_BY_ANNOTATION,
        SCHEDULING_GATE,
    ):
        assert name in text


def test_every_write_path_into_pod_metadata_is_matched(policy: dict[str, Any]) -> None:
    (rule,) = policy["spec"]["matchConstraints"]["resourceRules"]
    assert set(rule["operations"]) == {"CREATE", "UPDATE"}
    assert {"pods", "pods/status", "pods/binding"} <= set(rule["resources"])
    assert policy["spec"]["failurePolicy"] == "Fail"


def test_binding_fails_closed_on_the_shipped_params(
    binding: dict[str, Any], params: dict[str, Any], policy: dict[str, Any]
) -> None:
    assert binding["spec"]["policyName"] == policy["metadata"]["name"]
    assert binding["spec"]["validationActions"] == ["Deny"]
    ref = binding["spec"]["paramRef"]
    assert (ref["name"], ref["namespace"]) == (
        params["metadata"]["name"],
        params["metadata"]["namespace"],
    )
    assert ref["parameterNotFoundAction"] == "Deny"
    assert policy["spec"]["paramKind"] == {"apiVersion": "v1", "kind": "ConfigMap"}


def test_shipped_identity_is_the_deployments_service_account(params: dict[str, Any]) -> None:
    deployment = yaml.safe_load((BASE / "deployment.yaml").read_text())
    account = deployment["spec"]["template"]["spec"]["serviceAccountName"]
    namespace = deployment["metadata"]["namespace"]
    assert params["data"]["usernames"] == f"system:serviceaccount:{namespace}:{account}"


@pytest.mark.parametrize(
    "name", [DEVICES_ANNOTATION, CLAIM_STATUSES_ANNOTATION, ALLOCATED_BY_ANNOTATION]
)
def test_creating_a_pod_with_a_forged_annotation_is_refused(
    policy: dict[str, Any], params: dict[str, Any], name: str
) -> None:
    value = {DEVICES_ANNOTATION: DEVICES, CLAIM_STATUSES_ANNOTATION: STATUSES}.get(name, "{}")
    message = admit(policy, params, operation="CREATE", obj=pod({**CLAIMS, name: value}))
    assert message is not None
    assert message.startswith(f"annotation {name}: only the dralloc operator may set")
    assert f'user "{USER}" is not the dralloc operator' in message


def test_an_ordinary_pod_and_one_that_asks_for_claims_are_admitted(
    policy: dict[str, Any], params: dict[str, Any]
) -> None:
    assert admit(policy, params, operation="CREATE", obj=pod()) is None
    assert admit(policy, params, operation="CREATE", obj=pod(CLAIMS, [SCHEDULING_GATE])) is None


@pytest.mark.parametrize(
    ("before", "after"),
    [
        ({}, {DEVICES_ANNOTATION: DEVICES}),  # added later
        ({DEVICES_ANNOTATION: DEVICES}, {DEVICES_ANNOTATION: "[]"}),  # changed
        ({DEVICES_ANNOTATION: DEVICES}, {}),  # removed
        ({}, {CLAIM_STATUSES_ANNOTATION: STATUSES}),
        ({CLAIM_STATUSES_ANNOTATION: "[]"}, {CLAIM_STATUSES_ANNOTATION: STATUSES}),
        ({}, {ALLOCATED_BY_ANNOTATION: "{}"}),  # a forged record could fence the operator
    ],
)
@pytest.mark.parametrize("sub_resource", ["", "status"])
def test_updates_that_touch_a_protected_annotation_are_refused(
    policy: dict[str, Any],
    params: dict[str, Any],
    before: dict[str, str],
    after: dict[str, str],
    sub_resource: str,
) -> None:
    old = pod({**CLAIMS, **before}, [SCHEDULING_GATE])
    new = pod({**CLAIMS, **after}, [SCHEDULING_GATE])
    message = admit(policy, params, operation="UPDATE", obj=new, old=old, sub_resource=sub_resource)
    assert message is not None and message.startswith("annotation resource.dralloc.dev/")
    assert admit(
        policy, params, operation="UPDATE", obj=new, old=old, user=OPERATOR_SA,
        sub_resource=sub_resource,
    ) is None  # fmt: skip


def test_other_changes_to_an_allocated_pod_are_admitted(
    policy: dict[str, Any], params: dict[str, Any]
) -> None:
    old = pod({**CLAIMS, DEVICES_ANNOTATION: DEVICES, CLAIM_STATUSES_ANNOTATION: STATUSES})
    new = copy.deepcopy(old)
    new["metadata"]["annotations"]["team"] = "a"
    new["metadata"]["labels"] = {"x": "y"}
    assert admit(policy, params, operation="UPDATE", obj=new, old=old) is None
    status = copy.deepcopy(old)
    status["status"] = {"phase": "Running"}
    assert (
        admit(policy, params, operation="UPDATE", obj=status, old=old, sub_resource="status")
        is None
    )


def test_removing_the_gate_is_refused_and_other_gates_are_free(
    policy: dict[str, Any], params: dict[str, Any]
) -> None:
    gated = pod(CLAIMS, [SCHEDULING_GATE, "example.com/other"])
    message = admit(
        policy, params, operation="UPDATE", obj=pod(CLAIMS, ["example.com/other"]), old=gated
    )
    assert message is not None
    assert message.startswith(
        "scheduling gate resource.dralloc.dev/allocation: only the dralloc operator may remove"
    )
    assert admit(policy, params, operation="UPDATE", obj=pod(CLAIMS), old=gated) is not None
    assert (
        admit(policy, params, operation="UPDATE", obj=pod(CLAIMS), old=gated, user=OPERATOR_SA)
        is None
    )
    # Adding or removing someone else's gate, and adding ours, is anyone's business.
    ours_only = pod(CLAIMS, [SCHEDULING_GATE])
    assert admit(policy, params, operation="UPDATE", obj=ours_only, old=gated) is None
    assert admit(policy, params, operation="UPDATE", obj=gated, old=ours_only) is None
    assert admit(policy, params, operation="UPDATE", obj=ours_only, old=pod(CLAIMS)) is None


def test_bindings_carry_no_protected_annotations(
    policy: dict[str, Any], params: dict[str, Any]
) -> None:
    def binding(annotations: dict[str, str] | None) -> dict[str, Any]:
        body: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": "p", "namespace": "team-a"},
            "target": {"kind": "Node", "name": "node-1"},
        }
        if annotations is not None:
            body["metadata"]["annotations"] = annotations
        return body

    scheduler = "system:kube-scheduler"
    for extra in (None, {"other": "x"}):
        assert admit(
            policy, params, operation="CREATE", obj=binding(extra), user=scheduler,
            sub_resource="binding",
        ) is None  # fmt: skip
    message = admit(
        policy, params, operation="CREATE", obj=binding({DEVICES_ANNOTATION: DEVICES}),
        sub_resource="binding",
    )  # fmt: skip
    assert message is not None and DEVICES_ANNOTATION in message


def test_identity_by_user_list_or_group(policy: dict[str, Any], params: dict[str, Any]) -> None:
    forged = pod({DEVICES_ANNOTATION: DEVICES})
    demo = copy.deepcopy(params)
    demo["data"]["usernames"] = f"{OPERATOR_SA}, dralloc-testbed-admin"
    assert admit(policy, demo, operation="CREATE", obj=forged, user="dralloc-testbed-admin") is None
    assert admit(policy, demo, operation="CREATE", obj=forged, user="dralloc-testbed") is not None
    grouped = copy.deepcopy(params)
    grouped["data"]["groups"] = "dralloc:operators"
    assert admit(
        policy, grouped, operation="CREATE", obj=forged, groups=["system:authenticated", "dralloc:operators"]
    ) is None  # fmt: skip
    # An empty groups value names no group, not the empty group.
    assert admit(policy, params, operation="CREATE", obj=forged, groups=[""]) is not None
    assert (
        admit(policy, params, operation="CREATE", obj=forged, groups=["system:masters"]) is not None
    )
    bare = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}}
    assert admit(policy, bare, operation="CREATE", obj=forged, user=OPERATOR_SA) is not None


def test_the_extended_resources_record_is_set_at_creation_and_never_changed(
    policy: dict[str, Any], params: dict[str, Any]
) -> None:
    """The webhook sets it on the creator's behalf (the request is the creator's, so the
    create must pass); changing or removing it later is refused to everyone but the
    operator: the claim controller reads it."""
    key = "resource.dralloc.dev/extended-resources"
    record = {key: '{"claimName":"p-extended-resources-0123456789","requests":[]}'}
    assert admit(policy, params, operation="CREATE", obj=pod(record)) is None
    for after in ({key: record[key].replace("0123", "9999")}, {}):
        message = admit(policy, params, operation="UPDATE", obj=pod(after), old=pod(record))
        assert message is not None and key in message, after
    assert admit(policy, params, operation="UPDATE", obj=pod(record), old=pod(record)) is None
