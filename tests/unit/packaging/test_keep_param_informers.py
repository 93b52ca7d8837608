"""manifests/base/keep-param-informers.yaml: the inert policies that keep kube-apiserver
watching the parameter kinds of dralloc's other policies (kubernetes/kubernetes#130887).

Offline: every built-in kind a shipped policy takes as its parameter has one of them, bound,
kept on uninstall, and unable to refuse anything. The e2e proof (an uninstall and a reinstall on
one kube-apiserver) is tests/e2e/test_real_node_helm.py.
"""

from __future__ import annotations

from typing import Any

import pytest

from .test_manifest_files import BASE, load_dir

KEEP_LABEL = ("resource.dralloc.dev/on-uninstall", "keep")


@pytest.fixture(scope="module")
def base() -> list[dict[str, Any]]:
    return load_dir(BASE)


def kept(obj: dict[str, Any]) -> bool:
    key, value = KEEP_LABEL
    return bool((obj["metadata"].get("labels") or {}).get(key) == value)


def param_kind(policy: dict[str, Any]) -> tuple[str, str] | None:
    found = policy["spec"].get("paramKind")
    return (found["apiVersion"], found["kind"]) if found else None


def built_in(api_version: str) -> bool:
    """Served by kube-apiserver itself (not a CRD): the kinds whose watch #130887 stops."""
    group = api_version.rpartition("/")[0]
    return "." not in group or group.endswith(".k8s.io")


def test_every_built_in_parameter_kind_is_kept_watched(base: list[dict[str, Any]]) -> None:
    policies = [o for o in base if o["kind"] == "ValidatingAdmissionPolicy"]
    used = {kind for p in policies if not kept(p) and (kind := param_kind(p)) and built_in(kind[0])}
    assert used == {("coordination.k8s.io/v1", "Lease"), ("v1", "ConfigMap")}
    bindings = {
        o["spec"]["policyName"] for o in base if o["kind"] == "ValidatingAdmissionPolicyBinding"
    }
    watched = {param_kind(p) for p in policies if kept(p) and p["metadata"]["name"] in bindings}
    assert used <= watched, f"no kept, bound policy keeps {sorted(used - watched)} watched"


def test_the_kept_policies_refuse_nothing(base: list[dict[str, Any]]) -> None:
    policies = {o["metadata"]["name"]: o for o in base if o["kind"] == "ValidatingAdmissionPolicy"}
    anchors = [p for p in policies.values() if kept(p)]
    assert len(anchors) == 2
    for policy in anchors:
        spec = policy["spec"]
        assert spec["failurePolicy"] == "Ignore"
        assert [v["expression"] for v in spec["validations"]] == ["true"]
        # Only the deletion of objects that do not exist.
        rules = spec["matchConstraints"]["resourceRules"]
        assert all(r["operations"] == ["DELETE"] and r["resourceNames"] for r in rules), rules
    bindings = [o for o in base if o["kind"] == "ValidatingAdmissionPolicyBinding" and kept(o)]
    assert sorted(b["spec"]["policyName"] for b in bindings) == sorted(
        p["metadata"]["name"] for p in anchors
    )
    for binding in bindings:
        assert binding["spec"]["validationActions"] == ["Audit"]
        assert binding["spec"]["paramRef"]["parameterNotFoundAction"] == "Allow"
