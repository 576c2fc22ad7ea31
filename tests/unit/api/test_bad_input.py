"""Every way parameters can be wrong gets a precise field and a useful message."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from api import API_VERSION, ConfigError, decode_config
from api.v1alpha1.decode import Parameters

MPS_LIMITS = "sharing.mpsConfig"
PER_DEVICE = f"{MPS_LIMITS}.defaultPerDevicePinnedMemoryLimit"


def gpu(sharing: Any) -> dict[str, Any]:
    return {"apiVersion": API_VERSION, "kind": "GpuConfig", "sharing": sharing}


def mig(sharing: Any) -> dict[str, Any]:
    return {"apiVersion": API_VERSION, "kind": "MigDeviceConfig", "sharing": sharing}


def mps(**limits: Any) -> dict[str, Any]:
    return gpu({"strategy": "MPS", "mpsConfig": limits})


def pinned(value: Any) -> dict[str, Any]:
    return mps(defaultPinnedDeviceMemoryLimit=value)


def per_device(limits: Any) -> dict[str, Any]:
    return mps(defaultPerDevicePinnedMemoryLimit=limits)


KNOWN_KINDS = 'known kinds are "GpuConfig", "MigDeviceConfig"'
STRATEGIES = 'must be one of "TimeSlicing", "MPS"'
INTERVALS = 'must be one of "Default", "Short", "Medium", "Long"'
NOT_A_DEVICE = 'does not name a device; use a GPU index such as "0"'

LARGE_TEXT = json.dumps({"apiVersion": API_VERSION, "kind": "GpuConfig"}) + " " * 10240

BAD_INPUTS = [
    # --- envelope ---------------------------------------------------------
    pytest.param(
        {"apiVersion": API_VERSION},
        "kind",
        f"required field is missing; {KNOWN_KINDS}",
        id="kind-missing",
    ),
    pytest.param(
        {"apiVersion": API_VERSION, "kind": "TpuConfig"},
        "kind",
        f'unknown kind "TpuConfig"; {KNOWN_KINDS}',
        id="kind-unknown",
    ),
    pytest.param(
        {"apiVersion": API_VERSION, "kind": "gpuConfig"},
        "kind",
        'unknown kind "gpuConfig"',
        id="kind-wrong-case",
    ),
    pytest.param(
        {"apiVersion": API_VERSION, "kind": 7},
        "kind",
        "unknown kind integer 7",
        id="kind-not-a-string",
    ),
    pytest.param(
        {"kind": "GpuConfig"},
        "apiVersion",
        f'required field is missing; use "{API_VERSION}"',
        id="api-version-missing",
    ),
    pytest.param(
        {"apiVersion": "resource.dra-driver.dev/v1", "kind": "GpuConfig"},
        "apiVersion",
        f'unsupported version "resource.dra-driver.dev/v1"; the known version is "{API_VERSION}"',
        id="api-version-unknown",
    ),
    pytest.param(
        {"apiVersion": "resource.nvidia.com/v1beta1", "kind": "GpuConfig"},
        "apiVersion",
        "configuration written for NVIDIA's driver only needs this line changed",
        id="api-version-nvidia",
    ),
    pytest.param(
        {"apiVersion": None, "kind": "GpuConfig"},
        "apiVersion",
        "unsupported version null",
        id="api-version-null",
    ),
    pytest.param(
        {"apiVersion": API_VERSION, "kind": "GpuConfig", "shareing": {}},
        "shareing",
        "unknown field; the fields allowed here are apiVersion, kind, sharing",
        id="top-level-typo",
    ),
    # --- sharing ----------------------------------------------------------
    pytest.param(gpu([]), "sharing", "must be an object, got an array", id="sharing-array"),
    pytest.param(gpu("MPS"), "sharing", 'must be an object, got string "MPS"', id="sharing-string"),
    pytest.param(gpu({}), "sharing.strategy", "required field is missing", id="strategy-missing"),
    pytest.param(
        gpu({"strategy": "Exclusive"}),
        "sharing.strategy",
        f'{STRATEGIES}, got string "Exclusive"',
        id="strategy-unknown",
    ),
    pytest.param(
        gpu({"strategy": "mps"}),
        "sharing.strategy",
        f'{STRATEGIES}, got string "mps"',
        id="strategy-wrong-case",
    ),
    pytest.param(
        gpu({"strategy": 1}),
        "sharing.strategy",
        f"{STRATEGIES}, got integer 1",
        id="strategy-integer",
    ),
    pytest.param(
        gpu({"strategy": "MPS", "mps_config": {}}),
        "sharing.mps_config",
        "unknown field; the fields allowed here are strategy, timeSlicingConfig, mpsConfig",
        id="snake-case-field",
    ),
    pytest.param(
        gpu({"strategy": "TimeSlicing", "mpsConfig": {}}),
        "sharing.mpsConfig",
        "is not allowed with strategy TimeSlicing; set strategy to MPS or remove mpsConfig",
        id="time-slicing-with-mps-config",
    ),
    pytest.param(
        gpu({"strategy": "MPS", "timeSlicingConfig": {"interval": "Long"}}),
        "sharing.timeSlicingConfig",
        "is not allowed with strategy MPS",
        id="mps-with-time-slicing-config",
    ),
    pytest.param(
        gpu({"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Fast"}}),
        "sharing.timeSlicingConfig.interval",
        f'{INTERVALS}, got string "Fast"',
        id="interval-unknown",
    ),
    pytest.param(
        gpu({"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": 10}}),
        "sharing.timeSlicingConfig.interval",
        f"{INTERVALS}, got integer 10",
        id="interval-number",
    ),
    pytest.param(
        gpu({"strategy": "TimeSlicing", "timeSlicingConfig": {"duration": "1ms"}}),
        "sharing.timeSlicingConfig.duration",
        "unknown field; the fields allowed here are interval",
        id="time-slicing-unknown-field",
    ),
    pytest.param(
        gpu({"strategy": "TimeSlicing", "timeSlicingConfig": "Long"}),
        "sharing.timeSlicingConfig",
        'must be an object, got string "Long"',
        id="time-slicing-config-string",
    ),
    # --- MPS limits -------------------------------------------------------
    pytest.param(
        mps(defaultActiveThreadPercentage=150),
        f"{MPS_LIMITS}.defaultActiveThreadPercentage",
        "must be between 0 and 100, got 150",
        id="percentage-too-high",
    ),
    pytest.param(
        mps(defaultActiveThreadPercentage=-1),
        f"{MPS_LIMITS}.defaultActiveThreadPercentage",
        "must be between 0 and 100, got -1",
        id="percentage-negative",
    ),
    pytest.param(
        mps(defaultActiveThreadPercentage="50"),
        f"{MPS_LIMITS}.defaultActiveThreadPercentage",
        'must be an integer, got string "50"',
        id="percentage-quoted",
    ),
    pytest.param(
        mps(defaultActiveThreadPercentage=True),
        f"{MPS_LIMITS}.defaultActiveThreadPercentage",
        "must be an integer, got boolean true",
        id="percentage-boolean",
    ),
    pytest.param(
        mps(defaultActiveThreadPercentage=50.5),
        f"{MPS_LIMITS}.defaultActiveThreadPercentage",
        "must be an integer, got number 50.5",
        id="percentage-fraction",
    ),
    pytest.param(
        mps(defaultActiveThreadPercentage=50.0),
        f"{MPS_LIMITS}.defaultActiveThreadPercentage",
        "must be an integer, got number 50.0",
        id="percentage-float",
    ),
    pytest.param(
        mps(defaultPinnedMemoryLimit="1Gi"),
        f"{MPS_LIMITS}.defaultPinnedMemoryLimit",
        "unknown field; the fields allowed here are defaultActiveThreadPercentage, "
        "defaultPinnedDeviceMemoryLimit, defaultPerDevicePinnedMemoryLimit",
        id="mps-unknown-field",
    ),
    pytest.param(
        gpu({"strategy": "MPS", "mpsConfig": []}),
        MPS_LIMITS,
        "must be an object, got an array",
        id="mps-config-array",
    ),
    pytest.param(
        pinned("12XB"),
        f"{MPS_LIMITS}.defaultPinnedDeviceMemoryLimit",
        '"12XB" is not a quantity',
        id="quantity-bad-suffix",
    ),
    pytest.param(
        pinned("1 Gi"),
        f"{MPS_LIMITS}.defaultPinnedDeviceMemoryLimit",
        '"1 Gi" is not a quantity',
        id="quantity-space",
    ),
    pytest.param(
        pinned(""),
        f"{MPS_LIMITS}.defaultPinnedDeviceMemoryLimit",
        '"" is not a quantity',
        id="quantity-empty",
    ),
    pytest.param(
        pinned("-1Gi"),
        f"{MPS_LIMITS}.defaultPinnedDeviceMemoryLimit",
        'must not be negative, got "-1Gi"',
        id="quantity-negative",
    ),
    pytest.param(
        pinned(-5),
        f"{MPS_LIMITS}.defaultPinnedDeviceMemoryLimit",
        "must not be negative, got -5",
        id="quantity-negative-integer",
    ),
    pytest.param(
        pinned("0.5"),
        f"{MPS_LIMITS}.defaultPinnedDeviceMemoryLimit",
        'must be a whole number of bytes, got "0.5"',
        id="quantity-half-byte",
    ),
    pytest.param(
        pinned("10m"),
        f"{MPS_LIMITS}.defaultPinnedDeviceMemoryLimit",
        "must be a whole number of bytes",
        id="quantity-milli",
    ),
    pytest.param(
        pinned(1.5),
        f"{MPS_LIMITS}.defaultPinnedDeviceMemoryLimit",
        'must be a quantity string such as "4Gi" or an integer number of bytes, got number 1.5',
        id="quantity-float",
    ),
    pytest.param(
        pinned(False),
        f"{MPS_LIMITS}.defaultPinnedDeviceMemoryLimit",
        "got boolean false",
        id="quantity-boolean",
    ),
    pytest.param(
        pinned({"value": 1}),
        f"{MPS_LIMITS}.defaultPinnedDeviceMemoryLimit",
        "got an object",
        id="quantity-object",
    ),
    pytest.param(
        pinned("1e400"),
        f"{MPS_LIMITS}.defaultPinnedDeviceMemoryLimit",
        'exponent in "1e400" is out of range',
        id="quantity-huge-exponent",
    ),
    pytest.param(
        per_device({"gpu0": "1Gi"}),
        f'{PER_DEVICE}["gpu0"]',
        f'key "gpu0" {NOT_A_DEVICE}',
        id="device-key-name",
    ),
    pytest.param(
        per_device({"01": "1Gi"}),
        f'{PER_DEVICE}["01"]',
        f'key "01" {NOT_A_DEVICE}',
        id="device-key-leading-zero",
    ),
    pytest.param(
        per_device({"-1": "1Gi"}),
        f'{PER_DEVICE}["-1"]',
        f'key "-1" {NOT_A_DEVICE}',
        id="device-key-negative",
    ),
    pytest.param(
        per_device({"GPU-xyz": "1Gi"}),
        f'{PER_DEVICE}["GPU-xyz"]',
        f'key "GPU-xyz" {NOT_A_DEVICE}',
        id="device-key-not-hex",
    ),
    pytest.param(
        per_device({"gpu-8f6b0c2e": "1Gi"}),
        f'{PER_DEVICE}["gpu-8f6b0c2e"]',
        NOT_A_DEVICE,
        id="device-key-lower-case-prefix",
    ),
    pytest.param(
        per_device({"GPU-": "1Gi"}),
        f'{PER_DEVICE}["GPU-"]',
        NOT_A_DEVICE,
        id="device-key-empty-uuid",
    ),
    pytest.param(
        per_device({"0": "1.5"}),
        f'{PER_DEVICE}["0"]',
        'must be a whole number of bytes, got "1.5"',
        id="per-device-fractional",
    ),
    pytest.param(
        per_device({"1": None}),
        f'{PER_DEVICE}["1"]',
        "got null",
        id="per-device-null",
    ),
    pytest.param(
        per_device(["0", "1Gi"]),
        PER_DEVICE,
        "must be an object, got an array",
        id="per-device-array",
    ),
    # --- MIG --------------------------------------------------------------
    pytest.param(
        mig({"strategy": "TimeSlicing"}),
        "sharing.strategy",
        "TimeSlicing does not apply to MIG devices; use MPS",
        id="mig-time-slicing",
    ),
    pytest.param(
        mig({"strategy": "MPS", "timeSlicingConfig": {}}),
        "sharing.timeSlicingConfig",
        "time-slicing does not apply to MIG devices, so timeSlicingConfig is not allowed",
        id="mig-time-slicing-config",
    ),
    pytest.param(
        mig({"strategy": "MPS", "mpsConfig": {"defaultActiveThreadPercentage": 101}}),
        "sharing.mpsConfig.defaultActiveThreadPercentage",
        "must be between 0 and 100, got 101",
        id="mig-percentage",
    ),
    pytest.param(
        mig({"strategy": "Shared"}),
        "sharing.strategy",
        'must be one of "MPS", got string "Shared"',
        id="mig-strategy-unknown",
    ),
    # --- lending ----------------------------------------------------------
    pytest.param(
        {"apiVersion": API_VERSION, "kind": "MigDeviceConfig", "lending": "Never"},
        "lending",
        "MIG devices cannot be lent (a GPU in MIG mode lends nothing), so lending is not "
        "allowed in MigDeviceConfig; remove it",
        id="mig-lending",
    ),
    pytest.param(
        {"apiVersion": API_VERSION, "kind": "GpuConfig", "lending": "Sometimes"},
        "lending",
        'must be one of "Allowed", "Never", got string "Sometimes"',
        id="lending-unknown",
    ),
    pytest.param(
        {"apiVersion": API_VERSION, "kind": "GpuConfig", "lending": False},
        "lending",
        'must be one of "Allowed", "Never", got boolean false',
        id="lending-boolean",
    ),
    # --- the parameters object itself ---------------------------------------
    pytest.param([], "parameters", "must be a JSON object, got an array", id="not-an-object"),
    pytest.param(None, "parameters", "must be a JSON object, got null", id="none"),
    pytest.param(
        '"GpuConfig"',
        "parameters",
        'must be a JSON object, got string "GpuConfig"',
        id="json-string",
    ),
    pytest.param("{kind: GpuConfig}", "parameters", "is not valid JSON", id="json-syntax"),
    pytest.param(b"\xff\xfe", "parameters", "is not UTF-8 text", id="json-not-utf8"),
    pytest.param(
        '{"kind": "GpuConfig", "kind": "MigDeviceConfig"}',
        "parameters",
        'has the key "kind" twice in one object',
        id="json-duplicate-key",
    ),
    pytest.param(
        '{"apiVersion": "x", "kind": "GpuConfig", "n": NaN}',
        "parameters",
        "contains NaN, which is not valid JSON",
        id="json-nan",
    ),
    pytest.param(
        {"apiVersion": API_VERSION, "kind": "GpuConfig", 1: "x"},
        "parameters",
        "has a non-string key 1",
        id="mapping-int-key",
    ),
    pytest.param(
        mps(defaultActiveThreadPercentage=math.inf),
        "parameters.sharing.mpsConfig.defaultActiveThreadPercentage",
        "is inf, which JSON cannot represent",
        id="mapping-infinity",
    ),
    pytest.param(
        mps(defaultActiveThreadPercentage={1, 2}),
        "parameters.sharing.mpsConfig.defaultActiveThreadPercentage",
        "holds a value of Python type set, which is not JSON",
        id="mapping-set",
    ),
    pytest.param(
        {"apiVersion": API_VERSION, "kind": "GpuConfig", "pad": "x" * 10240},
        "parameters",
        "more than the limit of 10240 bytes",
        id="too-large-mapping",
    ),
    pytest.param(
        LARGE_TEXT,
        "parameters",
        f"is {len(LARGE_TEXT)} bytes of JSON, more than the limit of 10240 bytes",
        id="too-large-text",
    ),
    pytest.param(
        # 6000 characters but 12000 bytes: the limit is on bytes.
        {"apiVersion": API_VERSION, "kind": "GpuConfig", "pad": "\u00e9" * 6000},
        "parameters",
        "more than the limit of 10240 bytes",
        id="too-large-in-utf8",
    ),
]


@pytest.mark.parametrize(("parameters", "field", "fragment"), BAD_INPUTS)
def test_bad_input_is_reported_precisely(parameters: Any, field: str, fragment: str) -> None:
    with pytest.raises(ConfigError) as caught:
        decode_config(parameters)
    error = caught.value
    assert error.field == field
    assert fragment in str(error)
    assert str(error).startswith(f"{field}: ")
    assert isinstance(error, ValueError)


def test_there_are_plenty_of_distinct_cases() -> None:
    ids = [case.id for case in BAD_INPUTS]
    assert len(set(ids)) == len(ids) >= 30


def test_all_problems_are_reported_together() -> None:
    parameters: Parameters = gpu(
        {
            "strategy": "MPS",
            "mpsConfig": {
                "defaultActiveThreadPercentage": 150,
                "defaultPinnedDeviceMemoryLimit": "12XB",
                "defaultPerDevicePinnedMemoryLimit": {"x": "1Gi"},
                "extra": True,
            },
        }
    )
    with pytest.raises(ConfigError) as caught:
        decode_config(parameters)
    error = caught.value
    fields = [problem.field for problem in error.problems]
    assert fields == [
        f"{MPS_LIMITS}.defaultActiveThreadPercentage",
        f"{MPS_LIMITS}.defaultPinnedDeviceMemoryLimit",
        f'{PER_DEVICE}["x"]',
        f"{MPS_LIMITS}.extra",
    ]
    assert error.field == fields[0]
    assert str(error) == "; ".join(problem.message for problem in error.problems)
    assert str(error).startswith(
        "sharing.mpsConfig.defaultActiveThreadPercentage: must be between 0 and 100, got 150; "
    )


def test_envelope_and_body_problems_are_reported_together() -> None:
    with pytest.raises(ConfigError) as caught:
        decode_config({"apiVersion": "v1", "kind": "GpuConfig", "sharing": {"strategy": "X"}})
    assert [p.field for p in caught.value.problems] == ["apiVersion", "sharing.strategy"]


def test_unknown_kind_and_version_are_both_reported() -> None:
    with pytest.raises(ConfigError) as caught:
        decode_config({"apiVersion": "v1", "kind": "Nope", "whatever": 1})
    assert [p.field for p in caught.value.problems] == ["apiVersion", "kind"]


def test_long_values_are_shortened_in_messages() -> None:
    with pytest.raises(ConfigError) as caught:
        decode_config(mps(defaultActiveThreadPercentage="9" * 500))
    assert "..." in str(caught.value)
    assert len(str(caught.value)) < 200
