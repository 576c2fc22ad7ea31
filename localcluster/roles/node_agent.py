"""Stand-in for kubelet's DRA part on one node of the local cluster (tests and demos only).

The kubelet plugin is only ever called by kubelet, so testing it end to end needs something
that behaves like kubelet toward it: discovers it through the registry directory, speaks the
real gRPC protocols over the real unix sockets, prepares a pod's claims before the pod would
start and releases them once the pod is going away. Runs no containers; instead it writes
what a container runtime would have given the pod (devices, and the environment the CDI specs
inject) onto the pod, so tests and demos can check the whole path from claim to container.

What kubelet does and this agent mirrors:

* plugin registration through the registry directory (see :mod:`.registry`);
* a pod's claims are prepared only when all are allocated and reserved for it, one
  NodePrepareResources call per driver, with only namespace, UID and name of each claim;
* an error for any claim means the pod does not start and preparation is retried later;
* unprepare happens when the pod is being deleted (or is gone), and only for what was
  prepared, which the agent remembers in memory as kubelet does in its claim cache;
* a pod whose claims are prepared gets phase ``Running`` and ``Ready=True``, as kubelet
  reports once containers run (PodDisruptionBudgets count only ready pods as healthy);
* the pod object stays (a finalizer of ours, standing in for kubelet's hold on a terminating
  pod) until its resources are released; then the pod is dropped from the claims'
  ``reservedFor`` as the upstream resourceclaim controller would (where that controller
  runs, ``drop_reservations=False`` leaves it to it), and deleted with grace
  period 0, as kubelet finishes a pod's deletion on kube-apiserver. An evicted pod goes the
  same way: eviction is a delete.

Fake load (tests and demos only, nodes with fake GPUs): a pod annotated
``gpu.dra-driver.dev/fake-utilization`` "runs" one fake process per device it got from the
driver, from the moment it starts until its claims are released
(:mod:`dra_driver.backends.fake.load`), so the plugin's telemetry measures something. The value
is a percent of the device (``"80"``; none at ``"0"``), steps from the pod's start
(``"0:5,20:80"``: 5 %, then 80 % from 20 s on), or a daily curve on a compressed day shared by
every pod through the wall clock (``"daily:peak=80,valley=5,day=120,phase=0.25"``), see
:mod:`dra_driver.backends.fake.load_curve`. Any other value is a configuration error of the pod,
refused as kubelet refuses one: a Warning Event on the pod, and the pod does not start until
it is fixed.

What it does not: containers, the 45 s per-call deadline is configurable rather than fixed,
the claim cache is not checkpointed (a restarted agent prepares running pods again, which is
safe because the calls are idempotent), and pods without claims are left alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid as uuidlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

import grpc
import structlog
from kubernetes import client, dynamic
from kubernetes.client.exceptions import ApiException

from dra_driver.backends.errors import BackendError
from dra_driver.backends.fake.load import apply_pod_load, clear_pod_load
from dra_driver.backends.fake.load_curve import VALID_FORMS, LoadCurve
from dra_driver.cdi import CdiError, CdiSpec, CdiSpecDir, container_environment
from dra_driver.kubeletapi import KUBELET_CALL_TIMEOUT_S
from dra_driver.kubeletapi.client import DraClient
from dra_driver.kubeletapi.types import ClaimRef, PreparedDevice, PrepareOutcome
from dra_driver.pod_claims import claim_names
from kubeletplugin.prepare.container_edits import env_key
from localcluster.roles.registry import (
    DEFAULT_VERSIONS,
    PluginRegistration,
    RegistryPoller,
)

log = structlog.get_logger(__name__)

MERGE: Final = "application/merge-patch+json"
#: Kept on a pod from its first prepare attempt until its claims are released.
FINALIZER: Final = "dra.local/node-agent"
#: JSON: what the pod's containers would get (claims' devices and the CDI environment).
PREPARED_ANNOTATION: Final = "dra.local/prepared"
#: The last prepare failure, removed once preparation succeeds.
PREPARE_ERROR_ANNOTATION: Final = "dra.local/prepare-error"
#: Pod condition that tells whether the pod's claims are prepared.
PREPARED_CONDITION: Final = "dra.local/ResourcesPrepared"

#: Test-only: percent (0..100) of SM time and memory that the pod's fake processes use on each
#: GPU or MIG device it got, constant or over time (`LoadCurve`); read when the pod starts, on
#: nodes with fake GPUs only.
FAKE_UTILIZATION_ANNOTATION: Final = "gpu.dra-driver.dev/fake-utilization"
#: Reason of the Warning Event on a pod whose fake-utilization annotation does not parse.
INVALID_FAKE_UTILIZATION: Final = "InvalidFakeUtilization"

_CDI_SUFFIXES: Final = (".yaml", ".yml", ".json")
_COMPONENT: Final = "node-agent"

Obj = dict[str, Any]


@dataclass(frozen=True)
class FakeLoad:
    """Where a node's fake GPUs keep their state and where their fake processes' ``/proc``
    entries go (the plugin's ``--proc-root``), so that pods can be given load; only the devices
    of ``driver_name`` carry it."""

    driver_name: str
    state_dir: Path
    proc_root: Path


@dataclass
class _PodRecord:
    """What the agent did for one pod; the only source for unprepare, as kubelet's cache is."""

    namespace: str
    name: str
    uid: str
    #: driver -> claim UID -> claim: everything ever sent to NodePrepareResources.
    claims: dict[str, dict[str, ClaimRef]] = field(default_factory=dict)
    #: claim name -> outcome, filled once every claim is prepared.
    outcomes: dict[str, PrepareOutcome] = field(default_factory=dict)
    prepared: bool = False
    #: Whether fake processes may run for the pod (they are ended on release).
    loaded: bool = False
    #: Drivers whose NodeUnprepareResources succeeded for all of this pod's claims.
    released: set[str] = field(default_factory=set)

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    def remember(self, by_driver: Mapping[str, Sequence[ClaimRef]]) -> None:
        for driver, refs in by_driver.items():
            known = self.claims.setdefault(driver, {})
            for ref in refs:
                known[ref.uid] = ref


class NodeAgent:
    """Kubelet's DRA behaviour for the node ``node_name``; see the module docstring."""

    def __init__(
        self,
        api_client: client.ApiClient,
        node_name: str,
        registry_dir: Path,
        cdi_root: Path,
        *,
        poll_s: float = 0.2,
        versions: Sequence[str] = DEFAULT_VERSIONS,
        call_timeout: float = KUBELET_CALL_TIMEOUT_S,
        fake_load: FakeLoad | None = None,
        drop_reservations: bool = True,
    ) -> None:
        self.api_client = api_client
        self.drop_reservations = drop_reservations
        self.fake_load = fake_load
        self.node_name = node_name
        self.cdi_root = cdi_root
        self.poll_s = poll_s
        self.call_timeout = call_timeout
        self.registry = RegistryPoller(registry_dir, versions)
        #: Pod key -> the last prepare or unprepare error, until that step succeeds.
        self.errors: dict[str, str] = {}
        #: Completed passes; each one ends with a notification to :meth:`wait_until`.
        self.passes = 0
        self._records: dict[str, _PodRecord] = {}  # by pod UID: names can be reused
        #: Pod UID -> the annotation value refused last; one Event per value, not per pass.
        self._refused: dict[str, str] = {}
        self._pass_done = asyncio.Condition()
        self._dyn: Any = None

    # ---- what tests and demos look at -------------------------------------------------------

    @property
    def plugins(self) -> Mapping[str, PluginRegistration]:
        """Driver name -> the registered plugin instance that serves it."""
        return self.registry.plugins

    @property
    def prepared(self) -> dict[str, dict[str, PrepareOutcome]]:
        """Pod key (``namespace/name``) -> claim name -> outcome, for fully prepared pods."""
        return {r.key: dict(r.outcomes) for r in self._records.values() if r.prepared}

    async def wait_until(self, predicate: Callable[[], bool], timeout: float = 10.0) -> None:
        """Return once ``predicate()`` holds, checking now and after every completed pass.

        Lets tests wait for an outcome instead of sleeping for a guessed time; passes must be
        driven by :meth:`run` (or :meth:`reconcile_once`) in another task.
        """
        async with self._pass_done:
            try:
                await asyncio.wait_for(self._pass_done.wait_for(predicate), timeout)
            except TimeoutError:
                raise TimeoutError(
                    f"condition not met within {timeout} s ({self.passes} passes done)"
                ) from None

    # ---- the loop ---------------------------------------------------------------------------

    async def run(self, stop: asyncio.Event) -> None:
        """Pass after pass until ``stop`` is set; a failed pass is logged and retried."""
        while not stop.is_set():
            try:
                await self.reconcile_once()
            except Exception:
                log.exception("node agent pass failed", node=self.node_name)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self.poll_s)

    async def reconcile_once(self) -> int:
        """One full pass: registry, then every pod of the node; returns how many pods changed."""
        try:
            await self.registry.scan()
            return await self._pods_pass()
        finally:
            self.passes += 1
            async with self._pass_done:
                self._pass_done.notify_all()

    async def _pods_pass(self) -> int:
        pods, claims = await asyncio.to_thread(self._read_cluster)
        by_key = {(c["metadata"]["namespace"], c["metadata"]["name"]): c for c in claims}
        changed = 0
        present: set[str] = set()
        for pod in pods:
            meta = pod["metadata"]
            present.add(meta["uid"])
            try:
                if meta.get("deletionTimestamp"):
                    changed += await self._release_deleting(pod, by_key)
                else:
                    record = self._records.get(meta["uid"])
                    if record is None or not record.prepared:
                        changed += await self._prepare(pod, by_key)
            except ApiException as error:
                # Conflicts and the like: the next pass reads fresh objects and tries again.
                _write_failed(f"{meta['namespace']}/{meta['name']}", error)
        for uid in set(self._refused) - present:
            del self._refused[uid]
        for uid, record in list(self._records.items()):
            if uid in present:
                continue
            try:
                changed += await self._release(record, None, by_key)
            except ApiException as error:
                _write_failed(record.key, error)
        return changed

    # ---- prepare ----------------------------------------------------------------------------

    async def _prepare(self, pod: Obj, claims: Mapping[tuple[str, str], Obj]) -> int:
        meta = pod["metadata"]
        namespace, uid = meta["namespace"], meta["uid"]
        names = list(dict.fromkeys(claim_names(pod) or []))
        if not names:
            return 0  # no claims, or a templated claim not created yet
        pod_claims = [claims.get((namespace, n)) for n in names]
        ready = [c for c in pod_claims if c is not None and _allocated_and_reserved(c, uid)]
        if len(ready) != len(names):
            return 0  # the scheduler has not finished with this pod
        by_driver = _group_by_driver(ready)
        unregistered = sorted(d for d in by_driver if d not in self.plugins)
        if unregistered:
            log.info("waiting for drivers to register", pod=_key(pod), drivers=unregistered)
            return 0
        load: LoadCurve | None = None
        if self.fake_load is not None:
            try:
                load = fake_utilization(pod)
            except ValueError as error:
                return await self._refuse(pod, str(error))

        record = self._records.setdefault(uid, _PodRecord(namespace, meta["name"], uid))
        record.remember(by_driver)
        if FINALIZER not in (meta.get("finalizers") or []):
            await asyncio.to_thread(
                self._write_finalizers, pod, [*(meta.get("finalizers") or []), FINALIZER]
            )

        devices: dict[str, list[PreparedDevice]] = {n: [] for n in names}
        loaded_driver = self.fake_load.driver_name if self.fake_load is not None else None
        own: list[PreparedDevice] = []  # the devices of the driver with fake GPUs
        problems: list[str] = []
        for driver, refs in by_driver.items():
            plugin = self.plugins[driver]
            try:
                async with DraClient(plugin.endpoint, plugin.version, self.call_timeout) as dra:
                    outcomes = await dra.prepare(refs)
            except grpc.aio.AioRpcError as error:
                problems.append(f"{driver}: NodePrepareResources failed: {_rpc_text(error)}")
                continue
            for ref in refs:
                outcome = outcomes.get(ref.uid)
                if outcome is None:
                    problems.append(f"{driver}: no result for claim {ref.describe()}")
                elif outcome.error:
                    problems.append(f"{driver}: claim {ref.name}: {outcome.error}")
                else:
                    devices[ref.name].extend(outcome.devices)
                    if driver == loaded_driver:
                        own.extend(outcome.devices)

        env: dict[str, str] = {}
        if not problems:
            cdi_ids = [i for n in names for d in devices[n] for i in d.cdi_device_ids]
            try:
                env = await asyncio.to_thread(self._environment, cdi_ids)
            except CdiError as error:
                problems.append(f"CDI: {error}")

        if not problems and load is not None:
            try:
                await self._start_load(record, own, env, load)
            except (BackendError, ValueError, OSError) as error:
                problems.append(f"fake load: {error}")

        if problems:
            message = "; ".join(problems)
            self.errors[record.key] = message
            log.warning("prepare failed, will retry", pod=record.key, error=message)
            await asyncio.to_thread(self._write_prepare_error, pod, message)
            return 1

        outcomes_by_name = {n: PrepareOutcome(devices=tuple(devices[n])) for n in names}
        await asyncio.to_thread(self._write_prepared, pod, outcomes_by_name, env)
        record.outcomes = outcomes_by_name
        record.prepared = True
        self.errors.pop(record.key, None)
        self._refused.pop(uid, None)
        log.info("pod's claims prepared", pod=record.key, claims=names)
        return 1

    async def _start_load(
        self,
        record: _PodRecord,
        devices: Sequence[PreparedDevice],
        env: Mapping[str, str],
        load: LoadCurve,
    ) -> None:
        """One fake process per device the pod got from the driver with fake GPUs.

        A device's UUID (the GPU's, or the MIG device's) is what its CDI spec tells the
        container (``DRA_DEVICE_<NAME>``); time-slice and MPS shares name their GPU's UUID.
        A load never above 0 percent has none. Replaces the pod's earlier processes, so a
        repeated start is harmless (a curve keeps its start, see `apply_pod_load`).
        """
        assert self.fake_load is not None
        uuids: list[str] = []
        for device in devices:
            found = env.get(env_key(device.device_name))
            if not found:
                raise ValueError(
                    f"the container environment names no UUID for device {device.device_name}"
                )
            uuids.append(found)
        record.loaded = True  # from here on, release must end whatever may have started
        where = self.fake_load
        if load.is_zero:
            # A pod that never touches its GPU has no process there (docs/telemetry.md); one
            # from an earlier start with another value ends.
            await asyncio.to_thread(
                clear_pod_load, where.state_dir, self.node_name, where.proc_root, record.uid
            )
            log.info("no fake load: 0 percent", pod=record.key, load=str(load), uuids=uuids)
            return
        pids = await asyncio.to_thread(
            apply_pod_load,
            where.state_dir,
            self.node_name,
            where.proc_root,
            record.uid,
            uuids,
            load,
        )
        log.info("fake load started", pod=record.key, load=str(load), uuids=uuids, pids=pids)

    async def _refuse(self, pod: Obj, message: str) -> int:
        """Keep a pod with an unusable annotation from starting, as kubelet keeps a pod whose
        container config is wrong: a Warning Event (once per value) and a condition saying why;
        the next passes look again, so fixing the annotation starts the pod."""
        meta = pod["metadata"]
        key = _key(pod)
        value = (meta.get("annotations") or {}).get(FAKE_UTILIZATION_ANNOTATION, "")
        self.errors[key] = message
        if self._refused.get(meta["uid"]) == value:
            return 0
        log.warning("pod refused", pod=key, error=message)
        await asyncio.to_thread(self._post_event, pod, INVALID_FAKE_UTILIZATION, message)
        await asyncio.to_thread(
            self._write_prepare_error, pod, message, reason=INVALID_FAKE_UTILIZATION
        )
        self._refused[meta["uid"]] = value
        return 1

    def _environment(self, cdi_ids: Sequence[str]) -> dict[str, str]:
        """The environment a CDI-aware runtime would give a container with these devices."""
        if not cdi_ids:
            return {}
        store = CdiSpecDir(self.cdi_root)
        specs: list[CdiSpec] = []
        try:
            paths = sorted(self.cdi_root.iterdir())
        except FileNotFoundError:
            paths = []
        for path in paths:
            if path.name.startswith(".") or path.suffix not in _CDI_SUFFIXES:
                continue
            try:
                specs.append(store.read(path))
            except (CdiError, OSError) as error:
                # Runtimes skip a spec they cannot load; a device it defined then goes missing.
                log.warning("unreadable CDI spec skipped", path=str(path), error=str(error))
        return container_environment(specs, cdi_ids)

    # ---- release ----------------------------------------------------------------------------

    async def _release_deleting(self, pod: Obj, claims: Mapping[tuple[str, str], Obj]) -> int:
        meta = pod["metadata"]
        record = self._records.get(meta["uid"])
        if record is None:
            if FINALIZER not in (meta.get("finalizers") or []):
                # Never prepared here: nothing to release; the pod may go (kube-apiserver
                # keeps a deleted pod bound to a node until its kubelet says so).
                await asyncio.to_thread(self._finish_delete, pod)
                return 0
            # Our finalizer but no memory of the pod: an earlier agent prepared it. Release
            # what its claims are allocated to; unprepare of an unknown claim is harmless.
            record = _PodRecord(meta["namespace"], meta["name"], meta["uid"])
            names = claim_names(pod) or []
            found = [claims.get((meta["namespace"], n)) for n in names]
            record.remember(_group_by_driver([c for c in found if c is not None and _alloc(c)]))
            record.loaded = self.fake_load is not None  # it may have started processes
            self._records[record.uid] = record
        return await self._release(record, pod, claims)

    async def _release(
        self, record: _PodRecord, pod: Obj | None, claims: Mapping[tuple[str, str], Obj]
    ) -> int:
        """End the pod's fake processes (a MIG device in use cannot be destroyed), unprepare
        everything sent to the plugins for the pod, then let the pod go."""
        self._refused.pop(record.uid, None)
        if record.loaded and self.fake_load is not None:
            load = self.fake_load
            await asyncio.to_thread(
                clear_pod_load, load.state_dir, self.node_name, load.proc_root, record.uid
            )
            record.loaded = False
            log.info("fake load ended", pod=record.key)
        problems: list[str] = []
        for driver, known in record.claims.items():
            if driver in record.released:
                continue
            plugin = self.plugins.get(driver)
            if plugin is None:
                problems.append(f"{driver}: waiting for the driver to register")
                continue
            refs = list(known.values())
            try:
                async with DraClient(plugin.endpoint, plugin.version, self.call_timeout) as dra:
                    errors = await dra.unprepare(refs)
            except grpc.aio.AioRpcError as error:
                problems.append(f"{driver}: NodeUnprepareResources failed: {_rpc_text(error)}")
                continue
            failed = [
                f"{driver}: claim {r.name}: {errors.get(r.uid, 'no result')}"
                for r in refs
                if errors.get(r.uid, "no result")
            ]
            if failed:
                problems.extend(failed)
            else:
                record.released.add(driver)
        if problems:
            message = "; ".join(problems)
            self.errors[record.key] = message
            log.warning("unprepare not done, will retry", pod=record.key, error=message)
            return 0

        refs = [ref for known in record.claims.values() for ref in known.values()]
        if self.drop_reservations:
            await asyncio.to_thread(self._drop_reservations, record.uid, refs, claims)
        if pod is not None:
            finalizers = [f for f in pod["metadata"].get("finalizers") or [] if f != FINALIZER]
            await asyncio.to_thread(self._write_finalizers, pod, finalizers)
            await asyncio.to_thread(self._finish_delete, pod)
        del self._records[record.uid]
        self.errors.pop(record.key, None)
        log.info("pod's claims released", pod=record.key)
        return 1

    # ---- API access (blocking; always called through asyncio.to_thread) ---------------------

    def _resources(self) -> tuple[Any, Any]:
        if self._dyn is None:
            # The kubernetes package ships without type hints.
            self._dyn = dynamic.DynamicClient(self.api_client)  # type: ignore[no-untyped-call]
        pods = self._dyn.resources.get(api_version="v1", kind="Pod")
        claims = self._dyn.resources.get(api_version="resource.k8s.io/v1", kind="ResourceClaim")
        return pods, claims

    def _read_cluster(self) -> tuple[list[Obj], list[Obj]]:
        pods, claims = self._resources()
        on_node = pods.get(field_selector=f"spec.nodeName={self.node_name}").to_dict()
        all_claims = claims.get().to_dict()
        return list(on_node.get("items") or []), list(all_claims.get("items") or [])

    def _write_finalizers(self, pod: Obj, finalizers: list[str]) -> None:
        """Replace the list as read; the resourceVersion guards other writers' finalizers."""
        pods, _ = self._resources()
        meta = pod["metadata"]
        pods.patch(
            body={
                "metadata": {
                    "finalizers": finalizers or None,
                    "resourceVersion": meta["resourceVersion"],
                }
            },
            name=meta["name"],
            namespace=meta["namespace"],
            content_type=MERGE,
        )

    def _finish_delete(self, pod: Obj) -> None:
        """What kubelet does once a deleted pod's containers are gone: delete it for good
        (grace period 0, this pod only). kube-apiserver keeps a pod bound to a node until then;
        the embedded server has already removed it (404, nothing to do)."""
        meta = pod["metadata"]
        if not meta.get("deletionTimestamp") or meta.get("deletionGracePeriodSeconds") == 0:
            return
        pods, _ = self._resources()
        try:
            pods.delete(
                name=meta["name"],
                namespace=meta["namespace"],
                body={"gracePeriodSeconds": 0, "preconditions": {"uid": meta["uid"]}},
            )
        except ApiException as error:
            if error.status not in (404, 409):
                raise

    def _write_prepared(
        self, pod: Obj, outcomes: Mapping[str, PrepareOutcome], env: Mapping[str, str]
    ) -> None:
        pods, _ = self._resources()
        meta = pod["metadata"]
        document = {
            "claims": {
                name: {"devices": [_device_json(d) for d in outcome.devices]}
                for name, outcome in outcomes.items()
            },
            "env": dict(env),
        }
        pods.patch(
            body={
                "metadata": {
                    "annotations": {
                        PREPARED_ANNOTATION: json.dumps(document, sort_keys=True),
                        PREPARE_ERROR_ANNOTATION: None,
                    }
                }
            },
            name=meta["name"],
            namespace=meta["namespace"],
            content_type=MERGE,
        )
        self._write_status(
            pod, "True", "Prepared", f"{len(outcomes)} claim(s) prepared", phase="Running"
        )

    def _write_prepare_error(self, pod: Obj, message: str, reason: str = "PrepareFailed") -> None:
        pods, _ = self._resources()
        meta = pod["metadata"]
        pods.patch(
            body={"metadata": {"annotations": {PREPARE_ERROR_ANNOTATION: message}}},
            name=meta["name"],
            namespace=meta["namespace"],
            content_type=MERGE,
        )
        self._write_status(pod, "False", reason, message)

    def _post_event(self, pod: Obj, reason: str, message: str) -> None:
        """A Warning Event on the pod, as kubelet posts one for a pod it cannot start."""
        self._resources()  # makes the dynamic client
        meta = pod["metadata"]
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        events = self._dyn.resources.get(api_version="v1", kind="Event")
        events.create(
            body={
                "apiVersion": "v1",
                "kind": "Event",
                "metadata": {
                    "name": f"{meta['name']}.{uuidlib.uuid4().hex[:16]}",
                    "namespace": meta["namespace"],
                },
                "involvedObject": {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "name": meta["name"],
                    "namespace": meta["namespace"],
                    "uid": meta["uid"],
                },
                "reason": reason,
                "message": message[:1024],
                "type": "Warning",
                "source": {"component": _COMPONENT, "host": self.node_name},
                "reportingComponent": _COMPONENT,
                "reportingInstance": self.node_name,
                "firstTimestamp": now,
                "lastTimestamp": now,
                "count": 1,
            },
            namespace=meta["namespace"],
        )

    def _write_status(
        self, pod: Obj, status: str, reason: str, message: str, phase: str | None = None
    ) -> None:
        pods, _ = self._resources()
        meta = pod["metadata"]
        condition = {
            "type": PREPARED_CONDITION,
            "status": status,
            "reason": reason,
            "message": message,
            "lastTransitionTime": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        }
        old = (pod.get("status") or {}).get("conditions") or []
        wanted = [condition]
        if phase == "Running":
            # What kubelet reports once the containers run: PodDisruptionBudgets count such
            # pods as healthy.
            wanted.append(
                {**condition, "type": "Ready", "status": "True", "reason": "", "message": ""}
            )
        for one in wanted:
            same = next((c for c in old if c.get("type") == one["type"]), None)
            if same is not None and same.get("status") == one["status"]:
                one["lastTransitionTime"] = same.get("lastTransitionTime")
            if not one.get("reason"):
                one.pop("reason"), one.pop("message")
        types = {c["type"] for c in wanted}
        conditions = [c for c in old if c.get("type") not in types] + wanted
        body: Obj = {"status": {"conditions": conditions}}
        if phase is not None:
            body["status"]["phase"] = phase
        pods.status.patch(
            body=body, name=meta["name"], namespace=meta["namespace"], content_type=MERGE
        )

    def _drop_reservations(
        self, pod_uid: str, refs: Sequence[ClaimRef], claims: Mapping[tuple[str, str], Obj]
    ) -> None:
        _, claim_api = self._resources()
        for ref in refs:
            claim = claims.get((ref.namespace, ref.name))
            if claim is None or claim["metadata"].get("uid") != ref.uid:
                continue  # gone or replaced: no reservation of ours left on it
            reserved = (claim.get("status") or {}).get("reservedFor") or []
            kept = [r for r in reserved if r.get("uid") != pod_uid]
            if len(kept) == len(reserved):
                continue
            claim_api.status.patch(
                body={
                    "metadata": {"resourceVersion": claim["metadata"]["resourceVersion"]},
                    "status": {"reservedFor": kept or None},
                },
                name=ref.name,
                namespace=ref.namespace,
                content_type=MERGE,
            )


