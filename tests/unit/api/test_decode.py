"""Decoding well-formed parameters, defaults, and the encode/decode pair."""

from __future__ import annotations

import json
from types import MappingProxyType
from typing import Any, get_args

import pytest

from api import (
    API_GROUP,
    API_VERSION,
    ByteQuantity,
    DeviceType,
    GpuConfig,
    GpuSharing,
    Lending,
    MigDeviceConfig,
    MigSharing,
    MpsConfig,
    SharingStrategy,
    TimeSliceInterval,
    TimeSlicingConfig,
    decode_config,
    default_config_for,
    encode_config,
)
from api.v1alpha1.types import ApiVersion


def test_version_constants_agree_with_the_models() -> None:
    assert API_GROUP == "resource.dra-driver.dev"
    assert API_VERSION == "resource.dra-driver.dev/v1alpha1"
    assert get_args(ApiVersion) == (API_VERSION,)
    assert GpuConfig().api_version == API_VERSION
    assert MigDeviceConfig().api_version == API_VERSION


def test_minimal_gpu_config_has_no_sharing() -> None:
    config = decode_config({"apiVersion": API_VERSION, "kind": "GpuConfig"})
    assert config == GpuConfig()
    assert config.sharing is None


def test_null_sharing_means_unset() -> None:
    config = decode_config({"apiVersion": API_VERSION, "kind": "GpuConfig", "sharing": None})
    assert config == GpuConfig()


@pytest.mark.parametrize("lending", list(Lending))
def test_an_owner_states_whether_its_gpu_may_be_lent(lending: Lending) -> None:
    parameters = {"apiVersion": API_VERSION, "kind": "GpuConfig", "lending": lending.value}
    config = decode_config(parameters)
    assert config == GpuConfig(lending=lending)
    assert encode_config(config) == parameters


def test_lending_left_out_is_unset_and_not_written() -> None:
    config = decode_config({"apiVersion": API_VERSION, "kind": "GpuConfig"})
    assert isinstance(config, GpuConfig)
    assert config.lending is None
    assert "lending" not in encode_config(config)


def test_full_mps_gpu_config() -> None:
    config = decode_config(
        {
            "apiVersion": API_VERSION,
            "kind": "GpuConfig",
            "sharing": {
                "strategy": "MPS",
                "mpsConfig": {
                    "defaultActiveThreadPercentage": 50,
                    "defaultPinnedDeviceMemoryLimit": "1.5Gi",
                    "defaultPerDevicePinnedMemoryLimit": {
                        "0": 1024,
                        "GPU-8f6b0c2e-7f5b-2f3b-9f5a-1c2d3e4f5a6b": "2Gi",
                        "MIG-4a3b2c1d-0000-1111-2222-abcdefabcdef": "512Mi",
                    },
                },
            },
        }
    )
    assert isinstance(config, GpuConfig)
    assert config.sharing is not None
    mps = config.sharing.mps_config
    assert mps is not None
    assert mps.default_active_thread_percentage == 50
    assert mps.default_pinned_device_memory_limit == ByteQuantity("1.5Gi", 1610612736)
    assert mps.default_per_device_pinned_memory_limit == {
        "0": ByteQuantity("1024", 1024),
        "GPU-8f6b0c2e-7f5b-2f3b-9f5a-1c2d3e4f5a6b": ByteQuantity("2Gi", 2 * 2**30),
        "MIG-4a3b2c1d-0000-1111-2222-abcdefabcdef": ByteQuantity("512Mi", 512 * 2**20),
    }


@pytest.mark.parametrize("interval", list(TimeSliceInterval))
def test_time_slicing_intervals(interval: TimeSliceInterval) -> None:
    config = decode_config(
        {
            "apiVersion": API_VERSION,
            "kind": "GpuConfig",
            "sharing": {"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": interval}},
        }
    )
    assert config.sharing is not None
    assert isinstance(config.sharing, GpuSharing)
    assert config.sharing.time_slicing_config == TimeSlicingConfig(interval=interval)


def test_time_slicing_without_settings_gets_default_interval() -> None:
    config = decode_config(
        {"apiVersion": API_VERSION, "kind": "GpuConfig", "sharing": {"strategy": "TimeSlicing"}}
    )
    assert isinstance(config.sharing, GpuSharing)
    assert config.sharing.time_slicing_config == TimeSlicingConfig(
        interval=TimeSliceInterval.DEFAULT
    )
    assert config.sharing.mps_config is None


def test_empty_time_slicing_settings_get_default_interval() -> None:
    config = decode_config(
        {
            "apiVersion": API_VERSION,
            "kind": "GpuConfig",
            "sharing": {"strategy": "TimeSlicing", "timeSlicingConfig": {}},
        }
    )
    assert isinstance(config.sharing, GpuSharing)
    assert config.sharing.time_slicing_config == TimeSlicingConfig()


@pytest.mark.parametrize("kind", ["GpuConfig", "MigDeviceConfig"])
def test_mps_without_settings_gets_empty_mps_config(kind: str) -> None:
    config = decode_config(
        {"apiVersion": API_VERSION, "kind": kind, "sharing": {"strategy": "MPS"}}
    )
    assert config.sharing is not None
    assert config.sharing.mps_config == MpsConfig()
    assert config.sharing.strategy is SharingStrategy.MPS


