"""The host's NVIDIA driver installation: what a GPU container needs from it besides its GPUs.

A container given only device nodes cannot load `libcuda.so.1`; the driver's libraries, firmware,
programs and daemon sockets live on the host and are bind-mounted in. `discover` finds them under
a driver root, `driver_edits` turns them into the CDI edits every GPU container of the node gets.
"""

from dra_driver.driverroot.discover import (
    DeviceNodeNames,
    DriverFile,
    DriverInstallation,
    HookProgram,
    Library,
    discover,
    discover_device_nodes,
)
from dra_driver.driverroot.edits import MOUNT_OPTIONS, NO_HOOK_WARNING, driver_edits, gpu_nodes
from dra_driver.driverroot.errors import DriverRootError

__all__ = [
    "MOUNT_OPTIONS",
    "NO_HOOK_WARNING",
    "DeviceNodeNames",
    "DriverFile",
    "DriverInstallation",
    "DriverRootError",
    "HookProgram",
    "Library",
    "discover",
    "discover_device_nodes",
    "driver_edits",
    "gpu_nodes",
]
