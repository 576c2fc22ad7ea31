"""Which config entry wins for each allocated device."""

from __future__ import annotations

from typing import Any

import pytest

from api import (
    API_VERSION,
    AllocatedDevice,
    ConfigError,
    ConfigOrigin,
    ConfigSource,
    DeviceType,
    GpuConfig,
    GpuSharing,
    Lending,
    MigDeviceConfig,
    SharingStrategy,
    TimeSliceInterval,
    decode_config,
    default_config_for,
    resolve_device_configs,
)
from api.precedence import request_covers

DRIVER = "gpu.dra-driver.dev"

GPU = AllocatedDevice("whole", "gpu-0", DeviceType.GPU)
MIG = AllocatedDevice("mig-req", "gpu-0-mig-1g10gb-6", DeviceType.MIG)
SLICED = AllocatedDevice("sliced", "gpu-1-ts-2", DeviceType.TIMESLICE)
SHARED = AllocatedDevice("frac", "gpu-2-share-3", DeviceType.SHARED)
LENT = AllocatedDevice("borrow", "gpu-3-lent", DeviceType.OPPORTUNISTIC)
ALL = [GPU, MIG, SLICED, SHARED]


def time_slicing(interval: str = "Default") -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": "GpuConfig",
        "sharing": {"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": interval}},
    }


def mps(percentage: int | None = None, pinned: str | None = None) -> dict[str, Any]:
    limits: dict[str, Any] = {}
    if percentage is not None:
        limits["defaultActiveThreadPercentage"] = percentage
    if pinned is not None:
        limits["defaultPinnedDeviceMemoryLimit"] = pinned
    return {
        "apiVersion": API_VERSION,
        "kind": "GpuConfig",
        "sharing": {"strategy": "MPS", "mpsConfig": limits},
    }


PLAIN_GPU = {"apiVersion": API_VERSION, "kind": "GpuConfig"}
MIG_MPS = {"apiVersion": API_VERSION, "kind": "MigDeviceConfig", "sharing": {"strategy": "MPS"}}


def entry(
    parameters: Any,
    source: str = "FromClaim",
    requests: list[str] | None = None,
    driver: str = DRIVER,
) -> dict[str, Any]:
    """A config entry shaped as the Kubernetes client returns it."""
    raw: dict[str, Any] = {
        "source": source,
        "opaque": {"driver": driver, "parameters": parameters},
    }
    if requests is not None:
        raw["requests"] = requests
    return raw


def resolve(entries: list[dict[str, Any]], devices: list[AllocatedDevice] | None = None) -> Any:
    return resolve_device_configs(entries, ALL if devices is None else devices, DRIVER)


def interval_of(config: GpuConfig | MigDeviceConfig) -> TimeSliceInterval:
    assert isinstance(config.sharing, GpuSharing)
    assert config.sharing.time_slicing_config is not None
    return config.sharing.time_slicing_config.interval


def test_no_entries_gives_every_device_its_default() -> None:
    resolved = resolve([])
    assert list(resolved) == ALL
    for device, result in resolved.items():
        assert result.config == default_config_for(device.device_type)
        assert result.origin is None


def test_class_entries_apply_before_claim_entries_whatever_the_order() -> None:
    resolved = resolve(
        [
            entry(time_slicing("Short"), "FromClaim", ["sliced"]),
            entry(time_slicing("Long"), "FromClass", ["sliced"]),
        ]
    )
    assert interval_of(resolved[SLICED].config) is TimeSliceInterval.SHORT
    assert resolved[SLICED].origin == ConfigOrigin(0, ConfigSource.FROM_CLAIM)


def test_class_entry_applies_when_claim_says_nothing_about_the_device() -> None:
    resolved = resolve(
        [
            entry(time_slicing("Short"), "FromClaim", ["whole"]),
            entry(time_slicing("Long"), "FromClass", []),
        ]
    )
    assert interval_of(resolved[SLICED].config) is TimeSliceInterval.LONG
    assert resolved[SLICED].origin == ConfigOrigin(1, ConfigSource.FROM_CLASS)
    assert interval_of(resolved[GPU].config) is TimeSliceInterval.SHORT


@pytest.mark.parametrize("source", ["FromClass", "FromClaim"])
def test_later_entry_of_the_same_source_wins(source: str) -> None:
    resolved = resolve(
        [
            entry(time_slicing("Short"), source, ["sliced"]),
            entry(time_slicing("Medium"), source, ["sliced"]),
        ]
    )
    assert interval_of(resolved[SLICED].config) is TimeSliceInterval.MEDIUM
    assert resolved[SLICED].origin == ConfigOrigin(1, ConfigSource(source))


