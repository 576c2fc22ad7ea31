"""From one usage sample to the figures of each device this plugin prepared.

The checkpoint says which claim holds which device of which GPU; the sample says how each GPU,
MIG device and process is used. A whole GPU or a MIG device belongs to one claim, so it takes
the hardware's own figures. A share (time slice or MPS) is one of several on its GPU, so it
takes only its own pods' processes: each process's pod is read from its cgroup and matched
against the pods the claim is reserved for.

Two figures NVML leaves out can still be known for sure, and an idle device hides behind exactly
these two: a GPU in MIG mode has no SM figure, yet with no MIG device and no process on it
nothing can run there, so it is at 0 %; and a share's processes may have no samples (NVML keeps
none for processes that ran no kernel), yet a share never uses more than its whole GPU, so the
GPU's own figure bounds it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from api.device_type import DeviceType
from dra_driver.backends.usage import GpuUsage, MigUsage, ProcessUsage, UsageSample
from dra_driver.checkpoint.model import ClaimRecord, ClaimState, DeviceRecord
from kubeletplugin.telemetry.cgroups import NoPod

# An on-demand MIG device is named after its placement (`gpu-0-mig-1g10gb-3`), a pre-created one
# after its GPU and compute instance IDs (`gpu-0-mig-5-0`); profile names always hold a letter.
_PLACED_MIG = re.compile(r"gpu-\d+-mig-[a-z0-9]*[a-z][a-z0-9]*-(\d+)")
_STATIC_MIG = re.compile(r"gpu-\d+-mig-(\d+)-(\d+)")

PodOf = Callable[[int], "str | NoPod"]
"""pid -> the UID of its pod, or why it has none (cgroups.process_pod under the proc root)."""


@dataclass(frozen=True, slots=True)
class ClaimPods:
    """The pods a claim is reserved for, from its `status.reservedFor`."""

    names: tuple[str, ...] = ()
    uids: frozenset[str] = frozenset()

    @classmethod
    def from_claim(cls, claim: Mapping[str, object]) -> ClaimPods:
        status = claim.get("status")
        reserved = status.get("reservedFor") if isinstance(status, Mapping) else None
        names: list[str] = []
        uids: set[str] = set()
        for ref in reserved if isinstance(reserved, list) else ():
            if not isinstance(ref, Mapping) or ref.get("resource", "pods") != "pods":
                continue
            if ref.get("name"):
                names.append(str(ref["name"]))
            if ref.get("uid"):
                uids.add(str(ref["uid"]))
        return cls(tuple(sorted(names)), frozenset(uids))


@dataclass(frozen=True, slots=True)
class DeviceUsage:
    """One prepared device's figures this cycle."""

    claim_uid: str
    namespace: str
    name: str
    pool: str
    device: str
    uuid: str  # the GPU's or MIG device's the figures were read from
    sm_percent: float | None
    memory_used_bytes: int | None


@dataclass(frozen=True, slots=True)
class Skipped:
    """Something left out of this cycle, with what it was; the sampler logs each cause once."""

    cause: str
    subject: str


@dataclass(frozen=True, slots=True)
class Attribution:
    devices: tuple[DeviceUsage, ...] = ()
    skipped: tuple[Skipped, ...] = ()
    # Claims with a device where a process runs whose pod is none of the known pods of the
    # claims on that device: their pod lists may be stale (a pod reserved it since).
    stale_pods: frozenset[str] = field(default_factory=frozenset)


def _device_uuid(
    claim: ClaimRecord, device: DeviceRecord, sample: UsageSample
) -> tuple[str | None, str]:
    """The uuid the device's figures are read under, or None and why it has none."""
    gpu = next((g for g in sample.gpus if g.minor == device.minor), None)
    if device.device_type is DeviceType.MIG:
        if device.pre_created:
            # The preparer found it by GPU, GPU instance and compute instance in the inventory;
            # the sample names MIG devices by GPU instance only, which is one device unless an
            # administrator put several compute instances in one GPU instance.
            match = _STATIC_MIG.fullmatch(device.device_name)
            gi_id = int(match.group(1)) if match else None
            found = [
                m.uuid for m in sample.mig_devices if m.minor == device.minor and m.gi_id == gi_id
            ]
            if device.mps_uuid in found:
                return device.mps_uuid, ""
            if len(found) == 1:
                return found[0], ""
            if found:
                return None, "several MIG devices share the pre-created device's GPU instance"
            return None, "the pre-created MIG device is not in the sample"
        match = _PLACED_MIG.fullmatch(device.device_name)
        start = int(match.group(1)) if match else None
        instance = next(
            (
                i
                for i in claim.mig_instances
                if i.minor == device.minor and i.placement_start == start
            ),
            None,
        )
        if instance is None or instance.uuid is None:
            return None, "the claim's record has no MIG device at this placement"
        return instance.uuid, ""
    if device.device_type in _SHARES and device.mps_uuid:
        return device.mps_uuid, ""  # MPS on a MIG device: the MIG device's processes
    if gpu is None:
        return None, "the GPU is not in the sample"
    return gpu.uuid, ""


_SHARES = frozenset({DeviceType.TIMESLICE, DeviceType.SHARED, DeviceType.OPPORTUNISTIC})
"""Devices one of several claims holds on a GPU: figured from their own pods' processes."""


