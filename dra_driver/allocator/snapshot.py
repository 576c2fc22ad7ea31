"""An immutable, pre-parsed view of the cluster's ResourceSlices, DeviceClasses and Nodes.

Parsing happens once per snapshot so the search never touches raw dicts: devices get integer ids,
counters become indices into per-pool arrays, quantities become exact numbers. The per-node device
order (pools by driver and name, pools with binding conditions last, slices by name, devices as
listed) is computed on first use and kept, because every claim walks it.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from dra_driver.allocator.errors import InputError
from dra_driver.allocator.node_selectors import node_selector_matches
from dra_driver.allocator.projection import Entry, device_entries
from dra_driver.allocator.quantities import Number, quantity_value
from dra_driver.allocator.verdicts import SelectorEvaluator, Verdict, VerdictCache
from dra_driver.cel import CelEnvironment, DeviceVariable, default_environment, device_variable

AttributeValue = tuple[str, object]
"""(kind, value): kind is one of int, bool, string, version; equal kinds and values match."""

VALUE_KINDS = ("int", "bool", "string", "version")


@dataclass(frozen=True, slots=True)
class CapacityRule:
    """A device capacity and the request policy that rounds what one share consumes."""

    value: Number
    default: Number | None = None
    valid_values: tuple[Number, ...] | None = None
    minimum: Number | None = None
    maximum: Number | None = None
    step: Number | None = None


@dataclass(frozen=True, slots=True)
class Taint:
    key: str
    value: str
    effect: str


_UNPARSED: Any = object()


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
class _Item:
    """One attribute or capacity entry, shared by every device that publishes it unchanged.

    `full` is its content as a hashable value (what selector projections compare); `parsed` is
    filled on first successful parse, so 124,000 devices parse a few hundred distinct entries.
    """

    key: str
    value: Any
    full: tuple[Any, ...]
    ident: str
    parsed: Any = _UNPARSED


@dataclass(eq=False, slots=True)
class _Layout:
    """The keys of a section, in order, for one driver: shared by devices publishing the same
    keys, with the look-ups every such device would otherwise build for itself."""

    keys: tuple[str, ...]
    index: dict[str, int]
    """Fully qualified name → position (the last entry wins, as in a dict built in order)."""
    relevant: dict[frozenset[str], tuple[int, ...]] = field(default_factory=dict)
    """Projection names → positions of the entries whose id they name."""

    def positions(self, names: frozenset[str], items: tuple[_Item, ...]) -> tuple[int, ...]:
        found = self.relevant.get(names)
        if found is None:
            found = tuple(i for i, item in enumerate(items) if item.ident in names)
            self.relevant[names] = found
        return found


@dataclass(eq=False, slots=True)
class _Section:
    """A device's attributes or capacities: interned entries and their shared layout."""

    items: tuple[_Item, ...]
    layout: _Layout
    checked: bool = False
    """Every entry parsed once: errors are raised as the dict-building parse raised them."""
    parsed: dict[str, Any] | None = None
    """Capacity sections only: the parsed map, shared by the devices that share the section."""

    def as_dict(self) -> dict[str, Any]:
        return {item.key: item.value for item in self.items}


