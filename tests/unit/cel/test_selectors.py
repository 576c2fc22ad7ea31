"""Selectors of the kind DeviceClasses and ResourceClaims use, with Kubernetes' answers.

Each row is an expression and what Kubernetes would do with it on the device
from conftest: a bool, or a failure at compile time or at evaluation time
whose message contains a fragment.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from dra_driver.cel import (
    CelCompileError,
    CelEnvironment,
    CelRuntimeError,
    DeviceVariable,
)

G = 'device.attributes["gpu.dra-driver.dev"]'
CAP = 'device.capacity["gpu.dra-driver.dev"]'
PCI = 'device.attributes["resource.kubernetes.io"]'
OTHER = 'device.attributes["other.example.com"]'


@dataclass(frozen=True)
class Fails:
    stage: type[CelCompileError] | type[CelRuntimeError]
    fragment: str

    def __repr__(self) -> str:
        return f"{self.stage.__name__}({self.fragment!r})"


def compile_error(fragment: str) -> Fails:
    return Fails(CelCompileError, fragment)


def runtime_error(fragment: str) -> Fails:
    return Fails(CelRuntimeError, fragment)


H100_CASES: list[tuple[str, bool | Fails]] = [
    # Driver checks.
    ('device.driver == "gpu.dra-driver.dev"', True),
    ('device.driver == "gpu.nvidia.com"', False),
    ('device.driver.endsWith(".dev") && device.driver.startsWith("gpu.")', True),
    # Product names.
    (f'{G}.productName.startsWith("NVIDIA H100")', True),
    (f'{G}.productName.lowerAscii().contains("h100")', True),
    (f'{G}.productName.lowerAscii().contains("a100")', False),
    (f'{G}.productName.matches("^NVIDIA (H|A)100")', True),
    (f'{G}.productName.find("H[0-9]+") == "H100"', True),
    (f'{G}.productName.find("B[0-9]+") == ""', True),
    (f'{G}.productName.find("(H)([0-9]+)") == "H100"', True),
    (f'{G}.productName.findAll("[0-9]+") == ["100", "80", "3"]', True),
    (f'{G}.productName.findAll("[0-9]+", 2) == ["100", "80"]', True),
    (f'{G}.productName.split(" ")[1] == "H100"', True),
    (f'{G}.architecture in ["Hopper", "Blackwell"]', True),
    # Memory and other capacities as quantities.
    (f'{CAP}.memory.compareTo(quantity("40Gi")) >= 0', True),
    (f'{CAP}.memory.compareTo(quantity("81Gi")) >= 0', False),
    (f'0 > {CAP}.memory.compareTo(quantity("81Gi"))', True),
    (
        f'{CAP}.memory.isGreaterThan(quantity("79Gi"))'
        f' && {CAP}.memory.isLessThan(quantity("81Gi"))',
        True,
    ),
    (f'{CAP}.memory == quantity("81920Mi")', True),
    (f"{CAP}.memory.asInteger() == 85899345920", True),
    (f'{CAP}.multiprocessors.compareTo(quantity("100")) > 0', True),
    (f'{CAP}.memory.add(quantity("1Gi")).compareTo(quantity("81Gi")) == 0', True),
    ('quantity("1Gi") == quantity("1024Mi")', True),
    ('quantity("500m").isInteger() == false && quantity("1.5Gi").isInteger()', True),
    ('quantity("1.5").asInteger() == 1', runtime_error("cannot convert value to integer")),
    ('quantity("ten").sign() == 1', runtime_error('"ten" is not a quantity')),
    ('isQuantity("80Gi") && !isQuantity("80GB")', True),
    # Versions as semver.
    (f'{G}.driverVersion.isGreaterThan(semver("550.0.0"))', True),
    (f'{G}.driverVersion.compareTo(semver("580.95.5")) == 0', True),
    (f"{G}.driverVersion.compareTo({G}.cudaDriverVersion) > 0", True),
    (
        f'{G}.cudaComputeCapability.isLessThan(semver("10.0.0"))'
        f" && {G}.cudaComputeCapability.major() == 9",
        True,
    ),
    (f'{G}.cudaComputeCapability.compareTo(semver("8.9.0")) >= 0', True),
    ('semver("1.0.0-rc.1").isLessThan(semver("1.0.0"))', True),
    ('semver("1.0.0+build.5") == semver("1.0.0")', True),
    ('semver("1.2").major() == 1', runtime_error("not a semantic version")),
    # has() and `in` guards.
    (f"has({G}.migCapable) && {G}.migCapable", True),
    (f"has({G}.mpsCapable) && {G}.mpsCapable", False),
    (f'"migCapable" in {G} && {G}.migCapable', True),
    (f'"pcieRoot" in {PCI} && {PCI}.pcieRoot == "pci0000:00"', True),
    ("has(device.allowMultipleAllocations) && device.allowMultipleAllocations", True),
    ("has(device.driver)", True),
    # Optional types.
    (f"{G}.?mpsCapable.orValue(false) == false", True),
    (f"{G}.?numaNode.orValue(-1) == 0", True),
    (f"optional.of({G}.numaNode).value() == 0", True),
    (f'{PCI}.?pciBusID.hasValue() && {PCI}.?pciBusID.value().startsWith("0000:")', True),
    # cel.bind.
    (f'cel.bind(gpu, {G}, gpu.type == "gpu" && gpu.numaNode == 0)', True),
    (f'cel.bind(root, {PCI}.pcieRoot, root.startsWith("pci") && root.size() == 10)', True),
    # Lists library and macros.
    ("[1, 2, 3].sum() == 6 && [3, 1, 2].max() == 3 && [3, 1, 2].min() == 1", True),
    ('["a", "b", "c"].isSorted() && ![2, 1].isSorted()', True),
    ('["x", "y", "x"].lastIndexOf("x") == 2 && ["x", "y"].indexOf("z") == -1', True),
    ("[0.5, 1.5].sum() == 2.0", True),
    ("[1.0].filter(x, x > 5.0).sum() + 0.5 == 0.5", True),
    ('["a"].sum() == 0', compile_error("no matching overload for 'sum'")),
    ("[].max() == 0", runtime_error("max called on an empty list")),
    ('device.attributes.exists(d, d == "resource.kubernetes.io")', True),
    (f"{CAP}.all(k, {CAP}[k].sign() > 0)", True),
    (f'{G}.exists_one(k, k.startsWith("cuda") && k.endsWith("Capability"))', True),
    # An unknown domain is an empty map; a missing key in a known map is an error.
    (f"{OTHER}.size() == 0", True),
    (f'"x" in {OTHER}', False),
    (f"{OTHER}.size", runtime_error('no such key: "size"')),
    ('"other.example.com" in device.attributes', False),
    ('device.capacity["other.example.com"].?memory.hasValue()', False),
    ('device.attributes[?"other.example.com"].hasValue()', True),
    (f"cel.bind(o, {OTHER}, o.size() == 0 && !has(o.foo))", True),
    (f"{G}.mpsCapable", runtime_error('no such key: "mpsCapable"')),
    (f'{G}["mpsCapable"] == true', runtime_error('no such key: "mpsCapable"')),
    (f"{G}.mpsCapable == true || true", True),
    # Results that are not bool.
    ("device.driver", compile_error("must evaluate to bool, not string")),
    (f"{CAP}.memory", compile_error("must evaluate to bool, not kubernetes.Quantity")),
    (f"{G}.productName", runtime_error("must evaluate to bool, got string")),
    # Other compile and runtime errors.
    ('device.foo == "x"', compile_error("undeclared reference to 'device.foo'")),
    ("device.driver == 1", compile_error("no matching overload for '_==_'")),
    (f'{G}.productName.matches("(")', compile_error("missing )")),
    (f'{G}.productName.find("[") == ""', compile_error("missing ]")),
    (f'{G}.productName.find(device.driver) == ""', compile_error("must be a string literal")),
    ('quantity("1").numerator == "1"', compile_error("has no field 'numerator'")),
    (f'{G}.migCapable == "true"', False),
    ('dyn("x") + 1 == 2', runtime_error("no such overload")),
    ("1 / 0 == 0", runtime_error("divide by zero")),
    # Strings extension.
    ('"%s-%d".format(["gpu", 0]) == "gpu-0"', True),
    ('" H100 ".trim().upperAscii() == "H100"', True),
    (f'{G}.productName.replace("NVIDIA ", "").substring(0, 4) == "H100"', True),
    ('["a", "b"].join(",") == "a,b" && "abc".indexOf("c") == 2 && "abc".charAt(1) == "b"', True),
    ('"a".reverse() == "a"', compile_error("undeclared reference to 'reverse'")),
]

MIG_CASES: list[tuple[str, bool | Fails]] = [
    (f'{G}.type == "mig" && {G}.profile.startsWith("1g.")', True),
    (f'{CAP}.memory.compareTo(quantity("10Gi")) < 0', True),
    ("device.allowMultipleAllocations", False),
    (f"{G}.?migCapable.orValue(false)", False),
    (f'{G}.driverVersion.isGreaterThan(semver("550.54.14"))', True),
    ('"resource.kubernetes.io" in device.attributes', False),
    (f'{PCI}.?pcieRoot.orValue("") == ""', True),
    (f"{PCI}.pcieRoot == 'pci0000:00'", runtime_error('no such key: "pcieRoot"')),
]


def _check(env: CelEnvironment, var: DeviceVariable, expression: str, expected: object) -> None:
    if isinstance(expected, Fails):
        with pytest.raises(expected.stage) as caught:
            env.compile(expression).evaluate(var)
        assert expected.fragment in caught.value.message
        assert caught.value.expression == expression
    else:
        assert env.compile(expression).evaluate(var) is expected


def test_tables_are_large_enough() -> None:
    assert len(H100_CASES) + len(MIG_CASES) >= 40


@pytest.mark.parametrize(("expression", "expected"), H100_CASES)
def test_on_whole_gpu(
    env: CelEnvironment, h100: DeviceVariable, expression: str, expected: object
) -> None:
    _check(env, h100, expression, expected)


@pytest.mark.parametrize(("expression", "expected"), MIG_CASES)
def test_on_mig_device(
    env: CelEnvironment, mig: DeviceVariable, expression: str, expected: object
) -> None:
    _check(env, mig, expression, expected)


def test_compile_errors_are_raised_by_compile_not_evaluate(env: CelEnvironment) -> None:
    with pytest.raises(CelCompileError):
        env.compile("device.driver ==")


def test_syntax_error_names_the_position(env: CelEnvironment) -> None:
    with pytest.raises(CelCompileError) as caught:
        env.compile('device.driver == "a" &&\n  device.driver ==  ')
    error = caught.value
    assert error.position is not None
    assert error.position.line == 2
    assert "Syntax error" in error.message
    assert "line 2, column" in str(error)
    assert "\n" not in str(error)


def test_runtime_error_is_per_device(
    env: CelEnvironment, h100: DeviceVariable, mig: DeviceVariable
) -> None:
    selector = env.compile(f'{G}.profile == "1g.10gb"')
    assert selector.evaluate(mig) is True
    with pytest.raises(CelRuntimeError, match="no such key"):
        selector.evaluate(h100)
