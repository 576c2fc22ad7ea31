"""Where a GPU sits: PCI address, PCIe root complex, NUMA node and NVLink domain.

These feed the standard `resource.kubernetes.io/pciBusID` / `pcieRoot` attributes (which must use
the kernel's spelling so they line up with NICs published by other DRA drivers) and the
`nvlinkDomain` attribute (which claims compare with matchAttribute, so equal strings must mean
"NVLink-connected" and nothing else). Everything here is pure or reads sysfs only.
"""

from __future__ import annotations

import hashlib
import re
import uuid
from collections.abc import Iterable, Mapping
from pathlib import Path

_BUS_ID = re.compile(
    r"^(?:(?P<domain>[0-9a-fA-F]{1,8}):)?(?P<bus>[0-9a-fA-F]{1,2}):"
    r"(?P<device>[0-9a-fA-F]{1,2})\.(?P<function>[0-7])$"
)
_ROOT = re.compile(r"^pci[0-9a-f]{4,}:[0-9a-f]{2}$")
MAX_DOMAIN_LENGTH = 64


def normalize_bus_id(raw: str) -> str:
    """NVML's `00000000:18:00.0` as the kernel writes it: `0000:18:00.0`, lower case.

    The domain keeps at least four digits; a wider one (VMD domains such as 10000) keeps them all,
    exactly like sysfs names.
    """
    text = raw.strip().rstrip("\x00")
    match = _BUS_ID.match(text)
    if match is None:
        raise ValueError(f"not a PCI bus id: {raw!r}")
    domain = int(match["domain"] or "0", 16)
    bus = int(match["bus"], 16)
    device = int(match["device"], 16)
    return f"{domain:04x}:{bus:02x}:{device:02x}.{match['function']}"


def pcie_root(sysfs_root: Path, bus_id: str) -> str:
    """The root complex (`pci0000:17`) the device hangs under; "" when sysfs does not say.

    /sys/bus/pci/devices/<bus id> is a link into /sys/devices/pciDDDD:BB/..., whose first component
    names the host bridge no matter how many switches sit in between.
    """
    link = sysfs_root / "bus" / "pci" / "devices" / bus_id
    try:
        resolved = link.resolve(strict=True)
        devices = (sysfs_root / "devices").resolve(strict=True)
        parts = resolved.relative_to(devices).parts
    except (OSError, ValueError):
        return ""
    if parts and _ROOT.match(parts[0]):
        return parts[0]
    return ""


def sysfs_numa_node(sysfs_root: Path, bus_id: str) -> int | None:
    """The kernel's NUMA node of the device; None when unknown (the kernel writes -1 then)."""
    path = sysfs_root / "bus" / "pci" / "devices" / bus_id / "numa_node"
    try:
        node = int(path.read_text().strip())
    except (OSError, ValueError):
        return None
    return node if node >= 0 else None


def fabric_domain(cluster_uuid: bytes, clique_id: int) -> str:
    """Name of a registered NVLink fabric partition: `<cluster UUID>.<clique id>` (47 chars max).

    GPUs in the same clique of the same cluster share NVLink, even across nodes, so the name is
    global on purpose. An all-zero cluster UUID means "not registered" and yields "".
    """
    if len(cluster_uuid) != 16 or not any(cluster_uuid):
        return ""
    return f"{uuid.UUID(bytes=cluster_uuid)}.{clique_id}"


def nvlink_components(node_name: str, links: Mapping[str, Iterable[str]]) -> dict[str, str]:
    """Group GPUs that reach each other over active NVLinks and name each group.

    `links` maps a GPU's bus id to the bus ids at the far end of its active links: another GPU, or
    an NVSwitch that several GPUs share. GPUs are connected when a chain of links joins them. A GPU
    without active links gets "". Names hash the node name and the member bus ids, so they are
    stable across restarts and never equal between two nodes (these links do not leave the node).
    """
    parent: dict[str, str] = {}

    def find(item: str) -> str:
        parent.setdefault(item, item)
        while parent[item] != item:
            parent[item] = parent[parent[item]]
            item = parent[item]
        return item

    def union(a: str, b: str) -> None:
        root_a, root_b = find(a), find(b)
        if root_a != root_b:
            parent[max(root_a, root_b)] = min(root_a, root_b)

    linked: set[str] = set()
    for gpu, remotes in links.items():
        find(gpu)
        for remote in remotes:
            linked.add(gpu)
            union(gpu, remote)

    members: dict[str, list[str]] = {}
    for gpu in links:
        if gpu in linked:
            members.setdefault(find(gpu), []).append(gpu)

    names: dict[str, str] = {gpu: "" for gpu in links}
    for group in members.values():
        digest = hashlib.sha256("\n".join([node_name, *sorted(group)]).encode()).hexdigest()
        name = f"nvlink-{digest[:20]}"
        for gpu in group:
            names[gpu] = name
    return names
