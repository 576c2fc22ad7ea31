"""Readable names for NVML enums and versions."""

from __future__ import annotations

import pynvml
import pytest

from dra_driver.backends.nvml.names import (
    architecture_name,
    brand_name,
    cuda_version,
    derive_profile_name,
    multiprocessors_from_cores,
    profile_name_from_nvml,
)
from dra_driver.inventory.products import known_products


@pytest.mark.parametrize(
    ("brand", "name"),
    [
        (pynvml.NVML_BRAND_NVIDIA, "Nvidia"),
        (pynvml.NVML_BRAND_TESLA, "Tesla"),
        (pynvml.NVML_BRAND_QUADRO, "Quadro"),
        (pynvml.NVML_BRAND_GEFORCE, "GeForce"),
        (pynvml.NVML_BRAND_NVIDIA_RTX, "NvidiaRTX"),
        (pynvml.NVML_BRAND_UNKNOWN, "Unknown"),
        (999, "Unknown"),
    ],
)
def test_brand_name(brand: int, name: str) -> None:
    assert brand_name(brand) == name


@pytest.mark.parametrize(
    ("architecture", "name"),
    [
        (pynvml.NVML_DEVICE_ARCH_VOLTA, "Volta"),
        (pynvml.NVML_DEVICE_ARCH_AMPERE, "Ampere"),
        (pynvml.NVML_DEVICE_ARCH_ADA, "Ada Lovelace"),
        (pynvml.NVML_DEVICE_ARCH_HOPPER, "Hopper"),
        (pynvml.NVML_DEVICE_ARCH_BLACKWELL, "Blackwell"),
        (pynvml.NVML_DEVICE_ARCH_UNKNOWN, "Unknown"),
        (pynvml.NVML_DEVICE_ARCH_DLA, "Unknown"),
    ],
)
def test_architecture_name(architecture: int, name: str) -> None:
    assert architecture_name(architecture) == name


@pytest.mark.parametrize(
    ("encoded", "text"), [(12040, "12.4"), (12080, "12.8"), (13000, "13.0"), (11080, "11.8")]
)
def test_cuda_version(encoded: int, text: str) -> None:
    assert cuda_version(encoded) == text


def test_multiprocessors_from_cores() -> None:
    assert multiprocessors_from_cores(16896, (9, 0)) == 132  # H100 SXM
    assert multiprocessors_from_cores(6912, (8, 0)) == 108  # A100
    assert multiprocessors_from_cores(1000, (99, 0)) == 0
    assert multiprocessors_from_cores(0, (9, 0)) == 0


def test_profile_name_from_nvml() -> None:
    assert profile_name_from_nvml("MIG 1g.10gb+me") == "1g.10gb+me"
    assert profile_name_from_nvml("3g.40gb") == "3g.40gb"


def test_derived_names_match_every_known_profile() -> None:
    """The fallback naming rule reproduces NVML's names for every GPU in the hardware facts."""
    for facts in known_products().values():
        for profile in facts.mig_profiles:
            derived = derive_profile_name(
                profile.profile_index, profile.slice_count, profile.memory_mib, facts.memory_mib
            )
            assert derived == profile.name, (facts.key, profile.name)
