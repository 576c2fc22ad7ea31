"""A generated GPU cluster and claim mix for the allocator benchmarks.

The slices come from the real pipeline (fake H100 backend → ResourceSlice builder), so the
benchmark measures what a real cluster of such nodes would publish: per node, 8 whole GPUs, every
MIG placement, time-slice shares and a fractional share, tied together by shared counters.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

from dra_driver import DEFAULT_DRIVER_NAME
from dra_driver.backends.fake import FakeBackend
from dra_driver.slices import SliceSettings, build_resource_slices

DRIVER = DEFAULT_DRIVER_NAME
DOMAIN = "dra-driver.dev"
"""DeviceClasses are named <shape>.<domain>, as the chart installs them."""
PRODUCT = "H100-SXM5-80GB"
MIG_PROFILES = ("1g.10gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb")


def node_name(index: int) -> str:
    return f"node-{index:03d}"


def cluster_slices(nodes: int, gpus_per_node: int = 8) -> list[dict[str, Any]]:
    return list(iter_cluster_slices(nodes, gpus_per_node))


def iter_cluster_slices(nodes: int, gpus_per_node: int = 8) -> Iterator[dict[str, Any]]:
    """The same slices, node by node, for a consumer that need not hold them all at once."""
    settings = SliceSettings()
    for index in range(nodes):
        backend = FakeBackend.from_spec(f"{PRODUCT}:{gpus_per_node}", node_name(index))
        yield from build_resource_slices(backend.inventory(), settings)


def _class(kind: str) -> dict[str, Any]:
    expression = f'device.driver == "{DRIVER}" && device.attributes["{DRIVER}"].type == "{kind}"'
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": f"{kind}.{DOMAIN}"},
        "spec": {"selectors": [{"cel": {"expression": expression}}]},
    }


def device_classes() -> list[dict[str, Any]]:
    return [_class(kind) for kind in ("gpu", "mig", "timeslice", "shared")]


def _claim(name: str, requests: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    devices: dict[str, Any] = {"requests": requests, **extra}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"namespace": "bench", "name": name, "uid": f"uid-{name}"},
        "spec": {"devices": devices},
    }


def whole_gpus(name: str, count: int = 1) -> dict[str, Any]:
    extra: dict[str, Any] = {}
    if count > 1:
        extra["constraints"] = [{"matchAttribute": f"{DRIVER}/nvlinkDomain"}]
    request = {"name": "gpus", "exactly": {"deviceClassName": f"gpu.{DOMAIN}", "count": count}}
    return _claim(name, [request], **extra)


def mig(name: str, profile: str) -> dict[str, Any]:
    selector = f'device.attributes["{DRIVER}"].profile == "{profile}"'
    request = {
        "name": "mig",
        "exactly": {
            "deviceClassName": f"mig.{DOMAIN}",
            "selectors": [{"cel": {"expression": selector}}],
        },
    }
    return _claim(name, [request])


def timeslice(name: str) -> dict[str, Any]:
    return _claim(name, [{"name": "ts", "exactly": {"deviceClassName": f"timeslice.{DOMAIN}"}}])


def fractional(name: str, memory: str = "4Gi", compute: str = "20") -> dict[str, Any]:
    request = {
        "name": "share",
        "exactly": {
            "deviceClassName": f"shared.{DOMAIN}",
            "capacity": {"requests": {"memory": memory, "compute": compute}},
        },
    }
    return _claim(name, [request])


PCI_SELECTOR = (
    'size(device.attributes["resource.kubernetes.io"].pciBusID) == 12'
    ' && device.attributes["resource.kubernetes.io"].pciBusID != "0000:08:00.0"'
)
"""Whole GPUs other than the first: `size` hides from the projection which keys it reads, so
the verdict is a CEL evaluation per device (no sharing across devices or nodes)."""

CAPACITY_SELECTOR = (
    "device.driver in device.capacity"
    ' && device.capacity[device.driver].memory.compareTo(quantity("20Gi")) >= 0'
)
"""MIG devices of 20 GiB or more: membership in the domain map is opaque to the projection too."""


def pinned_gpu(name: str) -> dict[str, Any]:
    request = {
        "name": "gpu",
        "exactly": {
            "deviceClassName": f"gpu.{DOMAIN}",
            "selectors": [{"cel": {"expression": PCI_SELECTOR}}],
        },
    }
    return _claim(name, [request])


def mig_by_capacity(name: str) -> dict[str, Any]:
    request = {
        "name": "mig",
        "exactly": {
            "deviceClassName": f"mig.{DOMAIN}",
            "selectors": [{"cel": {"expression": CAPACITY_SELECTOR}}],
        },
    }
    return _claim(name, [request])


def pcie_pair(name: str) -> dict[str, Any]:
    """Two whole GPUs on one NVLink domain and one PCIe root: on a node where the first free
    GPU's sibling is taken, first fit has to undo its first pick and try the next GPU."""
    request = {"name": "gpus", "exactly": {"deviceClassName": f"gpu.{DOMAIN}", "count": 2}}
    constraints = [
        {"matchAttribute": f"{DRIVER}/nvlinkDomain"},
        {"matchAttribute": "resource.kubernetes.io/pcieRoot"},
    ]
    return _claim(name, [request], constraints=constraints)


MIX = (
    ("gpu", 0.25),
    ("gpu-pair", 0.10),
    ("mig", 0.35),
    ("timeslice", 0.15),
    ("fractional", 0.15),
)
"""The standard mix: its figures stay comparable from one change to the next."""

EXTENDED_MIX = (
    ("gpu", 0.20),
    ("gpu-pair", 0.05),
    ("pcie-pair", 0.05),
    ("pinned-gpu", 0.05),
    ("mig", 0.25),
    ("mig-capacity", 0.10),
    ("timeslice", 0.15),
    ("fractional", 0.15),
)
"""Adds what the standard mix spares the allocator: selectors evaluated per device and pairs
that need backtracking."""


def claim_mix(
    count: int, seed: int = 7, mix: tuple[tuple[str, float], ...] = MIX
) -> list[dict[str, Any]]:
    """`count` claims drawn from `mix`; MIG claims pick 1g/2g/3g/4g evenly."""
    rng = random.Random(seed)
    kinds = [k for k, _ in mix]
    weights = [w for _, w in mix]
    claims: list[dict[str, Any]] = []
    for i in range(count):
        kind = rng.choices(kinds, weights)[0]
        name = f"c{i:05d}-{kind}"
        if kind == "gpu":
            claims.append(whole_gpus(name))
        elif kind == "gpu-pair":
            claims.append(whole_gpus(name, 2))
        elif kind == "mig":
            claims.append(mig(name, rng.choice(MIG_PROFILES[:4])))
        elif kind == "timeslice":
            claims.append(timeslice(name))
        elif kind == "pcie-pair":
            claims.append(pcie_pair(name))
        elif kind == "pinned-gpu":
            claims.append(pinned_gpu(name))
        elif kind == "mig-capacity":
            claims.append(mig_by_capacity(name))
        else:
            claims.append(fractional(name))
    return claims