@dataclass(eq=False, slots=True)
class Device:
    """One published device, with everything the search asks about it pre-parsed.

    The slice's JSON is not kept: attributes and capacities are interned entries shared across
    devices and nodes (most are equal), so the snapshot's size follows the distinct values
    rather than the published JSON. Anything that is not the ordinary form (a section that is
    not an object, a non-boolean allowMultipleAllocations) is kept as given in `_odd`, so
    errors come out exactly as from the JSON.
    """

    id: int
    name: str
    driver: str
    pool_index: int
    slice_name: str
    consumes: tuple[tuple[int, Number], ...]
    taints: tuple[Taint, ...]
    allow_multiple: bool
    node_name: str | None
    all_nodes: bool
    node_selector: Mapping[str, Any] | None
    has_binding_conditions: bool
    _token: str | None
    _attrs: _Section | None
    _caps: _Section | None
    _odd: dict[str, Any] | None = None

    @property
    def where(self) -> str:
        return f"ResourceSlice {self.slice_name}: device {self.name}"

    @property
    def cache_key(self) -> tuple[str, ...] | None:
        """(driver, slice, slice version, device) when the slice has a resourceVersion."""
        token = self._token
        return (self.driver, self.slice_name, token, self.name) if token else None

    def _raw_section(self, name: str) -> object:
        odd = self._odd
        if odd is not None and name in odd:
            return odd[name]
        section = self._attrs if name == "attributes" else self._caps
        return section.as_dict() if section is not None else None

    def _checked(self, section: _Section, kind: str) -> None:
        """Parse every entry once, raising the first error as the map-building parse would."""
        parse = _attribute if kind == "attributes" else _capacity
        where = self.where
        for item in section.items:
            if item.parsed is _UNPARSED:
                item.parsed = parse(item.value, f"{where}.{kind}[{item.key}]")
        section.checked = True

    @property
    def attributes(self) -> dict[str, AttributeValue]:
        """Fully qualified name → (kind, value), built on each call (hot paths use `attribute`)."""
        section = self._attrs
        if section is None:
            raw = _mapping(self._raw_section("attributes") or {}, f"{self.where}.attributes")
            return {
                _qualify(key, self.driver): _attribute(spec, f"{self.where}.attributes[{key}]")
                for key, spec in raw.items()
            }
        if not section.checked:
            self._checked(section, "attributes")
        return {_qualify(item.key, self.driver): item.parsed for item in section.items}

    @property
    def capacity(self) -> dict[str, CapacityRule]:
        """Fully qualified name → capacity; parsed once per distinct set of capacities."""
        section = self._caps
        if section is None:
            raw = _mapping(self._raw_section("capacity") or {}, f"{self.where}.capacity")
            return {
                _qualify(key, self.driver): _capacity(spec, f"{self.where}.capacity[{key}]")
                for key, spec in raw.items()
            }
        if section.parsed is None:
            if not section.checked:
                self._checked(section, "capacity")
            section.parsed = {
                _qualify(item.key, self.driver): item.parsed for item in section.items
            }
        return section.parsed

    def attribute(self, qualified: str) -> AttributeValue | None:
        """One attribute by fully qualified name, without building the whole map."""
        section = self._attrs
        if section is None:
            return self.attributes.get(qualified)
        if not section.checked:
            self._checked(section, "attributes")
        position = section.layout.index.get(qualified)
        return None if position is None else section.items[position].parsed

    @property
    def entries(self) -> tuple[Entry, ...] | None:
        """Attributes and capacities as text (projection.py's form, for tools and tests)."""
        sections = {name: self._raw_section(name) for name in ("attributes", "capacity")}
        return device_entries(sections)

    def projection_key(self, names: frozenset[str] | None) -> tuple[object, ...] | None:
        """What a selector naming only `names` can see of this device; None when it may see
        more (opaque selector, or a section that is not an object). Equal keys, equal verdicts."""
        if names is None or (
            self._odd is not None and ("attributes" in self._odd or "capacity" in self._odd)
        ):
            return None
        attrs = self._attrs
        caps = self._caps
        seen_attrs: tuple[tuple[Any, ...], ...] = ()
        seen_caps: tuple[tuple[Any, ...], ...] = ()
        if attrs is not None:
            items = attrs.items
            positions = attrs.layout.relevant.get(names)
            if positions is None:
                positions = attrs.layout.positions(names, items)
            if positions:
                seen_attrs = tuple([items[p].full for p in positions])
        if caps is not None:
            items = caps.items
            positions = caps.layout.relevant.get(names)
            if positions is None:
                positions = caps.layout.positions(names, items)
            if positions:
                seen_caps = tuple([items[p].full for p in positions])
        return (self.driver, self.allow_multiple, seen_attrs, seen_caps)

    def variable(self) -> DeviceVariable:
        """A fresh CEL `device` value; callers keep it only as long as they need it (memory)."""
        raw: dict[str, Any] = {}
        for name in ("attributes", "capacity"):
            value = self._raw_section(name)
            if value is not None:
                raw[name] = value
        odd = self._odd
        if odd is not None and "allowMultipleAllocations" in odd:
            raw["allowMultipleAllocations"] = odd["allowMultipleAllocations"]
        elif self.allow_multiple:
            raw["allowMultipleAllocations"] = True
        return device_variable(self.driver, raw)

    def content(self) -> tuple[object, ...]:
        """Everything the allocator reads of the device, as a hashable value (equal devices)."""
        return (*self.layout(), self.node_name)

    def layout(self) -> tuple[object, ...]:
        """`content` but the node the device is bound to: equal for the same device on
        another node (selectors cannot read the node)."""
        return (
            self.name,
            self.driver,
            tuple(i.full for i in self._attrs.items) if self._attrs is not None else None,
            tuple(i.full for i in self._caps.items) if self._caps is not None else None,
            repr(sorted(self._odd.items())) if self._odd is not None else None,
            self.consumes,
            self.taints,
            self.allow_multiple,
            self.all_nodes,
            repr(self.node_selector),
            self.has_binding_conditions,
        )


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


