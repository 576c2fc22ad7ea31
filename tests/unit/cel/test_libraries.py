"""The pieces under the selectors: value ordering, regex rewriting, message cleanup."""

from __future__ import annotations

import itertools
import pathlib
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dra_driver.cel import CelCompileError, CelEnvironment, DeviceVariable, messages
from dra_driver.cel.checked_ast import SourcePosition
from dra_driver.cel.lists_lib import cel_equal
from dra_driver.cel.quantity_lib import order_key as quantity_key
from dra_driver.cel.regex_lib import without_capture_groups
from dra_driver.cel.semver_lib import order_key as semver_key
from dra_driver.cel.semver_lib import parse_semver

# Every quantity is a finite decimal: integer digits scaled by powers of 2 and 10.
decimals = st.builds(
    lambda digits, tens, twos: Fraction(digits) * Fraction(10) ** tens * 2**twos,
    st.integers(min_value=-(10**30), max_value=10**30),
    st.integers(min_value=-40, max_value=40),
    st.integers(min_value=0, max_value=60),
)


@given(decimals, decimals)
def test_quantity_keys_sort_like_their_values(a: Fraction, b: Fraction) -> None:
    assert (quantity_key(a) < quantity_key(b)) == (a < b)
    assert (quantity_key(a) == quantity_key(b)) == (a == b)


def test_quantity_key_refuses_non_decimals() -> None:
    with pytest.raises(ValueError, match="finite decimal"):
        quantity_key(Fraction(1, 3))


# semver.org's precedence example, lowest first, plus numeric ordering of the core.
SEMVER_ORDER = [
    "1.0.0-alpha",
    "1.0.0-alpha.1",
    "1.0.0-alpha.beta",
    "1.0.0-beta",
    "1.0.0-beta.2",
    "1.0.0-beta.11",
    "1.0.0-rc.1",
    "1.0.0",
    "1.9.0",
    "1.10.0",
    "1.11.0",
    "2.0.0",
    "2.1.1",
    "550.54.15",
    "580.95.5",
]


def test_semver_keys_follow_precedence() -> None:
    keys = [semver_key(parse_semver(v)) for v in SEMVER_ORDER]
    assert keys == sorted(keys)
    assert len(set(keys)) == len(keys)


@pytest.mark.parametrize(
    ("low", "high"), list(itertools.combinations([*SEMVER_ORDER[:8], "1.10.0"], 2))
)
def test_semver_comparisons_in_cel(
    env: CelEnvironment, h100: DeviceVariable, low: str, high: str
) -> None:
    # Typed operands become native key comparisons; dyn() on both sides leaves the
    # overload to be picked at run time, by the Python implementation.
    for wrap in ("{}", "dyn({})"):
        left, right = wrap.format(f'semver("{low}")'), wrap.format(f'semver("{high}")')
        assert env.compile(f"{left}.isLessThan({right})").evaluate(h100)
        assert env.compile(f"{left}.compareTo({right}) < 0").evaluate(h100)
        assert env.compile(f"{left}.compareTo({right}) == -1").evaluate(h100)
        assert not env.compile(f"{left}.isGreaterThan({right})").evaluate(h100)


@pytest.mark.parametrize(
    "text", ["1.0", "01.0.0", "1.0.0-", "1.0.0-01", "1.0.0+", "v1.0.0", " 1.0.0", "1.0.0-a..b"]
)
def test_semver_parsing_is_strict(text: str) -> None:
    with pytest.raises(ValueError, match="not a semantic version"):
        parse_semver(text)


def test_semver_normalisation_option(env: CelEnvironment, h100: DeviceVariable) -> None:
    assert env.compile('semver("v1.02", true) == semver("1.2.0")').evaluate(h100)
    assert env.compile('isSemver("v1", true) && !isSemver("v1")').evaluate(h100)


def test_quantity_arithmetic_in_cel(env: CelEnvironment, h100: DeviceVariable) -> None:
    checks = [
        'quantity("1.5").add(1) == quantity("2500m")',
        'quantity("1Ki").sub(quantity("24")) == quantity("1000")',
        'quantity("-2").sign() == -1 && quantity("0").sign() == 0',
        'quantity("250m").asApproximateFloat() == 0.25',
        'quantity("1e3").compareTo(quantity("1k")) == 0',
        'dyn(quantity("2")).compareTo(quantity("10")) == -1',
        '!quantity("9223372036854775808").isInteger()',
    ]
    for expression in checks:
        assert env.compile(expression).evaluate(h100), expression


@pytest.mark.parametrize(
    ("pattern", "expected"),
    [
        ("a(b)c", "a(?:b)c"),
        ("(?P<name>x)(?<other>y)", "(?:x)(?:y)"),
        ("(?:kept)(?i)(?s:z)", "(?:kept)(?i)(?s:z)"),
        (r"\(literal\)", r"\(literal\)"),
        ("[(]x[^)]", "[(]x[^)]"),
        ("[]()]", "[]()]"),
        ("[[:alpha:](]+", "[[:alpha:](]+"),
        (r"\Q(a)\E(b)", r"\Q(a)\E(?:b)"),
    ],
)
def test_capture_groups_become_non_capturing(pattern: str, expected: str) -> None:
    assert without_capture_groups(pattern) == expected


def test_cel_equality_keeps_bools_apart() -> None:
    assert cel_equal(1, 1.0)
    assert not cel_equal(True, 1)
    assert cel_equal([1, "a"], [1.0, "a"])
    assert not cel_equal({"a": 1}, {"a": True})


def test_compile_messages_are_one_line() -> None:
    report = (
        "INVALID_ARGUMENT: ERROR: <input>:1:3: Syntax error: extraneous input 'b'\n"
        " | a b\n | ..^\nERROR: <input>:2:1: undeclared reference to 'x' (in container '')\n"
        " | x\n | ^ [INVALID_ARGUMENT]"
    )
    message, position = messages.compile_failure(report)
    assert message == "Syntax error: extraneous input 'b'; undeclared reference to 'x'"
    assert position == SourcePosition(1, 3)


def test_nesting_limit_message(env: CelEnvironment) -> None:
    deep = " + ".join(["1"] * 40) + " > 0"
    with pytest.raises(CelCompileError, match="nests too deeply") as caught:
        env.compile(deep)
    assert caught.value.position is None


def test_runtime_messages_lose_status_codes() -> None:
    assert messages.runtime_failure('NOT_FOUND: Key not found in map : "x"') == 'no such key: "x"'
    assert messages.runtime_failure("INTERNAL: Iteration budget exceeded [INTERNAL]").startswith(
        "cost limit exceeded"
    )
    assert messages.type_name("LIST<INT>") == "list(int)"
    assert messages.type_name("kubernetes.Semver") == "kubernetes.Semver"


def test_only_the_adapter_imports_the_runtime() -> None:
    root = pathlib.Path(__file__).resolve().parents[3]
    importers = sorted(
        str(path.relative_to(root))
        for package in ("api", "dra_driver", "kubeletplugin", "controller")
        for path in (root / package).rglob("*.py")
        if "cel_expr_python" in path.read_text(encoding="utf-8")
    )
    assert importers == ["dra_driver/cel/runtime.py"]
