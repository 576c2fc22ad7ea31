"""The checker's own reading of ResourceSlices, DeviceClasses, Nodes and ResourceClaims.

The checker exists to catch mistakes in the allocator, so it must not share the allocator's
parsing: a misreading there would otherwise be invisible. Everything here is written from
docs/allocation.md and the Kubernetes API field names alone, favouring plain code over speed.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from api.errors import ConfigError
from api.quantity import parse_quantity

DeviceKey = tuple[str, str, str]
"""(driver, pool, device): how allocation results name a device."""

PoolKey = tuple[str, str]
"""(driver, pool name)."""


class MalformedInputError(ValueError):
    """An object the checker cannot read at all (as opposed to one that breaks a rule)."""


def quantity(raw: Any, where: str) -> Fraction:
    """Read a Kubernetes quantity; JSON numbers are accepted, as hand-written inputs use them."""
    if isinstance(raw, bool) or not isinstance(raw, str | int):
        raise MalformedInputError(f"{where}: {raw!r} is not a quantity")
    try:
        return parse_quantity(str(raw), where).value
    except ConfigError as err:
        raise MalformedInputError(str(err)) from err


def qualify(name: str, driver: str) -> str:
    """Kubernetes puts a bare attribute or capacity name in the driver's own domain."""
    return name if "/" in name else f"{driver}/{name}"


# --- nodes and node selectors ------------------------------------------------------------------


@dataclass(frozen=True)
class NodeInfo:
    """A node as node selectors see it. ``name`` None stands for "no particular node"."""

    name: str | None
    labels: Mapping[str, str] = field(default_factory=dict)


def parse_nodes(nodes: Iterable[Mapping[str, Any]]) -> dict[str, NodeInfo]:
    found: dict[str, NodeInfo] = {}
    for node in nodes:
        meta = node.get("metadata") or {}
        name = meta.get("name")
        if not isinstance(name, str):
            raise MalformedInputError(f"a Node without metadata.name: {node!r}")
        found[name] = NodeInfo(name, dict(meta.get("labels") or {}))
    return found


def _requirement_holds(requirement: Mapping[str, Any], values_by_key: Mapping[str, str]) -> bool:
    key = requirement.get("key", "")
    operator = requirement.get("operator", "")
    values = list(requirement.get("values") or [])
    present = key in values_by_key
    actual = values_by_key.get(key)
    if operator == "In":
        return present and actual in values
    if operator == "NotIn":
        return not present or actual not in values
    if operator == "Exists":
        return present
    if operator == "DoesNotExist":
        return not present
    if operator in ("Gt", "Lt") and present and len(values) == 1:
        try:
            left, right = int(str(actual)), int(values[0])
        except ValueError:
            return False
        return left > right if operator == "Gt" else left < right
    return False


def node_selector_matches(selector: Mapping[str, Any], node: NodeInfo) -> bool:
    """Terms are ORed, requirements within a term ANDed; an empty term matches nothing."""
    fields = {"metadata.name": node.name} if node.name is not None else {}
    for term in selector.get("nodeSelectorTerms") or []:
        expressions = term.get("matchExpressions") or []
        match_fields = term.get("matchFields") or []
        if not expressions and not match_fields:
            continue
        if all(_requirement_holds(r, node.labels) for r in expressions) and all(
            _requirement_holds(r, fields) for r in match_fields
        ):
            return True
    return False


def node_name_selector(node: str) -> dict[str, Any]:
    """The selector an allocation with a node-local device must carry."""
    return {
        "nodeSelectorTerms": [
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
        ]
    }


def allocation_node(allocation: Mapping[str, Any]) -> str | None:
    """The node named by ``nodeSelectorTerms[0].matchFields[0].values[0]``, if any."""
    selector = allocation.get("nodeSelector")
    if not isinstance(selector, Mapping):
        return None
    terms = selector.get("nodeSelectorTerms") or []
    if not terms:
        return None
    match_fields = terms[0].get("matchFields") or []
    if not match_fields:
        return None
    first = match_fields[0]
    if first.get("key") != "metadata.name" or first.get("operator") != "In":
        return None
    values = first.get("values") or []
    return str(values[0]) if values else None


# --- devices, slices, pools --------------------------------------------------------------------