class ClusterSnapshot:
    """Slices, classes and nodes parsed for allocation; never mutated after `build`."""

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
        self.candidate_lists: dict[tuple[str, tuple[str, ...]], list[tuple[Device, Verdict]]] = {}
        """(node, selector chain) → devices whose verdict is not false; filled by the search."""
        # Caches of the fragmentation model (scoring.py), kept with the snapshot they describe.
        self.neighbourhoods: dict[int, Any] = {}
        self.neighbourhood_shapes: dict[object, int] = {}
        self.neighbourhood_parts: dict[int, Any] = {}
        self.losses: dict[tuple[int, tuple[float, ...]], float] = {}
        self.counter_users: dict[int, dict[int, list[Device]]] = {}
        self.pool_templates: dict[int, int] = {}
        self.pool_shapes: dict[object, int] = {}
        self.counter_groups: dict[tuple[int, ...], tuple[int, ...]] = {}
        self.topology_values: dict[tuple[str, ...], dict[int, tuple[object | None, ...]]] = {}
        """Topology attribute names → device → its values (scoring.py)."""
        self.claim_plans: dict[str, Any] = {}
        """Claim signature → what planning its spec gave (claims.py); the spec and this
        snapshot's classes are all a plan depends on besides the claim's name."""
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
            meta = _mapping(node.get("metadata"), "Node.metadata")
            name = _string(meta.get("name"), "Node.metadata.name")
            node_labels[name] = dict(_mapping(meta.get("labels") or {}, f"Node {name} labels"))
            if _mapping(node.get("spec") or {}, f"Node {name} spec").get("unschedulable"):
                cordoned.add(name)
        # Each slice's devices are read into compact records as the slice arrives, so a caller
        # that streams slices never holds every slice's JSON at once.
        interner = _Interner()
        parsed_slices = [_slice_header(s, interner) for s in slices]
        for header in parsed_slices:
            if header.node_name and header.node_name not in node_labels:
                node_labels[header.node_name] = {}
            for dev in header.devices:
                node_name = dev.named_node
                if node_name is not None and node_name not in node_labels:
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
    all_nodes: bool
    node_selector: Mapping[str, Any] | None
    per_device: bool
    devices: list[_Read]
    shared_counters: list[Mapping[str, Any]]
    cache_token: str | None


def _mapping(value: object, where: str) -> Mapping[str, Any]:
    if type(value) is dict:  # the common case, without the slow ABC check
        return value
    if not isinstance(value, Mapping):
        raise InputError(f"{where}: expected an object, got {type(value).__name__}")
    return value


def _string(value: object, where: str) -> str:
    if not isinstance(value, str) or not value:
        raise InputError(f"{where}: expected a non-empty string, got {value!r}")
    return value


def _int(value: object, where: str, default: int | None = None) -> int:
    if value is None and default is not None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise InputError(f"{where}: expected an integer, got {value!r}")
    return value


@dataclass(slots=True)
class _Read:
    """A device read as its slice arrives, before its pool's counters are known.

    `raw` is kept only when something in it is malformed: such a device is parsed again, from
    its JSON, when its pool is built, so errors surface in the same order and words as ever.
    """

    named_node: str | None
    raw: Mapping[str, Any] | None = None
    name: str = ""
    sections: tuple[_Section | None, _Section | None] = (None, None)
    odd: dict[str, Any] | None = None
    consumes: tuple[str, tuple[tuple[str, str, Number], ...]] | None = None
    taints: tuple[Taint, ...] = ()
    node_name: object = None
    all_nodes: bool = False
    node_selector: object = None
    allow_multiple: bool = False
    has_binding_conditions: bool = False


