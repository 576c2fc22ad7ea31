"""Every library function a Kubernetes DRA selector may call, against hand-written values.

The allocator and the checker share the CEL runtime, so a function that computes the wrong value
would fool both. Each row is an expression and the value Kubernetes documents for it (the
quantity, semver, lists, regex and strings libraries, plus the standard functions selectors
use); the test evaluates ``(expression) == expected`` on a real device, and also checks that a
different value is not accepted, so a row cannot pass by comparing nothing.
"""

from __future__ import annotations

import pytest

from dra_driver.cel import CelEnvironment, DeviceVariable

Value = bool | int | float | str | list[int] | list[str]

ROWS: list[tuple[str, Value]] = [
    # quantity library (k8s.io/apiserver/pkg/cel/library/quantity.go)
    ('quantity("1Gi").asInteger()', 1073741824),
    ('quantity("1.5k").asInteger()', 1500),
    ('quantity("500m").asApproximateFloat()', 0.5),
    ('quantity("500m").isInteger()', False),
    ('quantity("2M").isInteger()', True),
    ('quantity("-3").sign()', -1),
    ('quantity("0").sign()', 0),
    ('isQuantity("10Gi")', True),
    ('isQuantity("10 Gi")', False),
    ('quantity("1Gi").add(quantity("1024Mi")).asInteger()', 2147483648),
    ('quantity("1k").add(24).asInteger()', 1024),
    ('quantity("1k").sub(quantity("1")).asInteger()', 999),
    ('quantity("1k").sub(1).asInteger()', 999),
    ('quantity("1Gi").isGreaterThan(quantity("1G"))', True),
    ('quantity("1G").isLessThan(quantity("1Gi"))', True),
    ('quantity("1Gi").compareTo(quantity("1024Mi"))', 0),
    ('quantity("1").compareTo(quantity("2"))', -1),
    ('quantity("1Gi") == quantity("1024Mi")', True),
    ('device.capacity["gpu.dra-driver.dev"].memory.asInteger()', 85899345920),
    # semver library (k8s.io/apiserver/pkg/cel/library/semverlib.go)
    ('semver("1.2.3").major()', 1),
    ('semver("1.2.3").minor()', 2),
    ('semver("1.2.3").patch()', 3),
    ('isSemver("1.2.3-rc.1+build")', True),
    ('isSemver("v1.2")', False),
    ('isSemver("v1.2", true)', True),
    ('semver("v1.2", true).patch()', 0),
    ('semver("1.0.0").isGreaterThan(semver("1.0.0-rc.1"))', True),
    ('semver("1.0.0-alpha").isLessThan(semver("1.0.0-alpha.1"))', True),
    ('semver("1.0.0+a").compareTo(semver("1.0.0+b"))', 0),
    ('semver("2.0.0").compareTo(semver("10.0.0"))', -1),
    ('device.attributes["gpu.dra-driver.dev"].driverVersion.minor()', 95),
    # lists library (k8s.io/apiserver/pkg/cel/library/lists.go)
    ("[1, 2, 2, 3].isSorted()", True),
    ('["b", "a"].isSorted()', False),
    ("[1, 2, 3].sum()", 6),
    ("[4, 1, 3].min()", 1),
    ("[4, 1, 3].max()", 4),
    ("[1, 2, 1].indexOf(1)", 0),
    ("[1, 2, 1].lastIndexOf(1)", 2),
    ("[1, 2].indexOf(5)", -1),
    # regex library (k8s.io/apiserver/pkg/cel/library/regex.go) and standard matches
    ('"NVIDIA H100".matches("^NVIDIA H[0-9]+$")', True),
    ('"abc 123 def 456".find("[0-9]+")', "123"),
    ('"abc".find("[0-9]+")', ""),
    ('"abc 123 def 456".findAll("[0-9]+")', ["123", "456"]),
    ('"a1 b2 c3".findAll("[a-z][0-9]", 2)', ["a1", "b2"]),
    # strings extension, version 2 (cel-go ext/strings.go)
    ('"hello".charAt(1)', "e"),
    ('"hello".indexOf("l")', 2),
    ('"hello".lastIndexOf("l")', 3),
    ('"hello".indexOf("l", 3)', 3),
    ('"Hello".lowerAscii()', "hello"),
    ('"Hello".upperAscii()', "HELLO"),
    ('"a-b-c".replace("-", "+")', "a+b+c"),
    ('"a-b-c".replace("-", "+", 1)', "a+b-c"),
    ('"a,b,c".split(",")', ["a", "b", "c"]),
    ('"a,b,c".split(",", 2)', ["a", "b,c"]),
    ('"hello".substring(1, 3)', "el"),
    ('"hello".substring(2)', "llo"),
    ('"  x ".trim()', "x"),
    ('["a", "b"].join("-")', "a-b"),
    ('["a", "b"].join()', "ab"),
    ('strings.quote("a\\"b")', '"a\\"b"'),
    ('"%s has %d".format(["gpu", 2])', "gpu has 2"),
    # standard functions and macros selectors use
    ('"pci0000:00".startsWith("pci")', True),
    ('"9.0.0".endsWith(".0")', True),
    ('"Hopper".contains("opp")', True),
    ('size("hello")', 5),
    ("[1, 2, 3].exists(x, x > 2)", True),
    ("[1, 2, 3].all(x, x > 0)", True),
    ("[1, 2, 3].filter(x, x > 1)", [2, 3]),
    ("[1, 2, 3].map(x, x * 2)", [2, 4, 6]),
    ("cel.bind(x, 3, x * x)", 9),
    ('device.attributes["gpu.dra-driver.dev"].?missing.orValue("none")', "none"),
    ('"numaNode" in device.attributes["gpu.dra-driver.dev"]', True),
    ('device.attributes["other.example.com"].size()', 0),
    ("device.allowMultipleAllocations", True),
    ("device.driver", "gpu.dra-driver.dev"),
]


def _literal(value: Value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, list):
        return "[" + ", ".join(_literal(v) for v in value) + "]"
    return repr(value)


def _different(value: Value) -> Value:
    if isinstance(value, bool):
        return not value
    if isinstance(value, int | float):
        return value + 1
    if isinstance(value, str):
        return value + "?"
    return [*value, value[0]] if value else ["?"]


@pytest.mark.parametrize(("expression", "expected"), ROWS, ids=[r[0] for r in ROWS])
def test_library_function_value(
    env: CelEnvironment, h100: DeviceVariable, expression: str, expected: Value
) -> None:
    assert env.compile(f"({expression}) == {_literal(expected)}").evaluate(h100) is True
    assert (
        env.compile(f"({expression}) == {_literal(_different(expected))}").evaluate(h100) is False
    )
