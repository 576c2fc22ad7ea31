"""ResourceClaims turned into search plans: requests, their alternatives, constraints.

A plan is built once per claim and reused on every node tried, so selector compilation and
quantity parsing are not repeated per node.

Caches: `ClaimPlans`, kept with the snapshot (`snapshot.caches`): a spec's requests and
constraints by the spec's signature. A plan depends only on the spec and on the snapshot's
DeviceClasses and CEL environment, which never change within a snapshot, so an entry is only
dropped with the snapshot, or all at once when the table is full.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from dra_driver.allocator.errors import AllocationError, InputError
from dra_driver.allocator.quantities import Number, quantity_value
from dra_driver.allocator.snapshot import ClusterSnapshot, DeviceClass
from dra_driver.cel import CelCompileError, CompiledSelector

MAX_RESULTS_PER_CLAIM = 32

EXACT_COUNT = "ExactCount"
ALL = "All"


@dataclass(frozen=True, slots=True)
class Toleration:
    key: str
    operator: str
    value: str
    effect: str
    raw: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class Alternative:
    """One way to satisfy a request: the request itself, or one of its `firstAvailable` entries."""

    request: str
    result_name: str
    device_class: DeviceClass
    selectors: tuple[CompiledSelector, ...]
    mode: str
    count: int
    admin_access: bool
    tolerations: tuple[Toleration, ...]
    capacity: Mapping[str, Number]
    selector_key: tuple[str, ...]
    class_selector_count: int


@dataclass(frozen=True, slots=True)
class RequestPlan:
    name: str
    alternatives: tuple[Alternative, ...]


@dataclass(frozen=True, slots=True)
class Constraint:
    requests: frozenset[str]
    match_attribute: str | None
    distinct_attribute: str | None

    def covers(self, alternative: Alternative) -> bool:
        return (
            not self.requests
            or alternative.request in self.requests
            or alternative.result_name in self.requests
        )


@dataclass(frozen=True, slots=True)
class ClaimPlan:
    key: str
    uid: str
    requests: tuple[RequestPlan, ...]
    constraints: tuple[Constraint, ...]
    config: tuple[Mapping[str, Any], ...]
    signature: str
    """Identifies the claim's spec: two claims with equal signatures fit exactly the same nodes."""


def claim_key(claim: Mapping[str, Any]) -> str:
    meta = claim.get("metadata")
    if not isinstance(meta, Mapping):
        raise InputError("ResourceClaim: metadata is missing")
    return f"{meta.get('namespace') or 'default'}/{meta.get('name')}"


