"""Unix socket paths: naming, the kernel's length limit, and stale files.

Kubelet discovers plugins by watching a directory for sockets, so a leftover socket from a crashed
instance must be replaced, while a regular file at that path points at a configuration mistake
that deleting would only hide.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Final

#: sockaddr_un.sun_path holds 108 bytes including the terminating NUL.
UNIX_PATH_MAX: Final = 108


class SocketPathError(ValueError):
    """A socket path that cannot be used; the message names the path."""


def dra_socket_path(plugin_dir: Path, pod_uid: str | None = None) -> Path:
    name = f"dra-{pod_uid}.sock" if pod_uid else "dra.sock"
    return Path(os.path.abspath(plugin_dir)) / name


def registration_socket_path(
    registry_dir: Path, driver_name: str, pod_uid: str | None = None
) -> Path:
    name = f"{driver_name}-{pod_uid}-reg.sock" if pod_uid else f"{driver_name}-reg.sock"
    return Path(os.path.abspath(registry_dir)) / name


def check_length(path: Path) -> None:
    size = len(os.fsencode(path))
    if size >= UNIX_PATH_MAX:
        raise SocketPathError(
            f"unix socket path {str(path)!r} is {size} bytes; the limit is "
            f"{UNIX_PATH_MAX - 1} bytes, use a shorter directory or driver name"
        )


def prepare_socket_path(path: Path) -> None:
    """Make ``path`` ready to listen on: parent created, stale socket removed."""
    check_length(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        mode = path.lstat().st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(mode):
        raise SocketPathError(
            f"{str(path)!r} exists and is not a unix socket; refusing to delete it"
        )
    path.unlink(missing_ok=True)


def remove_socket(path: Path) -> None:
    """Remove our socket if it is still there; anything else at the path is left alone."""
    try:
        if stat.S_ISSOCK(path.lstat().st_mode):
            path.unlink(missing_ok=True)
    except FileNotFoundError:
        pass


__all__ = [
    "UNIX_PATH_MAX",
    "SocketPathError",
    "check_length",
    "dra_socket_path",
    "prepare_socket_path",
    "registration_socket_path",
    "remove_socket",
]
