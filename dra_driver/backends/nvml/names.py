"""Readable names for NVML's numeric answers.

Attributes published in ResourceSlices are matched by CEL expressions people write by hand, so
they must be words ("Hopper", "Nvidia") rather than enum values, and they must not change when
NVML adds enum members. Unknown values therefore map to "Unknown" instead of failing.
"""

from __future__ import annotations

import math

# nvmlBrandType_t in CamelCase (NVML_BRAND_NVIDIA_VWS is NvidiaVWS). 17 (DLA) is not a GPU.
_BRANDS: dict[int, str] = {
    0: "Unknown",
    1: "Quadro",
    2: "Tesla",
    3: "NVS",
    4: "Grid",
    5: "GeForce",
    6: "Titan",
    7: "NvidiaVApps",
    8: "NvidiaVPC",
    9: "NvidiaVCS",
    10: "NvidiaVWS",
    11: "NvidiaCloudGaming",
    12: "QuadroRTX",
    13: "NvidiaRTX",
    14: "Nvidia",
    15: "GeForceRTX",
    16: "TitanRTX",
    18: "NvidiaVGameDev",
}

# nvmlDeviceArchitecture_t. DLA/NPU values are not GPUs and fall through to "Unknown".
_ARCHITECTURES: dict[int, str] = {
    2: "Kepler",
    3: "Maxwell",
    4: "Pascal",
    5: "Volta",
    6: "Turing",
    7: "Ampere",
    8: "Ada Lovelace",
    9: "Hopper",
    10: "Blackwell",
    13: "Rubin",
}

# FP32 cores per SM by compute capability, for GPUs where NVML only reports the core count.
# (Same table as CUDA samples' _ConvertSMVer2Cores.)
_CORES_PER_SM: dict[tuple[int, int], int] = {
    (6, 0): 64,
    (6, 1): 128,
    (6, 2): 128,
    (7, 0): 64,
    (7, 2): 64,
    (7, 5): 64,
    (8, 0): 64,
    (8, 6): 128,
    (8, 7): 128,
    (8, 9): 128,
    (9, 0): 128,
    (10, 0): 128,
    (10, 1): 128,
    (10, 3): 128,
    (11, 0): 128,
    (12, 0): 128,
    (12, 1): 128,
}

# Name suffixes NVML gives GPU-instance profile variants, by NVML_GPU_INSTANCE_PROFILE_* index.
_PROFILE_SUFFIX: dict[int, str] = {
    7: "+me",  # 1_SLICE_REV1
    8: "+me",  # 2_SLICE_REV1
    10: "+gfx",
    11: "+gfx",
    12: "+gfx",
    13: "-me",  # NO_ME
    14: "-me",
    15: "+me.all",  # ALL_ME
    16: "+me.all",
    17: "+gfx",
}

MIG_NAME_PREFIX = "MIG "


def brand_name(brand: int) -> str:
    return _BRANDS.get(brand, "Unknown")


def architecture_name(architecture: int) -> str:
    return _ARCHITECTURES.get(architecture, "Unknown")


def cuda_version(encoded: int) -> str:
    """NVML encodes CUDA versions as 1000*major + 10*minor (12040 is 12.4)."""
    return f"{encoded // 1000}.{(encoded % 1000) // 10}"


def multiprocessors_from_cores(cores: int, capability: tuple[int, int]) -> int:
    """SM count from the CUDA core count; 0 when the architecture's ratio is not known."""
    per_sm = _CORES_PER_SM.get(capability, 0)
    return cores // per_sm if per_sm and cores > 0 else 0


def profile_name_from_nvml(raw: str) -> str:
    """`MIG 1g.10gb+me` is published as `1g.10gb+me`."""
    name = raw.strip()
    return name[len(MIG_NAME_PREFIX) :] if name.startswith(MIG_NAME_PREFIX) else name


def derive_profile_name(
    profile_index: int, slice_count: int, memory_mib: int, total_memory_mib: int
) -> str:
    """The name NVML would give a profile, for drivers whose profile info has no name field.

    Same rule as go-nvlib: memory is rounded up to eighths of the GPU and scaled by the GPU's
    memory in whole GiB (rounded up), so 9984 MiB of an 81559 MiB H100 becomes `10gb`.
    """
    if total_memory_mib <= 0:
        return (
            f"{slice_count}g.{round(memory_mib / 1024)}gb{_PROFILE_SUFFIX.get(profile_index, '')}"
        )
    eighths = math.ceil(8 * memory_mib / total_memory_mib)
    # Half rounds up (Go's math.Round), not to even: H200's 70.5 GB 3g profile is `3g.71gb`.
    gigabytes = math.floor(eighths / 8 * math.ceil(total_memory_mib / 1024) + 0.5)
    return f"{slice_count}g.{gigabytes}gb{_PROFILE_SUFFIX.get(profile_index, '')}"
