"""Hardware facts of real GPU products, loaded from the packaged data file.

The fake backend builds its GPUs from these facts so that profiles, placements, memory sizes and
engine counts are the ones real hardware reports; the NVML backend never reads them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

from dra_driver.inventory.model import MigPlacement, MigProfile


@dataclass(frozen=True, slots=True)
class GpuProduct:
    key: str
    product_name: str
    pci_device_id: str
    architecture: str
    cuda_compute_capability: str
    memory_mib: int
    multiprocessors: int
    memory_slices: int
    compute_slices: int
    mig_profiles: tuple[MigProfile, ...]
    unconfirmed: tuple[str, ...] = ()

    @property
    def memory_bytes(self) -> int:
        return self.memory_mib * 1024 * 1024

    @property
    def mig_capable(self) -> bool:
        return bool(self.mig_profiles)


def _profile(raw: dict[str, Any]) -> MigProfile:
    return MigProfile(
        name=raw["name"],
        profile_index=raw["profile_index"],
        gi_profile_id=raw["gi_profile_id"],
        ci_profile_index=raw["ci_profile_index"],
        ci_profile_id=raw["ci_profile_id"],
        slice_count=raw["slice_count"],
        instance_count=raw["instance_count"],
        memory_mib=raw["memory_mib"],
        multiprocessors=raw["multiprocessors"],
        copy_engines=raw["copy_engines"],
        decoders=raw["decoders"],
        encoders=raw["encoders"],
        jpeg_engines=raw["jpeg_engines"],
        ofa_engines=raw["ofa_engines"],
        placements=tuple(MigPlacement(start, size) for start, size in raw["placements"]),
        unconfirmed=tuple(raw.get("unconfirmed", ())),
    )


def product_from_dict(raw: dict[str, Any]) -> GpuProduct:
    """Build a product from the packaged JSON shape (also used for custom fake GPUs in YAML)."""
    return GpuProduct(
        key=raw["key"],
        product_name=raw["product_name"],
        pci_device_id=raw.get("pci_device_id", "0x000010DE"),
        architecture=raw["architecture"],
        cuda_compute_capability=raw["cuda_compute_capability"],
        memory_mib=raw["memory_mib"],
        multiprocessors=raw["multiprocessors"],
        memory_slices=raw.get("memory_slices", 0) if raw.get("mig_profiles") else 0,
        compute_slices=raw.get("compute_slices", 0) if raw.get("mig_profiles") else 0,
        mig_profiles=tuple(_profile(p) for p in raw.get("mig_profiles", ())),
        unconfirmed=tuple(raw.get("unconfirmed", ())),
    )


@cache
def known_products() -> dict[str, GpuProduct]:
    text = resources.files("dra_driver").joinpath("data/gpu_profiles.json").read_text()
    return {p["key"]: product_from_dict(p) for p in json.loads(text)["products"]}


def product(key: str) -> GpuProduct:
    """Look a product up by its key (e.g. `H100-SXM5-80GB`), naming the known keys on a miss."""
    products = known_products()
    try:
        return products[key]
    except KeyError:
        raise KeyError(
            f"unknown GPU profile {key!r}; known profiles: {', '.join(sorted(products))}"
        ) from None