@dataclass(frozen=True)
class CapacityRule:
    value: Fraction
    default: Fraction | None
    valid_values: tuple[Fraction, ...] | None
    minimum: Fraction | None
    maximum: Fraction | None
    step: Fraction | None


@dataclass(frozen=True)
class Placement:
    """Where a slice, or with per-device node selection a device, may be used."""

    node_name: str | None
    all_nodes: bool
    node_selector: Mapping[str, Any] | None

    def applies_to(self, node: NodeInfo) -> bool:
        if self.node_name:
            return node.name == self.node_name
        if self.all_nodes:
            return True
        if self.node_selector is not None:
            return node_selector_matches(self.node_selector, node)
        return False


def _placement(obj: Mapping[str, Any]) -> Placement:
    selector = obj.get("nodeSelector")
    return Placement(
        node_name=obj.get("nodeName") or None,
        all_nodes=bool(obj.get("allNodes")),
        node_selector=selector if isinstance(selector, Mapping) else None,
    )


@dataclass(frozen=True)
class Device:
    key: DeviceKey
    raw: Mapping[str, Any]
    slice_name: str
    placement: Placement
    per_device_placement: bool
    multiple: bool
    capacity: Mapping[str, CapacityRule]
    """Keyed by qualified name (``driver/memory`` for a bare ``memory``)."""
    consumes: tuple[tuple[str, Mapping[str, Fraction]], ...]
    taints: tuple[Mapping[str, Any], ...]
    binding: bool

    @property
    def driver(self) -> str:
        return self.key[0]

    @property
    def name(self) -> str:
        return self.key[2]

    def __str__(self) -> str:
        return "/".join(self.key)


def _capacity_rule(raw: Mapping[str, Any], where: str) -> CapacityRule:
    policy = raw.get("requestPolicy") or {}
    valid_range = policy.get("validRange")
    listed = policy.get("validValues")
    default = policy.get("default")
    return CapacityRule(
        value=quantity(raw.get("value"), f"{where}.value"),
        default=None if default is None else quantity(default, f"{where}.requestPolicy.default"),
        valid_values=(
            None
            if listed is None
            else tuple(sorted(quantity(v, f"{where}.requestPolicy.validValues") for v in listed))
        ),
        minimum=(
            None
            if not valid_range or valid_range.get("min") is None
            else quantity(valid_range["min"], f"{where}.requestPolicy.validRange.min")
        ),
        maximum=(
            None
            if not valid_range or valid_range.get("max") is None
            else quantity(valid_range["max"], f"{where}.requestPolicy.validRange.max")
        ),
        step=(
            None
            if not valid_range or valid_range.get("step") is None
            else quantity(valid_range["step"], f"{where}.requestPolicy.validRange.step")
        ),
    )


def _device(
    raw: Mapping[str, Any], driver: str, pool: str, slice_name: str, slice_spec: Mapping[str, Any]
) -> Device:
    name = raw.get("name")
    if not isinstance(name, str):
        raise MalformedInputError(f"slice {slice_name}: a device without a name")
    where = f"slice {slice_name} device {name}"
    per_device = bool(slice_spec.get("perDeviceNodeSelection"))
    consumes: list[tuple[str, Mapping[str, Fraction]]] = []
    for entry in raw.get("consumesCounters") or []:
        counters = {
            counter: quantity((value or {}).get("value"), f"{where}.consumesCounters")
            for counter, value in (entry.get("counters") or {}).items()
        }
        consumes.append((str(entry.get("counterSet", "")), counters))
    return Device(
        key=(driver, pool, name),
        raw=raw,
        slice_name=slice_name,
        placement=_placement(raw if per_device else slice_spec),
        per_device_placement=per_device,
        multiple=bool(raw.get("allowMultipleAllocations")),
        capacity={
            qualify(cap, driver): _capacity_rule(spec or {}, f"{where}.capacity.{cap}")
            for cap, spec in (raw.get("capacity") or {}).items()
        },
        consumes=tuple(consumes),
        taints=tuple(raw.get("taints") or ()),
        binding=bool(raw.get("bindingConditions")),
    )


