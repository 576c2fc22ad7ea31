"""Finding the driver's user-space files under a driver root.

The driver root is the host's driver installation as this process sees it: `/` when the plugin
runs on the host or mounts the host's root, another directory for a containerised driver or in
tests. Every path found is recorded absolute in the root's own terms (`/usr/lib64/...`), which is
both where a container gets it and, under the runtime's view of the root, where the runtime reads
it; see `edits.py`.

Libraries come from the root's linker cache when it has one, because that is where the dynamic
linker finds them on that host whatever the layout; without one, the usual library directories
are searched. Each library is recorded as its real, versioned file plus the other names
(sonames) that point at it, so a container can get the file and the links a loader looks for.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from dra_driver.driverroot import libraries as names
from dra_driver.driverroot.errors import DriverRootError
from dra_driver.driverroot.ldcache import (
    FLAG_X8664_LIBX32,
    CacheEntry,
    native_abi,
    read_ld_cache,
)
from dra_driver.driverroot.paths import in_root, resolve_in_root

LD_CACHE = PurePosixPath("/etc/ld.so.cache")
_VERSION = re.compile(r"\d+(?:\.\d+)+")
_GPU_NODE = re.compile(r"nvidia(\d+)")


@dataclass(frozen=True, slots=True)
class DriverFile:
    """A file a container gets: where it appears there, and the real file behind it (they
    differ when the name found is a link, as `/lib/firmware` is on merged-/usr systems)."""

    path: PurePosixPath
    source: PurePosixPath


@dataclass(frozen=True, slots=True)
class Library:
    name: str  # as listed in `libraries.py`, e.g. libcuda.so
    file: PurePosixPath  # the real, versioned file
    sonames: tuple[str, ...]  # other names in the same directory that lead to it

    @property
    def directory(self) -> PurePosixPath:
        return self.file.parent


@dataclass(frozen=True, slots=True)
class HookProgram:
    """The NVIDIA container toolkit's hook; `subcommand` is set for `nvidia-ctk hook ...`."""

    path: PurePosixPath
    subcommand: bool

    def argv(self, *args: str) -> tuple[str, ...]:
        prefix = (self.path.name, "hook") if self.subcommand else (self.path.name,)
        return (*prefix, *args)


@dataclass(frozen=True, slots=True)
class DriverInstallation:
    root: Path
    version: str
    libraries: tuple[Library, ...]
    firmware: tuple[DriverFile, ...]
    binaries: tuple[DriverFile, ...]
    sockets: tuple[DriverFile, ...]
    hook: HookProgram | None
    # Where the libraries were looked up: the linker cache, or the directories searched.
    searched: str

    def library(self, name: str) -> Library | None:
        return next((lib for lib in self.libraries if lib.name == name), None)


def discover(root: Path, version: str | None = None) -> DriverInstallation:
    """Find the driver under `root`; `version` is the driver's (from NVML) when known.

    Raises DriverRootError naming the path when the root is missing, its linker cache cannot be
    read, or the CUDA or NVML library is not there.
    """
    if not root.is_dir():
        what = "does not exist" if not os.path.lexists(root) else "is not a directory"
        raise DriverRootError(f"driver root {root} {what}")
    try:
        return _discover(root, version)
    except OSError as error:
        where = error.filename or root
        raise DriverRootError(
            f"cannot read the driver under {root}: {where}: {error.strerror or error}"
        ) from None


def _discover(root: Path, version: str | None) -> DriverInstallation:
    candidates, searched = _library_candidates(root)
    found: list[Library] = []
    for name in names.LIBRARIES:
        library = _pick(root, name, candidates.get(name, ()), version)
        if library is not None:
            found.append(library)
    missing = [n for n in names.REQUIRED_LIBRARIES if all(lib.name != n for lib in found)]
    if missing:
        raise DriverRootError(
            f"driver root {root} has no {' or '.join(missing)} (looked in {searched}); "
            "is the NVIDIA driver installed there?"
        )
    if version is None:
        version = _version_of(next(lib for lib in found if lib.name == "libcuda.so"), root)
    return DriverInstallation(
        root=root,
        version=version,
        libraries=tuple(found),
        firmware=_firmware(root, version),
        binaries=tuple(_first_found(root, names.BINARY_DIRS, names.BINARIES)),
        sockets=tuple(f for s in names.IPC_SOCKETS if (f := _driver_file(root, "/" / s))),
        hook=_hook(root),
        searched=searched,
    )


def _library_candidates(root: Path) -> tuple[dict[str, list[PurePosixPath]], str]:
    """Library name -> paths that may hold it, best first, and a description of the search."""
    cache = in_root(root, LD_CACHE)
    by_name: dict[str, list[PurePosixPath]] = {}
    if os.path.lexists(cache):
        entries = _native(read_ld_cache(cache))
        for entry in entries:
            name = _library_name(entry.name)
            if name is not None:
                by_name.setdefault(name, []).append(PurePosixPath(entry.path))
        return by_name, str(cache)
    searched = []
    for directory in names.LIBRARY_DIRS:
        where = in_root(root, "/" / directory)
        searched.append(str(where))
        if not where.is_dir():
            continue
        for child in sorted(os.listdir(where)):
            name = _library_name(child)
            if name is not None:
                by_name.setdefault(name, []).append("/" / directory / child)
    return by_name, ", ".join(searched)


