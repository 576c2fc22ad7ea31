"""Protocol values as plain, immutable Python objects.

Both the plugin's servers and the client translate protobuf messages to and from these, so the
code on either side (prepare logic, the kubelet stand-in, tests) never handles generated
message classes, whose shape differs slightly between API versions.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


@dataclass(frozen=True)
class ClaimRef:
    """All kubelet says about a claim; the plugin reads the rest from the API server."""

    namespace: str
    uid: str
    name: str

    def describe(self) -> str:
        """A short form for error messages and logs, carrying the UID because names get reused."""
        return f"{self.namespace}/{self.name} (uid {self.uid or '<empty>'})"


@dataclass(frozen=True)
class PreparedDevice:
    """One device handed to a claim's containers.

    ``share_id`` exists on the wire only from v1 on; v1beta1 drops it.
    """

    request_names: tuple[str, ...]
    pool_name: str
    device_name: str
    cdi_device_ids: tuple[str, ...]
    share_id: str | None = None


@dataclass(frozen=True)
class PrepareOutcome:
    """Result for one claim: devices, or an error that makes kubelet ignore them and retry."""

    devices: tuple[PreparedDevice, ...] = ()
    error: str = ""


@dataclass(frozen=True)
class PluginInfo:
    """The plugin's answer to kubelet's GetInfo."""

    type: str
    name: str
    endpoint: str
    supported_versions: tuple[str, ...]


class Health(enum.Enum):
    """Device health as the health protocol encodes it (same numbers as on the wire)."""

    UNKNOWN = 0
    HEALTHY = 1
    UNHEALTHY = 2


@dataclass(frozen=True)
class DeviceHealthStatus:
    """Health of one device; ``last_updated`` is unix seconds."""

    pool_name: str
    device_name: str
    health: Health
    last_updated: int
    timeout_seconds: int
    message: str