@dataclass(frozen=True)
class Slice:
    name: str
    driver: str
    pool: str
    generation: int
    slice_count: int
    spec: Mapping[str, Any]
    placement: Placement
    devices: tuple[Device, ...]
    counter_sets: tuple[tuple[str, Mapping[str, Fraction]], ...]

    def applies_to(self, node: NodeInfo) -> bool:
        """Per-device node selection leaves the decision to each device."""
        if self.spec.get("perDeviceNodeSelection"):
            return True
        return self.placement.applies_to(node)


def parse_slice(raw: Mapping[str, Any]) -> Slice:
    name = str((raw.get("metadata") or {}).get("name", ""))
    spec = raw.get("spec") or {}
    driver = spec.get("driver")
    pool = spec.get("pool") or {}
    if not isinstance(driver, str) or not isinstance(pool.get("name"), str):
        raise MalformedInputError(f"slice {name}: spec.driver and spec.pool.name are required")
    counter_sets = tuple(
        (
            str(cs.get("name", "")),
            {
                counter: quantity((value or {}).get("value"), f"slice {name} sharedCounters")
                for counter, value in (cs.get("counters") or {}).items()
            },
        )
        for cs in spec.get("sharedCounters") or []
    )
    return Slice(
        name=name,
        driver=driver,
        pool=pool["name"],
        generation=int(pool.get("generation", 0)),
        slice_count=int(pool.get("resourceSliceCount", 1)),
        spec=spec,
        placement=_placement(spec),
        devices=tuple(
            _device(d, driver, pool["name"], name, spec) for d in spec.get("devices") or []
        ),
        counter_sets=counter_sets,
    )


@dataclass
class Pool:
    """One pool as seen from one node: only its newest slices that apply there."""

    key: PoolKey
    slices: list[Slice]
    incomplete: bool = False
    invalid: str | None = None
    counter_sets: dict[str, Mapping[str, Fraction]] = field(default_factory=dict)
    devices: dict[str, Device] = field(default_factory=dict)

    @property
    def usable(self) -> bool:
        return not self.incomplete and self.invalid is None

    @property
    def problem(self) -> str:
        if self.invalid is not None:
            return f"pool {self.key[0]}/{self.key[1]} is invalid: {self.invalid}"
        return (
            f"pool {self.key[0]}/{self.key[1]} is incomplete: it has {len(self.slices)} "
            f"slice(s) at generation {self.slices[0].generation}, but resourceSliceCount is "
            f"{self.slices[0].slice_count}"
        )


def build_pools(slices: Iterable[Slice]) -> dict[PoolKey, Pool]:
    """Group slices into pools, keep the newest generation, and judge completeness and validity."""
    newest: dict[PoolKey, list[Slice]] = defaultdict(list)
    for s in slices:
        key = (s.driver, s.pool)
        kept = newest[key]
        if kept and s.generation < kept[0].generation:
            continue
        if kept and s.generation > kept[0].generation:
            kept.clear()
        kept.append(s)
    pools: dict[PoolKey, Pool] = {}
    for key, kept in newest.items():
        members = sorted(kept, key=lambda s: s.name)
        pool = Pool(key=key, slices=members)
        pool.incomplete = len(members) != members[0].slice_count
        problems: list[str] = []
        for s in members:
            for set_name, counters in s.counter_sets:
                if set_name in pool.counter_sets:
                    problems.append(f"counter set {set_name} is defined twice")
                pool.counter_sets[set_name] = counters
        for s in members:
            for device in s.devices:
                if device.name in pool.devices:
                    problems.append(f"device {device.name} is listed twice")
                else:
                    pool.devices[device.name] = device
                for set_name, counters in device.consumes:
                    defined = pool.counter_sets.get(set_name)
                    if defined is None:
                        problems.append(
                            f"device {device.name} consumes counter set {set_name}, "
                            "which the pool does not define"
                        )
                        continue
                    for counter in counters:
                        if counter not in defined:
                            problems.append(
                                f"device {device.name} consumes counter {counter} of set "
                                f"{set_name}, which the set does not define"
                            )
        pool.invalid = "; ".join(problems) if problems else None
        pools[key] = pool
    return pools


def device_order(pools: Iterable[Pool], node: NodeInfo) -> list[Device]:
    """Every device of usable pools that is available on ``node``, in the search's device order."""
    usable = [p for p in pools if p.usable]
    usable.sort(key=lambda p: (any(d.binding for d in p.devices.values()), p.key))
    ordered: list[Device] = []
    for pool in usable:
        for s in pool.slices:
            for device in s.devices:
                if not device.per_device_placement or device.placement.applies_to(node):
                    ordered.append(device)
    return ordered