def _read_device(raw: Mapping[str, Any], header_driver: str, interner: _Interner) -> _Read:
    named = raw.get("nodeName")
    named_node = named if isinstance(named, str) and named else None
    name = raw.get("name")
    entries = raw.get("consumesCounters") or []
    if not isinstance(name, str) or not name or not isinstance(entries, list):
        return _Read(named_node, raw)
    consumes = None
    if entries:
        text = repr(entries)
        found = interner.counters_read.get(text)
        if found is None:
            try:
                found = _read_consumes(entries)
            except InputError:
                return _Read(named_node, raw)
            interner.counters_read[text] = found
        consumes = (text, found)
    try:
        taints = tuple(_taint(t, "") for t in raw.get("taints") or [])
    except (InputError, TypeError):
        return _Read(named_node, raw)
    sections, odd = _sections(raw, header_driver, interner)
    return _Read(
        named_node,
        None,
        name,
        sections,
        odd,
        consumes,
        taints,
        raw.get("nodeName") or None,
        bool(raw.get("allNodes")),
        raw.get("nodeSelector") or None,
        bool(raw.get("allowMultipleAllocations")),
        bool(raw.get("bindingConditions")),
    )


def _read_consumes(entries: list[Any]) -> tuple[tuple[str, str, Number], ...]:
    """(counter set, counter, amount) of each consumed counter; InputError when malformed."""
    found: list[tuple[str, str, Number]] = []
    for raw_entry in entries:
        entry = _mapping(raw_entry, "")
        set_name = _string(entry.get("counterSet"), "")
        for counter, spec in _mapping(entry.get("counters") or {}, "").items():
            found.append((set_name, counter, quantity_value(_mapping(spec, "").get("value"), "")))
    return tuple(found)


def _sections(
    raw: Mapping[str, Any], driver: str, interner: _Interner
) -> tuple[tuple[_Section | None, _Section | None], dict[str, Any] | None]:
    """Interned attributes and capacity, and what is not in the ordinary form, as given."""
    odd: dict[str, Any] = {}
    sections: list[_Section | None] = []
    for section_name in ("attributes", "capacity"):
        value = raw.get(section_name)
        if value is None:
            sections.append(None)
        elif type(value) is dict and not value:
            sections.append(None)  # an empty map reads as an absent one everywhere
        elif (
            type(value) is dict
            and (section := interner.section(value, driver, section_name == "capacity")) is not None
        ):
            sections.append(section)
        else:
            sections.append(None)
            odd[section_name] = value
    multi = raw.get("allowMultipleAllocations")
    if multi is not None and type(multi) is not bool:
        odd["allowMultipleAllocations"] = multi
    return (sections[0], sections[1]), odd or None


def _slice_header(raw: Mapping[str, Any], interner: _Interner) -> _SliceHeader:
    meta = _mapping(raw.get("metadata"), "ResourceSlice.metadata")
    name = _string(meta.get("name"), "ResourceSlice.metadata.name")
    where = f"ResourceSlice {name}"
    spec = _mapping(raw.get("spec"), f"{where}: spec")
    pool = _mapping(spec.get("pool"), f"{where}: spec.pool")
    devices = spec.get("devices") or []
    counters = spec.get("sharedCounters") or []
    if not isinstance(devices, list) or not isinstance(counters, list):
        raise InputError(f"{where}: spec.devices and spec.sharedCounters must be lists")
    selector = spec.get("nodeSelector")
    version = meta.get("resourceVersion")
    token = f"{meta.get('uid', name)}@{version}" if isinstance(version, str) and version else None
    driver = _string(spec.get("driver"), f"{where}: spec.driver")
    return _SliceHeader(
        name=name,
        driver=driver,
        pool=_string(pool.get("name"), f"{where}: spec.pool.name"),
        generation=_int(pool.get("generation"), f"{where}: spec.pool.generation", 0),
        slice_count=_int(
            pool.get("resourceSliceCount"), f"{where}: spec.pool.resourceSliceCount", 1
        ),
        node_name=spec.get("nodeName") or None,
        all_nodes=bool(spec.get("allNodes")),
        node_selector=_mapping(selector, f"{where}: spec.nodeSelector") if selector else None,
        per_device=bool(spec.get("perDeviceNodeSelection")),
        devices=[
            _read_device(_mapping(d, f"{where}: spec.devices[{i}]"), driver, interner)
            for i, d in enumerate(devices)
        ],
        shared_counters=[
            _mapping(c, f"{where}: spec.sharedCounters[{i}]") for i, c in enumerate(counters)
        ],
        cache_token=token,
    )


