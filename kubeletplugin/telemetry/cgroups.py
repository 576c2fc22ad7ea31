"""Which pod a process belongs to, read from its cgroup.

NVML names the processes on a GPU by host pid and nothing else; kubelet puts every container
of a pod in a cgroup whose path carries the pod's UID, so `/proc/<pid>/cgroup` is how a share's
figures are told apart by pod. Both layouts kubelet uses are read, under cgroup v1 (a line per
hierarchy) and v2 (the single `0::` line):

- systemd driver: `.../kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid>.slice/
  cri-containerd-<id>.scope`, the UID's dashes written as underscores (a guaranteed pod has no
  QoS level: `kubepods-pod<uid>.slice`);
- cgroupfs driver: `/kubepods/burstable/pod<uid>/<container>` (guaranteed: `/kubepods/pod<uid>/`).

A process seen from another cgroup namespace shows a path relative to the reader's (leading
`/../..`); only the path elements matter, so that reads the same.
"""

from __future__ import annotations

import enum
import re
from pathlib import Path

_UID = r"[0-9a-fA-F]{8}[-_][0-9a-fA-F]{4}[-_][0-9a-fA-F]{4}[-_][0-9a-fA-F]{4}[-_][0-9a-fA-F]{12}"
# A pod's element: `pod<uid>` (cgroupfs) or `kubepods[-<qos>]-pod<uid>.slice` (systemd).
_POD_ELEMENT = re.compile(rf"(?:kubepods(?:-[a-z]+)?-)?pod({_UID})(?:\.slice)?")


class NoPod(enum.Enum):
    """Why a pid has no pod this time; each is logged once per cause, not per sample."""

    EXITED = "the process exited before its cgroup was read"
    NOT_IN_POD = "the process's cgroup names no pod"
    UNREADABLE = "the process's cgroup file cannot be read"


def pod_uid_from_cgroup(text: str) -> str | None:
    """The pod UID in the content of a `/proc/<pid>/cgroup` file, None when no line names one.

    Only paths under kubelet's `kubepods` hierarchy count, so a host service whose unit name
    happens to look like `pod<uuid>` is not taken for a pod.
    """
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        elements = [e for e in parts[2].split("/") if e]
        if not any(e.startswith("kubepods") for e in elements):
            continue
        for element in elements:
            match = _POD_ELEMENT.fullmatch(element)
            if match:
                return match.group(1).replace("_", "-").lower()
    return None


def process_pod(proc_root: Path, pid: int) -> str | NoPod:
    """The UID of the pod `pid` runs in, or why there is none."""
    try:
        text = (proc_root / str(pid) / "cgroup").read_text()
    except (FileNotFoundError, ProcessLookupError, NotADirectoryError):
        return NoPod.EXITED
    except OSError:
        return NoPod.UNREADABLE
    uid = pod_uid_from_cgroup(text)
    return NoPod.NOT_IN_POD if uid is None else uid


def pod_uid(proc_root: Path, pid: int) -> str | None:
    """The UID of the pod `pid` runs in; None for a process outside pods or one that exited."""
    found = process_pod(proc_root, pid)
    return None if isinstance(found, NoPod) else found


__all__ = ["NoPod", "pod_uid", "pod_uid_from_cgroup", "process_pod"]
