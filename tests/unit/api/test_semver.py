"""Semver parsing and precedence (semver.org 2.0.0 §11)."""

from __future__ import annotations

import pytest

from operators.api.semver import Semver


def test_precedence_follows_the_spec_example() -> None:
    ordered = [
        "1.0.0-alpha",
        "1.0.0-alpha.1",
        "1.0.0-alpha.beta",
        "1.0.0-beta",
        "1.0.0-beta.2",
        "1.0.0-beta.11",
        "1.0.0-rc.1",
        "1.0.0",
        "1.0.1",
        "1.2.0",
        "2.0.0",
    ]
    parsed = [Semver.parse(v) for v in ordered]
    assert sorted(reversed(parsed)) == parsed


def test_build_metadata_is_ignored_for_equality_but_kept_in_text() -> None:
    a, b = Semver.parse("1.2.3+build.5"), Semver.parse("1.2.3")
    assert a == b
    assert hash(a) == hash(b)
    assert str(a) == "1.2.3+build.5"


@pytest.mark.parametrize("text", ["1.2", "01.2.3", "1.2.3-", "1.2.3-01", "v1.2.3", "1.2.3+", ""])
def test_rejects_invalid(text: str) -> None:
    with pytest.raises(ValueError, match="semantic version"):
        Semver.parse(text)
