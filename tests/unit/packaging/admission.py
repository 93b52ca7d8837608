"""ValidatingAdmissionPolicies of manifests/base, evaluated offline as the API server does.

The policies' CEL is plain Kubernetes CEL over ``object``, ``oldObject``, ``request`` and
``params``; dralloc's own CEL implementation (operators/cel) evaluates it: matchConditions
first (any false skips the policy), then the variables in order, then each validation, whose
messageExpression is what the user is told.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from operators.cel import CELError
from operators.cel.program import evaluate

BASE = Path(__file__).resolve().parents[3] / "manifests" / "base"
REFUSING_CONDITIONS = frozenset(
    {
        "the-operator-outside-its-protocol",
        "a-fenced-writer-not-holding-the-lease",
        "touches-the-protocol-not-the-operator",
    }
)
"""Match conditions that hold exactly when their policy refuses (its validations' checks,
inlined): a request passing them must be refused by a validation."""
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
    conditions = spec.get("matchConditions", [])
    matched = all(evaluate(c["expression"], bindings) is True for c in conditions)
    refusing = [c for c in conditions if c["name"] in REFUSING_CONDITIONS]
    message = _refusal(spec, bindings, errors_refuse=not matched)
    if refusing:
        # The condition holds exactly when the validations refuse (for the writers it
        # names): it decides what the API server refuses, the validations word it.
        (condition,) = refusing
        assert matched == (_writer(condition, bindings) and message is not None), (
            f"{policy['metadata']['name']}: the match condition says {matched}, "
            f"the validations {message!r}"
        )
    return message if matched else None


def _refusal(spec: dict[str, Any], bindings: dict[str, Any], *, errors_refuse: bool) -> str | None:
    """What the validations answer, whatever the match conditions say. For a request the
    conditions let through an evaluation error fails the test (a refusal must be the one a
    validation words); for the others, compared with the conditions only, it refuses, as
    failurePolicy: Fail does."""
    variables: dict[str, Any] = {}
    try:
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
    except CELError as error:
        if not errors_refuse:
            raise
        return f"evaluation error: {error}"
    return None


def _writer(condition: dict[str, Any], bindings: dict[str, Any]) -> bool:
    """The part of a refusing condition that names what it judges (whose writes, and for the
    fencing which writes): all but the validations' checks inlined."""
    operands = _conjuncts(str(condition["expression"]))
    name = condition["name"]
    if name == "touches-the-protocol-not-the-operator":  # (refusal) && !(the operator)
        writer = operands[1]
    elif name == "a-fenced-writer-not-holding-the-lease":  # (writer) && ((what) && !(holder))
        writer = f"({operands[0]}) && ({_conjuncts(operands[1])[0]})"
    else:  # (the operator) && (refusal)
        writer = operands[0]
    return evaluate(writer, bindings) is True


def _conjuncts(expression: str) -> list[str]:
    """The operands of the top-level `&&` of ``expression``, itself unwrapped of parentheses
    around the whole."""
    text = expression.strip()
    parts: list[str] = []
    start = 0
    for index, depth in _outside_strings(text):
        if depth == 0 and text.startswith("&&", index):
            parts.append(text[start:index].strip())
            start = index + 2
    parts.append(text[start:].strip())
    closing = next((i for i, depth in _outside_strings(text) if depth == 0 and i > 0), None)
    if len(parts) == 1 and text.startswith("(") and closing == len(text) - 1:
        return _conjuncts(text[1:-1])
    return parts


def _outside_strings(text: str) -> Iterator[tuple[int, int]]:
    """Each position of ``text`` outside CEL string literals, with the depth of brackets
    there (counted after the bracket at the position itself)."""
    depth, quote, index = 0, "", 0
    while index < len(text):
        char = text[index]
        if quote:
            if char == "\\":
                index += 1
            elif char == quote:
                quote = ""
        elif char in "'\"":
            quote = char
        else:
            depth += (char in "([") - (char in ")]")
            yield index, depth
        index += 1
