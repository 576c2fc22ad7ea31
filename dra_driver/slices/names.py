"""Names of devices, counter sets, counters and slices.

Device names are part of every allocation result and every checkpoint, so they are derived only
from stable facts (minor number, profile, placement) and never from NVML's enumeration index.
"""

from __future__ import annotations

import hashlib
import re

from dra_driver.inventory.model import MigDevice, MigProfile

MAX_OBJECT_NAME = 253


def whole_gpu(minor: int) -> str:
    return f"gpu-{minor}"


def mig_placement(minor: int, profile: MigProfile, start: int) -> str:
    return f"gpu-{minor}-mig-{profile.dns_name}-{start}"


def static_mig(device: MigDevice) -> str:
    return f"gpu-{device.parent_minor}-mig-{device.gi_id}-{device.ci_id}"


def timeslice_share(minor: int, index: int) -> str:
    return f"gpu-{minor}-ts-{index}"


def fractional_share(minor: int) -> str:
    return f"gpu-{minor}-shared"


def lent_share(minor: int) -> str:
    return f"gpu-{minor}-lent"


_GPU_DEVICE = re.compile(r"gpu-(\d+)(?:-(lent|shared|ts-\d+|mig-[a-z0-9-]+))?")


def gpu_of(device: str) -> tuple[int, bool] | None:
    """The minor of the GPU a device name above belongs to, and whether the device is its lent
    share; None for a name that is no GPU's."""
    match = _GPU_DEVICE.fullmatch(device)
    if match is None:
        return None
    return int(match.group(1)), match.group(2) == "lent"


def counter_set(minor: int) -> str:
    return f"gpu-{minor}"


def memory_slice_counter(index: int) -> str:
    return f"memory-slice-{index}"


def slice_name(node_name: str, driver_name: str, suffix: str) -> str:
    """`<node>-<driver>-<suffix>`, shortened with a hash when it would exceed the name limit.

    Fixed names (rather than generateName) let the publisher update slices in place and find
    its own leftovers after a restart.
    """
    driver = driver_name.replace(".", "-")
    name = f"{node_name}-{driver}-{suffix}"
    if len(name) <= MAX_OBJECT_NAME:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:10]
    keep = MAX_OBJECT_NAME - len(suffix) - len(digest) - 2
    return f"{name[:keep].rstrip('-.')}-{digest}-{suffix}"
