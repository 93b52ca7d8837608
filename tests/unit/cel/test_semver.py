from __future__ import annotations

import pytest

from operators.cel import Semver


def test_strict_parse() -> None:
    v = Semver.parse("1.2.3-rc.1+build.5")
    assert (v.major, v.minor, v.patch) == (1, 2, 3)
    assert v.prerelease == ("rc", 1)
    assert v.build == ("build", "5")
    assert str(v) == "1.2.3-rc.1+build.5"


@pytest.mark.parametrize("text", ["1.2", "v1.2.3", "01.2.3", "1.2.3-01", "1.2.3-", "a.b.c", ""])
def test_strict_rejects(text: str) -> None:
    with pytest.raises(ValueError):
        Semver.parse(text)


@pytest.mark.parametrize(
    ("text", "expected"),
    [("v1.2.3", "1.2.3"), ("1", "1.0.0"), ("v1.2", "1.2.0"), ("01.02.03", "1.2.3")],
)
def test_normalized_parse(text: str, expected: str) -> None:
    assert str(Semver.parse(text, normalize=True)) == expected


def test_precedence() -> None:
    order = [
        "1.0.0-alpha",
        "1.0.0-alpha.1",
        "1.0.0-alpha.beta",
        "1.0.0-beta",
        "1.0.0-rc.1",
        "1.0.0",
    ]
    versions = [Semver.parse(v) for v in order]
    assert versions == sorted(versions)
    assert Semver.parse("1.0.0+a") == Semver.parse("1.0.0+b")  # build is ignored
    assert Semver.parse("2.0.0").compare(Semver.parse("10.0.0")) == -1