def _native(entries: Sequence[CacheEntry]) -> list[CacheEntry]:
    """The entries a 64-bit program on this machine would load (not the i386 or x32 copies)."""
    abi = native_abi()
    if abi is not None:
        return [e for e in entries if e.abi == abi]
    return [e for e in entries if e.abi not in (0, FLAG_X8664_LIBX32)]


def _library_name(file_name: str) -> str | None:
    for name in names.LIBRARIES:
        if file_name.startswith(name + "."):
            return name
    return None


def _pick(
    root: Path, name: str, paths: Iterable[PurePosixPath], version: str | None
) -> Library | None:
    """The real file behind a library's candidates, with every candidate name in its directory.

    With the driver's version known, the file named for it wins (as the NVIDIA container toolkit
    picks it), wherever the linker cache lists it among other versions' copies, and also when
    it is only found beside a soname link that leads to another version: ldconfig links a
    soname to the highest version in the directory, which after an in-place downgrade is a
    leftover. Without a version, the first candidate wins, as for the host's own linker."""
    real: dict[PurePosixPath, list[str]] = {}
    for path in paths:
        target = _real_file(root, path)
        if target is None:
            continue
        links = real.setdefault(target, [])
        if path.name != target.name and path.parent == target.parent:
            links.append(path.name)
    if not real:
        return None
    chosen = next(iter(real))
    if version:
        wanted = f"{name}.{version}"
        named = [p for p in real if p.name == wanted]
        beside = [f for d in _parents(real) if (f := _real_file(root, d / wanted)) is not None]
        chosen = (named or beside or [chosen])[0]
    # A soname next to the chosen file names it in the container, whatever it leads to here.
    sonames = {
        link for file, links in real.items() if file.parent == chosen.parent for link in links
    }
    sonames |= _sibling_links(root, chosen)
    sonames.discard(name)  # the development name is a link the hooks make, never a soname
    return Library(name=name, file=chosen, sonames=tuple(sorted(sonames)))


def _parents(files: Iterable[PurePosixPath]) -> list[PurePosixPath]:
    return list(dict.fromkeys(file.parent for file in files))


def _real_file(root: Path, path: PurePosixPath) -> PurePosixPath | None:
    target = resolve_in_root(root, path)
    return target if target is not None and in_root(root, target).is_file() else None


def _sibling_links(root: Path, file: PurePosixPath) -> set[str]:
    """Links next to a library that point at it (`libcuda.so.1`): a linker cache lists only one
    name per library, and the directory may hold more."""
    directory = in_root(root, file.parent)
    stem = file.name.split(".so.")[0] + ".so."
    found = set()
    for child in os.listdir(directory):
        if (
            child.startswith(stem)
            and child != file.name
            and (directory / child).is_symlink()
            and resolve_in_root(root, file.parent / child) == file
        ):
            found.add(child)
    return found


def _version_of(cuda: Library, root: Path) -> str:
    suffix = cuda.file.name.removeprefix("libcuda.so.")
    if not _VERSION.fullmatch(suffix):
        raise DriverRootError(
            f"cannot tell the driver version under {root}: {cuda.file} is not named "
            "libcuda.so.<version>"
        )
    return suffix


def _driver_file(root: Path, path: PurePosixPath) -> DriverFile | None:
    source = resolve_in_root(root, path)
    return None if source is None else DriverFile(path=path, source=source)


def _first_found(
    root: Path, directories: Sequence[PurePosixPath], wanted: Sequence[str]
) -> Iterable[DriverFile]:
    for name in wanted:
        for directory in directories:
            found = _driver_file(root, "/" / directory / name)
            if found is not None:
                yield found
                break


def _firmware(root: Path, version: str) -> tuple[DriverFile, ...]:
    for directory in names.FIRMWARE_DIRS:
        where = in_root(root, "/" / directory / version)
        if not where.is_dir():
            continue
        files = sorted(p.name for p in where.glob(names.FIRMWARE_GLOB))
        found = [_driver_file(root, "/" / directory / version / f) for f in files]
        if found:
            return tuple(f for f in found if f is not None)
    return ()


def _hook(root: Path) -> HookProgram | None:
    for program, subcommand in ((names.CDI_HOOK, False), (names.CTK, True)):
        for directory in names.BINARY_DIRS:
            path = "/" / directory / program
            if resolve_in_root(root, path) is not None:
                return HookProgram(path=path, subcommand=subcommand)
    return None


@dataclass(frozen=True, slots=True)
class DeviceNodeNames:
    """NVIDIA device nodes under a dev root, as names relative to it."""

    control: tuple[str, ...]
    gpu_minors: tuple[int, ...]
    capabilities: tuple[str, ...]


def discover_device_nodes(dev_root: Path, control: Sequence[str]) -> DeviceNodeNames:
    """Which nodes exist; character devices on a host, plain files in tests: both count."""
    present = tuple(name for name in control if os.path.exists(dev_root / name))
    try:
        entries = os.listdir(dev_root)
    except FileNotFoundError:
        entries = []
    minors = sorted(int(m.group(1)) for e in entries if (m := _GPU_NODE.fullmatch(e)))
    caps_dir = dev_root / "nvidia-caps"
    caps = (
        tuple(f"nvidia-caps/{n}" for n in sorted(os.listdir(caps_dir), key=_natural))
        if caps_dir.is_dir()
        else ()
    )
    return DeviceNodeNames(control=present, gpu_minors=tuple(minors), capabilities=caps)


def _natural(text: str) -> tuple[str, int]:
    digits = re.search(r"(\d+)$", text)
    return (text[: digits.start()] if digits else text, int(digits.group(1)) if digits else -1)