def _borrowers(
    claims: Iterable[ClaimRecord], pods: Mapping[str, ClaimPods], sample: UsageSample
) -> dict[str, frozenset[str]]:
    """GPU UUID -> the pods borrowing it (claims holding its lent share)."""
    uuids = {g.minor: g.uuid for g in sample.gpus}
    found: dict[str, set[str]] = {}
    for claim in claims:
        if claim.state is not ClaimState.PREPARE_COMPLETED:
            continue
        for device in claim.devices:
            if device.device_type is DeviceType.OPPORTUNISTIC and device.minor in uuids:
                known = pods.get(claim.uid, ClaimPods()).uids
                found.setdefault(uuids[device.minor], set()).update(known)
    return {uuid: frozenset(uids) for uuid, uids in found.items()}


def _sum(values: Iterable[float | int | None]) -> float | None:
    total = 0.0
    for value in values:
        if value is None:
            return None
        total += value
    return total


def _own_sm(uuid: str, gpus: Mapping[str, GpuUsage], migs: Mapping[str, MigUsage]) -> float | None:
    if uuid in migs:
        return migs[uuid].sm_percent
    return gpus[uuid].sm_percent if uuid in gpus else None


def _bounded(share: float | None, whole: float | None) -> float | None:
    """A share's figure, never above the figure of the device it shares."""
    if whole is None:
        return share
    return whole if share is None else min(share, whole)


def _runs_nothing(
    minor: int, uuid: str, sample: UsageSample, by_uuid: Mapping[str, list[ProcessUsage]]
) -> bool:
    """No MIG device and no process on this GPU: nothing can be computing on it."""
    return not by_uuid.get(uuid) and not any(m.minor == minor for m in sample.mig_devices)


def attribute(
    sample: UsageSample,
    claims: Iterable[ClaimRecord],
    pods: Mapping[str, ClaimPods],
    pod_of: PodOf,
) -> Attribution:
    """Each prepared device of `claims` with its figures from `sample`.

    `pods` holds each claim's pods by claim UID (a claim missing there has none known yet).
    A device on a GPU that failed this cycle is left out, never reported as idle.
    """
    failed = {f.minor for f in sample.failures}
    gpus = {g.uuid: g for g in sample.gpus}
    migs = {m.uuid: m for m in sample.mig_devices}
    by_uuid: dict[str, list[ProcessUsage]] = {}
    for process in sample.processes:
        by_uuid.setdefault(process.uuid, []).append(process)
    pod_cache: dict[int, str | NoPod] = {}

    def lookup(pid: int) -> str | NoPod:
        if pid not in pod_cache:
            pod_cache[pid] = pod_of(pid)
        return pod_cache[pid]

    claims = list(claims)
    borrowers = _borrowers(claims, pods, sample)
    devices: list[DeviceUsage] = []
    skipped: list[Skipped] = []
    # uuid -> the claims with a device on it: to tell a stranger's process from a stale list
    holders: dict[str, set[str]] = {}
    for claim in claims:
        if claim.state is not ClaimState.PREPARE_COMPLETED:
            continue
        known = pods.get(claim.uid, ClaimPods())
        for device in claim.devices:
            label = f"{claim.namespace}/{claim.name} {device.device_name}"
            if device.minor in failed:
                skipped.append(Skipped("GPU failed this cycle", f"GPU {device.minor}"))
                continue
            uuid, why = _device_uuid(claim, device, sample)
            if uuid is None:
                skipped.append(Skipped(why, label))
                continue
            holders.setdefault(uuid, set()).add(claim.uid)
            sm: float | None
            memory: float | None
            if device.device_type in _SHARES:
                mine: list[ProcessUsage] = []
                for process in by_uuid.get(uuid, ()):
                    owner = lookup(process.pid)
                    if isinstance(owner, NoPod):
                        continue
                    if owner in known.uids:
                        mine.append(process)
                sm = _bounded(_sum(p.sm_percent for p in mine), _own_sm(uuid, gpus, migs))
                memory = _sum(p.memory_used_bytes for p in mine)
            elif uuid in migs:
                sm, memory = migs[uuid].sm_percent, migs[uuid].memory_used_bytes
            elif uuid in gpus and uuid in borrowers:
                # A lent GPU: its owner's figures are its processes', not the borrowers'.
                theirs = [p for p in by_uuid.get(uuid, ()) if lookup(p.pid) not in borrowers[uuid]]
                sm = _bounded(_sum(p.sm_percent for p in theirs), gpus[uuid].sm_percent)
                memory = _sum(p.memory_used_bytes for p in theirs)
            elif uuid in gpus:
                sm, memory = gpus[uuid].sm_percent, gpus[uuid].memory_used_bytes
                if sm is None and _runs_nothing(gpus[uuid].minor, uuid, sample, by_uuid):
                    sm = 0.0
            else:
                skipped.append(Skipped("the device is not in the sample", label))
                continue
            devices.append(
                DeviceUsage(
                    claim_uid=claim.uid,
                    namespace=claim.namespace,
                    name=claim.name,
                    pool=device.pool_name,
                    device=device.device_name,
                    uuid=uuid,
                    sm_percent=sm,
                    memory_used_bytes=None if memory is None else int(memory),
                )
            )
    stale: set[str] = set()
    for uuid, claim_uids in holders.items():
        known_uids = set().union(*(pods.get(c, ClaimPods()).uids for c in claim_uids))
        for process in by_uuid.get(uuid, ()):
            owner = lookup(process.pid)
            if isinstance(owner, NoPod):
                skipped.append(Skipped(owner.value, f"processes on {uuid}"))
            elif owner not in known_uids:
                stale.update(claim_uids)
    return Attribution(tuple(devices), tuple(skipped), frozenset(stale))


__all__ = ["Attribution", "ClaimPods", "DeviceUsage", "PodOf", "Skipped", "attribute"]