# --- attribute values --------------------------------------------------------------------------

_SEMVER = re.compile(r"^v?(\d+)\.(\d+)\.(\d+)(?:-([0-9A-Za-z.-]+))?(?:\+[0-9A-Za-z.-]+)?$")


def attribute_value(raw: Mapping[str, Any]) -> tuple[str, Any] | None:
    """A typed, comparable form of a device attribute; versions compare as semver (no build)."""
    for kind in ("int", "bool", "string"):
        if kind in raw:
            return (kind, raw[kind])
    if "version" in raw:
        text = str(raw["version"])
        match = _SEMVER.match(text)
        if match is None:
            return ("version", text)
        major, minor, patch, pre = match.groups()
        return ("version", (int(major), int(minor), int(patch), pre or ""))
    return None


def lookup_attribute(device: Device, name: str) -> tuple[str, Any] | None:
    """The name as a key first, then its bare id when its domain is the device's driver."""
    attributes = device.raw.get("attributes") or {}
    if name in attributes:
        return attribute_value(attributes[name])
    domain, slash, bare = name.partition("/")
    if slash and domain == device.driver and bare in attributes:
        return attribute_value(attributes[bare])
    return None


# --- claims -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Alternative:
    """What a request (``exactly``) or one of its ``firstAvailable`` entries asks for."""

    result_name: str
    """The name results carry: ``request`` or ``request/subrequest``."""
    class_name: str
    selectors: tuple[str, ...]
    all_mode: bool
    count: int
    admin: bool
    tolerations: tuple[Mapping[str, Any], ...]
    capacity: Mapping[str, Fraction]
    """Requested amounts, keyed by the name as written."""


@dataclass(frozen=True)
class Request:
    name: str
    alternatives: tuple[Alternative, ...]
    first_available: bool


@dataclass(frozen=True)
class Constraint:
    requests: tuple[str, ...]
    attribute: str
    distinct: bool


@dataclass(frozen=True)
class ClaimSpec:
    key: str
    requests: tuple[Request, ...]
    constraints: tuple[Constraint, ...]
    configs: tuple[Mapping[str, Any], ...]


def claim_key(claim: Mapping[str, Any]) -> str:
    meta = claim.get("metadata") or {}
    return f"{meta.get('namespace', 'default')}/{meta.get('name', '')}"


def _alternative(raw: Mapping[str, Any], result_name: str, where: str) -> Alternative:
    mode = raw.get("allocationMode", "ExactCount") or "ExactCount"
    if mode not in ("ExactCount", "All"):
        raise MalformedInputError(f"{where}: unknown allocationMode {mode!r}")
    selectors = tuple(
        str((s.get("cel") or {}).get("expression", "")) for s in raw.get("selectors") or []
    )
    requested = (raw.get("capacity") or {}).get("requests") or {}
    return Alternative(
        result_name=result_name,
        class_name=str(raw.get("deviceClassName", "")),
        selectors=selectors,
        all_mode=mode == "All",
        count=int(raw.get("count", 1) or 1),
        admin=bool(raw.get("adminAccess")),
        tolerations=tuple(raw.get("tolerations") or ()),
        capacity={
            name: quantity(v, f"{where}.capacity.requests.{name}") for name, v in requested.items()
        },
    )


def parse_claim(claim: Mapping[str, Any]) -> ClaimSpec:
    key = claim_key(claim)
    devices = (claim.get("spec") or {}).get("devices") or {}
    requests: list[Request] = []
    for raw in devices.get("requests") or []:
        name = str(raw.get("name", ""))
        where = f"claim {key} request {name}"
        if raw.get("firstAvailable"):
            alternatives = tuple(
                _alternative(sub, f"{name}/{sub.get('name', '')}", where)
                for sub in raw["firstAvailable"]
            )
            requests.append(Request(name, alternatives, first_available=True))
        else:
            requests.append(
                Request(name, (_alternative(raw.get("exactly") or {}, name, where),), False)
            )
    constraints = []
    for raw in devices.get("constraints") or []:
        distinct = raw.get("distinctAttribute")
        attribute = distinct if distinct is not None else raw.get("matchAttribute")
        if not isinstance(attribute, str):
            raise MalformedInputError(f"claim {key}: a constraint names no attribute")
        constraints.append(
            Constraint(tuple(raw.get("requests") or ()), attribute, distinct is not None)
        )
    return ClaimSpec(
        key=key,
        requests=tuple(requests),
        constraints=tuple(constraints),
        configs=tuple(devices.get("config") or ()),
    )