def _build_pools(headers: Sequence[_SliceHeader], interner: _Interner) -> list[Pool]:
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
        for header in current:
            for index, read in enumerate(header.devices):
                if read.raw is not None:
                    device = _device(pool, header, index, read.raw, next_id, interner)
                else:
                    device = _device_from(pool, header, read, next_id, interner)
                next_id += 1
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
            set_name = _string(counter_set.get("name"), f"{where}.name")
            if set_name in sets_seen and pool.invalid is None:
                pool.invalid = (
                    f"pool {pool.label} is invalid: counter set {set_name} is defined twice"
                )
            sets_seen.add(set_name)
            counters = _mapping(counter_set.get("counters") or {}, f"{where}.counters")
            for counter, spec in counters.items():
                value = quantity_value(
                    _mapping(spec, f"{where}.counters[{counter}]").get("value"),
                    f"{where}.counters[{counter}].value",
                )
                pool.counter_index.setdefault((set_name, counter), len(pool.counter_totals))
                if len(pool.counter_totals) <= pool.counter_index[(set_name, counter)]:
                    pool.counter_totals.append(value)


class _Interner:
    """Shares equal entries, sections and layouts among the devices of one build."""

    def __init__(self) -> None:
        self.items: tuple[dict[tuple[str, object], _Item], dict[tuple[str, object], _Item]] = (
            {},
            {},
        )
        self.layouts: dict[tuple[str, tuple[str, ...]], _Layout] = {}
        self.capacities: dict[tuple[str, str], _Section] = {}
        self.counters_read: dict[str, tuple[tuple[str, str, Number], ...]] = {}
        self.pool_layouts: dict[int, int] = {}
        self.counter_layouts: dict[tuple[tuple[str, str], ...], int] = {}
        self.consumes: dict[tuple[int, str], tuple[tuple[tuple[int, Number], ...], str | None]] = {}

    def counter_layout(self, pool: Pool) -> int:
        """A number shared by pools whose counters are named and numbered alike."""
        found = self.pool_layouts.get(pool.index)
        if found is None:
            found = self.counter_layouts.setdefault(
                tuple(pool.counter_index), len(self.counter_layouts)
            )
            self.pool_layouts[pool.index] = found
        return found

    def section(self, entries: dict[Any, Any], driver: str, capacity: bool) -> _Section | None:
        """The interned section, or None when a key is not a string (kept as given)."""
        if capacity:
            # Capacity maps repeat whole (every GPU of a model): one look-up by their text.
            text = (driver, repr(entries))
            found = self.capacities.get(text)
            if found is None:
                found = self._section(entries, driver, self.items[1])
                if found is not None:
                    self.capacities[text] = found
            return found
        return self._section(entries, driver, self.items[0])

    def _section(
        self, entries: dict[Any, Any], driver: str, table: dict[tuple[Any, ...], _Item]
    ) -> _Section | None:
        lookup = table.get
        items: list[_Item] = []
        add = items.append
        for key, value in entries.items():
            if type(key) is not str:
                return None
            # A hashable stand-in for the JSON value (equal stand-ins, equal values): the
            # common one-entry map of a scalar directly, anything else by its repr.
            full: tuple[Any, ...]
            if type(value) is dict and len(value) == 1:
                ((kind, inner),) = value.items()
                kind_of = type(inner)
                if kind_of is str or kind_of is int or kind_of is bool:
                    full = (key, kind, kind_of, inner)
                else:
                    full = (key, None, None, repr(value))
            else:
                full = (key, None, None, repr(value))
            item = lookup(full)
            if item is None:
                item = table[full] = _Item(key, value, full, key.rpartition("/")[2])
            add(item)
        keys = tuple(entries)
        layout = self.layouts.get((driver, keys))
        if layout is None:
            index = {_qualify(key, driver): i for i, key in enumerate(keys)}
            layout = self.layouts[(driver, keys)] = _Layout(keys, index)
        return _Section(tuple(items), layout)