# ---- pure helpers ---------------------------------------------------------------------------


def _write_failed(pod: str, error: ApiException) -> None:
    """A 409 is routine (two pods of one claim released at once): retried, not worth a warning."""
    if error.status == 409:
        log.info("write conflict; retrying on the next pass", pod=pod)
    else:
        log.warning(
            "api write failed",
            pod=pod,
            status=error.status,
            reason=error.reason,
            message=_status_message(error),
        )


def _status_message(error: ApiException) -> str:
    """The API server's own words (its Status body), which name the field it refused."""
    try:
        return str(json.loads(error.body or "{}").get("message") or error.body)
    except ValueError:
        return str(error.body)


def _key(pod: Obj) -> str:
    return f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"


def fake_utilization(pod: Obj) -> LoadCurve | None:
    """The pod's fake-utilization annotation as a load curve; None without it.

    Raises ValueError naming the pod, the annotation and the value, with what is wrong and the
    valid forms, when it is not a percent from 0 to 100, steps or a daily curve
    (`LoadCurve.parse`): the Event it becomes is all a pod's author sees.
    """
    value = (pod["metadata"].get("annotations") or {}).get(FAKE_UTILIZATION_ANNOTATION)
    if value is None:
        return None
    try:
        if not isinstance(value, str):
            raise ValueError(f"{type(value).__name__} is not text; expected {VALID_FORMS}")
        return LoadCurve.parse(value)
    except ValueError as error:
        raise ValueError(
            f"pod {_key(pod)}: annotation {FAKE_UTILIZATION_ANNOTATION}={value!r}: {error}"
        ) from None


