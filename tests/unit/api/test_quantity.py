"""Kubernetes quantity notation, and the stricter whole-bytes rule on top."""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from api.errors import ConfigError
from api.quantity import (
    BINARY_SUFFIXES,
    DECIMAL_SUFFIXES,
    ByteQuantity,
    parse_byte_quantity,
    parse_quantity,
)


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("0", Fraction(0)),
        ("1", Fraction(1)),
        ("+7", Fraction(7)),
        ("-3", Fraction(-3)),
        ("1.5", Fraction(3, 2)),
        ("5.", Fraction(5)),
        (".25", Fraction(1, 4)),
        ("1Ki", Fraction(1024)),
        ("4Gi", Fraction(4 * 2**30)),
        ("1.5Gi", Fraction(1610612736)),
        ("2Ei", Fraction(2 * 2**60)),
        ("3k", Fraction(3000)),
        ("1M", Fraction(10**6)),
        ("1E", Fraction(10**18)),
        ("500m", Fraction(1, 2)),
        ("7u", Fraction(7, 10**6)),
        ("9n", Fraction(9, 10**9)),
        ("1e3", Fraction(1000)),
        ("1E3", Fraction(1000)),
        ("2.5e-2", Fraction(1, 40)),
        ("1e+2", Fraction(100)),
        ("-1.5Mi", Fraction(-3 * 2**19)),
    ],
)
def test_parse_quantity_values(text: str, value: Fraction) -> None:
    parsed = parse_quantity(text)
    assert parsed.value == value
    assert parsed.text == text


@pytest.mark.parametrize(
    "text",
    [
        "",
        " 1",
        "1 ",
        "1 Gi",
        "Gi",
        ".",
        "+",
        "1.2.3",
        "1KiB",
        "1ki",
        "1K",
        "12XB",
        "0x10",
        "1e",
        "1e1.5",
        "١٢",
        "1_000",
        "--1",
        "1Gi1",
    ],
)
def test_parse_quantity_rejects_bad_syntax(text: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_quantity(text, field="limit")
    assert caught.value.field == "limit"
    assert "is not a quantity" in str(caught.value)
    assert str(caught.value).startswith("limit: ")


def test_huge_exponent_is_refused_instead_of_computed() -> None:
    with pytest.raises(ConfigError, match=r"exponent .* out of range"):
        parse_quantity("1e999999999")
    assert parse_quantity("1e100").value == 10**100


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("1.5Gi", ByteQuantity("1.5Gi", 1610612736)),
        ("1000m", ByteQuantity("1000m", 1)),
        ("0", ByteQuantity("0", 0)),
        ("-0", ByteQuantity("-0", 0)),
        ("2.5k", ByteQuantity("2.5k", 2500)),
        (4096, ByteQuantity("4096", 4096)),
        (0, ByteQuantity("0", 0)),
    ],
)
def test_byte_quantity_keeps_text_and_exact_bytes(given: str | int, expected: ByteQuantity) -> None:
    assert parse_byte_quantity(given) == expected


@pytest.mark.parametrize(
    ("given", "fragment"),
    [
        ("0.5", 'must be a whole number of bytes, got "0.5" (= 0.5 bytes)'),
        ("100m", "(= 0.1 bytes)"),
        ("1n", "(= 0.000000001 bytes)"),
        ("1.1Ki", "(= 1126.4 bytes)"),
        ("-1Gi", 'must not be negative, got "-1Gi"'),
        (-1, "must not be negative, got -1"),
        (1.5, "got number 1.5"),
        (True, "got boolean true"),
        (None, "got null"),
        ("12XB", '"12XB" is not a quantity'),
    ],
)
def test_byte_quantity_refusals(given: object, fragment: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_byte_quantity(given, field="mem")  # type: ignore[arg-type]
    assert caught.value.field == "mem"
    assert fragment in str(caught.value)


def test_byte_quantity_of_count() -> None:
    assert ByteQuantity.of(2**40) == ByteQuantity("1099511627776", 2**40)


_ALL_SUFFIXES: dict[str, Fraction] = {
    **{name: Fraction(mult) for name, mult in BINARY_SUFFIXES.items()},
    **DECIMAL_SUFFIXES,
}


@given(
    whole=st.integers(min_value=0, max_value=10**12),
    suffix=st.sampled_from(sorted(_ALL_SUFFIXES)),
    negative=st.booleans(),
)
def test_suffix_scales_exactly(whole: int, suffix: str, negative: bool) -> None:
    text = f"{'-' if negative else ''}{whole}{suffix}"
    expected = whole * _ALL_SUFFIXES[suffix] * (-1 if negative else 1)
    assert parse_quantity(text).value == expected


@given(whole=st.integers(min_value=0, max_value=10**9), exponent=st.integers(-30, 30))
def test_exponent_scales_exactly(whole: int, exponent: int) -> None:
    assert parse_quantity(f"{whole}e{exponent}").value == whole * Fraction(10) ** exponent
