"""A pre-parsed view of the cluster's ResourceSlices, DeviceClasses and Nodes.

Parsing happens once per snapshot so the search never touches raw dicts: devices get integer ids
(devices.py reads each one), counters become indices into per-pool arrays, quantities become
exact numbers. What was parsed never changes; a changed slice, class or node means a new
snapshot.

Caches. Everything below is worked out from the parsed content on first use and kept as long as
the snapshot, so none of it can go stale — a change to the cluster builds a new snapshot (some
tables are emptied when very large, for memory, and refilled as asked):
- `ClusterSnapshot.view`: per node, its devices in allocation order (pools by driver and name,
  pools with binding conditions last, slices by name, devices as listed), because every claim
  walks it; with the pools sorted in that order and, per pool, the nodes its devices name;
- `ClusterSnapshot.evaluator`: selector verdicts (verdicts.py says which outlive the snapshot,
  in the `VerdictCache` passed to `build`);
- `ClusterSnapshot.caches`: one object per module that keeps something with the snapshot
  (claim plans, candidate lists, the fragmentation model), typed and described in that module.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

from dra_driver.allocator.devices import (
    Device,
    Interner,
    SliceContext,
    Unreadable,
    expect_mapping,
    expect_string,
    read_device,
)
from dra_driver.allocator.errors import InputError
from dra_driver.allocator.node_selectors import node_selector_matches
from dra_driver.allocator.quantities import Number, quantity_value
from dra_driver.allocator.verdicts import SelectorEvaluator, VerdictCache
from dra_driver.cel import CelEnvironment, default_environment

_Owned = TypeVar("_Owned")


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """Keep Python's cyclic garbage collector from running while a snapshot is built.

    A build allocates hundreds of thousands of small objects, none of them in a reference
    cycle; each allocation burst triggers collections that rescan everything alive, the
    caller's slice JSON included, which cost a third of the parse. The collector's previous
    state is restored afterwards, whatever it was.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


@dataclass(eq=False, slots=True)
class Pool:
    index: int
    driver: str
    name: str
    generation: int
    devices: list[Device] = field(default_factory=list)
    counter_index: dict[tuple[str, str], int] = field(default_factory=dict)
    counter_totals: list[Number] = field(default_factory=list)
    incomplete: str | None = None
    invalid: str | None = None
    has_binding_conditions: bool = False
    slice_nodes: set[str] = field(default_factory=set)
    """Nodes named by the pool's slices, so a counters-only slice still ties the pool to them."""

    @property
    def problem(self) -> str | None:
        return self.invalid or self.incomplete

    @property
    def label(self) -> str:
        return f"{self.driver}/{self.name}"


@dataclass(frozen=True, slots=True)
class DeviceClass:
    name: str
    selectors: tuple[str, ...]
    config: tuple[Mapping[str, Any], ...]


@dataclass(slots=True)
class NodeView:
    """What one node can use: its devices in allocation order, and the pools it must not use."""

    name: str
    devices: list[Device]
    unusable: list[Pool]
    position: dict[int, int]


class SnapshotCaches:
    """What other modules work out from one snapshot and keep with it: one object per owner.

    Each owning module defines its object's type (a class that builds empty), and says there
    what it holds and when it is dropped. The snapshot never looks inside and the objects die
    with it. An owner fetches its object once per search or per claim, not per device, and keeps
    the object's tables in locals or attributes for its loops.
    """

    __slots__ = ("_by_owner",)

    def __init__(self) -> None:
        self._by_owner: dict[type[object], object] = {}

    def of(self, kind: type[_Owned]) -> _Owned:
        """The snapshot's `kind` object, made empty on first use."""
        found = self._by_owner.get(kind)
        if found is None:
            found = self._by_owner[kind] = kind()
        return cast(_Owned, found)


