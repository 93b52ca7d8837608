"""ValidatingAdmissionPolicies of manifests/base, evaluated offline as the API server does.

The policies' CEL is plain Kubernetes CEL over ``object``, ``oldObject``, ``request`` and
``params``; dralloc's own CEL implementation (operators/cel) evaluates it: matchConditions
first (any false skips the policy), then the variables in order, then each validation, whose
messageExpression is what the user is told.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from operators.cel.program import evaluate

BASE = Path(__file__).resolve().parents[3] / "manifests" / "base"
USER = "mallory"


def docs(name: str) -> list[dict[str, Any]]:
    """The documents of one file of manifests/base."""
    return [d for d in yaml.safe_load_all((BASE / name).read_text()) if d]


def policy_and_binding(name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The ValidatingAdmissionPolicy of one file of manifests/base, and its binding."""
    found = docs(name)
    policy = next(d for d in found if d["kind"] == "ValidatingAdmissionPolicy")
    binding = next(d for d in found if d["kind"] == "ValidatingAdmissionPolicyBinding")
    return policy, binding


def operator_identity() -> dict[str, Any]:
    """The policies' parameters: the ConfigMap of the operator's identity."""
    return docs("pod-protocol-identity.yaml")[0]


def _plural(obj: dict[str, Any] | None, old: dict[str, Any] | None) -> str:
    kind = str((obj or old or {}).get("kind") or "")
    return kind.lower() + "s" if kind else ""


def admit(
    policy: dict[str, Any],
    params: dict[str, Any],
    *,
    operation: str,
    obj: dict[str, Any] | None,
    old: dict[str, Any] | None = None,
    user: str = USER,
    groups: list[str] | None = None,
    extra: dict[str, list[str]] | None = None,
    sub_resource: str = "",
    resource: str = "",
) -> str | None:
    """None if the policy admits the request, else the message the requester sees."""
    user_info: dict[str, Any] = {"username": user}
    if groups is not None:
        user_info["groups"] = groups
    if extra is not None:
        user_info["extra"] = extra
    bindings: dict[str, Any] = {
        "object": obj,
        "oldObject": old,
        "params": params,
        "request": {
            "operation": operation,
            "userInfo": user_info,
            "resource": {"group": "", "version": "v1", "resource": resource or _plural(obj, old)},
        },
    }
    if sub_resource:  # the API server leaves it out when empty (omitempty)
        bindings["request"]["subResource"] = sub_resource
    spec = policy["spec"]
    for condition in spec.get("matchConditions", []):
        if evaluate(condition["expression"], bindings) is not True:
            return None
    variables: dict[str, Any] = {}
    for variable in spec.get("variables", []):
        variables[variable["name"]] = evaluate(
            variable["expression"], {**bindings, "variables": variables}
        )
    for validation in spec["validations"]:
        context = {**bindings, "variables": variables}
        if evaluate(validation["expression"], context) is not True:
            message = evaluate(validation["messageExpression"], context)
            assert isinstance(message, str)
            return message
    return None