def test_a_winning_entry_replaces_the_whole_object() -> None:
    resolved = resolve(
        [
            entry(mps(percentage=50), "FromClass", ["frac"]),
            entry(mps(pinned="1Gi"), "FromClaim", ["frac"]),
        ]
    )
    config = resolved[SHARED].config
    assert isinstance(config.sharing, GpuSharing)
    assert config.sharing.mps_config is not None
    assert config.sharing.mps_config.default_active_thread_percentage is None
    limit = config.sharing.mps_config.default_pinned_device_memory_limit
    assert limit is not None
    assert limit.num_bytes == 2**30


def test_entries_for_other_drivers_are_ignored_even_when_invalid() -> None:
    resolved = resolve(
        [
            entry({"anything": ["goes"]}, "FromClaim", [], driver="other.example.com"),
            entry(time_slicing("Long"), "FromClaim", ["sliced"], driver="gpu.nvidia.com"),
            {"source": "FromClaim", "requests": []},  # no opaque config at all
        ]
    )
    assert all(result.origin is None for result in resolved.values())


def test_gpu_config_for_all_requests_skips_mig_devices() -> None:
    resolved = resolve([entry(PLAIN_GPU, "FromClass", [])])
    assert resolved[GPU].origin == ConfigOrigin(0, ConfigSource.FROM_CLASS)
    assert resolved[SLICED].origin == ConfigOrigin(0, ConfigSource.FROM_CLASS)
    assert resolved[SHARED].origin == ConfigOrigin(0, ConfigSource.FROM_CLASS)
    assert resolved[MIG].origin is None
    assert resolved[MIG].config == MigDeviceConfig()


def test_mig_config_for_all_requests_applies_only_to_mig_devices() -> None:
    resolved = resolve([entry(MIG_MPS, "FromClaim")])  # "requests" left out
    assert resolved[MIG].origin == ConfigOrigin(0, ConfigSource.FROM_CLAIM)
    assert resolved[MIG].config == decode_config(MIG_MPS)
    for device in (GPU, SLICED, SHARED):
        assert resolved[device].origin is None


def test_null_requests_mean_all_requests() -> None:
    raw = entry(MIG_MPS, "FromClaim")
    raw["requests"] = None
    assert resolve([raw])[MIG].origin == ConfigOrigin(0, ConfigSource.FROM_CLAIM)


def test_strategies_for_all_requests_skip_devices_they_cannot_drive() -> None:
    resolved = resolve([entry(time_slicing("Long"), "FromClass"), entry(mps(percentage=10))])
    # TimeSlicing (class) reaches whole and time-sliced GPUs but not shared ones;
    # MPS (claim) then overrides the whole GPU and reaches the shared one, but
    # leaves the time-sliced device alone.
    assert resolved[SLICED].origin == ConfigOrigin(0, ConfigSource.FROM_CLASS)
    assert resolved[GPU].origin == ConfigOrigin(1, ConfigSource.FROM_CLAIM)
    assert resolved[SHARED].origin == ConfigOrigin(1, ConfigSource.FROM_CLAIM)
    assert resolved[MIG].origin is None


def test_naming_a_request_covers_its_subrequests() -> None:
    first = AllocatedDevice("gpus/big", "gpu-0", DeviceType.GPU)
    second = AllocatedDevice("gpus/small", "gpu-1", DeviceType.GPU)
    other = AllocatedDevice("gpus2", "gpu-2", DeviceType.GPU)
    resolved = resolve([entry(mps(), requests=["gpus"])], [first, second, other])
    assert resolved[first].origin is not None
    assert resolved[second].origin is not None
    assert resolved[other].origin is None


def test_naming_a_subrequest_covers_only_that_subrequest() -> None:
    big = AllocatedDevice("gpus/big", "gpu-0", DeviceType.GPU)
    small = AllocatedDevice("gpus/small", "gpu-1", DeviceType.GPU)
    resolved = resolve([entry(mps(), requests=["gpus/small"])], [big, small])
    assert resolved[big].origin is None
    assert resolved[small].origin is not None