class ClusterSnapshot:
    """Slices, classes and nodes parsed for allocation.

    What `build` parsed is never changed afterwards; what is worked out from it on demand (node
    views here, other modules' caches in `caches`) is kept with it and goes with it.
    """

    def __init__(
        self,
        pools: list[Pool],
        classes: dict[str, DeviceClass],
        node_labels: dict[str, Mapping[str, str]],
        cel: CelEnvironment,
        verdicts: VerdictCache,
    ) -> None:
        self.pools = pools
        self.classes = classes
        self.node_labels = node_labels
        self.cel = cel
        self.verdicts = verdicts
        self.evaluator = SelectorEvaluator(verdicts)
        self.caches = SnapshotCaches()
        """Claim plans (claims.py), candidate lists (search.py), the fragmentation model
        (scoring.py): each module's own object, kept here because it describes this snapshot."""
        self.devices: list[Device] = [d for p in pools for d in p.devices]
        self._views: dict[str, NodeView] = {}
        self._ordered_pools: list[Pool] | None = None
        self._pool_nodes: dict[int, frozenset[str] | None] = {}
        self.unschedulable: frozenset[str] = frozenset()
        """Nodes whose Node object says `spec.unschedulable`."""
        self._by_name: dict[tuple[str, str, str], Device] = {
            (d.driver, pools[d.pool_index].name, d.name): d for d in self.devices
        }

    @classmethod
    def build(
        cls,
        slices: Iterable[Mapping[str, Any]],
        classes: Iterable[Mapping[str, Any]],
        nodes: Iterable[Mapping[str, Any]] = (),
        *,
        cel: CelEnvironment | None = None,
        verdicts: VerdictCache | None = None,
    ) -> ClusterSnapshot:
        with collector_paused():
            return cls._build(slices, classes, nodes, cel=cel, verdicts=verdicts)

    @classmethod
    def _build(
        cls,
        slices: Iterable[Mapping[str, Any]],
        classes: Iterable[Mapping[str, Any]],
        nodes: Iterable[Mapping[str, Any]],
        *,
        cel: CelEnvironment | None,
        verdicts: VerdictCache | None,
    ) -> ClusterSnapshot:
        node_labels: dict[str, Mapping[str, str]] = {}
        cordoned: set[str] = set()
        for node in nodes:
            meta = expect_mapping(node.get("metadata"), "Node.metadata")
            name = expect_string(meta.get("name"), "Node.metadata.name")
            node_labels[name] = dict(
                expect_mapping(meta.get("labels") or {}, f"Node {name} labels")
            )
            if expect_mapping(node.get("spec") or {}, f"Node {name} spec").get("unschedulable"):
                cordoned.add(name)
        # Each slice's devices are read (devices.py) as the slice arrives, so a caller that
        # streams slices never holds every slice's JSON at once.
        interner = Interner()
        parsed_slices = [_slice_header(s, interner) for s in slices]
        for header in parsed_slices:
            if header.node_name and header.node_name not in node_labels:
                node_labels[header.node_name] = {}
            for node_name in header.named_nodes:
                if node_name not in node_labels:
                    node_labels[node_name] = {}
        pools = _build_pools(parsed_slices, interner)
        device_classes = {c.name: c for c in (_device_class(raw) for raw in classes)}
        snapshot = cls(
            pools,
            device_classes,
            node_labels,
            cel if cel is not None else default_environment(),
            verdicts if verdicts is not None else VerdictCache(),
        )
        snapshot.unschedulable = frozenset(cordoned)
        # The ids any entry has (an entry's id is its key after the domain): a selector name
        # outside them selects nothing, so verdict numberings can ignore it.
        snapshot.evaluator.entry_ids = frozenset(
            key.rpartition("/")[2] for _, keys in interner.layouts for key in keys
        )
        return snapshot

    def node_names(self) -> list[str]:
        return sorted(self.node_labels)

    def schedulable_node_names(self) -> list[str]:
        return [n for n in self.node_names() if n not in self.unschedulable]

    def device(self, driver: str, pool: str, name: str) -> Device | None:
        return self._by_name.get((driver, pool, name))

    def pool_of(self, device: Device) -> Pool:
        return self.pools[device.pool_index]

    def view(self, node: str) -> NodeView:
        cached = self._views.get(node)
        if cached is None:
            cached = self._views[node] = self._make_view(node)
        return cached

    def _applies(self, device: Device, node: str) -> bool:
        if device.node_name is not None:
            return device.node_name == node
        if device.all_nodes:
            return True
        if device.node_selector is not None:
            return node_selector_matches(device.node_selector, node, self.node_labels.get(node, {}))
        return False

    def pool_nodes(self, pool_index: int) -> frozenset[str] | None:
        """The nodes a pool's devices name, when every device names one; else None."""
        return self._bound_nodes(self.pools[pool_index])

    def _bound_nodes(self, pool: Pool) -> frozenset[str] | None:
        """The nodes a pool's devices name, when every device names one; else None."""
        if pool.index not in self._pool_nodes:
            names = {d.node_name for d in pool.devices}
            self._pool_nodes[pool.index] = (
                None if None in names else frozenset(n for n in names if n is not None)
            )
        return self._pool_nodes[pool.index]

    def _make_view(self, node: str) -> NodeView:
        devices: list[Device] = []
        unusable: list[Pool] = []
        if self._ordered_pools is None:
            self._ordered_pools = sorted(
                self.pools, key=lambda p: (p.has_binding_conditions, p.driver, p.name)
            )
        for pool in self._ordered_pools:
            bound = self._bound_nodes(pool)
            if bound is not None and node not in bound and node not in pool.slice_nodes:
                continue  # every device names another node: nothing here (large clusters)
            mine = [d for d in pool.devices if self._applies(d, node)]
            touches = bool(mine) or node in pool.slice_nodes
            if not touches:
                continue
            if pool.problem is not None:
                unusable.append(pool)
                continue
            devices.extend(mine)
        return NodeView(node, devices, unusable, {d.id: i for i, d in enumerate(devices)})


