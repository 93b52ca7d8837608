"""Run every cel-spec conformance case through ``operators.cel.evaluate``.

Cases that need protobuf messages (TestAllTypes, google.protobuf.* types,
``container``) cannot apply to device selectors and are skipped with that
reason; known gaps are marked xfail with a reason per category.
"""

from __future__ import annotations

from typing import Any

import pytest

from operators.cel import CELError, evaluate

from .cel_spec_data import Case, Unsupported, data_dir, decode_value, load_cases, same

_CASES = load_cases()

_PROTO_MARKERS = ("TestAllTypes", "google.protobuf", "cel.expr.conformance", "NestedTestAllTypes")

# Genuine gaps, by case id, with the reason for each category.
_KNOWN_GAPS: dict[str, str] = {}


def _proto_reason(case: Case) -> str | None:
    if case.first("container"):
        return "needs a protobuf container (message type resolution)"
    if any(marker in case.expr for marker in _PROTO_MARKERS):
        return "needs protobuf message types"
    text = repr(case.data.get("value", "")) + repr(case.data.get("bindings", ""))
    if "object_value" in text:
        return "expects a protobuf message value"
    if "message_type" in repr(case.data.get("type_env", "")):
        return "declares protobuf message-typed variables"
    return None


def _bindings(case: Case) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for binding in case.data.get("bindings", []):
        value = binding["value"][0]
        result[binding["key"][0]] = decode_value(value["value"][0])
    return result


@pytest.mark.parametrize("case", _CASES, ids=[c.id for c in _CASES])
def test_cel_spec_case(case: Case) -> None:
    reason = _proto_reason(case)
    if reason:
        pytest.skip(reason)
    if case.id in _KNOWN_GAPS:
        pytest.xfail(_KNOWN_GAPS[case.id])
    try:
        bindings = _bindings(case)
    except Unsupported as exc:
        pytest.skip(f"binding needs a protobuf value ({exc})")
    expect_error = "eval_error" in case.data
    if "value" in case.data:
        expected = decode_value(case.data["value"][0])
    elif "typed_result" in case.data and "result" in case.data["typed_result"][0]:
        expected = decode_value(case.data["typed_result"][0]["result"][0])
    else:
        expected = True
    if expect_error:
        with pytest.raises(CELError):
            evaluate(case.expr, bindings)
        return
    actual = evaluate(case.expr, bindings)
    assert same(actual, expected), f"{case.expr!r}: got {actual!r}, expected {expected!r}"


def test_cel_spec_data_is_present() -> None:
    """The data is part of the repository: missing data is a failure, not a skip."""
    assert (data_dir() / "LICENSE").is_file(), f"cel-spec's LICENSE is missing in {data_dir()}"
    assert len(_CASES) > 500, f"only {len(_CASES)} cel-spec cases under {data_dir()}"
