"""Smoke test of the CEL differential harness (bench/celdiff): it runs, not that it finds 0.

The generator is reproducible, the dralloc side gives a verdict on every case, the
classifier sees a disagreement it is shown, and, when the Go side is built, both sides
answer ~50 cases and the report renders. How many mismatches there are is the
benchmark's figure (`make celdiff`), not this test's.
"""

from __future__ import annotations

import io

import pytest

from bench.celdiff import compare, sides
from bench.celdiff.cases import LIST_ATTRIBUTES, Case, Device, generate

CASES = 50
LIST_KINDS = set(LIST_ATTRIBUTES.values())


def test_the_same_seed_gives_the_same_cases() -> None:
    first, again, other = generate(20, 7), generate(20, 7), generate(20, 8)
    assert [c.to_json_line() for c in first] == [c.to_json_line() for c in again]
    assert [c.expression for c in first] != [c.expression for c in other]


def test_devices_keep_list_values_with_the_list_gate_off_sometimes() -> None:
    cases = generate(200, 1)
    off = [c for c in cases if not c.features.list_type_attributes]
    with_lists = [c for c in off if any(k in LIST_KINDS for k, _ in c.device.attributes.values())]
    assert 0 < len(with_lists) < len(off)


def test_dralloc_side_answers_every_case_without_crashing() -> None:
    verdicts = sides.run_dralloc(generate(4 * CASES, 1))
    assert len(verdicts) == 4 * CASES
    assert [v.crash for v in verdicts if v.crash] == []
    # The generated mix reaches every outcome.
    assert {v.kind_new for v in verdicts} == {"compile", "runtime", "none"}


def test_measured_cost_is_the_least_limit_that_completes() -> None:
    case = Case(0, "lists.range(5).all(x, x >= 0)", Device("d.example.com", {}, {}, None))
    selector = sides.cel.compile_selector(case.expression, check_cost=False)
    view = sides.device_view(case.device)
    cost = sides.measured_cost(selector, view)
    assert cost is not None and cost > 0
    with pytest.raises(sides.cel.CELCostError):
        selector.evaluate(view, cost_limit=cost - 1)


def test_a_disagreement_is_classified() -> None:
    case = Case(0, "x", Device("d.example.com", {}, {}, None))
    failed = "compilation failed: ERROR: <input>:1:1: Syntax error: x"
    upstream = sides.Verdict(failed, None, False, failed, None, None, None)
    dralloc = sides.Verdict(None, 5, False, None, True, None, 7)
    findings = compare.classify(case, upstream, dralloc)
    assert {(f.category, f.detail) for f in findings} == {
        ("error kind", "new: upstream compile (parse), dralloc none"),
        ("actual > estimate", "dralloc"),
    }


def test_actual_over_estimate_counts_unless_upstream_exceeds_the_same_estimate() -> None:
    case = Case(0, '"".split(",").all(s, s.startsWith(device.driver))', Device("d", {}, {}, None))
    upstream = sides.Verdict(None, 1, False, None, False, None, 9)

    def categories(dralloc_actual: int, dralloc_estimate: int = 1) -> set[str]:
        dralloc = sides.Verdict(None, dralloc_estimate, False, None, False, None, dralloc_actual)
        return {f.category for f in compare.classify(case, upstream, dralloc)}

    # Upstream's estimate (1) is below its own actual cost (9): dralloc, giving both, is
    # not counted.
    assert "actual > estimate" not in categories(9)
    assert "actual > estimate as upstream" in categories(9)
    # Counted when dralloc counts more than upstream, or its estimate differs.
    assert "actual > estimate" in categories(10)
    assert "actual > estimate" in categories(3, dralloc_estimate=2)
    # Upstream within its estimate: counted.
    upstream = sides.Verdict(None, 1, False, None, False, None, 1)
    assert "actual > estimate" in categories(9)


def test_both_sides_answer_and_the_report_renders() -> None:
    try:
        binary = sides.upstream_binary(build=False)
    except sides.UpstreamUnavailable as error:
        pytest.skip(f"the Go side is not built (bench/celdiff/build): {error}")
    cases = generate(CASES, 1)
    upstream = sides.run_upstream(cases, binary)
    assert len(upstream) == CASES
    assert {v.kind_new for v in upstream} == {"compile", "runtime", "none"}
    summary = compare.summarize(cases, upstream, sides.run_dralloc(cases))
    out = io.StringIO()
    compare.report(summary, out)
    assert out.getvalue().startswith(f"{CASES} cases, ")
    assert "| error kind |" in out.getvalue()
    versions = sides.upstream_versions(binary)
    assert versions["k8s.io/dynamic-resource-allocation"].startswith("v0.")
