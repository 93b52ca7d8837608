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


def test_parts_and_text_round_trip() -> None:
    v = Semver.parse("1.2.3-rc.1+build.5")
    assert (v.major, v.minor, v.patch) == (1, 2, 3)
    assert v.prerelease == ("rc", 1)
    assert v.build == ("build", "5")
    assert str(v) == "1.2.3-rc.1+build.5"
    assert repr(v) == "Semver('1.2.3-rc.1+build.5')"


def test_rejects_a_trailing_newline() -> None:
    with pytest.raises(ValueError):
        Semver.parse("1.2.3\n")


@pytest.mark.parametrize(
    ("text", "expected"),
    [("v1.2.3", "1.2.3"), ("1", "1.0.0"), ("v1.2", "1.2.0"), ("01.02.03", "1.2.3")],
)
def test_normalized_parse(text: str, expected: str) -> None:
    assert str(Semver.parse(text, normalize=True)) == expected


@pytest.mark.parametrize("text", ["v", "va.b.c", "1.2.3-01"])
def test_normalized_parse_still_checks_the_rest(text: str) -> None:
    with pytest.raises(ValueError):
        Semver.parse(text, normalize=True)


def test_compare_is_numeric() -> None:
    assert Semver.parse("2.0.0").compare(Semver.parse("10.0.0")) == -1
    assert Semver.parse("1.0.0+a").compare(Semver.parse("1.0.0+b")) == 0
    assert Semver.parse("1.0.0").compare(Semver.parse("1.0.0-rc.1")) == 1
