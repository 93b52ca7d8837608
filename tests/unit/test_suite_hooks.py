"""The suite's own CI guard (tests/conftest.py): skips beyond the known ones fail a CI run."""

from __future__ import annotations

import pytest

from tests.conftest import KNOWN_SKIPS, KnownSkipsError, known_skips, unexpected_skips


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