def _device(
    pool: Pool,
    header: _SliceHeader,
    index: int,
    raw: Mapping[str, Any],
    device_id: int,
    interner: _Interner,
) -> Device:
    given = raw.get("name")
    name = (
        given
        if isinstance(given, str) and given
        else _string(given, f"ResourceSlice {header.name}: spec.devices[{index}].name")
    )
    where = f"ResourceSlice {header.name}: device {name}"
    entries = raw.get("consumesCounters") or []
    if not isinstance(entries, list):
        raise InputError(f"{where}.consumesCounters: expected a list")
    consumes: tuple[tuple[int, Number], ...] = ()
    if entries:
        # Equal lists (the same MIG placement on every GPU and node) are read once per pool.
        # Pools that define the same counters in the same order resolve them alike.
        layout = interner.counter_layout(pool)
        text = repr(entries)
        found = interner.consumes.get((layout, text))
        if found is None:
            found = _consumes(pool, entries, where, name)
            interner.consumes[(layout, text)] = found
        consumes, missing = found
        if missing is not None and pool.invalid is None:
            pool.invalid = (
                f"pool {pool.label} is invalid: device {name} consumes counter "
                f"{missing}, which the pool does not define"
            )
    taints = tuple(_taint(t, f"{where}.taints[{i}]") for i, t in enumerate(raw.get("taints") or []))
    if header.per_device:
        node_name = raw.get("nodeName") or None
        all_nodes = bool(raw.get("allNodes"))
        selector = raw.get("nodeSelector") or None
    else:
        node_name, all_nodes, selector = header.node_name, header.all_nodes, header.node_selector
    sections, odd = _sections(raw, header.driver, interner)
    return Device(
        id=device_id,
        name=name,
        driver=header.driver,
        pool_index=pool.index,
        slice_name=header.name,
        _token=header.cache_token,
        _attrs=sections[0],
        _caps=sections[1],
        _odd=odd,
        consumes=consumes,
        taints=taints,
        allow_multiple=bool(raw.get("allowMultipleAllocations")),
        node_name=node_name if isinstance(node_name, str) else None,
        all_nodes=all_nodes,
        node_selector=selector if isinstance(selector, Mapping) else None,
        has_binding_conditions=bool(raw.get("bindingConditions")),
    )


def _device_from(
    pool: Pool, header: _SliceHeader, read: _Read, device_id: int, interner: _Interner
) -> Device:
    """A device from its compact record (nothing left in it can be malformed)."""
    consumes: tuple[tuple[int, Number], ...] = ()
    if read.consumes is not None:
        text, counters = read.consumes
        layout = interner.counter_layout(pool)
        found = interner.consumes.get((layout, text))
        if found is None:
            resolved: list[tuple[int, Number]] = []
            missing: str | None = None
            for set_name, counter, amount in counters:
                position = pool.counter_index.get((set_name, counter))
                if position is None:
                    if missing is None:
                        missing = f"{set_name}/{counter}"
                    continue
                resolved.append((position, amount))
            found = interner.consumes[(layout, text)] = (tuple(resolved), missing)
        consumes, missing = found
        if missing is not None and pool.invalid is None:
            pool.invalid = (
                f"pool {pool.label} is invalid: device {read.name} consumes counter "
                f"{missing}, which the pool does not define"
            )
    if header.per_device:
        node_name, all_nodes, selector = read.node_name, read.all_nodes, read.node_selector
    else:
        node_name, all_nodes, selector = header.node_name, header.all_nodes, header.node_selector
    return Device(
        id=device_id,
        name=read.name,
        driver=header.driver,
        pool_index=pool.index,
        slice_name=header.name,
        _token=header.cache_token,
        _attrs=read.sections[0],
        _caps=read.sections[1],
        _odd=read.odd,
        consumes=consumes,
        taints=read.taints,
        allow_multiple=read.allow_multiple,
        node_name=node_name if isinstance(node_name, str) else None,
        all_nodes=all_nodes,
        node_selector=selector if isinstance(selector, Mapping) else None,
        has_binding_conditions=read.has_binding_conditions,
    )


