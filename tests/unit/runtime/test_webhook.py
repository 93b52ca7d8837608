"""The webhook's decision and its self-signed certificate."""

from __future__ import annotations

import ssl
import tempfile
from pathlib import Path

from operators.api.podprotocol import KUBERNETES
from operators.settings import Settings
from operators.webhooks import build_self_signed_certificate, gate_patch

CLAIMS = {"resource.dralloc.dev/claims": '[{"name":"a","resourceClaimName":"c"}]'}


def test_gate_added_only_to_pods_with_claims() -> None:
    assert gate_patch({"metadata": {}, "spec": {}}) is None
    assert gate_patch({"metadata": {"annotations": CLAIMS}, "spec": {}}) == [
        {"name": "resource.dralloc.dev/allocation"}
    ]
    other = {"metadata": {"annotations": CLAIMS}, "spec": {"schedulingGates": [{"name": "x"}]}}
    assert gate_patch(other) == [{"name": "x"}, {"name": "resource.dralloc.dev/allocation"}]
    already = {"metadata": {"annotations": CLAIMS}, "spec": {"schedulingGates": gate_patch(other)}}
    assert gate_patch(already) is None


def test_certificate_loads_and_names_hosts() -> None:
    cert, key = build_self_signed_certificate(["localhost", "127.0.0.1", "0.0.0.0"])
    with tempfile.TemporaryDirectory() as tmp:
        cert_path, key_path = Path(tmp, "c.pem"), Path(tmp, "k.pem")
        cert_path.write_bytes(cert)
        key_path.write_bytes(key)
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(cert_path, key_path)  # raises if they do not match
        decoded = ssl._ssl._test_decode_cert(str(cert_path))  # type: ignore[attr-defined]
    names = {value for _, value in decoded["subjectAltName"]}
    assert {"localhost", "127.0.0.1"} <= names
    assert "0.0.0.0" not in names


def test_no_gate_for_what_dralloc_cannot_serve_or_the_api_server_refuses() -> None:
    # An empty list asks for nothing: nobody would ever lift the gate.
    empty = {"metadata": {"annotations": {"resource.dralloc.dev/claims": "[]"}}, "spec": {}}
    assert gate_patch(empty) is None
    # A pod created with spec.nodeName is bound already; the API server refuses gates on it.
    bound = {"metadata": {"annotations": CLAIMS}, "spec": {"nodeName": "node-1"}}
    assert gate_patch(bound) is None
    # A malformed list is still gated: the pod must not run without the devices it meant to
    # ask for, and the claim controller reports the problem on it.
    broken = {"metadata": {"annotations": {"resource.dralloc.dev/claims": "[{"}}, "spec": {}}
    assert gate_patch(broken) == [{"name": "resource.dralloc.dev/allocation"}]


def test_in_tree_pods_are_gated_by_their_spec_resource_claims() -> None:
    entries = [{"name": "gpu", "resourceClaimTemplateName": "t"}]
    asking = {"metadata": {}, "spec": {"resourceClaims": entries}}
    assert gate_patch(asking, KUBERNETES) == [{"name": "resource.dralloc.dev/allocation"}]
    # The annotation is the CRD mode's request, not the in-tree one; and vice versa.
    assert gate_patch({"metadata": {"annotations": CLAIMS}, "spec": {}}, KUBERNETES) is None
    assert gate_patch(asking) is None
    assert gate_patch({"metadata": {}, "spec": {"resourceClaims": []}}, KUBERNETES) is None
    bound = {"metadata": {}, "spec": {"resourceClaims": entries, "nodeName": "n"}}
    assert gate_patch(bound, KUBERNETES) is None


def test_namespace_selection() -> None:
    every = Settings()
    assert every.serves_namespace("team-a", {})
    assert every.serves_namespace("team-a", None)
    labelled = Settings(gate_namespace_label="dralloc=on")
    assert labelled.serves_namespace("team-a", {"dralloc": "on"})
    assert not labelled.serves_namespace("team-a", {"dralloc": "off"})
    assert not labelled.serves_namespace("team-a", {})
    assert not labelled.serves_namespace("team-a", None)
    # The control plane's and the operator's namespaces, whatever their labels.
    for name in ("kube-system", "kube-node-lease", "dralloc-system"):
        assert not every.serves_namespace(name, {})
        assert not labelled.serves_namespace(name, {"dralloc": "on"})
    assert Settings(unserved_namespaces="").serves_namespace("kube-system", {})


def _class(expression: str) -> dict[str, object]:
    return {
        "apiVersion": "resource.dralloc.dev/v1",
        "kind": "DeviceClass",
        "metadata": {"name": "gpus"},
        "spec": {"selectors": [{"cel": {"expression": expression}}]},
    }


def test_selector_verdict_uses_the_operators_gates_and_names_the_object() -> None:
    from operators.settings import FeatureGates, Settings
    from operators.webhooks import selector_verdict

    hidden = _class("device.allowMultipleAllocations")
    assert selector_verdict(hidden, None, Settings()) is None
    gated = Settings(feature_gates=FeatureGates.parse("DRAConsumableCapacity=false"))
    message = selector_verdict(hidden, None, gated)
    assert message is not None and message.startswith(
        'DeviceClass.resource.dralloc.dev "gpus" is invalid: spec.selectors[0].cel.expression: '
    ), message
    # An unchanged class is stored: not checked again, even under gates that hide a field.
    assert selector_verdict(hidden, hidden, gated) is None
    # What the models refuse beyond the CRD schema is left to the controllers to report.
    assert selector_verdict({"kind": "DeviceClass"}, None, gated) is None