# --- parsing -------------------------------------------------------------------------------------


@dataclass(slots=True)
class _SliceHeader:
    name: str
    driver: str
    pool: str
    generation: int
    slice_count: int
    node_name: str | None
    """spec.nodeName (None when empty): a node the pool is tied to, even with no devices."""
    devices: list[Device | Unreadable]
    named_nodes: list[str]
    """Every node a device names in `nodeName`, whatever the slice's node selection: each is
    a node of the snapshot, even with no Node object."""
    shared_counters: list[Mapping[str, Any]]


def _int(value: object, where: str, default: int | None = None) -> int:
    if value is None and default is not None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise InputError(f"{where}: expected an integer, got {value!r}")
    return value


def _slice_header(raw: Mapping[str, Any], interner: Interner) -> _SliceHeader:
    meta = expect_mapping(raw.get("metadata"), "ResourceSlice.metadata")
    name = expect_string(meta.get("name"), "ResourceSlice.metadata.name")
    where = f"ResourceSlice {name}"
    spec = expect_mapping(raw.get("spec"), f"{where}: spec")
    pool = expect_mapping(spec.get("pool"), f"{where}: spec.pool")
    devices = spec.get("devices") or []
    counters = spec.get("sharedCounters") or []
    if not isinstance(devices, list) or not isinstance(counters, list):
        raise InputError(f"{where}: spec.devices and spec.sharedCounters must be lists")
    selector = spec.get("nodeSelector")
    version = meta.get("resourceVersion")
    token = f"{meta.get('uid', name)}@{version}" if isinstance(version, str) and version else None
    driver = expect_string(spec.get("driver"), f"{where}: spec.driver")
    pool_name = expect_string(pool.get("name"), f"{where}: spec.pool.name")
    generation = _int(pool.get("generation"), f"{where}: spec.pool.generation", 0)
    slice_count = _int(pool.get("resourceSliceCount"), f"{where}: spec.pool.resourceSliceCount", 1)
    node_name = spec.get("nodeName") or None
    context = SliceContext(
        name=name,
        driver=driver,
        cache_token=token,
        per_device=bool(spec.get("perDeviceNodeSelection")),
        node_name=node_name if isinstance(node_name, str) else None,
        all_nodes=bool(spec.get("allNodes")),
        node_selector=expect_mapping(selector, f"{where}: spec.nodeSelector") if selector else None,
    )
    read: list[Device | Unreadable] = []
    named_nodes: list[str] = []
    for i, d in enumerate(devices):
        device = d if type(d) is dict else expect_mapping(d, f"{where}: spec.devices[{i}]")
        named = device.get("nodeName")
        if isinstance(named, str) and named:
            named_nodes.append(named)
        read.append(read_device(device, i, context, interner))
    return _SliceHeader(
        name=name,
        driver=driver,
        pool=pool_name,
        generation=generation,
        slice_count=slice_count,
        node_name=node_name,
        devices=read,
        named_nodes=named_nodes,
        shared_counters=[
            expect_mapping(c, f"{where}: spec.sharedCounters[{i}]") for i, c in enumerate(counters)
        ],
    )


