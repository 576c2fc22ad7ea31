"""Where the real control plane's binaries are: built from Go modules by `hack/upstream.sh`.

`DRA_UPSTREAM_BIN` names a directory that holds them (for a machine that built them elsewhere);
otherwise the repository's `hack/upstream.sh` says where its cache is, and builds it when asked to.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

BINARIES = (
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kubelet",
    "fakecri",
)
SCRIPT = Path(__file__).resolve().parents[2] / "hack" / "upstream.sh"


class BinariesMissingError(RuntimeError):
    """The control plane is not built here; the message says how to build it."""


def _complete(directory: Path) -> bool:
    return all(os.access(directory / name, os.X_OK) for name in BINARIES)


def upstream_binaries(*, build: bool = False) -> Path:
    """The directory of the binaries; builds them first (minutes, once a machine) if `build`."""
    named = os.environ.get("DRA_UPSTREAM_BIN")
    if named:
        directory = Path(named)
        if not _complete(directory):
            missing = [b for b in BINARIES if not os.access(directory / b, os.X_OK)]
            raise BinariesMissingError(f"DRA_UPSTREAM_BIN={named} lacks {', '.join(missing)}")
        return directory
    if not SCRIPT.exists():
        raise BinariesMissingError(
            "the real control plane is built by hack/upstream.sh in a checkout of the project; "
            "set DRA_UPSTREAM_BIN to a directory of its binaries instead"
        )
    done = subprocess.run(
        ["bash", str(SCRIPT), "build" if build else "dir"],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise BinariesMissingError(
            done.stderr.strip().splitlines()[-1]
            if done.stderr.strip()
            else "hack/upstream.sh failed"
        )
    return Path(done.stdout.strip().splitlines()[-1])
