"""Reading (and, for tests, writing) glibc's linker cache, `/etc/ld.so.cache`.

The cache is what the dynamic linker itself consults, so it is the most reliable answer to "where
does this host keep libcuda.so.1", whatever the distribution's directory layout. Only the binary
format glibc has written by default since 2.32 ("glibc-ld.so.cache1.1") is understood, on its own
or behind the old "ld.so-1.7.0" table that earlier glibc versions put first. The cache is read
as bytes, never through `ldconfig -p`, because the plugin's own image has a different glibc (or
none) and must not run programs from the host's driver root.

Layout (all integers in the byte order the header's flag names, in practice little-endian):
a 48-byte header (17-byte magic, 3-byte version, entry count, string table length, endianness
flag, padding, extension offset, reserved words), then 24-byte entries (flags, name offset, path
offset, OS version, hwcap), then NUL-terminated strings. Offsets count from the header's start.
"""

from __future__ import annotations

import platform
import struct
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from dra_driver.driverroot.errors import DriverRootError

NEW_MAGIC = b"glibc-ld.so.cache1.1"
OLD_MAGIC = b"ld.so-1.7.0"
_OLD_HEADER = 16  # 12 bytes of magic (NUL-padded), the entry count
_OLD_ENTRY = 12
_HEADER = struct.Struct("<20sIIB3xI12x")
_ENTRY = struct.Struct("<iIIIQ")
_ENDIAN_AT = 28  # offset of the byte-order flag in the header
_ENDIAN_BIG = 3

# The low byte of an entry's flags is the file type (ELF for glibc: 1 or 3); the high byte says
# which ABI the library is built for. Values from glibc's ldconfig.h.
FLAG_ELF_LIBC6 = 0x0003
FLAG_X8664_LIB64 = 0x0300
FLAG_X8664_LIBX32 = 0x0800
FLAG_AARCH64_LIB64 = 0x0A00
_ABI_MASK = 0xFF00
_MACHINE_ABI = {
    "x86_64": FLAG_X8664_LIB64,
    "amd64": FLAG_X8664_LIB64,
    "aarch64": FLAG_AARCH64_LIB64,
}


@dataclass(frozen=True, slots=True)
class CacheEntry:
    """A library name (normally its soname) and the absolute path the linker loads for it."""

    name: str
    path: str
    flags: int

    @property
    def abi(self) -> int:
        return self.flags & _ABI_MASK


def native_abi(machine: str | None = None) -> int | None:
    """The ABI flag of 64-bit libraries on this machine; None when the machine is not known, in
    which case every 64-bit entry is accepted."""
    return _MACHINE_ABI.get((machine or platform.machine()).lower())


def read_ld_cache(path: Path) -> tuple[CacheEntry, ...]:
    try:
        data = path.read_bytes()
    except OSError as error:
        raise DriverRootError(
            f"cannot read the linker cache {path}: {error.strerror or error}"
        ) from None
    return parse_ld_cache(data, str(path))


def parse_ld_cache(data: bytes, source: str) -> tuple[CacheEntry, ...]:
    start = _new_format_start(data, source)
    if len(data) < start + _HEADER.size:
        raise DriverRootError(f"linker cache {source} is truncated (no complete header)")
    order = ">" if data[start + _ENDIAN_AT] == _ENDIAN_BIG else "<"
    header = struct.Struct(order + _HEADER.format[1:])
    entry = struct.Struct(order + _ENTRY.format[1:])
    magic, count, _strings, _endian, _extension = header.unpack_from(data, start)
    if magic != NEW_MAGIC:
        raise DriverRootError(
            f"linker cache {source} is not in the glibc-ld.so.cache1.1 format "
            f"(starts with {data[:20]!r})"
        )
    table = start + _HEADER.size
    if table + count * entry.size > len(data):
        raise DriverRootError(
            f"linker cache {source} is truncated: {count} entries do not fit in {len(data)} bytes"
        )
    entries = []
    for index in range(count):
        flags, key, value, _os, _hwcap = entry.unpack_from(data, table + index * entry.size)
        entries.append(
            CacheEntry(
                name=_string(data, start + key, source, index),
                path=_string(data, start + value, source, index),
                flags=flags,
            )
        )
    return tuple(entries)


def _new_format_start(data: bytes, source: str) -> int:
    """Offset of the new-format header: 0, or just past the old table when one comes first."""
    if not data.startswith(OLD_MAGIC):
        return 0
    if len(data) < _OLD_HEADER:
        raise DriverRootError(f"linker cache {source} is truncated (old-format header)")
    old_count: int = struct.unpack_from("<I", data, 12)[0]
    end = _OLD_HEADER + old_count * _OLD_ENTRY
    return (end + 7) & ~7  # the new header is aligned for its 64-bit fields


def _string(data: bytes, offset: int, source: str, index: int) -> str:
    end = data.find(b"\0", offset)
    if offset >= len(data) or end < 0:
        raise DriverRootError(f"linker cache {source}: entry {index} points outside the file")
    return data[offset:end].decode("utf-8", errors="surrogateescape")


def build_ld_cache(entries: Iterable[CacheEntry]) -> bytes:
    """Encode entries in the new format, as ldconfig would; used to build fake driver roots.

    ldconfig sorts entries so the linker can binary-search them; the reader here does not rely
    on that order, so entries are written as given.
    """
    items = list(entries)
    strings = bytearray()
    offsets: list[tuple[int, int]] = []
    base = _HEADER.size + len(items) * _ENTRY.size
    for item in items:
        name_at = base + len(strings)
        strings += item.name.encode() + b"\0"
        path_at = base + len(strings)
        strings += item.path.encode() + b"\0"
        offsets.append((name_at, path_at))
    out = bytearray(_HEADER.pack(NEW_MAGIC, len(items), len(strings), 2, 0))
    for item, (name_at, path_at) in zip(items, offsets, strict=True):
        out += _ENTRY.pack(item.flags, name_at, path_at, 0, 0)
    return bytes(out + strings)