def _build_pools(headers: Sequence[_SliceHeader], interner: Interner) -> list[Pool]:
    by_pool: dict[tuple[str, str], list[_SliceHeader]] = {}
    for header in headers:
        by_pool.setdefault((header.driver, header.pool), []).append(header)
    pools: list[Pool] = []
    next_id = 0
    for (driver, pool_name), members in sorted(by_pool.items()):
        generation = max(h.generation for h in members)
        current = sorted((h for h in members if h.generation == generation), key=lambda h: h.name)
        pool = Pool(index=len(pools), driver=driver, name=pool_name, generation=generation)
        pool.slice_nodes = {h.node_name for h in current if h.node_name}
        expected = {h.slice_count for h in current}
        if len(expected) != 1 or len(current) != expected.pop():
            pool.incomplete = (
                f"pool {driver}/{pool_name} is incomplete: {len(current)} slice(s) at generation "
                f"{generation}, resourceSliceCount says {sorted({h.slice_count for h in current})}"
            )
        _add_counters(pool, current)
        seen: set[str] = set()
        counter_index = pool.counter_index
        for header in current:
            for device in header.devices:
                if isinstance(device, Unreadable):
                    raise device.error
                device.id = next_id
                device.pool_index = pool.index
                next_id += 1
                if device.consumes_named is not None:
                    device.consumes, missing = interner.consumed(pool.index, counter_index, device)
                    if missing is not None and pool.invalid is None:
                        pool.invalid = (
                            f"pool {pool.label} is invalid: device {device.name} consumes counter "
                            f"{missing}, which the pool does not define"
                        )
                if device.name in seen and pool.invalid is None:
                    pool.invalid = (
                        f"pool {pool.label} is invalid: device {device.name} is listed twice"
                    )
                seen.add(device.name)
                pool.has_binding_conditions |= device.has_binding_conditions
                pool.devices.append(device)
        pools.append(pool)
    return pools


def _add_counters(pool: Pool, slices: Sequence[_SliceHeader]) -> None:
    sets_seen: set[str] = set()
    for header in slices:
        for index, counter_set in enumerate(header.shared_counters):
            where = f"ResourceSlice {header.name}: spec.sharedCounters[{index}]"
            set_name = expect_string(counter_set.get("name"), f"{where}.name")
            if set_name in sets_seen and pool.invalid is None:
                pool.invalid = (
                    f"pool {pool.label} is invalid: counter set {set_name} is defined twice"
                )
            sets_seen.add(set_name)
            counters = expect_mapping(counter_set.get("counters") or {}, f"{where}.counters")
            for counter, spec in counters.items():
                value = quantity_value(
                    expect_mapping(spec, f"{where}.counters[{counter}]").get("value"),
                    f"{where}.counters[{counter}].value",
                )
                pool.counter_index.setdefault((set_name, counter), len(pool.counter_totals))
                if len(pool.counter_totals) <= pool.counter_index[(set_name, counter)]:
                    pool.counter_totals.append(value)


def _device_class(raw: Mapping[str, Any]) -> DeviceClass:
    meta = expect_mapping(raw.get("metadata"), "DeviceClass.metadata")
    name = expect_string(meta.get("name"), "DeviceClass.metadata.name")
    spec = expect_mapping(raw.get("spec") or {}, f"DeviceClass {name}: spec")
    selectors: list[str] = []
    for i, selector in enumerate(spec.get("selectors") or []):
        cel_part = expect_mapping(
            expect_mapping(selector, f"DeviceClass {name}: spec.selectors[{i}]").get("cel"),
            f"DeviceClass {name}: spec.selectors[{i}].cel",
        )
        selectors.append(
            expect_string(
                cel_part.get("expression"),
                f"DeviceClass {name}: spec.selectors[{i}].cel.expression",
            )
        )
    config = tuple(
        expect_mapping(c, f"DeviceClass {name}: spec.config[{i}]")
        for i, c in enumerate(spec.get("config") or [])
    )
    return DeviceClass(name, tuple(selectors), config)
