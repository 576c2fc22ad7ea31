"""Property: whatever valid config the models can hold survives the wire."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from api import (
    ByteQuantity,
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
    encode_config,
    parse_byte_quantity,
)

_SUFFIXES = ["", "Ki", "Mi", "Gi", "Ti", "k", "M", "G"]

byte_quantities = st.one_of(
    st.integers(min_value=0, max_value=2**62).map(ByteQuantity.of),
    st.builds(
        lambda whole, suffix: parse_byte_quantity(f"{whole}{suffix}"),
        st.integers(min_value=0, max_value=10**6),
        st.sampled_from(_SUFFIXES),
    ),
    st.builds(
        lambda halves, suffix: parse_byte_quantity(f"{halves / 2}{suffix}"),
        st.integers(min_value=0, max_value=4096),
        st.sampled_from(["Ki", "Mi", "Gi"]),
    ),
)

_hex = st.text(alphabet="0123456789abcdefABCDEF", min_size=1, max_size=12)
device_keys = st.one_of(
    st.integers(min_value=0, max_value=255).map(str),
    st.builds(
        lambda prefix, groups: f"{prefix}-{'-'.join(groups)}",
        st.sampled_from(["GPU", "MIG"]),
        st.lists(_hex, min_size=1, max_size=5),
    ),
)

mps_configs = st.builds(
    MpsConfig,
    default_active_thread_percentage=st.none() | st.integers(min_value=0, max_value=100),
    default_pinned_device_memory_limit=st.none() | byte_quantities,
    default_per_device_pinned_memory_limit=st.none()
    | st.dictionaries(device_keys, byte_quantities, max_size=6),
)

gpu_sharing = st.one_of(
    st.builds(
        GpuSharing,
        strategy=st.just(SharingStrategy.TIME_SLICING),
        time_slicing_config=st.none()
        | st.builds(TimeSlicingConfig, interval=st.sampled_from(TimeSliceInterval)),
    ),
    st.builds(
        GpuSharing,
        strategy=st.just(SharingStrategy.MPS),
        mps_config=st.none() | mps_configs,
    ),
)

gpu_configs = st.builds(
    GpuConfig, sharing=st.none() | gpu_sharing, lending=st.none() | st.sampled_from(Lending)
)
mig_configs = st.builds(
    MigDeviceConfig,
    sharing=st.none()
    | st.builds(MigSharing, strategy=st.just(SharingStrategy.MPS), mps_config=mps_configs),
)


@settings(max_examples=300)
@given(gpu_configs)
def test_gpu_config_round_trips(config: GpuConfig) -> None:
    wire = config.model_dump(by_alias=True, exclude_none=True, mode="json")
    assert wire == encode_config(config)
    assert decode_config(wire) == config
    assert decode_config(json.dumps(wire)) == config


@given(mig_configs)
def test_mig_device_config_round_trips(config: MigDeviceConfig) -> None:
    assert decode_config(encode_config(config)) == config
