"""A published device as the allocator reads it: one parse, from the slice's JSON.

Each device is read once, as its slice arrives (`read_device`), into a `Device` that keeps no
JSON: attributes and capacities become interned entries shared by every device that publishes
them unchanged, consumed counters are read by name. What depends on the device's pool (its id,
its counters' positions) is filled in when the snapshot builds the pool.

A malformed device is not an error yet: `read_device` returns the error it found, worded with
its full location, and the snapshot raises it only when it reaches the device, building pools in
their order (pools by driver and name, slices by name, devices as listed) and only for the
current generation of each pool. So errors come in the same order and words as from a parse
that reads each pool's devices as it builds the pool, while reading a well-formed device formats
no location at all.

Caches, all of one build (`Interner`) or of the devices it made, so they go when the snapshot
goes and never need invalidating (nothing they describe changes):
- `Interner`: equal attribute and capacity entries, sections and key layouts, consumed-counter
  lists by their text, and those lists resolved against each layout of pool counters;
- `_Item.parsed`, `_Section.parsed`: an entry's or a capacity map's parsed value, filled on first
  use and shared by every device publishing it;
- `_Layout.relevant`: for a set of selector names, which entries of the layout they name (what
  `Device.projection_key` reads).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from dra_driver.allocator.errors import InputError
from dra_driver.allocator.projection import Entry, device_entries
from dra_driver.allocator.quantities import Number, quantity_value
from dra_driver.cel import DeviceVariable, device_variable

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

    `id`, `pool_index` and `consumes` are filled in when the snapshot builds the device's pool
    (until then they are -1, -1 and empty): they depend on which devices and counters the
    pool's current slices hold.
    """

    id: int
    name: str
    driver: str
    pool_index: int
    slice_name: str
    consumes: tuple[tuple[int, Number], ...]
    """(position in the pool's counters, amount) for each counter the device consumes."""
    consumes_named: tuple[str, tuple[tuple[str, str, Number], ...]] | None
    """The consumed counters as published: (their text, (set, counter, amount) each)."""
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
            raw = expect_mapping(self._raw_section("attributes") or {}, f"{self.where}.attributes")
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
            raw = expect_mapping(self._raw_section("capacity") or {}, f"{self.where}.capacity")
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


@dataclass(frozen=True, slots=True)
class SliceContext:
    """What a device takes from the slice that lists it."""

    name: str
    driver: str
    cache_token: str | None
    """uid@resourceVersion when the slice has a version (see `Device.cache_key`)."""
    per_device: bool
    """perDeviceNodeSelection: each device names its own node(s); else the slice's apply."""
    node_name: str | None
    all_nodes: bool
    node_selector: Mapping[str, Any] | None


@dataclass(frozen=True, slots=True)
class Unreadable:
    """A device whose JSON is malformed, and the error the snapshot raises on reaching it."""

    error: Exception


def read_device(
    raw: Mapping[str, Any], position: int, context: SliceContext, interner: Interner
) -> Device | Unreadable:
    """The device at `position` of its slice's list, or the first error in it.

    Fields are checked in the order the errors must come: name, consumed counters, taints.
    A `taints` that cannot be iterated fails as Python words it, as it always has."""
    try:
        return _read(raw, position, context, interner)
    except (InputError, TypeError) as err:
        return Unreadable(err)


def _read(
    raw: Mapping[str, Any], position: int, context: SliceContext, interner: Interner
) -> Device:
    name = raw.get("name")
    if not isinstance(name, str) or not name:
        name = expect_string(name, f"ResourceSlice {context.name}: spec.devices[{position}].name")
    listed = raw.get("consumesCounters") or []
    if not isinstance(listed, list):
        raise InputError(f"{_where(context, name)}.consumesCounters: expected a list")
    consumes_named = None
    if listed:
        # Equal lists (the same MIG placement on every GPU and node) are read once.
        text = repr(listed)
        found = interner.counters_read.get(text)
        if found is None:
            found = interner.counters_read[text] = _consumed_counters(listed, context, name)
        consumes_named = (text, found)
    listed_taints = raw.get("taints")
    taints = (
        tuple(_taint(t, context, name, i) for i, t in enumerate(listed_taints))
        if listed_taints
        else ()
    )
    if context.per_device:
        node = raw.get("nodeName") or None
        selector = raw.get("nodeSelector") or None
        node_name = node if isinstance(node, str) else None
        all_nodes = bool(raw.get("allNodes"))
        node_selector = selector if isinstance(selector, Mapping) else None
    else:
        node_name, all_nodes = context.node_name, context.all_nodes
        node_selector = context.node_selector
    sections, odd = _sections(raw, context.driver, interner)
    return Device(
        id=-1,
        name=name,
        driver=context.driver,
        pool_index=-1,
        slice_name=context.name,
        consumes=(),
        consumes_named=consumes_named,
        taints=taints,
        allow_multiple=bool(raw.get("allowMultipleAllocations")),
        node_name=node_name,
        all_nodes=all_nodes,
        node_selector=node_selector,
        has_binding_conditions=bool(raw.get("bindingConditions")),
        _token=context.cache_token,
        _attrs=sections[0],
        _caps=sections[1],
        _odd=odd,
    )


def _where(context: SliceContext, name: str) -> str:
    """A device's location in errors; only spelled out for an error (millions of devices)."""
    return f"ResourceSlice {context.name}: device {name}"