def test_mig_device_config_with_mps() -> None:
    config = decode_config(
        {
            "apiVersion": API_VERSION,
            "kind": "MigDeviceConfig",
            "sharing": {"strategy": "MPS", "mpsConfig": {"defaultActiveThreadPercentage": 0}},
        }
    )
    assert config == MigDeviceConfig(
        sharing=MigSharing(
            strategy=SharingStrategy.MPS,
            mps_config=MpsConfig(default_active_thread_percentage=0),
        )
    )


def test_python_constructors_apply_the_same_defaults() -> None:
    time_sliced = GpuSharing(strategy=SharingStrategy.TIME_SLICING)
    assert time_sliced.time_slicing_config == TimeSlicingConfig()
    assert GpuSharing(strategy=SharingStrategy.MPS).mps_config == MpsConfig()


def test_models_are_frozen() -> None:
    config = GpuConfig()
    with pytest.raises(ValueError, match="frozen"):
        config.sharing = None  # type: ignore[misc]


DOCUMENT: dict[str, Any] = {
    "apiVersion": API_VERSION,
    "kind": "GpuConfig",
    "sharing": {
        "strategy": "MPS",
        "mpsConfig": {
            "defaultActiveThreadPercentage": 20,
            "defaultPerDevicePinnedMemoryLimit": {"1": "1Gi"},
        },
    },
}


def test_mapping_json_text_and_bytes_decode_alike() -> None:
    from_mapping = decode_config(DOCUMENT)
    assert decode_config(json.dumps(DOCUMENT)) == from_mapping
    assert decode_config(json.dumps(DOCUMENT, indent=4).encode()) == from_mapping
    assert decode_config(bytearray(json.dumps(DOCUMENT).encode())) == from_mapping


def test_any_mapping_type_is_accepted() -> None:
    frozen = MappingProxyType({**DOCUMENT, "sharing": MappingProxyType(DOCUMENT["sharing"])})
    assert decode_config(frozen) == decode_config(DOCUMENT)


def test_exactly_the_size_limit_is_allowed() -> None:
    document: dict[str, Any] = {
        "apiVersion": API_VERSION,
        "kind": "GpuConfig",
        "sharing": {
            "strategy": "MPS",
            "mpsConfig": {"defaultPinnedDeviceMemoryLimit": "1"},
        },
    }
    base = len(json.dumps(document, separators=(",", ":")))
    # Pad the quantity with leading zeros to land exactly on 10 KiB.
    document["sharing"]["mpsConfig"]["defaultPinnedDeviceMemoryLimit"] = "0" * (10240 - base) + "1"
    assert len(json.dumps(document, separators=(",", ":"))) == 10240
    config = decode_config(document)
    assert isinstance(config.sharing, GpuSharing)
    assert config.sharing.mps_config is not None
    limit = config.sharing.mps_config.default_pinned_device_memory_limit
    assert limit is not None
    assert limit.num_bytes == 1


def test_encode_uses_camel_case_and_leaves_out_unset_fields() -> None:
    config = decode_config(DOCUMENT)
    assert encode_config(config) == DOCUMENT
    assert encode_config(GpuConfig()) == {"apiVersion": API_VERSION, "kind": "GpuConfig"}


def test_encode_writes_quantities_as_given() -> None:
    document = {
        "apiVersion": API_VERSION,
        "kind": "MigDeviceConfig",
        "sharing": {"strategy": "MPS", "mpsConfig": {"defaultPinnedDeviceMemoryLimit": "1.5e9"}},
    }
    assert encode_config(decode_config(document)) == document


def test_integer_quantities_come_back_as_decimal_strings() -> None:
    document = {
        "apiVersion": API_VERSION,
        "kind": "GpuConfig",
        "sharing": {"strategy": "MPS", "mpsConfig": {"defaultPinnedDeviceMemoryLimit": 4096}},
    }
    encoded = encode_config(decode_config(document))
    assert encoded["sharing"]["mpsConfig"]["defaultPinnedDeviceMemoryLimit"] == "4096"
    assert decode_config(encoded) == decode_config(document)


@pytest.mark.parametrize(
    ("device_type", "expected"),
    [
        (DeviceType.GPU, GpuConfig()),
        (DeviceType.MIG, MigDeviceConfig()),
        (
            DeviceType.TIMESLICE,
            GpuConfig(
                sharing=GpuSharing(
                    strategy=SharingStrategy.TIME_SLICING,
                    time_slicing_config=TimeSlicingConfig(interval=TimeSliceInterval.DEFAULT),
                )
            ),
        ),
        (
            DeviceType.SHARED,
            GpuConfig(sharing=GpuSharing(strategy=SharingStrategy.MPS, mps_config=MpsConfig())),
        ),
    ],
)
def test_default_config_for_each_device_type(
    device_type: DeviceType, expected: GpuConfig | MigDeviceConfig
) -> None:
    assert default_config_for(device_type) == expected
