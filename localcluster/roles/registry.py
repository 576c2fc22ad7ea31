"""The node agent's plugin watcher: how kubelet learns which DRA drivers a node has.

Kubelet watches its plugin registry directory with inotify and performs a small gRPC handshake
with every socket that appears there. This stand-in keeps the handshake exact (GetInfo, type and
version checks, NotifyRegistrationStatus) because that is what the plugin's registration code
must get right; only the discovery is simpler: it re-lists the directory when asked to
(:meth:`RegistryPoller.scan`), which the agent does once per pass. A listing is enough to see
what inotify would report here, sockets appearing, being replaced and going away, just later.

Several instances of one driver may be registered at once (a DaemonSet rolling update with
per-pod socket names). As kubelet 1.33+ does, the newest one serves the driver's calls, and when
its socket goes the next newest takes over; the driver is deregistered when none is left.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import grpc
import structlog

from dra_driver.kubeletapi import DRA_V1, DRA_V1BETA1, PLUGIN_TYPE
from dra_driver.kubeletapi.client import RegistrationClient
from dra_driver.kubeletapi.types import PluginInfo

log = structlog.get_logger(__name__)

#: The DRA service versions the agent can speak, in the order it prefers them.
DEFAULT_VERSIONS: Final[tuple[str, ...]] = (DRA_V1, DRA_V1BETA1)

#: A handshake must not stall a whole pass; a healthy plugin answers in milliseconds.
HANDSHAKE_TIMEOUT_S: Final = 5.0


@dataclass(frozen=True)
class PluginRegistration:
    """One accepted plugin instance: where to call it and in which service version."""

    driver: str
    registration_socket: Path
    endpoint: Path
    version: str
    info: PluginInfo
    #: Increases with every accepted registration, so "newest" does not depend on clocks.
    sequence: int


@dataclass(frozen=True)
class _SocketIdentity:
    """What distinguishes a socket file from one re-created at the same path.

    A plugin that restarts removes its stale socket and listens again under the same name;
    kubelet sees that as a new file and registers it again, so the agent must too.
    """

    inode: int
    ctime_ns: int


class RegistryPoller:
    """Tracks the registry directory and the plugins registered through it."""

    def __init__(
        self,
        registry_dir: Path,
        versions: Sequence[str] = DEFAULT_VERSIONS,
        handshake_timeout: float = HANDSHAKE_TIMEOUT_S,
    ) -> None:
        if not versions:
            raise ValueError("the agent must support at least one DRA service version")
        self.registry_dir = registry_dir
        self.versions = tuple(versions)
        self.handshake_timeout = handshake_timeout
        #: Registration socket -> the reason it was refused. A refused socket is not asked
        #: again until it is replaced, so a misconfigured plugin is told once, not every pass.
        self.refused: dict[Path, str] = {}
        self._seen: dict[Path, _SocketIdentity] = {}
        self._instances: dict[Path, PluginRegistration] = {}
        self._sequence = 0

    @property
    def plugins(self) -> Mapping[str, PluginRegistration]:
        """Driver name -> the instance that serves it (the newest registered one)."""
        newest: dict[str, PluginRegistration] = {}
        for instance in self._instances.values():
            current = newest.get(instance.driver)
            if current is None or instance.sequence > current.sequence:
                newest[instance.driver] = instance
        return newest

    async def scan(self) -> bool:
        """Register new or replaced sockets, forget vanished ones; True when anything changed."""
        present = self._list_sockets()
        changed = False
        for path in [p for p in self._seen if present.get(p) != self._seen[p]]:
            changed |= self._forget(path)
        # Oldest file first, so that of two new sockets for one driver the later one wins.
        for path, identity in sorted(present.items(), key=lambda kv: (kv[1].ctime_ns, kv[0])):
            if path in self._seen:
                continue
            outcome = await self._handshake(path)
            if outcome is None:
                continue  # not reachable yet: try again on the next scan
            self._seen[path] = identity
            changed = True
        return changed

    def _list_sockets(self) -> dict[Path, _SocketIdentity]:
        try:
            entries = list(os.scandir(self.registry_dir))
        except FileNotFoundError:
            return {}
        found: dict[Path, _SocketIdentity] = {}
        for entry in entries:
            if entry.name.startswith("."):
                continue
            try:
                st = entry.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue  # removed while listing
            if stat.S_ISSOCK(st.st_mode):
                found[Path(entry.path)] = _SocketIdentity(st.st_ino, st.st_ctime_ns)
        return found

    def _forget(self, path: Path) -> bool:
        del self._seen[path]
        self.refused.pop(path, None)
        instance = self._instances.pop(path, None)
        if instance is None:
            return False
        still = self.plugins.get(instance.driver)
        log.info(
            "plugin socket removed",
            driver=instance.driver,
            socket=str(path),
            now_served_by=str(still.registration_socket) if still else None,
        )
        return True

    async def _handshake(self, path: Path) -> bool | None:
        """GetInfo, verdict, NotifyRegistrationStatus. None when the plugin could not be asked."""
        try:
            async with RegistrationClient(path, timeout=self.handshake_timeout) as client:
                info = await client.get_info()
                reason = self._refusal(info)
                if reason:
                    await client.notify(False, reason)
                    self.refused[path] = reason
                    log.warning("plugin refused", socket=str(path), error=reason)
                    return False
                await client.notify(True)
        except grpc.aio.AioRpcError as error:
            log.info("plugin not reachable yet", socket=str(path), error=error.details())
            return None
        self._sequence += 1
        endpoint = Path(info.endpoint) if info.endpoint else path
        self._instances[path] = PluginRegistration(
            driver=info.name,
            registration_socket=path,
            endpoint=endpoint,
            version=self.choose_version(info.supported_versions) or "",
            info=info,
            sequence=self._sequence,
        )
        log.info(
            "plugin registered",
            driver=info.name,
            socket=str(path),
            endpoint=str(endpoint),
            version=self._instances[path].version,
        )
        return True

    def choose_version(self, offered: Sequence[str]) -> str | None:
        """The plugin's first listed version that the agent speaks, as kubelet chooses."""
        return next((v for v in offered if v in self.versions), None)

    def _refusal(self, info: PluginInfo) -> str:
        if info.type != PLUGIN_TYPE:
            return f"plugin type {info.type!r} is not supported; expected {PLUGIN_TYPE!r}"
        if not info.name:
            return "the plugin did not give a driver name"
        if self.choose_version(info.supported_versions) is None:
            return (
                f"none of the plugin's versions {list(info.supported_versions)} is supported; "
                f"supported: {list(self.versions)}"
            )
        return ""


__all__ = ["DEFAULT_VERSIONS", "HANDSHAKE_TIMEOUT_S", "PluginRegistration", "RegistryPoller"]
