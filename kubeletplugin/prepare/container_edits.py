"""What a container gets for each prepared device: the claim's transient CDI spec.

Every device gets a CDI device of its own, so kubelet can hand each container exactly the
devices of the requests it references. Environment keys are per device
(`DRA_DEVICE_<NAME>...`): CDI merges the environment of every device a container gets and a
shared key such as `CUDA_VISIBLE_DEVICES` could only keep one claim's value. Real GPUs also get
their device nodes, and the spec-wide edits carry the control nodes every CUDA process opens,
the driver's libraries, firmware and programs with the hooks that make them loadable, and
`NVIDIA_VISIBLE_DEVICES=void`, so the NVIDIA runtime hook does not add every GPU of the node on
top. Fake GPUs have no device nodes: their environment says what was handed out, which is what a
demo pod prints and a test checks.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from dra_driver.cdi import CdiDevice, CdiSpec, ContainerEdits, DeviceNode, Mount, qualified_name
from dra_driver.cdi.nvidia import control_device_nodes, gpu_device_nodes, mig_device_nodes


@dataclass(frozen=True, slots=True)
class HandedOut:
    """One device of a claim as a container sees it."""

    cdi_name: str
    device_name: str
    device_type: str
    uuid: str
    parent_minor: int
    # (GI, CI) of the MIG device, for its capability device nodes.
    mig_ids: tuple[int, int] | None = None
    sharing: str | None = None
    extra_env: tuple[str, ...] = ()
    # The MPS pipe directory, for a device whose clients use MPS.
    mounts: tuple[Mount, ...] = ()


def env_key(device_name: str) -> str:
    return "DRA_DEVICE_" + re.sub(r"[^A-Za-z0-9]", "_", device_name).upper()


def device_environment(item: HandedOut) -> tuple[str, ...]:
    key = env_key(item.device_name)
    env = [f"{key}={item.uuid}", f"{key}_TYPE={item.device_type}"]
    if item.sharing:
        env.append(f"{key}_SHARING={item.sharing}")
    return (*env, *item.extra_env)


class DeviceNodes(Protocol):
    """Where device nodes come from: the host for NVML, nowhere for fake GPUs."""

    def for_device(self, item: HandedOut) -> tuple[DeviceNode, ...]: ...

    def common(self) -> ContainerEdits: ...


class NoDeviceNodes:
    """Fake GPUs: no nodes of their own; `driver` is the driver's edits when a (fake) driver
    root was given, so specs can be checked for its files without a GPU."""

    def __init__(self, driver: ContainerEdits | None = None) -> None:
        self._driver = driver or ContainerEdits()

    def for_device(self, item: HandedOut) -> tuple[DeviceNode, ...]:
        return ()

    def common(self) -> ContainerEdits:
        return self._driver


class HostDeviceNodes:
    """Device nodes of real GPUs; roots are parameters because the plugin runs in a container
    that sees the host's /dev under another path. `driver` is what every container gets from
    the driver installation (see `dra_driver.driverroot`); it already holds the control nodes
    and the void visible-devices setting, which are the whole of `common()` without it."""

    def __init__(
        self,
        dev_root: Path = Path("/dev"),
        proc_root: Path = Path("/proc"),
        driver: ContainerEdits | None = None,
    ) -> None:
        self._dev = dev_root
        self._proc = proc_root
        self._driver = driver

    def for_device(self, item: HandedOut) -> tuple[DeviceNode, ...]:
        if item.mig_ids is not None:
            gi_id, ci_id = item.mig_ids
            return tuple(mig_device_nodes(item.parent_minor, gi_id, ci_id, self._dev, self._proc))
        return tuple(gpu_device_nodes(item.parent_minor, self._dev))

    def common(self) -> ContainerEdits:
        if self._driver is not None:
            return self._driver
        return ContainerEdits(
            env=("NVIDIA_VISIBLE_DEVICES=void",),
            device_nodes=tuple(control_device_nodes(self._dev)),
        )


def claim_spec(kind: str, items: Sequence[HandedOut], nodes: DeviceNodes) -> CdiSpec:
    devices = tuple(
        CdiDevice(
            name=item.cdi_name,
            edits=ContainerEdits(
                env=device_environment(item),
                device_nodes=nodes.for_device(item),
                mounts=item.mounts,
            ),
        )
        for item in items
    )
    return CdiSpec(kind=kind, devices=devices, edits=nodes.common())


def cdi_id(kind: str, cdi_name: str) -> str:
    return qualified_name(kind, cdi_name)
