"""Quantity: the grammar, exact values, Kubernetes' canonical printing, arithmetic."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel, ValidationError

from operators.api.quantity import NANO, Quantity, QuantityFormat, QuantityParseError


@pytest.mark.parametrize(
    ("text", "nano", "canonical"),
    [
        ("0", 0, "0"),
        ("1", NANO, "1"),
        ("80Gi", 80 * 2**30 * NANO, "80Gi"),
        ("1.5Gi", 1536 * 2**20 * NANO, "1536Mi"),
        ("100m", 100_000_000, "100m"),
        ("0.5", 500_000_000, "500m"),
        (".5", 500_000_000, "500m"),
        ("1000", 1000 * NANO, "1k"),
        ("1500", 1500 * NANO, "1500"),
        ("1e3", 1000 * NANO, "1e3"),
        ("1E3", 1000 * NANO, "1e3"),
        ("2.", 2 * NANO, "2"),
        ("-2k", -2000 * NANO, "-2k"),
        ("5E-3", 5_000_000, "5e-3"),
        ("12e2", 1200 * NANO, "1200"),
        ("1E", 10**18 * NANO, "1E"),
        ("1Ei", 2**60 * NANO, "1Ei"),
        ("+3", 3 * NANO, "3"),
        ("-1.5", -1_500_000_000, "-1500m"),
        ("1n", 1, "1n"),
        ("1u", 1000, "1u"),
        ("512", 512 * NANO, "512"),
        ("1023Ki", 1023 * 1024 * NANO, "1023Ki"),
        ("2048Ki", 2 * 2**20 * NANO, "2Mi"),
    ],
)
def test_parse_value_and_canonical_form(text: str, nano: int, canonical: str) -> None:
    q = Quantity.parse(text)
    assert q.nanos == nano
    assert str(q) == canonical


def test_precision_finer_than_nano_rounds_away_from_zero() -> None:
    assert Quantity.parse("0.1n").nanos == 1
    assert Quantity.parse("-0.1n").nanos == -1
    assert Quantity.parse("1.0000000001").nanos == NANO + 1


def test_small_binary_values_print_in_decimal() -> None:
    q = Quantity.parse("0.5Ki")  # 512: below 1024, so no binary suffix
    assert q.format is QuantityFormat.BINARY_SI
    assert str(q) == "512"


@pytest.mark.parametrize(
    "text",
    ["", "abc", "1.2.3", "1Gii", ".", "e3", "1e", "1 Gi", " 1", "1\n", "1K", "--1", "1ki", "1Gb"],
)
def test_rejects_malformed(text: str) -> None:
    with pytest.raises(QuantityParseError):
        Quantity.parse(text)


def test_refuses_huge_exponent_without_building_it() -> None:
    with pytest.raises(QuantityParseError, match="exponent"):
        Quantity.parse("1e999999999")


def test_only_binary_quantities_are_capped_at_int64_like_upstream() -> None:
    assert Quantity.parse("9Ei") * 2 > Quantity.parse("16Ei")  # arithmetic is not capped
    assert Quantity.parse("16Ei").nanos == (2**63 - 1) * NANO
    assert Quantity.parse("-16Ei").nanos == -(2**63 - 1) * NANO
    assert Quantity.parse("100E").nanos == 100 * 10**18 * NANO
    assert not Quantity.parse("100E").is_integer()  # beyond int64: CEL's asInteger fails


def test_fraction_of_one_in_binary_notation_is_decimal() -> None:
    assert Quantity.parse("0.5Ki").format is QuantityFormat.BINARY_SI  # 512
    assert Quantity.parse("0.0001Ki").format is QuantityFormat.DECIMAL_SI  # 0.1024


def test_approximate_float_saturates_instead_of_overflowing() -> None:
    assert Quantity.parse("250m").as_float() == 0.25
    assert Quantity.parse("1e400").as_float() == float("inf")
    assert Quantity.parse("-1e400").as_float() == float("-inf")


def test_equality_ordering_hashing_use_the_value() -> None:
    assert Quantity.parse("1Gi") == Quantity.parse("1024Mi")
    assert Quantity.parse("1k") == Quantity.parse("1000")
    assert hash(Quantity.parse("1k")) == hash(Quantity.parse("1e3"))
    assert (
        Quantity.parse("100m") < Quantity.parse("1") <= Quantity.parse("1") < Quantity.parse("1Ki")
    )
    assert sorted(Quantity.parse(s) for s in ["2", "1Ki", "500m"]) == [
        Quantity.parse("500m"),
        Quantity.parse("2"),
        Quantity.parse("1Ki"),
    ]
    assert len({Quantity.parse("1Gi"), Quantity.parse("1024Mi"), Quantity.parse("1G")}) == 2


def test_arithmetic_is_exact_and_keeps_the_left_format() -> None:
    total = Quantity.parse("10Gi") - Quantity.parse("1.5Gi")
    assert total == Quantity.parse("8.5Gi")
    assert str(total) == "8704Mi"
    assert str(Quantity.parse("100m") + Quantity.parse("200m")) == "300m"
    assert Quantity.parse("0.1") + Quantity.parse("0.2") == Quantity.parse("0.3")
    assert 3 * Quantity.parse("1Gi") == Quantity.parse("3Gi")
    assert -Quantity.parse("1") < Quantity.parse("0")
    assert not Quantity.parse("0")


def test_value_helpers_round_up_like_kubernetes() -> None:
    assert Quantity.parse("1500m").value() == 2
    assert Quantity.parse("-1500m").value() == -1
    assert Quantity.parse("1.5m").milli_value() == 2
    assert Quantity.parse("2").is_integer()
    assert not Quantity.parse("2.5").is_integer()
    assert Quantity.parse("-3").sign == -1


def test_coerce_accepts_json_numbers_but_not_booleans() -> None:
    assert Quantity.coerce(3) == Quantity.parse("3")
    assert Quantity.coerce(0.25) == Quantity.parse("250m")
    with pytest.raises(QuantityParseError):
        Quantity.coerce(True)
    with pytest.raises(QuantityParseError):
        Quantity.coerce([1])


class _Holder(BaseModel):
    q: Quantity


def test_pydantic_field_parses_and_serialises_canonically() -> None:
    holder = _Holder.model_validate({"q": "1.5Gi"})
    assert holder.q == Quantity.parse("1536Mi")
    assert holder.model_dump(mode="json") == {"q": "1536Mi"}
    assert holder.model_dump() == {"q": "1536Mi"}
    with pytest.raises(ValidationError, match="lots"):
        _Holder.model_validate({"q": "lots"})


_suffixes = st.sampled_from(["", "m", "k", "M", "G", "Ki", "Mi", "Gi", "e3", "e-3", "n"])


@given(st.integers(min_value=0, max_value=10**6), _suffixes)
def test_canonical_form_parses_back_to_the_same_value(number: int, suffix: str) -> None:
    q = Quantity.parse(f"{number}{suffix}")
    again = Quantity.parse(str(q))
    assert again == q
    assert str(again) == str(q)


@given(st.integers(min_value=-(10**12), max_value=10**12), st.integers(-(10**12), 10**12))
def test_addition_matches_integer_arithmetic(a: int, b: int) -> None:
    qa, qb = Quantity.from_nanos(a), Quantity.from_nanos(b)
    assert (qa + qb).nanos == a + b
    assert (qa - qb).nanos == a - b
    assert (qa < qb) == (a < b)


def test_constructor_takes_text_whole_units_or_a_quantity() -> None:
    assert Quantity("1.5Gi") == Quantity.parse("1536Mi")
    assert Quantity(3) == Quantity.parse("3")
    assert Quantity(Quantity("2k")) == Quantity(2000)
    assert Quantity() == Quantity(0) and Quantity().is_zero()
    assert Quantity.from_nanos(1500) == Quantity("1500n")
    with pytest.raises(TypeError):
        Quantity(1.5)  # type: ignore[arg-type]
    with pytest.raises(QuantityParseError):
        Quantity("lots")


def test_cmp_and_int64_bounds_of_is_integer() -> None:
    assert Quantity("1").cmp(Quantity("2")) == -1
    assert Quantity("2").cmp(Quantity("2000m")) == 0
    assert Quantity("3").cmp(Quantity("2")) == 1
    assert Quantity(2**63 - 1).is_integer()
    assert not Quantity.from_nanos(2**63 * NANO).is_integer()


@pytest.mark.parametrize(
    ("text", "amount"),
    [
        ("0", (0, 0)),
        ("1536Mi", (1536 * 2**20, 0)),
        ("1.5Gi", None),  # a fraction of a binary suffix: Kubernetes keeps a decimal
        ("999Ti", None),  # too many digits for its int64 fast path
        ("1000m", (1000, -3)),
        ("1.5k", (15, 2)),
        ("-1.5", (-15, -1)),
        ("1e3", (1, 3)),
        ("1234567890123456789", None),
    ],
)
def test_int64_amount_is_how_kubernetes_holds_the_parsed_quantity(
    text: str, amount: tuple[int, int] | None
) -> None:
    assert Quantity(text).int64_amount == amount


def test_a_computed_quantity_is_held_as_its_canonical_text_would_be() -> None:
    # 1.5Gi prints as 1536Mi, which parses onto the int64 path.
    assert Quantity.from_nanos(Quantity("1.5Gi").nanos).int64_amount == (1536 * 2**20, 0)
