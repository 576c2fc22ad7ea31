"""Hostile selectors must be refused at compile time or finish quickly.

The runtime cannot be interrupted, so a selector that would run for minutes
or build gigabytes must never reach it. Each test names the trick it tries.
Timing bounds are deliberately loose (they only catch a runaway, which would
take minutes or exhaust memory); the cost assertions are the precise part.
"""

from __future__ import annotations

import time

import pytest

from dra_driver.cel import CelCompileError, CelEnvironment, CelRuntimeError, DeviceVariable
from dra_driver.cel import cost as cost_model

LIMIT = 1_000_000


def _list(n: int) -> str:
    return "[" + ", ".join(str(i) for i in range(n)) + "]"


def _nested_binds(seed: str, levels: int, step: str) -> str:
    """cel.bind(v0, seed, cel.bind(v1, step(v0), ... v{n-1}.size() > 0))."""
    text = f"v{levels - 1}.size() > 0"
    for level in reversed(range(levels)):
        init = seed if level == 0 else step.format(p=f"v{level - 1}")
        text = f"cel.bind(v{level}, {init}, {text})"
    return text


REFUSED = {
    "string doubling through cel.bind": _nested_binds('"' + "x" * 8000 + '"', 12, "{p} + {p}"),
    "list doubling through cel.bind": _nested_binds(_list(400), 12, "{p} + {p}"),
    "replace() inserting between every character": _nested_binds(
        '"xxxxxxxxxx"', 8, '{p}.replace("", "yyyyyyyyyy")'
    ),
    "format() repeating its argument": _nested_binds(
        '"xxxxxxxxxx"', 8, '"%s%s%s%s".format([{p}, {p}, {p}, {p}])'
    ),
    "split() then join() growing the separators": _nested_binds(
        '"a,b,c,d,e,f,g,h"', 6, '{p}.split(",").join(",,")'
    ),
    "three nested comprehensions over 100 elements": (
        f"{_list(100)}.all(a, {_list(100)}.all(b, {_list(100)}.all(c, a + b + c >= 0)))"
    ),
    "map() producing growing strings": (
        f'cel.bind(s, "{"x" * 5000}", {_list(500)}.map(i, s + s + string(i)).size() > 0)'
    ),
    "many Python calls in nested loops": (
        f"{_list(90)}.all(x, {_list(100)}.all(y, quantity(string(x)).isInteger()))"
    ),
}


@pytest.mark.parametrize("expression", REFUSED.values(), ids=REFUSED.keys())
def test_refused_at_compile_time(env: CelEnvironment, expression: str) -> None:
    assert len(expression.encode()) <= 10 * 1024
    started = time.perf_counter()
    with pytest.raises(CelCompileError, match="too complex") as caught:
        env.compile(expression)
    assert time.perf_counter() - started < 5
    assert "exceeds the limit of 1,000,000" in caught.value.message


ACCEPTED = {
    "string doubling that stays small": _nested_binds('"xxxxxxxxxx"', 10, "{p} + {p}"),
    "every attribute against every attribute": (
        "device.attributes.all(d, device.attributes[d].all(k, device.attributes.exists(e, e == d)))"
    ),
    "catastrophic backtracking pattern, linear in RE2": (
        '"' + "a" * 5000 + 'b".matches("^(a+)+$") == false'
    ),
    "catastrophic pattern through find()": '"' + "a" * 5000 + 'b".find("(a|aa)+$") == ""',
    "a thousand-element list through two macros": (
        f"{_list(1000)}.filter(x, x % 2 == 0).map(x, x * 2).size() == 500"
    ),
}


@pytest.mark.parametrize("expression", ACCEPTED.values(), ids=ACCEPTED.keys())
def test_accepted_and_quick(env: CelEnvironment, h100: DeviceVariable, expression: str) -> None:
    selector = env.compile(expression)
    assert selector.cost <= LIMIT
    started = time.perf_counter()
    assert selector.evaluate(h100) is True
    assert time.perf_counter() - started < 5


def test_runtime_iteration_budget_backs_up_the_estimate(
    env: CelEnvironment, h100: DeviceVariable
) -> None:
    """10,100 iterations are cheap enough for the estimate but over the runtime's fixed budget."""
    selector = env.compile(f"{_list(100)}.all(a, {_list(100)}.all(b, a + b >= 0))")
    with pytest.raises(CelRuntimeError, match="cost limit exceeded"):
        selector.evaluate(h100)


def test_cost_grows_with_loop_sizes(env: CelEnvironment) -> None:
    costs = [env.compile(f"{_list(n)}.all(x, {_list(n)}.exists(y, y == x))").cost for n in (5, 50)]
    assert costs[1] > 50 * costs[0]


def test_typical_selectors_are_far_below_the_limit(env: CelEnvironment) -> None:
    for expression in (
        'device.driver == "gpu.dra-driver.dev"',
        'device.capacity["gpu.dra-driver.dev"].memory.compareTo(quantity("40Gi")) >= 0',
        'device.attributes["gpu.dra-driver.dev"].productName.lowerAscii().contains("h100")',
    ):
        assert env.compile(expression).cost < 1_000


def test_size_bounds_compose() -> None:
    text = cost_model.Size(10)
    listing = cost_model.Size(3, item=text)
    assert cost_model.join(text, cost_model.Size(4)) == text
    assert cost_model.join(None, listing) is listing
    assert cost_model.footprint(listing) == 3 * (1 + 10)
    assert cost_model.entries(listing) == 3
    assert cost_model.work(text) == 2
    sizes = cost_model.device_sizes()
    attributes = sizes["device.attributes"]
    assert attributes.length == 32
    assert attributes.item is not None and attributes.item.item == cost_model.Size(64)