@pytest.mark.parametrize(
    ("named", "allocated", "covers"),
    [
        ("req", "req", True),
        ("req", "req/sub", True),
        ("req/sub", "req/sub", True),
        ("req/sub", "req", False),
        ("req/sub", "req/other", False),
        ("re", "req", False),
        ("req", "request/sub", False),
    ],
)
def test_request_covers(named: str, allocated: str, covers: bool) -> None:
    assert request_covers(named, allocated) is covers


def test_requests_of_other_drivers_are_not_an_error() -> None:
    resolved = resolve([entry(MIG_MPS, requests=["network-card"])])
    assert all(result.origin is None for result in resolved.values())


def test_naming_a_mig_request_in_a_gpu_config_is_an_error() -> None:
    with pytest.raises(ConfigError) as caught:
        resolve(
            [
                entry(PLAIN_GPU, "FromClass"),
                entry(mps(), "FromClaim"),
                entry(time_slicing(), "FromClaim", ["mig-req"]),
            ]
        )
    assert caught.value.field == "config[2].requests"
    assert str(caught.value) == (
        'config entry 2 (FromClaim) names request "mig-req", which was allocated MIG device '
        '"gpu-0-mig-1g10gb-6"; GpuConfig does not apply to MIG devices, use MigDeviceConfig'
    )


def test_naming_a_gpu_request_in_a_mig_config_is_an_error() -> None:
    with pytest.raises(ConfigError) as caught:
        resolve([entry(MIG_MPS, "FromClass", ["whole"])])
    assert caught.value.field == "config[0].requests"
    assert str(caught.value) == (
        'config entry 0 (FromClass) names request "whole", which was allocated GPU device '
        '"gpu-0"; MigDeviceConfig does not apply to GPU devices, use GpuConfig'
    )


def test_subrequest_with_a_mig_device_is_reported_under_the_named_request() -> None:
    device = AllocatedDevice("any/mig", "gpu-3-mig-2g20gb-0", DeviceType.MIG)
    with pytest.raises(ConfigError) as caught:
        resolve([entry(PLAIN_GPU, requests=["any"])], [device])
    assert 'names request "any", which was allocated MIG device "gpu-3-mig-2g20gb-0"' in str(
        caught.value
    )


def test_time_slicing_a_shared_device_by_name_is_an_error() -> None:
    with pytest.raises(ConfigError) as caught:
        resolve([entry(time_slicing(), requests=["frac"])])
    assert caught.value.field == "config[0].requests"
    message = str(caught.value)
    assert 'names request "frac", which was allocated shared GPU device "gpu-2-share-3"' in message
    assert "strategy TimeSlicing cannot apply to shared GPU devices" in message
    assert "enforced with MPS" in message


def test_mps_on_a_time_sliced_device_by_name_is_an_error() -> None:
    with pytest.raises(ConfigError) as caught:
        resolve([entry(mps(), requests=["sliced"])])
    assert caught.value.field == "config[0].requests"
    message = str(caught.value)
    assert 'which was allocated time-sliced GPU device "gpu-1-ts-2"' in message
    assert "strategy MPS cannot apply to time-sliced GPU devices; use strategy TimeSlicing" in (
        message
    )


NEVER_LEND = {**PLAIN_GPU, "lending": "Never"}


def test_an_owner_refusing_to_lend_keeps_the_choice_on_every_owner_device() -> None:
    resolved = resolve([entry(NEVER_LEND)], [GPU, SLICED, SHARED])
    for device in (GPU, SLICED, SHARED):
        config = resolved[device].config
        assert isinstance(config, GpuConfig)
        assert config.lending is Lending.NEVER


@pytest.mark.parametrize("lending", ["Never", "Allowed"])
def test_lending_on_a_borrowers_device_by_name_is_an_error(lending: str) -> None:
    with pytest.raises(ConfigError) as caught:
        resolve([entry({**PLAIN_GPU, "lending": lending}, requests=["borrow"])], [GPU, LENT])
    assert caught.value.field == "config[0].requests"
    assert str(caught.value) == (
        'config entry 0 (FromClaim) names request "borrow", which was allocated lent GPU '
        f'device "gpu-3-lent"; lending {lending} cannot apply to lent GPU devices: a borrower '
        "holds a share of another owner's GPU and has nothing of its own to lend or refuse; "
        "remove lending, or leave this request out of the entry"
    )


def test_lending_for_all_requests_passes_over_a_borrowers_device() -> None:
    # As with any entry for all requests, it speaks only to the devices it can describe: the
    # owner's GPU refuses to lend, the borrower's device keeps its default.
    resolved = resolve([entry(NEVER_LEND)], [GPU, LENT])
    assert resolved[GPU].config == decode_config(NEVER_LEND)
    assert resolved[LENT].config == default_config_for(DeviceType.OPPORTUNISTIC)
    assert resolved[LENT].origin is None