def _consumed_counters(
    listed: list[Any], context: SliceContext, name: str
) -> tuple[tuple[str, str, Number], ...]:
    """(counter set, counter, amount) of each consumed counter; InputError when malformed.

    Locations are only spelled out on failure: a cluster has millions of these entries."""
    found: list[tuple[str, str, Number]] = []
    for k, raw_entry in enumerate(listed):
        entry = raw_entry
        if type(entry) is not dict:
            entry = expect_mapping(entry, f"{_where(context, name)}.consumesCounters[{k}]")
        set_name = entry.get("counterSet")
        if not isinstance(set_name, str) or not set_name:
            set_name = expect_string(
                set_name, f"{_where(context, name)}.consumesCounters[{k}].counterSet"
            )
        counters = entry.get("counters") or {}
        if type(counters) is not dict:
            counters = expect_mapping(
                counters, f"{_where(context, name)}.consumesCounters[{k}].counters"
            )
        for counter, spec in counters.items():
            amount = _plain_amount(spec)
            if amount is None:
                where = f"{_where(context, name)}.consumesCounters[{k}].counters[{counter}]"
                amount = quantity_value(expect_mapping(spec, where).get("value"), f"{where}.value")
            found.append((set_name, counter, amount))
    return tuple(found)


def _plain_amount(spec: object) -> Number | None:
    """The amount of a well-formed counter entry; None when it must be worded as an error."""
    if type(spec) is dict:
        try:
            return quantity_value(spec.get("value"), "")
        except InputError:
            return None
    return None


def _taint(spec: object, context: SliceContext, name: str, position: int) -> Taint:
    values = spec
    if type(values) is not dict:
        values = expect_mapping(values, f"{_where(context, name)}.taints[{position}]")
    return Taint(
        key=str(values.get("key", "")),
        value=str(values.get("value", "")),
        effect=str(values.get("effect", "")),
    )


def _sections(
    raw: Mapping[str, Any], driver: str, interner: Interner
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


class Interner:
    """Shares what equal devices publish among the devices of one build.

    One per `ClusterSnapshot.build`, dropped when the build ends (the devices keep what it
    handed them); the contents it keys by are never changed, so nothing here goes stale.
    """

    def __init__(self) -> None:
        self.items: tuple[dict[tuple[str, object], _Item], dict[tuple[str, object], _Item]] = (
            {},
            {},
        )
        """Attribute and capacity entries by content (key, kind, value)."""
        self.layouts: dict[tuple[str, tuple[str, ...]], _Layout] = {}
        """(driver, a section's keys in order) → their layout."""
        self.capacities: dict[tuple[str, str], _Section] = {}
        """(driver, a capacity map's text) → its section: capacity maps repeat whole."""
        self.counters_read: dict[str, tuple[tuple[str, str, Number], ...]] = {}
        """A consumesCounters list's text → its (set, counter, amount) entries."""
        self.pool_layouts: dict[int, int] = {}
        """Pool index → the number of its counter layout (`counter_layouts`)."""
        self.counter_layouts: dict[tuple[tuple[str, str], ...], int] = {}
        """A pool's counters, (set, counter) in position order → a number shared by pools
        that define the same counters in the same order."""
        self.consumes: dict[tuple[int, str], tuple[tuple[tuple[int, Number], ...], str | None]] = {}
        """(counter layout, consumesCounters text) → `consumed`'s answer."""

    def consumed(
        self, pool_index: int, counter_index: dict[tuple[str, str], int], device: Device
    ) -> tuple[tuple[tuple[int, Number], ...], str | None]:
        """(position, amount) of each counter `device` consumes in its pool, and the first
        counter (set/name) the pool does not define, if any. Pools that define the same counters
        in the same order resolve equal lists alike, so each list is resolved once per such
        layout."""
        named = device.consumes_named
        if named is None:
            return (), None
        text, counters = named
        layout = self.pool_layouts.get(pool_index)
        if layout is None:
            layout = self.counter_layouts.setdefault(
                tuple(counter_index), len(self.counter_layouts)
            )
            self.pool_layouts[pool_index] = layout
        found = self.consumes.get((layout, text))
        if found is None:
            resolved: list[tuple[int, Number]] = []
            missing: str | None = None
            for set_name, counter, amount in counters:
                position = counter_index.get((set_name, counter))
                if position is None:
                    if missing is None:
                        missing = f"{set_name}/{counter}"
                    continue
                resolved.append((position, amount))
            found = self.consumes[(layout, text)] = (tuple(resolved), missing)
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


def _qualify(key: str, driver: str) -> str:
    return key if "/" in key else f"{driver}/{key}"


def _attribute(spec: object, where: str) -> AttributeValue:
    values = expect_mapping(spec, where)
    if len(values) == 1:
        for kind, value in values.items():
            if kind in VALUE_KINDS:
                return kind, value
    raise InputError(f"{where}: exactly one of {', '.join(VALUE_KINDS)} must be set")


def _capacity(spec: object, where: str) -> CapacityRule:
    values = expect_mapping(spec, where)
    value = quantity_value(values.get("value"), f"{where}.value")
    policy = values.get("requestPolicy")
    if not policy:
        return CapacityRule(value)
    policy = expect_mapping(policy, f"{where}.requestPolicy")

    def optional(raw: object, name: str) -> Number | None:
        return None if raw is None else quantity_value(raw, f"{where}.requestPolicy.{name}")

    valid_values = policy.get("validValues")
    valid_range = expect_mapping(
        policy.get("validRange") or {}, f"{where}.requestPolicy.validRange"
    )
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


def expect_mapping(value: object, where: str) -> Mapping[str, Any]:
    if type(value) is dict:  # the common case, without the slow ABC check
        return value
    if not isinstance(value, Mapping):
        raise InputError(f"{where}: expected an object, got {type(value).__name__}")
    return value


def expect_string(value: object, where: str) -> str:
    if not isinstance(value, str) or not value:
        raise InputError(f"{where}: expected a non-empty string, got {value!r}")
    return value
