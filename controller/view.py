"""The controller's picture of the cluster, kept current by watch events.

Decisions read this view, never the API server: the allocator's parsed snapshot of slices,
classes and nodes is rebuilt only when one of those changes (selector verdicts survive the
rebuild in a shared cache keyed by slice resourceVersion), and what is in use is updated claim by
claim as claim events arrive. What the pods on each node request (CPU, memory, pod slots) is
kept the same way, pod by pod (see `node_load`). Allocations this controller decided but has not
yet seen come back through the watch are *assumed* (as the kube-scheduler's assume cache does):
they count as taken, so two decisions in a row never pick the same device.

Everything here runs on the event loop; informer threads only hand events over.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import structlog

from controller.informer import Event, Key, Obj, key_of, resource_version
from controller.node_load import NodeLoad, counted_node
from controller.pod_nodes import Eligibility, constrains_node, eligible_nodes
from controller.pod_placer import PodPlacer
from dra_driver.allocator import (
    AllocationError,
    AllocationMode,
    ClusterSnapshot,
    InputError,
    Placer,
    Usage,
    VerdictCache,
)
from dra_driver.allocator.placement import warm_class_verdicts
from dra_driver.allocator.result import allocation_node
from dra_driver.allocator.scoring import FragmentationModel
from dra_driver.cel import default_environment
from dra_driver.noderesources import (
    EMPTY,
    NodeUsage,
    Resources,
    Shortfall,
    insufficient,
    node_allocatable,
    pod_requests,
)
from dra_driver.pod_claims import claim_names, known_claim_names
from dra_driver.simulation.replay import PodPlacement, plan_pod
from dra_driver.simulation.workload import PodShape, Workload
from dra_driver.simulation.workload_source import WorkloadSource

log = structlog.get_logger(__name__)

SNAPSHOT_KINDS = frozenset({"resourceslices", "deviceclasses", "nodes"})


MAX_GPU_STATES = 20_000
"""The pod placer keeps every GPU state it has seen, with what it worked out for it (a node of
eight MIG-published H100s is a tuple of 248 availabilities): a long-running controller makes a
fresh one past this many, which costs one re-warm (about a second at 100 such nodes) and keeps
its memory to a few tens of MiB."""

#: Claim metadata that changes with every write and says nothing about the claim.
_VOLATILE_METADATA = frozenset({"resourceVersion", "managedFields", "generation"})


def device_status_only(old: Mapping[str, Any] | None, new: Mapping[str, Any] | None) -> bool:
    """Whether a claim write changed nothing but `status.devices` (a kubelet plugin's device
    conditions, such as `Idle`): nothing a decision reads, so no waiting pod need be decided
    again for it."""
    if old is None or new is None:
        return False
    if old.get("spec") != new.get("spec"):
        return False
    old_meta = old.get("metadata") or {}
    new_meta = new.get("metadata") or {}
    if {k: v for k, v in old_meta.items() if k not in _VOLATILE_METADATA} != {
        k: v for k, v in new_meta.items() if k not in _VOLATILE_METADATA
    }:
        return False
    old_status = old.get("status") or {}
    new_status = new.get("status") or {}
    if old_status.get("devices") == new_status.get("devices"):
        return False  # not a device status change either (nothing, or something else)
    return {k: v for k, v in old_status.items() if k != "devices"} == {
        k: v for k, v in new_status.items() if k != "devices"
    }


def allocation_of(claim: Mapping[str, Any] | None) -> Obj | None:
    if not claim:
        return None
    allocation = (claim.get("status") or {}).get("allocation")
    return allocation or None


class ClusterView:
    def __init__(self, mode: AllocationMode, profile: WorkloadSource | None = None) -> None:
        self.mode = mode
        self.profile = profile or WorkloadSource()
        """What scored placement weighs by (`workload_profile`)."""
        self._pod_placer: PodPlacer | None = None
        self._pod_placer_for: tuple[Placer, int] | None = None
        """The allocator's placer and the profile's epoch the pod placer was made for."""
        self.objects: dict[str, dict[Key, Obj]] = {
            kind: {}
            for kind in ("resourceslices", "deviceclasses", "nodes", "resourceclaims", "gpuqueues")
        }
        self.pods: dict[Key, Obj] = {}
        self.users: dict[Key, set[Key]] = {}
        """Claim → the pods that name it."""
        self._cel = default_environment()
        self._verdicts = VerdictCache()
        self._snapshot: ClusterSnapshot | None = None
        self._placer: Placer | None = None
        self._recorded: dict[Key, Obj] = {}
        """Claim → the allocation that `usage` holds for it (observed or assumed)."""
        self.assumed: dict[Key, Obj] = {}
        """Claim → an allocation decided here and not yet seen in the claim's status."""
        self.watched_claims_rv = 0
        """The newest claim resourceVersion the watch has delivered; events come in order, so
        every claim change up to it is in the view."""
        self._claims_caught_up = asyncio.Condition()
        self.load = NodeLoad()
        """Per node, what the pods counted against it request."""
        self._allocatable: dict[str, Resources | None] = {}
        self._unconstrained: Eligibility | None = None
        """The nodes a pod that constrains nothing about its node may go to (`eligibility`),
        until a node changes."""
        """Node → its parsed `status.allocatable` (None: it publishes none), parsed once."""
        self.generation = 0
        """Bumped on every change that can make a pod that did not fit fit now."""
        self.queue_revision = 0
        """Bumped on every GpuQueue change (the queue tree is rebuilt only then)."""
        self.snapshot_builds = 0

    # --- reading ---------------------------------------------------------------------------

    def prepare(self) -> None:
        """Build (and warm) the allocator's snapshot now, e.g. once the watches have synced,
        and in scored mode the pod placer's per-node state."""
        self.placer()
        if self.mode is AllocationMode.SCORED:
            self.pod_placer().warm()

    @property
    def claims(self) -> dict[Key, Obj]:
        return self.objects["resourceclaims"]

    @property
    def nodes(self) -> dict[Key, Obj]:
        return self.objects["nodes"]

    def eligibility(self, pod: Obj) -> Eligibility:
        """`eligible_nodes` over every node, worked out once for all the pods that constrain
        nothing about their node: every waiting pod is decided in every pass it may fit, and
        reading each node's taints and conditions for each of them was a large part of it."""
        if constrains_node(pod):
            return eligible_nodes(pod, self.nodes.values())
        if self._unconstrained is None:
            self._unconstrained = eligible_nodes(pod, self.nodes.values())
        return self._unconstrained

    def placer(self) -> Placer:
        """The allocator over the current state, rebuilt only when slices, classes or nodes
        changed since the last decision."""
        if self._placer is None:
            self._rebuild()
        assert self._placer is not None
        return self._placer

    def pod_placer(self) -> PodPlacer:
        """The shared pod placer over the same snapshot and usage as `placer`, made again when
        that is rebuilt or the profile is replaced: the workload is then made again from every
        count (`WorkloadSource.workload_for`, the refresh `simulate --workload learned`
        replays). Made afresh past `MAX_GPU_STATES`, it keeps the workload it had, so that
        bound refreshes nothing."""
        placer = self.placer()
        wanted = (placer, self.profile.epoch)
        kept: Workload | None = None
        if (
            self._pod_placer is not None
            and self._pod_placer.cluster.index.states_known > MAX_GPU_STATES
        ):
            log.info(
                "pod placer made afresh",
                gpu_states=self._pod_placer.cluster.index.states_known,
            )
            if self._pod_placer_for == wanted:
                kept = self._pod_placer.workload
            self._pod_placer = None
        if self._pod_placer is None or self._pod_placer_for != wanted:
            workload = kept if kept is not None else self._workload_for(placer.snapshot)
            self._pod_placer = PodPlacer(placer, self.nodes.values(), self.load, workload)
            self._pod_placer_for = wanted
        return self._pod_placer

    def _workload_for(self, snapshot: ClusterSnapshot) -> Workload:
        workload = self.profile.workload_for(snapshot)
        skipped = self.profile.skipped
        if skipped:
            log.warning(
                "workload profile entries left out",
                source=self.profile.source,
                skipped=len(skipped),
                first=skipped[0],
            )
        return workload

    def place_pod(self, pod: Obj, claims: Sequence[Obj], nodes: Iterable[str]) -> PodPlacement:
        """Where the shared pod placer puts `pod`'s `claims` among `nodes`; the pod is counted
        in a learned workload the first time (a waiting pod is decided again and again)."""
        return self.profile.decide(
            key_of(pod),
            pod,
            claims,
            lambda retry: self.pod_placer().place(pod, claims, nodes, retry=retry),
        )

    def count_unsearched(self, pod: Obj, claims: Sequence[Obj], shape: PodShape) -> None:
        """Count `pod` as `place_pod` would have, where its search was skipped for being bound
        to fail (`decide.NoRoom`): the learned workload must not miss the pods that wait."""
        self.profile.count_unsearched(
            key_of(pod), pod, claims, shape, lambda: self.pod_placer().workload
        )

    def count_turned_away(self, pod: Obj, claims: Sequence[Obj]) -> None:
        """Count `pod` as `place_pod` would have, where it was turned away before any search
        because no node has room for its requests: it is a pod of the workload all the same,
        and `simulate --workload learned` counts it. A pod whose claims cannot be planned has
        no shape and is not counted (`place_pod` raises before counting it too)."""
        key = key_of(pod)
        if self.mode is not AllocationMode.SCORED or key in self.profile.counted:
            return
        try:
            _, shape = plan_pod(self.snapshot, pod_requests(pod), claims)
        except (InputError, AllocationError):
            return
        self.count_unsearched(pod, claims, shape)

    @property
    def snapshot(self) -> ClusterSnapshot:
        return self.placer().snapshot

    @property
    def usage(self) -> Usage:
        return self.placer().usage

    def lacking(
        self, pods: Sequence[Obj], nodes: Iterable[str], freed: Iterable[Key] = ()
    ) -> dict[str, list[Shortfall]]:
        """The nodes of `nodes` without room for `pods` all at once → what they lack, after the
        pods already counted against each (the `pods` themselves excepted, should they be
        counted there already, and the `freed` pods too: those about to be evicted). A node
        that publishes no allocatable is not checked."""
        wanted = EMPTY
        own: list[tuple[str, Resources]] = []
        for pod in pods:
            wanted += pod_requests(pod)
            counted = self.load.of(key_of(pod))
            if counted is not None:
                own.append(counted)
        for key in freed:
            counted = self.load.of(key)
            if counted is not None:
                own.append(counted)
        lacking: dict[str, list[Shortfall]] = {}
        for node in nodes:
            allocatable = self._allocatable_of(node)
            if allocatable is None:
                continue
            used = self.load.on(node)
            for where, requests in own:
                if where == node:
                    used = used.minus(requests)
            # Every pod takes a slot: the slots are checked for all of them, requests as one.
            used = NodeUsage(used.requested, max(0, used.pods + len(pods) - 1))
            lack = insufficient(wanted, allocatable, used)
            if lack:
                lacking[node] = lack
        return lacking

    def _allocatable_of(self, node: str) -> Resources | None:
        if node not in self._allocatable:
            found = self.nodes.get(("", node))
            self._allocatable[node] = None if found is None else node_allocatable(found)
        return self._allocatable[node]

    def claim(self, namespace: str, name: str) -> Obj | None:
        return self.claims.get((namespace, name))

    def pod_claims(self, pod: Mapping[str, Any]) -> list[Obj] | None:
        """The pod's claims in spec order, or None while one of them does not exist yet."""
        names = claim_names(pod)
        if names is None:
            return None
        namespace = str(pod["metadata"].get("namespace") or "")
        found = [self.claims.get((namespace, n)) for n in names]
        if any(c is None for c in found):
            return None
        return [c for c in found if c is not None]

    # --- events ----------------------------------------------------------------------------

    def apply(self, event: Event) -> None:
        if event.resource == "pods":
            self._apply_pod(event)
            return
        store = self.objects[event.resource]
        current = store.get(event.key)
        if event.kind != "DELETED" and resource_version(current) > resource_version(event.obj):
            if event.resource == "resourceclaims":
                self._watched(resource_version(event.obj))
            return  # a fresher read got here first (see refresh_claims)
        if event.resource == "resourceclaims" and self.device_status_only(event):
            # Only a plugin's device conditions: the claim is kept (reclaim reads idleness from
            # it) but nothing the allocator or a waiting pod depends on moved.
            store[event.key] = event.obj
            self._watched(resource_version(event.obj))
            return
        if event.kind == "DELETED":
            store.pop(event.key, None)
        else:
            store[event.key] = event.obj
        if event.resource == "nodes":
            self._allocatable.pop(event.key[1], None)
            self._unconstrained = None
        if event.resource in SNAPSHOT_KINDS:
            if self._placer is not None:
                self._placer = None
            self.generation += 1
        elif event.resource == "resourceclaims":
            self._claim_changed(event.key, None if event.kind == "DELETED" else event.obj)
        elif event.resource == "gpuqueues" and not _status_only(current, event):
            # The tree is made of names and specs: our own status writes (every few passes
            # while queues move) leave it, and what was worked out from it, as it was.
            self.queue_revision += 1
            self.generation += 1  # a new guarantee or limit can let a waiting pod in
        if event.resource == "resourceclaims":
            self._watched(resource_version(event.obj))

    def device_status_only(self, event: Event) -> bool:
        """The claim event changes only `status.devices` of the claim as the view has it."""
        if event.resource != "resourceclaims" or event.kind == "DELETED":
            return False
        return device_status_only(self.claims.get(event.key), event.obj)

    def _watched(self, rv: int) -> None:
        if rv > self.watched_claims_rv:
            self.watched_claims_rv = rv
            asyncio.get_running_loop().create_task(self._notify())

    async def _notify(self) -> None:
        async with self._claims_caught_up:
            self._claims_caught_up.notify_all()

    async def claims_caught_up(self, rv: int, timeout: float) -> bool:
        """Wait until the claims watch has delivered resourceVersion `rv` (one of our own
        writes): then every claim change committed before it is in the view too, as fresh as a
        full list would be. False on timeout (a lagging or broken watch)."""
        async with self._claims_caught_up:
            try:
                await asyncio.wait_for(
                    self._claims_caught_up.wait_for(lambda: self.watched_claims_rv >= rv), timeout
                )
            except TimeoutError:
                return False
        return True

    def refresh_claims(self, fresh: Iterable[Obj], listed_at: int) -> None:
        """Merge a fresh list of every claim (newer than the watch may have delivered yet),
        taken at resourceVersion `listed_at`. A claim the list lacks is dropped only if the view
        has it at or before that version: one the watch delivered after the list was taken
        (created meanwhile) is not in it, and dropping it would lose it until the next relist,
        since no further event may come for it."""
        seen: set[Key] = set()
        for claim in fresh:
            meta = claim["metadata"]
            key = (str(meta.get("namespace") or ""), str(meta["name"]))
            seen.add(key)
            if resource_version(claim) > resource_version(self.claims.get(key)):
                self.claims[key] = claim
                self._claim_changed(key, claim)
        gone = [
            key
            for key, claim in self.claims.items()
            if key not in seen and key not in self.assumed and resource_version(claim) <= listed_at
        ]
        for key in gone:
            del self.claims[key]
            self._claim_changed(key, None)

    def refresh_claims_one(self, claim: Obj) -> None:
        """Take in a claim as our own write returned it (newer than the watch so far)."""
        key = (str(claim["metadata"].get("namespace") or ""), str(claim["metadata"]["name"]))
        if resource_version(claim) > resource_version(self.claims.get(key)):
            self.claims[key] = claim
            self._claim_changed(key, claim)

    def _apply_pod(self, event: Event) -> None:
        old = self.pods.get(event.key)
        if old is not None:
            for name in claim_names(old) or []:
                self.users.get((event.key[0], name), set()).discard(event.key)
        if event.kind == "DELETED":
            self.pods.pop(event.key, None)
            self.load.set(event.key, None)
            self.profile.forget_pod(event.key)
            self.generation += 1
            return
        self.pods[event.key] = event.obj
        for name in claim_names(event.obj) or known_claim_names(event.obj):
            self.users.setdefault((event.key[0], name), set()).add(event.key)
        self._recount(event.key)

    def _recount(self, key: Key) -> None:
        """Count the pod against the node it is on, nominated for or allocated on, now."""
        pod = self.pods.get(key)
        node = None if pod is None else counted_node(pod, lambda c: self._claim_node(key[0], c))
        if self.load.count(key, pod, node):
            self.generation += 1

    def _recount_users(self, claim: Key) -> None:
        for pod in list(self.users.get(claim, ())):
            self._recount(pod)

    def _claim_node(self, namespace: str, name: str) -> str | None:
        key = (namespace, name)
        allocation = allocation_of(self.claims.get(key)) or self.assumed.get(key)
        return None if allocation is None else allocation_node(allocation)

    def _claim_changed(self, key: Key, claim: Obj | None) -> None:
        allocation = allocation_of(claim)
        if allocation is not None or claim is None:
            self.assumed.pop(key, None)
        self._recount_users(key)
        if self._placer is None:
            return  # the next rebuild reads every claim
        wanted = allocation if allocation is not None else self.assumed.get(key)
        self._record(key, wanted)
        self.generation += 1

    # --- assumptions -----------------------------------------------------------------------

    def assume(self, key: Key, allocation: Obj, *, recorded: bool = False) -> None:
        """`recorded`: the allocator's usage holds `allocation` already (the placer that chose
        it recorded it), so it is not recorded a second time."""
        self.assumed[key] = allocation
        self._record(key, allocation, recorded=recorded)
        self._recount_users(key)

    def forget(self, key: Key) -> None:
        """Drop an assumption (its write failed or was withdrawn); free what it held."""
        if self.assumed.pop(key, None) is None:
            return
        self._record(key, allocation_of(self.claims.get(key)))
        self._recount_users(key)
        self.generation += 1

    @contextlib.contextmanager
    def without(self, claims: Iterable[Key]) -> Iterator[None]:
        """The allocator's usage as if these claims held nothing (a trial of evicting their
        pods), put back on leaving."""
        placer = self.placer()
        released = [(k, a) for k in dict.fromkeys(claims) if (a := self._recorded.get(k))]
        for _, allocation in released:
            placer.release(allocation, _allocation_node(allocation))
        try:
            yield
        finally:
            for _, allocation in released:
                placer.record(allocation, _allocation_node(allocation))

    def recorded(self, key: Key) -> Obj | None:
        """The allocation the allocator's usage holds for this claim now, if any."""
        return self._recorded.get(key)

    def holders(self, key: Key, allocation: Obj) -> list[Key]:
        """The other claims that hold one of the devices `allocation` holds whole (not a share,
        not admin access): the claims kube-scheduler's set of allocated devices counts only
        once together with this one (see `Reconciler._let_go`)."""
        mine = _whole_devices(allocation)
        if not mine:
            return []
        self.placer()  # builds `_recorded` when nothing has yet
        return sorted(
            other
            for other, held in self._recorded.items()
            if other != key and not mine.isdisjoint(_whole_devices(held))
        )

    def conflict(self, key: Key, allocation: Obj) -> str | None:
        """Why `allocation` for claim `key` collides with what every other claim holds now."""
        placer = self.placer()
        recorded = self._recorded.get(key)
        if recorded is not None:
            placer.release(recorded, _allocation_node(recorded))
        try:
            return placer.usage.conflict(placer.snapshot, allocation)
        finally:
            if recorded is not None:
                placer.record(recorded, _allocation_node(recorded))

    def _record(self, key: Key, allocation: Obj | None, *, recorded: bool = False) -> None:
        """Make the usage hold `allocation` for the claim instead of what it held. An equal
        allocation (the watch bringing back what was assumed) changes nothing: releasing and
        recording it again would mark the node's devices as changed for every cache keyed on
        their usage, after every decision."""
        placer = self.placer()
        old = self._recorded.pop(key, None)
        if old is not None and allocation is not None and not recorded and old == allocation:
            self._recorded[key] = allocation
            return
        if old is not None:
            node = _allocation_node(old)
            placer.release(old, node)
        if allocation is not None:
            if not recorded:
                placer.record(allocation, _allocation_node(allocation))
            self._recorded[key] = allocation

    def _rebuild(self) -> None:
        # The snapshot is millions of small objects that live until the next rebuild. Left to the
        # cyclic collector, every full collection rescans them all and stalls the loop for up to
        # a second; frozen, they are skipped. Unfreezing first lets the previous snapshot go.
        self._placer = None
        gc.unfreeze()
        gc.collect()
        snapshot = ClusterSnapshot.build(
            self.objects["resourceslices"].values(),
            self.objects["deviceclasses"].values(),
            self.objects["nodes"].values(),
            cel=self._cel,
            verdicts=self._verdicts,
        )
        started = time.perf_counter()
        if self.mode is AllocationMode.SCORED:
            FragmentationModel(snapshot).warm()
        warm_class_verdicts(snapshot)
        warm_s = time.perf_counter() - started
        gc.freeze()
        self._placer = Placer(snapshot, Usage(), self.mode, explain_failures=True)
        self._recorded = {}
        self.snapshot_builds += 1
        for key, claim in self.claims.items():
            allocation = allocation_of(claim) or self.assumed.get(key)
            if allocation is not None:
                self._placer.record(allocation, _allocation_node(allocation))
                self._recorded[key] = allocation
        log.info(
            "allocator snapshot rebuilt",
            devices=len(snapshot.devices),
            claims=len(self._recorded),
            warm_s=round(warm_s, 2),
        )


def _allocation_node(allocation: Mapping[str, Any]) -> str:
    return allocation_node(allocation) or "*"


def _status_only(old: Obj | None, event: Event) -> bool:
    """A change to a GpuQueue's status alone (its spec is as it was)."""
    return old is not None and event.kind == "MODIFIED" and old.get("spec") == event.obj.get("spec")


def _whole_devices(allocation: Mapping[str, Any]) -> set[tuple[str, str, str]]:
    """The devices an allocation holds whole: those kube-scheduler keeps in its set of
    allocated device IDs (results with a share ID or admin access are counted elsewhere)."""
    return {
        (str(r.get("driver")), str(r.get("pool")), str(r.get("device")))
        for r in (allocation.get("devices") or {}).get("results") or []
        if not r.get("adminAccess") and not r.get("shareID")
    }
