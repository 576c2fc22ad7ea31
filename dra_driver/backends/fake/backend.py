"""A GPU backend without GPUs, faithful enough that the driver cannot tell the difference.

The demo, the end-to-end tests and CI run the real driver code against this backend, so it
reproduces what NVML does rather than what is convenient: the same typed errors carrying the NVML
return code, the placements and limits of the real products (`dra_driver/data`), GPU instance ids
handed out lowest-free-first, and MIG device UUIDs that change when a device is re-created.
With a state directory, MIG instances and injected faults outlive the process, like instances on
a real GPU outlive the plugin that created them, until the node's boot ID changes.

Semantics worth knowing (each chosen to match NVML or, where NVML has no equivalent, documented):
- an unknown minor raises NotFoundError (code 6), as looking a GPU up by UUID does;
- `possible_placements` works on unhealthy or MIG-disabled GPUs (they are static facts);
- creates and `set_timeslice` on an unhealthy GPU raise GpuLostError; destroys still work so
  teardown can converge;
- MIG operations on a GPU without MIG mode raise NotSupportedError, while listing its
  instances returns nothing;
- a new boot ID drops live instances, time-slice settings and fake processes, as a reboot
  would; injected faults stay, since a test put them there;
- fake processes (`fake.load`) make `usage()` report what they declare, with None wherever
  NVML has no figure (see `fake.usage`), and a MIG device with a process on it is in use: its
  compute instance cannot be destroyed, as with `mark_busy`;
- after `close()` every call raises NvmlUnavailableError (code 1), as NVML after shutdown.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from dra_driver.backends.base import (
    TIMESLICE_SETTINGS,
    DeviceHealth,
    HealthEvent,
    TimeSliceInterval,
    timeslice_from_setting,
)
from dra_driver.backends.errors import (
    GpuLostError,
    InsufficientResourcesError,
    InUseError,
    NotFoundError,
    NotSupportedError,
    NvmlUnavailableError,
)
from dra_driver.backends.fake.faults import TORN_DOWN, check_fault_name, fault_error
from dra_driver.backends.fake.mig import LiveInstance, check_admission
from dra_driver.backends.fake.spec import FakeGpuSpec, parse_spec
from dra_driver.backends.fake.state import (
    ComputeInstanceRecord,
    CreateFault,
    FakeState,
    FileStateStore,
    GpuInstanceRecord,
    GpuRecord,
    MemoryStateStore,
    StateStore,
    UnhealthyRecord,
    read_boot_id,
)
from dra_driver.backends.fake.topology import build_gpus, mig_uuid
from dra_driver.backends.fake.usage import fake_usage
from dra_driver.backends.return_codes import NvmlReturn
from dra_driver.backends.usage import UsageSample
from dra_driver.inventory.model import (
    GpuInfo,
    GpuInstance,
    Inventory,
    MigDevice,
    MigPlacement,
    MigProfile,
)

DEFAULT_DRIVER_VERSION = "580.95.05"
DEFAULT_CUDA_DRIVER_VERSION = "13.0"
# XID 79: "GPU has fallen off the bus", the classic reason a GPU becomes unusable.
DEFAULT_XID = 79
# The one compute instance the driver creates fills its GPU instance; NVML numbers it 0.
FULL_CI_ID = 0


class FakeBackend:
    """Fake GPUs of one node; satisfies `GpuBackend`, plus fault injection for tests."""

    def __init__(
        self,
        node_name: str,
        gpus: Sequence[FakeGpuSpec],
        *,
        state_dir: Path | None = None,
        boot_id: str | None = None,
        driver_version: str = DEFAULT_DRIVER_VERSION,
        cuda_driver_version: str = DEFAULT_CUDA_DRIVER_VERSION,
    ) -> None:
        gpus = tuple(gpus)
        self._node_name = node_name
        self._gpus = build_gpus(
            node_name, gpus, driver_version=driver_version, cuda_driver_version=cuda_driver_version
        )
        self._by_minor = {gpu.minor: gpu for gpu in self._gpus}
        self._product_keys = [spec.product.key for spec in gpus for _ in range(spec.count)]
        self._by_uuid = {gpu.uuid: gpu for gpu in self._gpus}
        self._store: StateStore = (
            MemoryStateStore() if state_dir is None else FileStateStore(state_dir, node_name)
        )
        self._boot_id = boot_id if boot_id is not None else read_boot_id()
        self._closed = False
        self._pending_events: list[HealthEvent] = []
        with self._store.transaction() as state:
            if state.boot_id != self._boot_id:
                _forget_reboot_casualties(state)
                state.boot_id = self._boot_id
            for gpu in self._gpus:
                record = self._record(state, gpu)
                if record.unhealthy is not None:
                    # A fresh reader must learn about GPUs that went bad before it started.
                    self._pending_events.append(
                        HealthEvent(
                            gpu.minor,
                            DeviceHealth.UNHEALTHY,
                            record.unhealthy.reason,
                            record.unhealthy.xid,
                        )
                    )
            self._event_cursor = state.next_event_seq

    @classmethod
    def from_spec(
        cls,
        spec: str,
        node_name: str,
        *,
        state_dir: Path | None = None,
        boot_id: str | None = None,
        driver_version: str | None = None,
        cuda_driver_version: str | None = None,
    ) -> FakeBackend:
        """Build from a `PROFILE:COUNT[,...]` string or a YAML file (see `fake.spec`).

        Versions given here win over the YAML file's, which win over the defaults.
        """
        node = parse_spec(spec)
        return cls(
            node_name,
            node.gpus,
            state_dir=state_dir,
            boot_id=boot_id,
            driver_version=driver_version or node.driver_version or DEFAULT_DRIVER_VERSION,
            cuda_driver_version=cuda_driver_version
            or node.cuda_driver_version
            or DEFAULT_CUDA_DRIVER_VERSION,
        )

    # ---- GpuBackend -------------------------------------------------------------------------

    @property
    def node_name(self) -> str:
        return self._node_name

    @property
    def gpus(self) -> tuple[GpuInfo, ...]:
        return self._gpus

    @property
    def state_path(self) -> Path | None:
        """The shared state file, or None when state is private to this object."""
        return self._store.path

    def inventory(self) -> Inventory:
        self._check_open("inventory")
        with self._store.transaction() as state:
            devices = tuple(
                device
                for gpu in self._gpus
                for device in self._mig_devices(gpu, self._record(state, gpu))
            )
        return Inventory(node_name=self._node_name, gpus=self._gpus, mig_devices=devices)

    def possible_placements(self, minor: int, profile: str) -> tuple[MigPlacement, ...]:
        operation = f"get placements of profile {profile}"
        gpu = self._gpu(minor, operation)
        return self._profile(gpu, profile, operation).placements

    def create_gpu_instance(self, minor: int, profile: str, placement: MigPlacement) -> int:
        operation = f"create GPU instance {profile} at {placement.start}:{placement.size}"
        gpu = self._gpu(minor, operation)
        gi_id = 0
        with self._store.transaction() as state:
            record = self._record(state, gpu)
            record.gpu_instance_fault, injected = _consume(record.gpu_instance_fault)
            if injected is None:
                self._check_healthy(gpu, record, operation)
                self._check_mig_mode(gpu, operation)
                mig_profile = self._profile(gpu, profile, operation)
                check_admission(
                    gpu,
                    _label(gpu),
                    operation,
                    mig_profile,
                    placement,
                    self._live(gpu, record),
                )
                gi_id = _lowest_free_id({gi.gi_id for gi in record.instances}, first=1)
                record.instances.append(
                    GpuInstanceRecord(
                        gi_id=gi_id,
                        profile=mig_profile.name,
                        gi_profile_id=mig_profile.gi_profile_id,
                        start=placement.start,
                        size=placement.size,
                        memory_bytes=mig_profile.memory_mib * 1024 * 1024,
                    )
                )
                record.instances.sort(key=lambda gi: gi.gi_id)
        if injected is not None:
            raise fault_error(injected, _label(gpu), operation)
        return gi_id

    def create_compute_instance(self, minor: int, gi_id: int) -> int:
        operation = f"create compute instance in GPU instance {gi_id}"
        gpu = self._gpu(minor, operation)
        with self._store.transaction() as state:
            record = self._record(state, gpu)
            record.compute_instance_fault, injected = _consume(record.compute_instance_fault)
            torn_down = injected == TORN_DOWN
            if torn_down:
                injected = None
            if injected is None:
                self._check_healthy(gpu, record, operation)
                self._check_mig_mode(gpu, operation)
                instance = self._instance(gpu, record, gi_id, operation)
                if instance.compute_instances:
                    raise InsufficientResourcesError(
                        _label(gpu),
                        operation,
                        f"GPU instance {gi_id} already has its full-size compute instance "
                        f"{instance.compute_instances[0].ci_id}",
                        code=int(NvmlReturn.INSUFFICIENT_RESOURCES),
                    )
                record.creations += 1
                instance.compute_instances.append(
                    ComputeInstanceRecord(
                        FULL_CI_ID, mig_uuid(gpu.uuid, gi_id, FULL_CI_ID, record.creations)
                    )
                )
                if torn_down:  # someone else destroys the new MIG device at once
                    record.instances.remove(instance)
        if injected is not None:
            raise fault_error(injected, _label(gpu), operation)
        return FULL_CI_ID

    def destroy_compute_instance(self, minor: int, gi_id: int, ci_id: int) -> None:
        operation = f"destroy compute instance {ci_id} of GPU instance {gi_id}"
        gpu = self._gpu(minor, operation)
        with self._store.transaction() as state:
            record = self._record(state, gpu)
            self._check_mig_mode(gpu, operation)
            instance = self._instance(gpu, record, gi_id, operation)
            remaining = [ci for ci in instance.compute_instances if ci.ci_id != ci_id]
            if len(remaining) == len(instance.compute_instances):
                raise NotFoundError(
                    _label(gpu),
                    operation,
                    f"GPU instance {gi_id} has no compute instance {ci_id}",
                    code=int(NvmlReturn.NOT_FOUND),
                )
            destroyed = {ci.uuid for ci in instance.compute_instances if ci.ci_id == ci_id}
            if instance.busy or any(p.uuid in destroyed for p in state.processes):
                raise InUseError(
                    _label(gpu),
                    operation,
                    f"processes are running on compute instance {ci_id} of GPU instance {gi_id}",
                    code=int(NvmlReturn.IN_USE),
                )
            instance.compute_instances = remaining

    def destroy_gpu_instance(self, minor: int, gi_id: int) -> None:
        operation = f"destroy GPU instance {gi_id}"
        gpu = self._gpu(minor, operation)
        with self._store.transaction() as state:
            record = self._record(state, gpu)
            self._check_mig_mode(gpu, operation)
            instance = self._instance(gpu, record, gi_id, operation)
            if instance.compute_instances:
                ci_ids = ", ".join(str(ci.ci_id) for ci in instance.compute_instances)
                raise InUseError(
                    _label(gpu),
                    operation,
                    f"GPU instance {gi_id} still has compute instance(s) {ci_ids}",
                    code=int(NvmlReturn.IN_USE),
                )
            record.instances.remove(instance)

    def gpu_instances(self, minor: int) -> tuple[GpuInstance, ...]:
        gpu = self._gpu(minor, "list GPU instances")
        with self._store.transaction() as state:
            record = self._record(state, gpu)
            if not gpu.mig_enabled:
                return ()
            return tuple(
                GpuInstance(
                    parent_minor=gpu.minor,
                    profile=gi.profile,
                    gi_profile_id=gi.gi_profile_id,
                    gi_id=gi.gi_id,
                    placement=MigPlacement(gi.start, gi.size),
                    ci_ids=tuple(ci.ci_id for ci in gi.compute_instances),
                )
                for gi in record.instances
            )

    def mig_devices(self, minor: int) -> tuple[MigDevice, ...]:
        gpu = self._gpu(minor, "list MIG devices")
        with self._store.transaction() as state:
            return self._mig_devices(gpu, self._record(state, gpu))

    def set_timeslice(self, minor: int, interval: TimeSliceInterval) -> None:
        operation = f"set time-slice interval {interval.name}"
        gpu = self._gpu(minor, operation)
        with self._store.transaction() as state:
            record = self._record(state, gpu)
            self._check_healthy(gpu, record, operation)
            record.timeslice = TIMESLICE_SETTINGS[interval]

    def health_events(self) -> tuple[HealthEvent, ...]:
        """Each backend object sees every event once, like its own NVML event set: events are
        kept in the state, and this object remembers how far it has read."""
        self._check_open("read health events")
        events, self._pending_events = self._pending_events, []
        with self._store.transaction() as state:
            for event in state.events:
                gpu = self._by_uuid.get(event.uuid)
                if event.seq < self._event_cursor or gpu is None:
                    continue
                events.append(
                    HealthEvent(gpu.minor, DeviceHealth(event.health), event.reason, event.xid)
                )
            self._event_cursor = state.next_event_seq
        return tuple(events)

    def usage(self) -> UsageSample:
        """What the fake processes declare, in the shapes NVML gives (see `fake.usage`)."""
        self._check_open("read usage")
        with self._store.transaction() as state:
            return fake_usage(
                [
                    (
                        gpu,
                        self._record(state, gpu),
                        self._mig_devices(gpu, self._record(state, gpu)),
                    )
                    for gpu in self._gpus
                ],
                state.processes,
            )

    def stop_processes(self, pids: Sequence[int]) -> tuple[int, ...]:
        """A fake process ends at once: it leaves the node's state, so no sample sees it."""
        self._check_open("stop processes")
        wanted = set(pids)
        with self._store.transaction() as state:
            known = {p.pid for p in state.processes}
            state.processes = [p for p in state.processes if p.pid not in wanted]
        return tuple(pid for pid in pids if pid not in known)

    def close(self) -> None:
        self._closed = True

    # ---- inspection and fault injection ------------------------------------------------------

    def timeslice(self, minor: int) -> TimeSliceInterval:
        gpu = self._gpu(minor, "get time-slice interval")
        with self._store.transaction() as state:
            return timeslice_from_setting(self._record(state, gpu).timeslice)

    def healthy(self, minor: int) -> bool:
        gpu = self._gpu(minor, "get health")
        with self._store.transaction() as state:
            return self._record(state, gpu).unhealthy is None

    def inject_unhealthy(
        self, minor: int, xid: int = DEFAULT_XID, reason: str = "GPU has fallen off the bus"
    ) -> None:
        """Make the GPU unusable and announce it; every injection is a new event, as every XID
        is, even on a GPU that is already unhealthy."""
        gpu = self._gpu(minor, "inject unhealthy")
        with self._store.transaction() as state:
            self._record(state, gpu).unhealthy = UnhealthyRecord(xid, reason)
            state.add_event(gpu.uuid, DeviceHealth.UNHEALTHY.value, reason, xid)

    def clear_unhealthy(self, minor: int, reason: str = "fault cleared") -> None:
        """Announce recovery; a no-op on a healthy GPU, since nothing changed."""
        gpu = self._gpu(minor, "clear unhealthy")
        with self._store.transaction() as state:
            record = self._record(state, gpu)
            if record.unhealthy is not None:
                record.unhealthy = None
                state.add_event(gpu.uuid, DeviceHealth.HEALTHY.value, reason, None)

    def fail_next_creates(
        self,
        minor: int,
        count: int = 1,
        error: str = "InsufficientResources",
        *,
        compute_instance: bool = False,
    ) -> None:
        """Make the next `count` GPU-instance creates (or compute-instance creates) fail with
        `error` (a name from `fake.faults.FAULT_ERRORS`); count 0 cancels a pending fault."""
        check_fault_name(error)
        if count < 0:
            raise ValueError(f"count must not be negative, got {count}")
        gpu = self._gpu(minor, "inject create fault")
        fault = CreateFault(error, count) if count else None
        with self._store.transaction() as state:
            record = self._record(state, gpu)
            if compute_instance:
                record.compute_instance_fault = fault
            else:
                record.gpu_instance_fault = fault

    def tear_down_next_mig_devices(self, minor: int, count: int = 1) -> None:
        """The next `count` compute instances created on the GPU are made (the call succeeds),
        then destroyed with their GPU instance by another process before anyone lists them: the
        race a node agent loses when an admin or another tool reconfigures MIG under it."""
        if count < 0:
            raise ValueError(f"count must not be negative, got {count}")
        gpu = self._gpu(minor, "inject tear-down")
        with self._store.transaction() as state:
            self._record(state, gpu).compute_instance_fault = (
                CreateFault(TORN_DOWN, count) if count else None
            )

    def mark_busy(self, minor: int, gi_id: int) -> None:
        """Pretend processes run on the GPU instance's MIG device (blocks destroying its CI)."""
        self._set_busy(minor, gi_id, busy=True)

    def clear_busy(self, minor: int, gi_id: int) -> None:
        self._set_busy(minor, gi_id, busy=False)

    # ---- helpers ----------------------------------------------------------------------------

    def _set_busy(self, minor: int, gi_id: int, *, busy: bool) -> None:
        operation = f"{'mark' if busy else 'clear'} busy GPU instance {gi_id}"
        gpu = self._gpu(minor, operation)
        with self._store.transaction() as state:
            self._instance(gpu, self._record(state, gpu), gi_id, operation).busy = busy

    def _check_open(self, operation: str) -> None:
        if self._closed:
            raise NvmlUnavailableError(
                f"node {self._node_name}",
                operation,
                "the fake backend has been closed",
                code=int(NvmlReturn.UNINITIALIZED),
            )

    def _gpu(self, minor: int, operation: str) -> GpuInfo:
        self._check_open(operation)
        gpu = self._by_minor.get(minor)
        if gpu is None:
            raise NotFoundError(
                f"{minor}",
                operation,
                f"node {self._node_name} has no GPU with minor {minor} "
                + (f"(minors are 0-{len(self._gpus) - 1})" if self._gpus else "(it has no GPUs)"),
                code=int(NvmlReturn.NOT_FOUND),
            )
        return gpu

    def _record(self, state: FakeState, gpu: GpuInfo) -> GpuRecord:
        product = self._product_keys[gpu.minor]
        record = state.gpus.get(gpu.uuid)
        if record is None or record.product != product:
            # Same minor, different product: the old instances belong to hardware that is gone.
            creations = record.creations if record is not None else 0
            record = GpuRecord(product=product, creations=creations)
            state.gpus[gpu.uuid] = record
        record.memory_bytes = gpu.memory_bytes
        return record

    def _check_mig_mode(self, gpu: GpuInfo, operation: str) -> None:
        if not gpu.mig_capable:
            detail = f"{gpu.product_name} does not support MIG"
        elif not gpu.mig_enabled:
            detail = "MIG mode is disabled"
        else:
            return
        raise NotSupportedError(_label(gpu), operation, detail, code=int(NvmlReturn.NOT_SUPPORTED))

    def _check_healthy(self, gpu: GpuInfo, record: GpuRecord, operation: str) -> None:
        if record.unhealthy is not None:
            raise GpuLostError(
                _label(gpu),
                operation,
                f"GPU is lost (XID {record.unhealthy.xid}: {record.unhealthy.reason})",
                code=int(NvmlReturn.GPU_IS_LOST),
            )

    def _profile(self, gpu: GpuInfo, name: str, operation: str) -> MigProfile:
        if not gpu.mig_capable:
            self._check_mig_mode(gpu, operation)
        mig_profile = gpu.profile(name)
        if mig_profile is None:
            known = ", ".join(p.name for p in gpu.mig_profiles)
            raise NotSupportedError(
                _label(gpu),
                operation,
                f"{gpu.product_name} has no MIG profile {name!r} (it has: {known})",
                code=int(NvmlReturn.NOT_SUPPORTED),
            )
        return mig_profile

    def _instance(
        self, gpu: GpuInfo, record: GpuRecord, gi_id: int, operation: str
    ) -> GpuInstanceRecord:
        for instance in record.instances:
            if instance.gi_id == gi_id:
                return instance
        raise NotFoundError(
            _label(gpu), operation, f"no GPU instance {gi_id}", code=int(NvmlReturn.NOT_FOUND)
        )

    def _live(self, gpu: GpuInfo, record: GpuRecord) -> list[LiveInstance]:
        live = []
        for instance in record.instances:
            mig_profile = gpu.profile(instance.profile)
            if mig_profile is not None:
                live.append(
                    LiveInstance(
                        instance.gi_id, mig_profile, MigPlacement(instance.start, instance.size)
                    )
                )
        return live

    def _mig_devices(self, gpu: GpuInfo, record: GpuRecord) -> tuple[MigDevice, ...]:
        if not gpu.mig_enabled:
            return ()
        return tuple(
            MigDevice(
                parent_minor=gpu.minor,
                parent_uuid=gpu.uuid,
                profile=gi.profile,
                gi_profile_id=gi.gi_profile_id,
                gi_id=gi.gi_id,
                ci_id=ci.ci_id,
                uuid=ci.uuid,
                placement=MigPlacement(gi.start, gi.size),
            )
            for gi in record.instances
            for ci in gi.compute_instances
        )


def _label(gpu: GpuInfo) -> str:
    return f"{gpu.minor} ({gpu.uuid})"


def _lowest_free_id(used: set[int], *, first: int) -> int:
    candidate = first
    while candidate in used:
        candidate += 1
    return candidate


def _consume(fault: CreateFault | None) -> tuple[CreateFault | None, str | None]:
    """Use up one injected failure: returns what is left of the fault and the error to raise.

    The caller raises only after the state is saved, so the countdown persists although the
    operation fails.
    """
    if fault is None:
        return None, None
    if fault.remaining <= 1:
        return None, fault.error
    return CreateFault(fault.error, fault.remaining - 1), fault.error


def _forget_reboot_casualties(state: FakeState) -> None:
    state.processes = []  # a reboot ends every process
    for record in state.gpus.values():
        record.instances = []
        record.timeslice = TIMESLICE_SETTINGS[TimeSliceInterval.DEFAULT]
