"""The suite's own CI guard (tests/conftest.py): skips beyond the known ones fail a CI run."""

from __future__ import annotations

from tests.conftest import KNOWN_SKIPS, known_skips, unexpected_skips


def test_skips_within_the_allowance_pass_and_others_are_named() -> None:
    allowed = known_skips("# comment\n2 only in CRD mode\n\n1 ^needs root  # trailing\n")
    assert [(n, p.pattern) for n, p in allowed] == [(2, "only in CRD mode"), (1, "^needs root")]
    fine = [("a", "x: only in CRD mode"), ("b", "only in CRD mode"), ("c", "needs root here")]
    assert unexpected_skips(fine, allowed) == []
    more = [*fine, ("d", "only in CRD mode"), ("e", "testbed did not start")]
    assert unexpected_skips(more, allowed) == [
        "e: testbed did not start",
        "3 skips of 'only in CRD mode' (2 allowed)",
    ]


def test_the_shipped_allowance_parses() -> None:
    allowed = known_skips(KNOWN_SKIPS.read_text())
    assert allowed and all(count > 0 for count, _ in allowed)