def _alloc(claim: Obj) -> Obj | None:
    allocation: Obj | None = (claim.get("status") or {}).get("allocation")
    return allocation


def _allocated_and_reserved(claim: Obj, pod_uid: str) -> bool:
    reserved = (claim.get("status") or {}).get("reservedFor") or []
    return _alloc(claim) is not None and any(r.get("uid") == pod_uid for r in reserved)


def _group_by_driver(claims: Sequence[Obj]) -> dict[str, list[ClaimRef]]:
    """Driver -> claims with a device from it; a claim spanning drivers goes to each."""
    grouped: dict[str, list[ClaimRef]] = {}
    for claim in claims:
        meta = claim["metadata"]
        ref = ClaimRef(meta["namespace"], meta["uid"], meta["name"])
        results = ((_alloc(claim) or {}).get("devices") or {}).get("results") or []
        for driver in dict.fromkeys(str(r["driver"]) for r in results):
            grouped.setdefault(driver, []).append(ref)
    return grouped


def _device_json(device: PreparedDevice) -> Obj:
    entry: Obj = {
        "requests": list(device.request_names),
        "pool": device.pool_name,
        "device": device.device_name,
        "cdiDeviceIds": list(device.cdi_device_ids),
    }
    if device.share_id:
        entry["shareId"] = device.share_id
    return entry


def _rpc_text(error: grpc.aio.AioRpcError) -> str:
    code = error.code()
    return f"{getattr(code, 'name', code)}: {error.details()}"


__all__ = [
    "FAKE_UTILIZATION_ANNOTATION",
    "FINALIZER",
    "INVALID_FAKE_UTILIZATION",
    "PREPARED_ANNOTATION",
    "PREPARED_CONDITION",
    "PREPARE_ERROR_ANNOTATION",
    "FakeLoad",
    "NodeAgent",
    "fake_utilization",
]