def _consumes(
    pool: Pool, entries: list[Any], where: str, name: str
) -> tuple[tuple[tuple[int, Number], ...], str | None]:
    """(counter position, amount) for each counter a device consumes, and the first counter
    (set/name) the pool does not define, if any. Raises InputError for malformed entries."""
    consumes: list[tuple[int, Number]] = []
    missing: str | None = None
    for k, raw_entry in enumerate(entries):
        entry = _mapping(raw_entry, f"{where}.consumesCounters[{k}]")
        set_name = _string(entry.get("counterSet"), f"{where}.consumesCounters[{k}].counterSet")
        counters = _mapping(entry.get("counters") or {}, f"{where}.consumesCounters[{k}].counters")
        for counter, spec in counters.items():
            amount = _counter_amount(spec, where, k, counter)
            position = pool.counter_index.get((set_name, counter))
            if position is None:
                if missing is None:
                    missing = f"{set_name}/{counter}"
                continue
            consumes.append((position, amount))
    return tuple(consumes), missing


def _counter_amount(spec: object, where: str, k: int, counter: str) -> Number:
    """A consumed counter's amount; the error's location is only spelled out on failure (a
    cluster has millions of these entries, and formatting it each time doubled the parse)."""
    if type(spec) is dict:
        try:
            return quantity_value(spec.get("value"), "")
        except InputError:
            pass
    return quantity_value(
        _mapping(spec, f"{where}.consumesCounters[{k}].counters[{counter}]").get("value"),
        f"{where}.consumesCounters[{k}].counters[{counter}].value",
    )


def _qualify(key: str, driver: str) -> str:
    return key if "/" in key else f"{driver}/{key}"


def _attribute(spec: object, where: str) -> AttributeValue:
    values = _mapping(spec, where)
    if len(values) == 1:
        for kind, value in values.items():
            if kind in VALUE_KINDS:
                return kind, value
    raise InputError(f"{where}: exactly one of {', '.join(VALUE_KINDS)} must be set")


def _capacity(spec: object, where: str) -> CapacityRule:
    values = _mapping(spec, where)
    value = quantity_value(values.get("value"), f"{where}.value")
    policy = values.get("requestPolicy")
    if not policy:
        return CapacityRule(value)
    policy = _mapping(policy, f"{where}.requestPolicy")

    def optional(raw: object, name: str) -> Number | None:
        return None if raw is None else quantity_value(raw, f"{where}.requestPolicy.{name}")

    valid_values = policy.get("validValues")
    valid_range = _mapping(policy.get("validRange") or {}, f"{where}.requestPolicy.validRange")
    return CapacityRule(
        value=value,
        default=optional(policy.get("default"), "default"),
        valid_values=tuple(
            sorted(
                quantity_value(v, f"{where}.requestPolicy.validValues[{i}]")
                for i, v in enumerate(valid_values)
            )
        )
        if isinstance(valid_values, list) and valid_values
        else None,
        minimum=optional(valid_range.get("min"), "validRange.min"),
        maximum=optional(valid_range.get("max"), "validRange.max"),
        step=optional(valid_range.get("step"), "validRange.step"),
    )


def _taint(spec: object, where: str) -> Taint:
    values = _mapping(spec, where)
    return Taint(
        key=str(values.get("key", "")),
        value=str(values.get("value", "")),
        effect=str(values.get("effect", "")),
    )


def _device_class(raw: Mapping[str, Any]) -> DeviceClass:
    meta = _mapping(raw.get("metadata"), "DeviceClass.metadata")
    name = _string(meta.get("name"), "DeviceClass.metadata.name")
    spec = _mapping(raw.get("spec") or {}, f"DeviceClass {name}: spec")
    selectors: list[str] = []
    for i, selector in enumerate(spec.get("selectors") or []):
        cel_part = _mapping(
            _mapping(selector, f"DeviceClass {name}: spec.selectors[{i}]").get("cel"),
            f"DeviceClass {name}: spec.selectors[{i}].cel",
        )
        selectors.append(
            _string(
                cel_part.get("expression"),
                f"DeviceClass {name}: spec.selectors[{i}].cel.expression",
            )
        )
    config = tuple(
        _mapping(c, f"DeviceClass {name}: spec.config[{i}]")
        for i, c in enumerate(spec.get("config") or [])
    )
    return DeviceClass(name, tuple(selectors), config)