def _list(value: object, where: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise InputError(f"{where}: expected a list")
    return value


def _selectors(
    snapshot: ClusterSnapshot, key: str, raw: Mapping[str, Any], where: str
) -> tuple[CompiledSelector, ...]:
    compiled: list[CompiledSelector] = []
    for i, selector in enumerate(_list(raw.get("selectors"), f"{where}.selectors")):
        expression = (selector or {}).get("cel", {}).get("expression")
        if not isinstance(expression, str):
            raise InputError(f"claim {key}: {where}.selectors[{i}].cel.expression is missing")
        try:
            compiled.append(snapshot.cel.compile(expression))
        except CelCompileError as err:
            raise AllocationError(key, f"{where}.selectors[{i}]: {err.message}") from None
    return tuple(compiled)


def _class_selectors(
    snapshot: ClusterSnapshot, key: str, device_class: DeviceClass
) -> tuple[CompiledSelector, ...]:
    compiled: list[CompiledSelector] = []
    for i, expression in enumerate(device_class.selectors):
        try:
            compiled.append(snapshot.cel.compile(expression))
        except CelCompileError as err:
            raise AllocationError(
                key, f"DeviceClass {device_class.name}: spec.selectors[{i}]: {err.message}"
            ) from None
    return tuple(compiled)


def _tolerations(raw: Mapping[str, Any], where: str) -> tuple[Toleration, ...]:
    found: list[Toleration] = []
    for i, entry in enumerate(_list(raw.get("tolerations"), f"{where}.tolerations")):
        if not isinstance(entry, Mapping):
            raise InputError(f"{where}.tolerations[{i}]: expected an object")
        found.append(
            Toleration(
                key=str(entry.get("key") or ""),
                operator=str(entry.get("operator") or "Equal"),
                value=str(entry.get("value") or ""),
                effect=str(entry.get("effect") or ""),
                raw=entry,
            )
        )
    return tuple(found)


def _alternative(
    snapshot: ClusterSnapshot,
    key: str,
    request: str,
    result_name: str,
    raw: Mapping[str, Any],
    where: str,
    admin_allowed: bool,
) -> Alternative:
    class_name = raw.get("deviceClassName")
    if not isinstance(class_name, str) or not class_name:
        raise InputError(f"claim {key}: {where}.deviceClassName is missing")
    device_class = snapshot.classes.get(class_name)
    if device_class is None:
        raise AllocationError(key, f"{where}: DeviceClass {class_name} does not exist")
    mode = raw.get("allocationMode") or EXACT_COUNT
    if mode not in (EXACT_COUNT, ALL):
        raise InputError(f"claim {key}: {where}.allocationMode {mode!r} is not ExactCount or All")
    count = raw.get("count", 1) if mode == EXACT_COUNT else 0
    if isinstance(count, bool) or not isinstance(count, int) or (mode == EXACT_COUNT and count < 1):
        raise InputError(f"claim {key}: {where}.count must be a positive integer, got {count!r}")
    capacity_requests = (raw.get("capacity") or {}).get("requests") or {}
    if not isinstance(capacity_requests, Mapping):
        raise InputError(f"claim {key}: {where}.capacity.requests must be an object")
    capacity: dict[str, Number] = {}
    for name, amount in capacity_requests.items():
        # Bare names are qualified against each candidate device's driver during the search.
        capacity[name] = quantity_value(amount, f"claim {key}: {where}.capacity.requests[{name}]")
    class_selectors = _class_selectors(snapshot, key, device_class)
    request_selectors = _selectors(snapshot, key, raw, where)
    selectors = class_selectors + request_selectors
    return Alternative(
        request=request,
        result_name=result_name,
        device_class=device_class,
        selectors=selectors,
        mode=mode,
        count=count,
        admin_access=bool(raw.get("adminAccess")) and admin_allowed,
        tolerations=_tolerations(raw, f"claim {key}: {where}"),
        capacity=capacity,
        selector_key=tuple(s.expression for s in selectors),
        class_selector_count=len(class_selectors),
    )


_PlanParts = tuple[tuple[RequestPlan, ...], tuple[Constraint, ...]]


@dataclass(slots=True)
class ClaimPlans:
    """One snapshot's plans by claim signature (what planning a spec gave, bar `config`)."""

    MAX_ENTRIES = 4096
    """Emptied when this full: a cluster's claims come in a few shapes; a flood of unique
    specs must not grow it without bound."""

    by_signature: dict[str, _PlanParts] = field(default_factory=dict)


def plan_claim(snapshot: ClusterSnapshot, claim: Mapping[str, Any]) -> ClaimPlan:
    """The claim as the search sees it.

    Claims with equal specs share their requests and constraints, kept with the snapshot by
    signature (`ClaimPlans`): planning compiles selectors and parses quantities, and a
    cluster's claims come in a few shapes. The kept parts are planned from a private copy of
    the spec, so changing a claim object afterwards cannot change them. A spec that fails to
    plan is not kept (each such claim reports its own error), and `config` is always the
    claim's own.
    """
    key = claim_key(claim)
    spec = claim.get("spec") or {}
    devices = spec.get("devices") or {}
    if not isinstance(devices, Mapping):
        raise InputError(f"claim {key}: spec.devices must be an object")
    signature = repr(_canonical(devices))
    kept = snapshot.caches.of(ClaimPlans).by_signature
    parts = kept.get(signature)
    if parts is None:
        parts = _plan_parts(snapshot, key, copy.deepcopy(devices))
        if len(kept) >= ClaimPlans.MAX_ENTRIES:
            kept.clear()
        kept[signature] = parts
    config = tuple(_list(devices.get("config"), f"claim {key}: spec.devices.config"))
    meta = claim.get("metadata") or {}
    return ClaimPlan(
        key=key,
        uid=str(meta.get("uid") or key),
        requests=parts[0],
        constraints=parts[1],
        config=config,
        signature=signature,
    )


def _plan_parts(snapshot: ClusterSnapshot, key: str, devices: Mapping[str, Any]) -> _PlanParts:
    requests: list[RequestPlan] = []
    names: set[str] = set()
    for i, raw in enumerate(_list(devices.get("requests"), f"claim {key}: spec.devices.requests")):
        where = f"spec.devices.requests[{i}]"
        if not isinstance(raw, Mapping) or not isinstance(raw.get("name"), str):
            raise InputError(f"claim {key}: {where}.name is missing")
        name = raw["name"]
        if name in names:
            raise InputError(f"claim {key}: {where}.name {name!r} is used twice")
        names.add(name)
        alternatives: tuple[Alternative, ...]
        if raw.get("exactly") is not None:
            alternatives = (
                _alternative(snapshot, key, name, name, raw["exactly"], f"{where}.exactly", True),
            )
        elif raw.get("firstAvailable"):
            subs = _list(raw["firstAvailable"], f"claim {key}: {where}.firstAvailable")
            alternatives = tuple(
                _alternative(
                    snapshot,
                    key,
                    name,
                    f"{name}/{sub.get('name')}",
                    sub,
                    f"{where}.firstAvailable[{j}]",
                    False,
                )
                for j, sub in enumerate(subs)
            )
        else:
            raise InputError(f"claim {key}: {where} needs exactly or firstAvailable")
        requests.append(RequestPlan(name, alternatives))
    constraints: list[Constraint] = []
    for i, raw in enumerate(
        _list(devices.get("constraints"), f"claim {key}: spec.devices.constraints")
    ):
        match = raw.get("matchAttribute")
        distinct = raw.get("distinctAttribute")
        if bool(match) == bool(distinct):
            raise InputError(
                f"claim {key}: spec.devices.constraints[{i}] needs one of "
                "matchAttribute or distinctAttribute"
            )
        constraints.append(
            Constraint(frozenset(raw.get("requests") or []), match or None, distinct or None)
        )
    return tuple(requests), tuple(constraints)


def _canonical(value: object) -> object:
    if isinstance(value, Mapping):
        return tuple(sorted((k, _canonical(v)) for k, v in value.items()))
    if isinstance(value, list):
        return tuple(_canonical(v) for v in value)
    return value


def check_result_limit(plans: Sequence[ClaimPlan]) -> None:
    """Fatal when ExactCount requests alone already need more than the per-claim limit."""
    for plan in plans:
        needed = sum(
            min(a.count for a in r.alternatives)
            for r in plan.requests
            if all(a.mode == EXACT_COUNT for a in r.alternatives)
        )
        if needed > MAX_RESULTS_PER_CLAIM:
            raise AllocationError(
                plan.key,
                f"asks for {needed} devices, more than the "
                f"{MAX_RESULTS_PER_CLAIM} a claim may hold",
            )