@dataclass(frozen=True)
class DeviceClass:
    name: str
    selectors: tuple[str, ...]
    configs: tuple[Mapping[str, Any], ...]


def parse_classes(classes: Iterable[Mapping[str, Any]]) -> dict[str, DeviceClass]:
    found: dict[str, DeviceClass] = {}
    for raw in classes:
        name = str((raw.get("metadata") or {}).get("name", ""))
        spec = raw.get("spec") or {}
        found[name] = DeviceClass(
            name=name,
            selectors=tuple(
                str((s.get("cel") or {}).get("expression", "")) for s in spec.get("selectors") or []
            ),
            configs=tuple(spec.get("config") or ()),
        )
    return found


# --- tolerations and capacity ------------------------------------------------------------------

BLOCKING_EFFECTS = ("NoSchedule", "NoExecute")


def tolerates(toleration: Mapping[str, Any], taint: Mapping[str, Any]) -> bool:
    """Kubernetes' rule: effect (when set) and key (when set) must match, then the operator."""
    effect = toleration.get("effect") or ""
    if effect and effect != taint.get("effect"):
        return False
    key = toleration.get("key") or ""
    if key and key != taint.get("key"):
        return False
    operator = toleration.get("operator") or "Equal"
    if operator == "Exists":
        return True
    if operator == "Equal":
        return (toleration.get("value") or "") == (taint.get("value") or "")
    return False


def untolerated_taints(
    device: Device, tolerations: Sequence[Mapping[str, Any]]
) -> list[Mapping[str, Any]]:
    return [
        taint
        for taint in device.taints
        if taint.get("effect") in BLOCKING_EFFECTS
        and not any(tolerates(t, taint) for t in tolerations)
    ]


def round_amount(rule: CapacityRule, amount: Fraction) -> Fraction | None:
    """The amount the policy turns a request into; None when the policy cannot serve it."""
    if rule.valid_values is not None:
        for allowed in rule.valid_values:
            if allowed >= amount:
                return allowed
        return None
    if rule.minimum is not None:
        if amount < rule.minimum:
            amount = rule.minimum
        elif rule.step:
            steps = (amount - rule.minimum) / rule.step
            whole = steps.numerator // steps.denominator
            if whole < steps:
                whole += 1
            amount = rule.minimum + whole * rule.step
        if rule.maximum is not None and amount > rule.maximum:
            return None
    return amount


def share_amounts(device: Device, requested: Mapping[str, Fraction]) -> dict[str, Fraction] | str:
    """What one share of ``device`` consumes, per device capacity, or why it cannot be served."""
    wanted = {qualify(name, device.driver): amount for name, amount in requested.items()}
    for name in wanted:
        if name not in device.capacity:
            return f"the request asks for capacity {name}, which device {device} does not have"
    amounts: dict[str, Fraction] = {}
    for name, rule in device.capacity.items():
        amount = wanted.get(name)
        if amount is None:
            amount = rule.default if rule.default is not None else rule.value
        rounded = round_amount(rule, amount)
        if rounded is None:
            return f"capacity {name} of device {device}: the policy allows no amount for {amount}"
        amounts[name] = rounded
    return amounts


def exclusive_capacity_problem(device: Device, requested: Mapping[str, Fraction]) -> str | None:
    for name, amount in requested.items():
        rule = device.capacity.get(qualify(name, device.driver))
        if rule is None:
            return f"the request asks for capacity {name}, which device {device} does not have"
        if amount > rule.value:
            return (
                f"the request asks for {amount} of capacity {name}; device {device} has "
                f"{rule.value}"
            )
    return None


def capacity_key_of(device: Device, written: str) -> str:
    """The capacity name as written in the device, for ``consumedCapacity`` keys."""
    for name in device.raw.get("capacity") or {}:
        if qualify(name, device.driver) == written:
            return str(name)
    return written