def test_both_strategies_are_fine_on_whole_gpus() -> None:
    for parameters in (time_slicing("Long"), mps(percentage=30)):
        resolved = resolve([entry(parameters, requests=["whole"])])
        assert resolved[GPU].config == decode_config(parameters)


def test_invalid_parameters_name_the_entry_and_keep_the_decode_message() -> None:
    bad = mps(percentage=150)
    with pytest.raises(ConfigError) as caught:
        resolve([entry(PLAIN_GPU, "FromClaim"), entry(bad, "FromClass", ["frac"])])
    error = caught.value
    assert (
        error.field == "config[1].opaque.parameters.sharing.mpsConfig.defaultActiveThreadPercentage"
    )
    assert str(error) == (
        "config entry 1 (FromClass) has invalid parameters: "
        "sharing.mpsConfig.defaultActiveThreadPercentage: must be between 0 and 100, got 150"
    )


def test_invalid_parameters_are_reported_even_if_they_would_apply_to_nothing() -> None:
    with pytest.raises(ConfigError) as caught:
        resolve([entry({"kind": "GpuConfig"}, requests=["not-allocated"])], [])
    assert caught.value.field == "config[0].opaque.parameters.apiVersion"


def test_missing_parameters_are_reported() -> None:
    raw = {"source": "FromClaim", "opaque": {"driver": DRIVER}}
    with pytest.raises(ConfigError) as caught:
        resolve([raw])
    assert caught.value.field == "config[0].opaque.parameters"
    assert "must be a JSON object, got null" in str(caught.value)


def test_every_problem_of_every_entry_is_reported() -> None:
    with pytest.raises(ConfigError) as caught:
        resolve(
            [
                entry(mps(percentage=101, pinned="1.5"), "FromClass"),
                entry(PLAIN_GPU, "FromClaim", ["mig-req"]),
                entry(MIG_MPS, "FromClaim", ["whole", "sliced"]),
            ]
        )
    assert [p.field for p in caught.value.problems] == [
        "config[0].opaque.parameters.sharing.mpsConfig.defaultActiveThreadPercentage",
        "config[0].opaque.parameters.sharing.mpsConfig.defaultPinnedDeviceMemoryLimit",
        "config[1].requests",
        "config[2].requests",
        "config[2].requests",
    ]


@pytest.mark.parametrize(
    ("raw", "field", "fragment"),
    [
        (
            {"source": "FromDriver", "opaque": {"driver": DRIVER, "parameters": PLAIN_GPU}},
            "config[0].source",
            'must be one of "FromClass", "FromClaim", got string "FromDriver"',
        ),
        (
            {
                "source": "FromClaim",
                "requests": "whole",
                "opaque": {"driver": DRIVER, "parameters": PLAIN_GPU},
            },
            "config[0].requests",
            'must be a list of request names, got string "whole"',
        ),
        ("not-an-entry", "config[0]", 'must be an object, got string "not-an-entry"'),
    ],
)
def test_malformed_entries(raw: Any, field: str, fragment: str) -> None:
    with pytest.raises(ConfigError) as caught:
        resolve([raw])
    assert caught.value.field == field
    assert fragment in str(caught.value)


def test_parameters_may_be_json_text() -> None:
    import json

    resolved = resolve([entry(json.dumps(time_slicing("Long")), requests=["sliced"])])
    assert interval_of(resolved[SLICED].config) is TimeSliceInterval.LONG


def test_defaults_follow_the_device_type() -> None:
    resolved = resolve([])
    assert resolved[SLICED].config == GpuConfig(
        sharing=GpuSharing(strategy=SharingStrategy.TIME_SLICING)
    )
    assert resolved[SHARED].config == GpuConfig(sharing=GpuSharing(strategy=SharingStrategy.MPS))
    assert resolved[GPU].config == GpuConfig()
    assert resolved[MIG].config == MigDeviceConfig()


def test_driver_name_is_an_argument() -> None:
    raw = entry(time_slicing("Long"), requests=["sliced"], driver="gpu.example.org")
    assert resolve([raw])[SLICED].origin is None
    resolved = resolve_device_configs([raw], [SLICED], "gpu.example.org")
    assert interval_of(resolved[SLICED].config) is TimeSliceInterval.LONG
