"""Every limit the API server enforces on ResourceSlices, checked before we write.

One violated limit makes the API server reject the whole slice, which on a node means no GPUs
at all, so the builder's output is checked here and each violation is named precisely (slice,
field path, limit). Pool-level consistency (generation, slice count, counter references, unique
names) is checked too: the API server accepts an inconsistent pool, but schedulers then skip it.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from api.errors import ConfigError
from api.quantity import parse_quantity

MAX_DEVICES = 128
MAX_DEVICES_WITH_COUNTERS_OR_TAINTS = 64
MAX_ATTRIBUTES_AND_CAPACITIES = 32
MAX_ID_LENGTH = 32
MAX_DOMAIN_LENGTH = 63
MAX_VALUE_LENGTH = 64
MAX_COUNTER_SETS = 8
MAX_COUNTERS_PER_SET = 32
MAX_CONSUMPTIONS_PER_DEVICE = 2
MAX_COUNTERS_PER_CONSUMPTION = 32
MAX_TAINTS = 16
MAX_NAME = 253

_C_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_NUM = r"(0|[1-9]\d*)"
_PRE = r"(0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)"
_BUILD = r"[0-9a-zA-Z-]+"
_SEMVER = re.compile(rf"^{_NUM}\.{_NUM}\.{_NUM}(-{_PRE}(\.{_PRE})*)?(\+{_BUILD}(\.{_BUILD})*)?$")
_TAINT_EFFECTS = {"NoSchedule", "NoExecute", "None"}


@dataclass(frozen=True, slots=True)
class LimitViolation:
    slice: str
    path: str
    message: str

    def __str__(self) -> str:
        return f'ResourceSlice "{self.slice}" {self.path}: {self.message}'


class SliceLimitError(ValueError):
    def __init__(self, violations: Sequence[LimitViolation]) -> None:
        self.violations = list(violations)
        listed = "\n".join(f"  - {v}" for v in self.violations)
        super().__init__(f"{len(self.violations)} ResourceSlice limit violation(s):\n{listed}")


class _Checker:
    def __init__(self) -> None:
        self.violations: list[LimitViolation] = []
        self.slice = ""

    def fail(self, path: str, message: str) -> None:
        self.violations.append(LimitViolation(self.slice, path, message))

    def dns_label(self, path: str, value: str, what: str) -> None:
        if len(value) > 63 or not _DNS_LABEL.match(value):
            self.fail(
                path,
                f"{what} {value!r} must be a DNS label (at most 63 lower-case "
                "letters, digits and '-', starting and ending alphanumeric)",
            )

    def dns_subdomain(self, path: str, value: str, what: str, limit: int = MAX_NAME) -> None:
        if len(value) > limit or not _DNS_SUBDOMAIN.match(value):
            self.fail(
                path, f"{what} {value!r} must be a DNS subdomain of at most {limit} characters"
            )

    def qualified_name(self, path: str, key: str) -> None:
        domain, _, ident = key.rpartition("/")
        if "/" in key:
            self.dns_subdomain(path, domain, "domain", MAX_DOMAIN_LENGTH)
        if len(ident) > MAX_ID_LENGTH:
            self.fail(path, f"name {ident!r} is longer than {MAX_ID_LENGTH} characters")
        if not _C_IDENTIFIER.match(ident):
            self.fail(path, f"name {ident!r} must be a C identifier")

    def quantity(self, path: str, value: Any) -> Fraction | None:
        try:
            return parse_quantity(str(value), path).value
        except ConfigError as err:
            self.fail(path, str(err))
            return None

    def check_slice(self, item: Mapping[str, Any]) -> None:
        self.slice = _name(item)
        self.dns_subdomain("metadata.name", self.slice, "name")
        spec = _spec(item)
        self.dns_subdomain("spec.driver", str(spec.get("driver", "")), "driver", MAX_DOMAIN_LENGTH)
        pool = _pool(item)
        if int(pool.get("resourceSliceCount", 0)) <= 0:
            self.fail("spec.pool.resourceSliceCount", "must be greater than zero")
        if int(pool.get("generation", -1)) < 0:
            self.fail("spec.pool.generation", "must be zero or more")
        chosen = [
            k
            for k in ("nodeName", "nodeSelector", "allNodes", "perDeviceNodeSelection")
            if spec.get(k)
        ]
        if len(chosen) != 1:
            self.fail(
                "spec",
                "exactly one of nodeName, nodeSelector, allNodes, "
                f"perDeviceNodeSelection must be set (got {chosen or 'none'})",
            )
        devices = spec.get("devices")
        counter_sets = spec.get("sharedCounters")
        if devices is not None and counter_sets is not None:
            self.fail("spec", "a slice carries either devices or sharedCounters, not both")
        self.check_devices(devices or [])
        self.check_counter_sets(counter_sets or [])

    def check_devices(self, devices: Sequence[Mapping[str, Any]]) -> None:
        limited = any(d.get("taints") or d.get("consumesCounters") for d in devices)
        limit = MAX_DEVICES_WITH_COUNTERS_OR_TAINTS if limited else MAX_DEVICES
        if len(devices) > limit:
            why = " (some device uses taints or consumesCounters)" if limited else ""
            self.fail("spec.devices", f"{len(devices)} devices, at most {limit}{why}")
        seen: set[str] = set()
        for i, device in enumerate(devices):
            path = f"spec.devices[{i}]"
            name = str(device.get("name", ""))
            self.dns_label(f"{path}.name", name, "device name")
            if name in seen:
                self.fail(f"{path}.name", f"duplicate device name {name!r}")
            seen.add(name)
            self.check_device(path, device)

    def check_device(self, path: str, device: Mapping[str, Any]) -> None:
        attrs = device.get("attributes") or {}
        capacity = device.get("capacity") or {}
        if len(attrs) + len(capacity) > MAX_ATTRIBUTES_AND_CAPACITIES:
            self.fail(
                path,
                f"{len(attrs)} attributes + {len(capacity)} capacities, at most "
                f"{MAX_ATTRIBUTES_AND_CAPACITIES} together",
            )
        for key, value in attrs.items():
            self.qualified_name(f"{path}.attributes[{key}]", key)
            self.check_attribute(f"{path}.attributes[{key}]", value)
        multi = bool(device.get("allowMultipleAllocations"))
        for key, value in capacity.items():
            self.qualified_name(f"{path}.capacity[{key}]", key)
            self.check_capacity(f"{path}.capacity[{key}]", value, multi)
        taints = device.get("taints") or []
        if len(taints) > MAX_TAINTS:
            self.fail(f"{path}.taints", f"{len(taints)} taints, at most {MAX_TAINTS}")
        for t, taint in enumerate(taints):
            if not taint.get("key"):
                self.fail(f"{path}.taints[{t}].key", "is required")
            if taint.get("effect") not in _TAINT_EFFECTS:
                self.fail(
                    f"{path}.taints[{t}].effect",
                    f"{taint.get('effect')!r} is not one of {sorted(_TAINT_EFFECTS)}",
                )
        consumes = device.get("consumesCounters") or []
        if len(consumes) > MAX_CONSUMPTIONS_PER_DEVICE:
            self.fail(
                f"{path}.consumesCounters",
                f"{len(consumes)} entries, at most {MAX_CONSUMPTIONS_PER_DEVICE}",
            )
        sets = [c.get("counterSet") for c in consumes]
        if len(set(sets)) != len(sets):
            self.fail(f"{path}.consumesCounters", "a counter set is named twice")
        for c, entry in enumerate(consumes):
            counters = entry.get("counters") or {}
            cpath = f"{path}.consumesCounters[{c}].counters"
            if not counters:
                self.fail(cpath, "must not be empty")
            if len(counters) > MAX_COUNTERS_PER_CONSUMPTION:
                self.fail(
                    cpath, f"{len(counters)} counters, at most {MAX_COUNTERS_PER_CONSUMPTION}"
                )
            for name, counter in counters.items():
                self.dns_label(f"{cpath}[{name}]", name, "counter name")
                self.quantity(f"{cpath}[{name}].value", (counter or {}).get("value"))

    def check_attribute(self, path: str, value: Mapping[str, Any]) -> None:
        kinds = [k for k in ("bool", "int", "string", "version") if value.get(k) is not None]
        if len(kinds) != 1:
            self.fail(path, f"exactly one of bool, int, string, version must be set (got {kinds})")
            return
        text = value.get("string")
        if text is not None and len(str(text)) > MAX_VALUE_LENGTH:
            self.fail(f"{path}.string", f"{len(str(text))} characters, at most {MAX_VALUE_LENGTH}")
        ver = value.get("version")
        if ver is not None:
            if len(str(ver)) > MAX_VALUE_LENGTH:
                self.fail(f"{path}.version", f"longer than {MAX_VALUE_LENGTH} characters")
            if not _SEMVER.match(str(ver)):
                self.fail(f"{path}.version", f"{ver!r} is not semantic versioning 2.0.0")

    def check_capacity(self, path: str, value: Mapping[str, Any], multi: bool) -> None:
        total = self.quantity(f"{path}.value", value.get("value"))
        policy = value.get("requestPolicy")
        if policy is None:
            return
        if not multi:
            self.fail(f"{path}.requestPolicy", "only allowed when allowMultipleAllocations is true")
            return
        if total is None or policy.get("default") is None:
            self.fail(f"{path}.requestPolicy.default", "is required")
            return
        default = self.quantity(f"{path}.requestPolicy.default", policy["default"])
        valid_range = policy.get("validRange")
        if default is None or valid_range is None:
            return
        rpath = f"{path}.requestPolicy.validRange"
        low = self.quantity(f"{rpath}.min", valid_range.get("min"))
        if low is None:
            return
        high = self.quantity(f"{rpath}.max", valid_range["max"]) if "max" in valid_range else None
        step = (
            self.quantity(f"{rpath}.step", valid_range["step"]) if "step" in valid_range else None
        )
        if low > total:
            self.fail(f"{rpath}.min", "is larger than the capacity value")
        if default < low:
            self.fail(f"{rpath}.min", "default is less than min")
        if high is not None:
            if low > high:
                self.fail(f"{rpath}.max", "min is larger than max")
            if high > total:
                self.fail(f"{rpath}.max", "is larger than the capacity value")
            if default > high:
                self.fail(f"{rpath}.max", "default is more than max")
        if step is not None and step > 0:
            if low + step > total:
                self.fail(f"{rpath}.step", "one step above min is larger than the capacity value")
            for what, amount in (("default", default), ("max", high)):
                if amount is not None and (amount - low) % step != 0:
                    self.fail(f"{rpath}.step", f"{what} is not min plus a multiple of step")

    def check_counter_sets(self, counter_sets: Sequence[Mapping[str, Any]]) -> None:
        if len(counter_sets) > MAX_COUNTER_SETS:
            self.fail(
                "spec.sharedCounters",
                f"{len(counter_sets)} counter sets, at most {MAX_COUNTER_SETS}",
            )
        seen: set[str] = set()
        for i, counter_set in enumerate(counter_sets):
            path = f"spec.sharedCounters[{i}]"
            name = str(counter_set.get("name", ""))
            self.dns_label(f"{path}.name", name, "counter set name")
            if name in seen:
                self.fail(f"{path}.name", f"duplicate counter set {name!r}")
            seen.add(name)
            counters = counter_set.get("counters") or {}
            if not counters:
                self.fail(f"{path}.counters", "must not be empty")
            if len(counters) > MAX_COUNTERS_PER_SET:
                self.fail(
                    f"{path}.counters", f"{len(counters)} counters, at most {MAX_COUNTERS_PER_SET}"
                )
            for counter, value in counters.items():
                self.dns_label(f"{path}.counters[{counter}]", counter, "counter name")
                self.quantity(f"{path}.counters[{counter}].value", (value or {}).get("value"))

    def check_pools(self, slices: Sequence[Mapping[str, Any]]) -> None:
        pools: dict[tuple[str, str], list[Mapping[str, Any]]] = defaultdict(list)
        for item in slices:
            spec = _spec(item)
            pools[(str(spec.get("driver")), str(_pool(item).get("name")))].append(item)
        for (driver, pool), members in pools.items():
            self.slice = _name(members[0])
            where = f"pool {driver}/{pool}"
            generations = {int(_pool(m).get("generation", 0)) for m in members}
            if len(generations) > 1:
                self.fail(
                    "spec.pool.generation", f"{where}: slices disagree ({sorted(generations)})"
                )
            for m in members:
                count = int(_pool(m).get("resourceSliceCount", 0))
                if count != len(members):
                    self.slice = _name(m)
                    self.fail(
                        "spec.pool.resourceSliceCount",
                        f"{where}: says {count} but the pool has {len(members)} slices",
                    )
            self.check_pool_references(where, members)

    def check_pool_references(self, where: str, members: Sequence[Mapping[str, Any]]) -> None:
        counter_sets: dict[str, set[str]] = {}
        devices: set[str] = set()
        for m in members:
            self.slice = _name(m)
            for cs in _spec(m).get("sharedCounters") or []:
                name = str(cs.get("name", ""))
                if name in counter_sets:
                    self.fail("spec.sharedCounters", f"{where}: counter set {name!r} twice")
                counter_sets[name] = set(cs.get("counters") or {})
            for d in _spec(m).get("devices") or []:
                name = str(d.get("name", ""))
                if name in devices:
                    self.fail("spec.devices", f"{where}: device {name!r} in two slices")
                devices.add(name)
        for m in members:
            self.slice = _name(m)
            for i, d in enumerate(_spec(m).get("devices") or []):
                for c in d.get("consumesCounters") or []:
                    known = counter_sets.get(c.get("counterSet"))
                    path = f"spec.devices[{i}].consumesCounters"
                    if known is None:
                        self.fail(
                            path,
                            f"{where}: counter set {c.get('counterSet')!r} does "
                            "not exist in the pool",
                        )
                        continue
                    missing = sorted(set(c.get("counters") or {}) - known)
                    if missing:
                        self.fail(
                            path,
                            f"{where}: counters {missing} are not in counter set "
                            f"{c.get('counterSet')!r}",
                        )


def _spec(item: Mapping[str, Any]) -> Mapping[str, Any]:
    return item.get("spec") or {}


def _pool(item: Mapping[str, Any]) -> Mapping[str, Any]:
    return _spec(item).get("pool") or {}


def _name(item: Mapping[str, Any]) -> str:
    return str((item.get("metadata") or {}).get("name", "<unnamed>"))


def check_limits(slices: Sequence[Mapping[str, Any]]) -> list[LimitViolation]:
    """All violations in a node's slices (empty when the API server would accept them all)."""
    checker = _Checker()
    for item in slices:
        checker.check_slice(item)
    checker.check_pools(slices)
    return checker.violations


def enforce_limits(slices: Sequence[Mapping[str, Any]]) -> None:
    violations = check_limits(slices)
    if violations:
        raise SliceLimitError(violations)
