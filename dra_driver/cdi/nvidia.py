"""Device nodes a container needs to use a real NVIDIA GPU or MIG device.

The plugin may run in a container that sees the host's `/dev` and `/proc` somewhere else (for
example under `/driver-root`), so every root is a parameter. In the container the paths are always
`/dev/...`; the host path is recorded only when it differs, which keeps specs at the lowest CDI
version when the plugin sees the real `/dev`. Runtimes stat the host path for the device numbers,
so none are written here.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from dra_driver.cdi.errors import CdiError
from dra_driver.cdi.model import DeviceNode

DEV_ROOT = Path("/dev")
PROC_ROOT = Path("/proc")
CONTROL_NODES = ("nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset")
_MINOR_LABEL = "DeviceFileMinor"


def _node(relative: str, dev_root: Path) -> DeviceNode:
    host = dev_root / relative
    return DeviceNode(
        path=f"/dev/{relative}", host_path=None if dev_root == DEV_ROOT else str(host)
    )


def _required_node(relative: str, dev_root: Path) -> DeviceNode:
    host = dev_root / relative
    if not host.exists():
        raise CdiError(f"device node {host} does not exist")
    return _node(relative, dev_root)


def gpu_device_nodes(minor: int, dev_root: Path = DEV_ROOT) -> tuple[DeviceNode, ...]:
    return (_required_node(f"nvidia{minor}", dev_root),)


def control_device_nodes(dev_root: Path = DEV_ROOT) -> tuple[DeviceNode, ...]:
    """The driver-wide nodes; absent ones are skipped (UVM is loaded on first use on some hosts,
    and modeset only with a display driver)."""
    return tuple(_node(name, dev_root) for name in CONTROL_NODES if (dev_root / name).exists())


def mig_capability_path(
    gpu_minor: int, gi_id: int, ci_id: int | None, proc_root: Path = PROC_ROOT
) -> Path:
    path = proc_root / "driver/nvidia/capabilities" / f"gpu{gpu_minor}" / "mig" / f"gi{gi_id}"
    if ci_id is not None:
        path = path / f"ci{ci_id}"
    return path / "access"


def mig_capability_minor(
    gpu_minor: int, gi_id: int, ci_id: int | None, proc_root: Path = PROC_ROOT
) -> int:
    """The minor of the `nvidia-cap<N>` node that grants access to a GPU or compute instance."""
    path = mig_capability_path(gpu_minor, gi_id, ci_id, proc_root)
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as error:
        raise CdiError(f"cannot read MIG capability file {path}: {error.strerror}") from None
    for line in text.splitlines():
        label, colon, value = line.partition(":")
        if colon and label.strip() == _MINOR_LABEL:
            value = value.strip()
            if not (value.isascii() and value.isdigit()):
                raise CdiError(
                    f"MIG capability file {path}: {_MINOR_LABEL} {value!r} is not a number"
                )
            return int(value)
    raise CdiError(f"MIG capability file {path} has no '{_MINOR_LABEL}: N' line")


def mig_device_nodes(
    gpu_minor: int,
    gi_id: int,
    ci_id: int | None,
    dev_root: Path = DEV_ROOT,
    proc_root: Path = PROC_ROOT,
) -> tuple[DeviceNode, ...]:
    """The parent GPU's node, then the capability nodes of the GPU instance and compute instance."""
    nodes = list(gpu_device_nodes(gpu_minor, dev_root))
    capability_ids: list[int | None] = [None] if ci_id is None else [None, ci_id]
    for capability_ci in capability_ids:
        cap_minor = mig_capability_minor(gpu_minor, gi_id, capability_ci, proc_root)
        nodes.append(_required_node(f"nvidia-caps/nvidia-cap{cap_minor}", dev_root))
    return tuple(nodes)


def visible_devices_env(uuids: Iterable[str]) -> tuple[str, ...]:
    """Environment naming the handed-out devices by UUID, for CUDA and the NVIDIA toolkit hook."""
    joined = ",".join(uuids)
    return (f"NVIDIA_VISIBLE_DEVICES={joined}", f"CUDA_VISIBLE_DEVICES={joined}")
