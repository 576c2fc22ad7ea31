"""A driver installation on disk that looks like a real one, for tests without a GPU.

Files are laid out as the NVIDIA installer and distribution packages leave them: every library
as `<name>.so.<driver version>` with its soname link next to it, a merged-/usr root (`lib` a link
to `usr/lib`), GSP firmware per version, the utility programs, the daemons' sockets, and a linker
cache in glibc's binary format written by our own encoder. The dev root holds plain files where a
host has character devices: discovery only asks whether a node exists.
"""

from __future__ import annotations

import os
import platform
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from dra_driver.driverroot.ldcache import (
    FLAG_AARCH64_LIB64,
    FLAG_ELF_LIBC6,
    FLAG_X8664_LIB64,
    CacheEntry,
    build_ld_cache,
)
from dra_driver.driverroot.libraries import BINARIES, LIBRARIES

VERSION = "580.95.05"
OLD_VERSION = "550.54.15"
# Where an older driver's copies are left behind (a runfile install under a package one, or the
# reverse) on a node upgraded in place; their soname links still point at the old files.
LEFTOVER_DIR = PurePosixPath("/usr/local/lib/nvidia")
FIRMWARE = ("gsp_ga10x.bin", "gsp_tu10x.bin")
CONTROL = ("nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset")

# Soname of each library relative to its versioned file: a number, or None when the soname is the
# full version (the driver ships some libraries that way).
SONAMES: dict[str, str | None] = {
    "libnvidia-ml.so": "1",
    "libnvidia-cfg.so": "1",
    "libnvidia-nscq.so": "2",
    "libcuda.so": "1",
    "libcudadebugger.so": "1",
    "libnvidia-opencl.so": "1",
    "libnvidia-gpucomp.so": None,
    "libnvidia-ptxjitcompiler.so": "1",
    "libnvidia-fatbinaryloader.so": None,
    "libnvidia-allocator.so": "1",
    "libnvidia-compiler.so": None,
    "libnvidia-pkcs11.so": None,
    "libnvidia-pkcs11-openssl3.so": None,
    "libnvidia-nvvm.so": "4",
}
assert set(SONAMES) == set(LIBRARIES)


def _machine() -> tuple[str, int]:
    if platform.machine().lower() == "aarch64":
        return "aarch64-linux-gnu", FLAG_AARCH64_LIB64
    return "x86_64-linux-gnu", FLAG_X8664_LIB64


@dataclass(frozen=True)
class FakeDriverRoot:
    root: Path
    dev: Path
    version: str
    # Where the libraries are, as a container sees them (e.g. /usr/lib64).
    lib_dir: PurePosixPath
    libraries: tuple[str, ...]

    def library_file(self, name: str) -> PurePosixPath:
        return self.lib_dir / f"{name}.{self.version}"

    def soname(self, name: str) -> str:
        number = SONAMES[name]
        return f"{name}.{number}" if number else f"{name}.{self.version}"


def build(
    base: Path,
    *,
    layout: str = "ubuntu",
    version: str = VERSION,
    ld_cache: bool = True,
    hook: str | None = "nvidia-cdi-hook",
    omit: Collection[str] = (),
    gpus: int = 2,
    leftover: str | None = None,
    leftover_first: bool = True,
) -> FakeDriverRoot:
    """Make `base/root` (the driver root) and `base/dev` (the dev root); `layout` is "ubuntu"
    (multiarch directories) or "rhel" (lib64); `hook` names the hook program to install.

    `leftover` is an older driver version whose copy of every library stays in `LEFTOVER_DIR`,
    each behind a soname link of its own that points at the old file, and listed in the linker
    cache before the current driver's (`leftover_first`) or after it."""
    root, dev = base / "root", base / "dev"
    triplet, abi = _machine()
    if layout == "ubuntu":
        lib_dir = PurePosixPath("/usr/lib") / triplet
        cache_dir = PurePosixPath("/lib") / triplet  # ldconfig reports the merged-/usr name
    elif layout == "rhel":
        lib_dir = cache_dir = PurePosixPath("/usr/lib64")
    else:
        raise ValueError(f"unknown layout {layout!r}")
    for name in ("usr/lib", "usr/bin", "etc", "usr/lib64"):
        (root / name).mkdir(parents=True, exist_ok=True)
    os.symlink("usr/lib", root / "lib")  # merged /usr, as on current Ubuntu and RHEL
    os.symlink("usr/lib64", root / "lib64")
    libs = root.joinpath(*lib_dir.parts[1:])
    libs.mkdir(parents=True, exist_ok=True)
    fake = FakeDriverRoot(root, dev, version, lib_dir, tuple(n for n in LIBRARIES if n not in omit))
    entries = [CacheEntry("libc.so.6", str(cache_dir / "libc.so.6"), FLAG_ELF_LIBC6 | abi)]
    (libs / "libc.so.6").write_bytes(b"\x7fELF libc")
    old_libs = root.joinpath(*LEFTOVER_DIR.parts[1:])
    if leftover:
        old_libs.mkdir(parents=True)
    for name in fake.libraries:
        real = f"{name}.{version}"
        (libs / real).write_bytes(b"\x7fELF " + real.encode())
        soname = fake.soname(name)
        if soname != real:
            os.symlink(real, libs / soname)
        current = CacheEntry(soname, str(cache_dir / soname), FLAG_ELF_LIBC6 | abi)
        if not leftover:
            entries.append(current)
            continue
        old_real = f"{name}.{leftover}"
        (old_libs / old_real).write_bytes(b"\x7fELF " + old_real.encode())
        old_soname = old_real if SONAMES[name] is None else soname
        if old_soname != old_real:
            os.symlink(old_real, old_libs / old_soname)
        old = CacheEntry(old_soname, str(LEFTOVER_DIR / old_soname), FLAG_ELF_LIBC6 | abi)
        entries += [old, current] if leftover_first else [current, old]
    if layout == "ubuntu" and "libcuda.so" not in omit:
        # The 32-bit copy a multilib host also has; a 64-bit container must not get it.
        i386 = root / "usr/lib/i386-linux-gnu"
        i386.mkdir(parents=True)
        (i386 / f"libcuda.so.{version}").write_bytes(b"\x7fELF i386")
        os.symlink(f"libcuda.so.{version}", i386 / "libcuda.so.1")
        entries.insert(0, CacheEntry("libcuda.so.1", "/lib/i386-linux-gnu/libcuda.so.1", 3))
    if ld_cache:
        (root / "etc/ld.so.cache").write_bytes(build_ld_cache(entries))
    firmware = root / "usr/lib/firmware/nvidia" / version
    firmware.mkdir(parents=True)
    for name in FIRMWARE:
        (firmware / name).write_bytes(b"firmware")
    programs = [*BINARIES, *([hook] if hook else [])]
    for program in programs:
        path = root / "usr/bin" / program
        path.write_text("#!/bin/sh\n")
        path.chmod(0o755)
    for socket in ("run/nvidia-persistenced/socket", "run/nvidia-fabricmanager/socket"):
        (root / socket).parent.mkdir(parents=True)
        (root / socket).write_bytes(b"")
    (dev / "nvidia-caps").mkdir(parents=True)
    for node in (*CONTROL, *(f"nvidia{i}" for i in range(gpus))):
        (dev / node).write_bytes(b"")
    for cap in ("nvidia-cap1", "nvidia-cap2"):
        (dev / "nvidia-caps" / cap).write_bytes(b"")
    return fake
