"""The suite's own hooks (tests/conftest.py): skips beyond the known ones fail a CI run, and
the units of work of a parallel run."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import (
    KNOWN_SKIPS,
    REAL_NODE_MODULES,
    REAL_NODE_UNIT,
    SLOWEST_FIRST,
    KnownSkipsError,
    _rank,
    known_skips,
    unexpected_skips,
    unit_of_work,
)

TESTS = Path(__file__).resolve().parents[1]


def test_skips_within_the_allowance_pass_and_others_are_named() -> None:
    allowed = known_skips("# comment\n2 only in CRD mode\n\n1\t^needs root\n")
    assert [(n, p.pattern) for n, p in allowed] == [(2, "only in CRD mode"), (1, "^needs root")]
    fine = [("a", "x: only in CRD mode"), ("b", "only in CRD mode"), ("c", "needs root here")]
    assert unexpected_skips(fine, allowed) == []
    more = [*fine, ("d", "only in CRD mode"), ("e", "testbed did not start")]
    assert unexpected_skips(more, allowed) == [
        "e: testbed did not start",
        "3 skips of 'only in CRD mode' (2 allowed)",
    ]


@pytest.mark.parametrize("line", ["1", "0 some reason", "x some reason", "-1 reason"])
def test_a_line_that_would_allow_everything_or_nothing_is_refused(line: str) -> None:
    """A count alone would be an empty pattern, which matches every reason."""
    with pytest.raises(KnownSkipsError, match="expected COUNT PATTERN"):
        known_skips(f"# fine\n{line}\n")


def test_the_shipped_allowance_parses() -> None:
    allowed = known_skips(KNOWN_SKIPS.read_text())
    assert allowed and all(count > 0 for count, _ in allowed)


# --- units of work under xdist ---------------------------------------------------------------


def test_a_module_is_one_unit_and_the_real_node_modules_are_one_together() -> None:
    assert unit_of_work("tests/e2e/test_gang.py::test_x[crd]") == "tests/e2e/test_gang.py"
    assert unit_of_work("tests/e2e/test_gang.py::test_y[in-tree]") == "tests/e2e/test_gang.py"
    assert {unit_of_work(f"{module}::test_z") for module in REAL_NODE_MODULES} == {REAL_NODE_UNIT}


def test_every_module_that_starts_real_nodes_is_in_the_real_node_unit() -> None:
    """Real nodes use host-wide paths, one testbed with them per host at a time: two workers
    each starting one would break both. A module that asks for a real-node testbed kind or
    starts real nodes itself must be marked and listed."""
    uses = {
        f"tests/e2e/{path.name}"
        for path in (TESTS / "e2e").glob("test_*.py")
        if any(
            word in path.read_text()
            for word in ("TESTBED_REAL_NODE", "real_nodes=", "--real-nodes")
        )
    }
    assert uses == set(REAL_NODE_MODULES)
    for module in REAL_NODE_MODULES:
        assert "pytest.mark.real_node" in (TESTS.parent / module).read_text(), module


def test_the_slowest_units_are_handed_out_first_then_e2e_then_the_rest() -> None:
    nodeids = [
        "tests/unit/test_a.py::t",
        "tests/e2e/test_gang.py::t",
        f"{REAL_NODE_MODULES[0]}::t",
        f"{SLOWEST_FIRST[0]}::t",
        "tests/conformance/test_b.py::t",
    ]
    ordered = sorted(nodeids, key=_rank)
    assert ordered[:2] == [f"{SLOWEST_FIRST[0]}::t", f"{REAL_NODE_MODULES[0]}::t"]
    assert ordered[2] == "tests/e2e/test_gang.py::t"
    assert set(ordered[3:]) == {"tests/unit/test_a.py::t", "tests/conformance/test_b.py::t"}
