"""Fake GPU load: the processes a pod "runs" on fake GPUs, for tests and the local cluster.

The node agent of the local cluster calls these when it starts or ends a pod that asks for
load; tests call them directly. A fake process is a record in the node's fake GPU state (so
every backend object and process on that node sees it) plus `<proc_root>/<pid>/cgroup`, written
the way a systemd-driven kubelet's cgroup v2 tree names the pod, so the plugin's attribution
reads the same file shape it reads on a real node.
"""

from __future__ import annotations

import hashlib
import shutil
import time
from collections.abc import Sequence
from pathlib import Path

from dra_driver.backends.errors import NotFoundError
from dra_driver.backends.fake.load_curve import LoadCurve
from dra_driver.backends.fake.state import (
    FakeState,
    FileStateStore,
    GpuInstanceRecord,
    ProcessRecord,
)
from dra_driver.backends.return_codes import NvmlReturn
from dra_driver.inventory.products import product

MIB = 1024 * 1024
_OPERATION = "apply fake load"


def apply_pod_load(
    state_dir: Path,
    node_name: str,
    proc_root: Path,
    pod_uid: str,
    uuids: Sequence[str],
    percent: float | LoadCurve,
    *,
    started_at: float | None = None,
) -> tuple[int, ...]:
    """Replace the pod's fake processes with one per UUID (GPU or MIG device of the node), each
    using `percent` of its device's SM time and memory, a number or a curve over time; return
    the new pids in `uuids` order.

    A curve never above 0 % starts no process: a process that holds no memory and runs no
    kernel is what a pod that never touches its GPU looks like, and on a GPU in MIG mode NVML
    could not even tell such a process's use (no SM figure there).

    A curve counts its steps from `started_at` (epoch seconds; now by default). Given the same
    curve again without `started_at`, the pod keeps its earlier start: a repeated start of the
    same pod (the node agent prepares running pods again after a restart) must not replay the
    steps from the beginning."""
    curve = percent if isinstance(percent, LoadCurve) else _constant(percent)
    if not pod_uid:
        raise ValueError("pod_uid must not be empty")
    wire = None if curve.is_constant else curve.to_wire()
    with FileStateStore(state_dir, node_name).transaction() as state:
        totals = _device_memory(state)
        for uuid in uuids:
            if uuid not in totals:
                raise NotFoundError(
                    uuid,
                    _OPERATION,
                    f"node {node_name} has no GPU or MIG device {uuid}",
                    code=int(NvmlReturn.NOT_FOUND),
                )
        earlier = [p for p in state.processes if p.pod_uid == pod_uid]
        start = started_at
        if start is None and wire is not None:
            start = next((p.started_at for p in earlier if p.curve == wire), None)
        if start is None:
            start = time.time()
        state.processes = [p for p in state.processes if p.pod_uid != pod_uid]
        at_start = curve.percent_at(start, start)
        started: list[ProcessRecord] = []
        for uuid in () if curve.is_zero else uuids:
            started.append(
                ProcessRecord(
                    pid=state.allocate_pid(),
                    pod_uid=pod_uid,
                    uuid=uuid,
                    sm_percent=at_start,
                    memory_bytes=int(totals[uuid] * at_start / 100),
                    curve=wire,
                    started_at=None if wire is None else start,
                )
            )
        state.processes.extend(started)
    _remove_proc_dirs(proc_root, [p.pid for p in earlier])
    for process in started:
        directory = proc_root / str(process.pid)
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "cgroup").write_text(cgroup_line(pod_uid, process.pid) + "\n")
    return tuple(p.pid for p in started)


def clear_pod_load(state_dir: Path, node_name: str, proc_root: Path, pod_uid: str) -> None:
    """End the pod's fake processes; nothing to do when it has none."""
    with FileStateStore(state_dir, node_name).transaction() as state:
        ended = [p.pid for p in state.processes if p.pod_uid == pod_uid]
        if ended:
            state.processes = [p for p in state.processes if p.pod_uid != pod_uid]
    _remove_proc_dirs(proc_root, ended)


def cgroup_line(pod_uid: str, pid: int) -> str:
    """The cgroup v2 line of a container process under the systemd cgroup driver, best-effort
    QoS; the container id is derived from the pod and pid so it is stable for a test."""
    container = hashlib.sha256(f"{pod_uid}/{pid}".encode()).hexdigest()
    pod = pod_uid.replace("-", "_")
    return (
        "0::/kubepods.slice/kubepods-besteffort.slice/"
        f"kubepods-besteffort-pod{pod}.slice/cri-containerd-{container}.scope"
    )


def _constant(percent: float) -> LoadCurve:
    """The curve of a plain percent, with the message callers have always seen for a bad one."""
    try:
        return LoadCurve.constant(percent)
    except ValueError:
        raise ValueError(f"percent must be a number from 0 to 100, got {percent!r}") from None


def _device_memory(state: FakeState) -> dict[str, int]:
    """Memory in bytes of every GPU and live MIG device the node's state knows."""
    totals: dict[str, int] = {}
    for gpu_uuid, record in state.gpus.items():
        totals[gpu_uuid] = record.memory_bytes
        for instance in record.instances:
            memory = instance.memory_bytes or _packaged_profile_memory(record.product, instance)
            for ci in instance.compute_instances:
                totals[ci.uuid] = memory
    return totals


def _packaged_profile_memory(product_key: str, instance: GpuInstanceRecord) -> int:
    """For instances made before their memory was kept: the packaged facts, where they know the
    product (0 otherwise; the process then uses no memory)."""
    try:
        profiles = product(product_key).mig_profiles
    except KeyError:
        return 0
    for profile in profiles:
        if profile.name == instance.profile:
            return profile.memory_mib * MIB
    return 0


def _remove_proc_dirs(proc_root: Path, pids: Sequence[int]) -> None:
    for pid in pids:
        shutil.rmtree(proc_root / str(pid), ignore_errors=True)
