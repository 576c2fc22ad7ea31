"""The kinds of device the driver publishes in its ResourceSlices.

Which configuration applies to an allocated device depends on what the
device is, so the configuration API needs this vocabulary even though the
devices themselves are described elsewhere in the driver.
"""

from __future__ import annotations

from enum import StrEnum


class DeviceType(StrEnum):
    """What an allocated device is; the value matches the device attribute."""

    GPU = "gpu"
    """A whole physical GPU given to one claim."""
    MIG = "mig"
    """A MIG instance carved out of a GPU."""
    TIMESLICE = "timeslice"
    """A GPU offered to several claims that take turns on it."""
    SHARED = "shared"
    """A fractional share of a GPU, enforced with MPS limits."""
    OPPORTUNISTIC = "gpu-opportunistic"
    """A best-effort share of a GPU its owner lends while idle (or nobody holds), enforced with
    MPS limits and taken back when the owner is busy again; published only where the node
    lends (`--lend-after`)."""

    @property
    def display_name(self) -> str:
        """How error messages refer to devices of this type."""
        return _DISPLAY_NAMES[self]


_DISPLAY_NAMES: dict[DeviceType, str] = {
    DeviceType.GPU: "GPU",
    DeviceType.MIG: "MIG",
    DeviceType.TIMESLICE: "time-sliced GPU",
    DeviceType.SHARED: "shared GPU",
    DeviceType.OPPORTUNISTIC: "lent GPU",
}
