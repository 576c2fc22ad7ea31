"""Identities and topology of fake GPUs, derived only from the node name and the minor.

Determinism is the point: a restarted plugin, a second process and a test all compute the same
UUIDs and PCI addresses for the same node, so persisted MIG state and device names line up
without coordination, while two fake nodes never share a UUID (as no two real GPUs do).
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Sequence

from dra_driver.backends.fake.spec import FakeGpuSpec
from dra_driver.inventory.model import GpuInfo
from dra_driver.inventory.products import GpuProduct

# Fixed namespace for every name-based UUID the fake hands out; changing it renames all devices.
FAKE_UUID_NAMESPACE = uuid.UUID("3f9b2c1e-7a4d-5e8f-9b6a-1c2d3e4f5a6b")

BRAND = "Nvidia"
# GPUs sharing one PCIe root complex, as on HGX boards where two GPUs sit behind one switch.
GPUS_PER_PCIE_ROOT = 2
# Products whose GPUs are NVLink-bridged in pairs rather than joined by NVSwitch.
_PAIRED_PRODUCTS = ("H100-NVL-94GB", "A30-24GB")


def gpu_uuid(node_name: str, minor: int) -> str:
    return f"GPU-{uuid.uuid5(FAKE_UUID_NAMESPACE, f'{node_name}/{minor}')}"


def mig_uuid(parent_uuid: str, gi_id: int, ci_id: int, serial: int) -> str:
    """`serial` counts creations on the parent, so a re-created device gets a fresh UUID."""
    return f"MIG-{uuid.uuid5(FAKE_UUID_NAMESPACE, f'{parent_uuid}/{gi_id}/{ci_id}/{serial}')}"


def _root_index(minor: int) -> int:
    return minor // GPUS_PER_PCIE_ROOT


def pcie_root(minor: int) -> str:
    # Eight root complexes per PCI domain, 0x20 buses apart, then the next domain.
    root = _root_index(minor)
    return f"pci{root // 8:04x}:{(root % 8) * 0x20:02x}"


def pci_bus_id(minor: int) -> str:
    """A bus just below the GPU's root complex, so the bus ID and the root visibly agree."""
    root = _root_index(minor)
    bus = (root % 8) * 0x20 + 0x08 + (minor % GPUS_PER_PCIE_ROOT) * 0x10
    return f"{root // 8:04x}:{bus:02x}:00.0"


def numa_node(minor: int, gpu_count: int) -> int:
    """Two sockets: the first half of the GPUs on node 0, the rest on node 1."""
    return 0 if minor < (gpu_count + 1) // 2 else 1


def _nvlink_class(gpu_product: GpuProduct) -> str:
    if "SXM" in gpu_product.key or gpu_product.key == "B200":
        return "switched"
    if gpu_product.key in _PAIRED_PRODUCTS:
        return "paired"
    return "none"


def nvlink_domains(node_name: str, specs: Sequence[FakeGpuSpec]) -> list[str]:
    """NVLink domain of each GPU, indexed by minor.

    NVSwitch products put every GPU of the product on the node in one domain; bridged products
    pair consecutive GPUs of the product (a leftover odd one has no peer, hence no domain).
    """
    prefix = f"fake-{hashlib.sha256(node_name.encode()).hexdigest()[:8]}"
    domain_keys: dict[tuple[str, int], str] = {}
    seen_of_product: dict[str, int] = {}
    counts: dict[str, int] = {}
    for spec in specs:
        if spec.nvlink_domain is None:
            counts[spec.product.key] = counts.get(spec.product.key, 0) + spec.count
    domains: list[str] = []
    for spec in specs:
        for _ in range(spec.count):
            if spec.nvlink_domain is not None:
                domains.append(spec.nvlink_domain)
                continue
            key = spec.product.key
            nth = seen_of_product.get(key, 0)
            seen_of_product[key] = nth + 1
            kind = _nvlink_class(spec.product)
            if kind == "switched":
                group = (key, 0)
            elif kind == "paired" and nth // 2 * 2 + 1 < counts[key]:
                group = (key, nth // 2)
            else:
                domains.append("")
                continue
            if group not in domain_keys:
                domain_keys[group] = f"{prefix}-{len(domain_keys)}"
            domains.append(domain_keys[group])
    return domains


def build_gpus(
    node_name: str,
    specs: Sequence[FakeGpuSpec],
    *,
    driver_version: str,
    cuda_driver_version: str,
) -> tuple[GpuInfo, ...]:
    total = sum(spec.count for spec in specs)
    domains = nvlink_domains(node_name, specs)
    gpus: list[GpuInfo] = []
    for spec in specs:
        gpu_product = spec.product
        for _ in range(spec.count):
            minor = len(gpus)
            gpus.append(
                GpuInfo(
                    minor=minor,
                    index=minor,
                    uuid=gpu_uuid(node_name, minor),
                    product_name=gpu_product.product_name,
                    brand=BRAND,
                    architecture=gpu_product.architecture,
                    cuda_compute_capability=gpu_product.cuda_compute_capability,
                    driver_version=driver_version,
                    cuda_driver_version=cuda_driver_version,
                    memory_bytes=gpu_product.memory_bytes,
                    multiprocessors=gpu_product.multiprocessors,
                    pci_bus_id=pci_bus_id(minor),
                    pcie_root=pcie_root(minor),
                    numa_node=numa_node(minor, total),
                    nvlink_domain=domains[minor],
                    mig_capable=gpu_product.mig_capable,
                    mig_enabled=spec.effective_mig_enabled,
                    memory_slices=gpu_product.memory_slices,
                    mig_profiles=gpu_product.mig_profiles,
                )
            )
    return tuple(gpus)
