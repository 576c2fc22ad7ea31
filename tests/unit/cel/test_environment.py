from __future__ import annotations

import pickle
import threading
from typing import Any

import pytest

from dra_driver.cel import (
    CelCompileError,
    CelEnvironment,
    CelRuntimeError,
    CompiledSelector,
    DeviceVariable,
    default_environment,
)
from dra_driver.cel.checked_ast import SourcePosition


class _CountingRuntime:
    """Wraps the shared runtime and counts type checks, i.e. real compilations."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.checks = 0

    def check(self, text: str) -> Any:
        self.checks += 1
        return self._inner.check(text)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


@pytest.fixture
def counted(env: CelEnvironment, monkeypatch: pytest.MonkeyPatch) -> _CountingRuntime:
    runtime = _CountingRuntime(env._runtime)
    monkeypatch.setattr(env, "_runtime", runtime)
    return runtime


def test_same_text_gives_the_same_compiled_object(
    env: CelEnvironment, counted: _CountingRuntime
) -> None:
    first = env.compile('device.driver == "a"')
    second = env.compile('device.driver == "a"')
    other = env.compile('device.driver == "b"')
    assert first is second
    assert other is not first
    assert isinstance(first, CompiledSelector)
    assert first.expression == 'device.driver == "a"'
    assert counted.checks == 2


def test_failures_are_cached_too(env: CelEnvironment, counted: _CountingRuntime) -> None:
    for _ in range(3):
        with pytest.raises(CelCompileError, match="undeclared reference"):
            env.compile("nope == 1")
    assert counted.checks == 1


def test_environments_do_not_share_a_cache() -> None:
    expression = "device.allowMultipleAllocations"
    assert CelEnvironment().compile(expression) is not CelEnvironment().compile(expression)


def test_concurrent_compiles_agree_on_one_object(env: CelEnvironment) -> None:
    expression = '[1, 2, 3].all(x, x > 0) && device.driver != ""'
    results: list[CompiledSelector] = []
    threads = [
        threading.Thread(target=lambda: results.append(env.compile(expression))) for _ in range(8)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(results) == 8
    assert all(r is results[0] for r in results)


def test_default_environment_is_shared() -> None:
    assert default_environment() is default_environment()
    assert default_environment().cost_limit == 1_000_000
    assert default_environment().max_expression_bytes == 10 * 1024


def test_length_limit_counts_utf8_bytes() -> None:
    env = CelEnvironment(max_expression_bytes=32)
    fits = 'device.driver == "' + "x" * 13 + '"'
    assert len(fits.encode()) == 32
    assert env.compile(fits).expression == fits
    too_long = 'device.driver == "' + "é" * 7 + '"'  # 26 characters, 33 bytes
    with pytest.raises(CelCompileError, match="33 bytes long; the limit is 32 bytes"):
        env.compile(too_long)


def test_default_length_limit_is_10_kib(env: CelEnvironment) -> None:
    padding = " " * (10 * 1024 - len("true"))
    assert env.compile("true" + padding).expression == "true" + padding
    with pytest.raises(CelCompileError, match="10,241 bytes long"):
        env.compile("true " + padding)


def test_cost_limit_is_configurable(h100: DeviceVariable) -> None:
    expression = "device.attributes.all(d, device.attributes[d].all(k, k.size() > 0))"
    accepted = CelEnvironment().compile(expression)
    assert 1_000 < accepted.cost <= 1_000_000
    assert accepted.evaluate(h100) is True
    with pytest.raises(CelCompileError, match=r"too complex.*exceeds the limit of 1,000"):
        CelEnvironment(cost_limit=1_000).compile(expression)


def test_invalid_limits_are_refused() -> None:
    with pytest.raises(ValueError, match="positive"):
        CelEnvironment(cost_limit=0)
    with pytest.raises(ValueError, match="positive"):
        CelEnvironment(max_expression_bytes=-1)


def test_compile_error_shape(env: CelEnvironment) -> None:
    with pytest.raises(CelCompileError) as caught:
        env.compile("device.driver == 1 ||\n device.nope")
    error = caught.value
    assert isinstance(error, ValueError)
    assert error.expression == "device.driver == 1 ||\n device.nope"
    assert "no matching overload for '_==_'" in error.message
    assert "undeclared reference to 'device.nope'" in error.message
    assert error.position == SourcePosition(line=1, column=15)
    text = str(error)
    assert "\n" not in text
    assert text.startswith("CEL selector 'device.driver == 1 || device.nope' is invalid at line 1")


def test_runtime_error_shape(env: CelEnvironment, h100: DeviceVariable) -> None:
    selector = env.compile('device.attributes["gpu.dra-driver.dev"].nope')
    with pytest.raises(CelRuntimeError) as caught:
        selector.evaluate(h100)
    error = caught.value
    assert isinstance(error, RuntimeError)
    assert error.expression == selector.expression
    assert error.message == 'no such key: "nope"'
    assert "\n" not in str(error)


def test_errors_survive_pickling(env: CelEnvironment) -> None:
    with pytest.raises(CelCompileError) as caught:
        env.compile("1 +")
    copy = pickle.loads(pickle.dumps(caught.value))
    assert (copy.expression, copy.message, copy.position) == (
        caught.value.expression,
        caught.value.message,
        caught.value.position,
    )
    runtime = pickle.loads(pickle.dumps(CelRuntimeError("x", "boom")))
    assert (runtime.expression, runtime.message) == ("x", "boom")


def test_dyn_result_is_checked_at_evaluation(env: CelEnvironment, h100: DeviceVariable) -> None:
    selector = env.compile('device.attributes["gpu.dra-driver.dev"].migCapable')
    assert selector.evaluate(h100) is True
    with pytest.raises(CelRuntimeError, match="must evaluate to bool, got int"):
        env.compile('device.attributes["gpu.dra-driver.dev"].numaNode').evaluate(h100)


def test_wrong_argument_types(env: CelEnvironment) -> None:
    with pytest.raises(TypeError):
        env.compile(b"true")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        env.compile("true").evaluate({"driver": "x"})  # type: ignore[arg-type]


def test_internal_functions_and_types_are_out_of_reach(env: CelEnvironment) -> None:
    with pytest.raises(CelCompileError, match="Syntax error"):
        env.compile("[1].@take(1) == [1]")
    with pytest.raises(CelCompileError, match="creating messages"):
        env.compile('kubernetes.Quantity{numerator: "1", denominator: "0"} == quantity("1")')
    with pytest.raises(CelCompileError, match="undeclared reference to 'regex'"):
        env.compile('regex.extract("a", "a").hasValue()')


def test_a_variable_is_shared_safely_between_threads(
    env: CelEnvironment, h100: DeviceVariable
) -> None:
    """The runtime ties its copy of a device to one thread; each thread must get its own."""
    var = h100
    selectors = [
        env.compile('dyn(quantity("1")).compareTo(dyn(quantity("2"))) == -1'),
        env.compile('device.capacity["gpu.dra-driver.dev"].memory.asInteger() > 0'),
        env.compile('device.attributes["gpu.dra-driver.dev"].driverVersion.major() == 580'),
    ]
    assert all(s.evaluate(var) for s in selectors)  # first use on this thread
    failures: list[BaseException] = []

    def work() -> None:
        try:
            for _ in range(200):
                for selector in selectors:
                    assert selector.evaluate(var) is True
        except BaseException as failure:  # reported below, on the test's thread
            failures.append(failure)

    threads = [threading.Thread(target=work) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
