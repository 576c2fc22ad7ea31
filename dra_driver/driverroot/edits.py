"""The container edits every GPU container on a node gets: the driver's files, the driver-wide
device nodes, and hooks that make the libraries loadable.

Mounts are read-only bind mounts at the path the file has in the driver root; the runtime reads
the file at the same path under `host_root`, the driver root as the runtime sees it (the plugin
may see it elsewhere, e.g. mounted at `/driver-root`). Libraries are mounted under their real,
versioned names, so the container's loader still needs the soname links (`libcuda.so.1`) and a
linker cache that lists the directory. With the toolkit's hook program in the driver root, two
`createContainer` hooks provide both: `create-symlinks` makes the soname and development links,
`update-ldcache` runs the container's ldconfig over the library directories.

Without the hook program no hooks are written, and every soname (and `libcuda.so`) is mounted as
a file of its own instead. Programs then find the libraries only when the directory is one the
container's loader searches by default (`/usr/lib64`, or the multiarch directory on Debian and
Ubuntu images), so the fallback is logged once per process as a warning.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path, PurePosixPath

import structlog

from dra_driver.cdi.model import ContainerEdits, DeviceNode, Hook, Mount
from dra_driver.cdi.nvidia import control_device_nodes, gpu_device_nodes
from dra_driver.driverroot.discover import DriverFile, DriverInstallation, HookProgram, Library
from dra_driver.driverroot.libraries import DEVELOPMENT_LINKS

log = structlog.get_logger(__name__)

MOUNT_OPTIONS = ("ro", "nosuid", "nodev", "rbind", "rprivate")
HOOK_STAGE = "createContainer"
VOID_ENV = "NVIDIA_VISIBLE_DEVICES=void"
NO_HOOK_WARNING = (
    "no nvidia-cdi-hook or nvidia-ctk under the driver root: containers get the libraries' "
    "soname files mounted directly and no linker cache update, so they load only from the "
    "image's default library directories"
)
_warned: set[str] = set()


def driver_edits(
    driver: DriverInstallation,
    *,
    host_root: PurePosixPath | None = None,
    dev_root: Path = Path("/dev"),
    warn: Callable[[str], None] | None = None,
) -> ContainerEdits:
    """`host_root` defaults to the driver root; `warn` gets the no-hook warning (default: the
    log, once per process)."""
    host = PurePosixPath(host_root if host_root is not None else driver.root)
    mounts: list[Mount] = []
    for library in driver.libraries:
        mounts.append(_mount(host, library.file, library.file))
        if driver.hook is None:
            mounts.extend(
                _mount(host, library.file, library.directory / link)
                for link in _link_names(library)
            )
    for found in (*driver.firmware, *driver.binaries, *driver.sockets):
        mounts.append(_file_mount(host, found))
    if driver.hook is None:
        (warn or _warn_once)(NO_HOOK_WARNING)
        hooks: tuple[Hook, ...] = ()
    else:
        hooks = _hooks(host, driver.hook, driver.libraries)
    return ContainerEdits(
        env=(VOID_ENV,),
        device_nodes=control_device_nodes(dev_root),
        mounts=tuple(mounts),
        hooks=hooks,
    )


def gpu_nodes(dev_root: Path, minors: Iterable[int]) -> tuple[DeviceNode, ...]:
    return tuple(node for minor in minors for node in gpu_device_nodes(minor, dev_root))


def _mount(host: PurePosixPath, source: PurePosixPath, target: PurePosixPath) -> Mount:
    return Mount(
        host_path=str(host.joinpath(*source.parts[1:])),
        container_path=str(target),
        options=MOUNT_OPTIONS,
    )


def _file_mount(host: PurePosixPath, found: DriverFile) -> Mount:
    return _mount(host, found.source, found.path)


def _link_names(library: Library) -> tuple[str, ...]:
    development = () if library.name not in DEVELOPMENT_LINKS else (library.name,)
    return (*library.sonames, *development)


def _hooks(
    host: PurePosixPath, program: HookProgram, libraries: Iterable[Library]
) -> tuple[Hook, ...]:
    path = str(host.joinpath(*program.path.parts[1:]))
    links: list[str] = []
    folders: list[str] = []
    for library in libraries:
        links.extend(f"{library.file.name}::{library.directory / s}" for s in library.sonames)
        soname = DEVELOPMENT_LINKS.get(library.name)
        if soname is not None:
            links.append(f"{soname}::{library.directory / library.name}")
        if str(library.directory) not in folders:
            folders.append(str(library.directory))
    link_args = [arg for link in links for arg in ("--link", link)]
    folder_args = [arg for folder in folders for arg in ("--folder", folder)]
    hooks = []
    if link_args:
        hooks.append(Hook(HOOK_STAGE, path, program.argv("create-symlinks", *link_args)))
    hooks.append(Hook(HOOK_STAGE, path, program.argv("update-ldcache", *folder_args)))
    return tuple(hooks)


def _warn_once(message: str) -> None:
    if message not in _warned:
        _warned.add(message)
        log.warning(message)
