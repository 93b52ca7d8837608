from __future__ import annotations

import pytest

from operators.cel import Quantity


@pytest.mark.parametrize(
    ("text", "nanos"),
    [
        ("0", 0),
        ("1", 10**9),
        ("80Gi", 80 * 2**30 * 10**9),
        ("100m", 10**8),
        ("1e3", 1000 * 10**9),
        ("1E3", 1000 * 10**9),
        ("1.5", 15 * 10**8),
        ("1.5Gi", 3 * 2**29 * 10**9),
        ("-2k", -2000 * 10**9),
        ("+3M", 3 * 10**6 * 10**9),
        ("1E", 10**18 * 10**9),
        ("5n", 5),
        ("7u", 7000),
        (".5", 5 * 10**8),
        ("2.", 2 * 10**9),
    ],
)
def test_parse_to_exact_nanos(text: str, nanos: int) -> None:
    assert Quantity(text).nanos == nanos


def test_sub_nano_precision_rounds_up_away_from_zero() -> None:
    assert Quantity("1e-10").nanos == 1
    assert Quantity("-1e-10").nanos == -1


@pytest.mark.parametrize("text", ["", "Gi", "1Gb", "1.2.3", "abc", "1 Gi", "--1", "1e"])
def test_invalid_quantities_are_rejected(text: str) -> None:
    with pytest.raises(ValueError):
        Quantity(text)


def test_equality_and_hash_ignore_the_spelling() -> None:
    assert Quantity("1Ki") == Quantity("1024")
    assert hash(Quantity("1k")) == hash(Quantity("1000"))
    assert len({Quantity("1Gi"), Quantity("1073741824")}) == 1
    assert Quantity("1") != Quantity("1001m")


def test_ordering_and_arithmetic() -> None:
    assert Quantity("40Gi") < Quantity("80Gi") <= Quantity("80Gi")
    assert Quantity("1Gi") + Quantity("1Gi") == Quantity("2Gi")
    assert Quantity("1") - Quantity("500m") == Quantity("0.5")
    assert -Quantity("1") == Quantity("-1")
    assert Quantity("2") * 3 == Quantity("6")
    assert Quantity("1").cmp(Quantity("2")) == -1


def test_views() -> None:
    q = Quantity("1500m")
    assert q.value() == 2  # rounded up like Kubernetes
    assert q.milli_value() == 1500
    assert not q.is_integer()
    assert Quantity("3").is_integer()
    assert q.as_float() == 1.5
    assert Quantity("-1").sign == -1 and Quantity("0").sign == 0
    assert Quantity(5) == Quantity("5")


def test_text_keeps_the_input_and_canonicalises_results() -> None:
    assert str(Quantity("80Gi")) == "80Gi"
    assert str(Quantity("40Gi") + Quantity("40Gi")) == "80Gi"
    assert str(Quantity("1") + Quantity("500m")) == "1500m"
    assert str(Quantity("2k") + Quantity("1k")) == "3k"
