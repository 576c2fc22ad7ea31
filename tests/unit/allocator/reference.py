"""A brute-force reference for first-fit allocation, for tests on small inputs.

The search in docs/allocation.md is a depth-first walk whose first complete solution wins. Because
every rule it enforces on a partial solution also holds for the complete one (and the other way
round), that first solution is simply the first complete candidate, in the walk's lexicographic
order, that the independent checker accepts. This module enumerates candidates in exactly that
order and asks the checker, with no pruning and no cleverness: it is slow on purpose, so that it
is easy to believe.

Some rules the final state cannot show. First, pod-local: while one pod's claims are
allocated together, a device picked by an earlier claim (even with admin access) is not available
to a later claim's non-admin request unless the device allows multiple allocations. Once written,
an admin result takes nothing, so the checker rightly accepts such a state; the reference applies
the rule itself. Second, an admin pick needs room for its device's shared counters on top of
whoever holds the device (``_admin_counters_exceed``).

Third, a pool whose counters earlier claims already over-commit yields no device that draws
counters (``_over_committed_pool``).

Fourth, an admin pick of a device with multiple allocations takes a share that the later claims
of the same pod count, like any share (``_pod_capacity_exceeded``); the checker counts it only
against the rest of its own claim, since a written admin result takes nothing.

Fatal errors are not modelled: a constraint that refuses a member of an ``All`` set, which the
allocator reports as fatal, is here just a candidate the checker rejects.

CEL: the reference evaluates selectors eagerly (all devices of the node, for ``All``), so it is
only exact for selectors that never raise; the checker reports a raising selector as a violation.
"""

from __future__ import annotations

import copy
import itertools
import math
import uuid
from collections.abc import Iterable, Mapping, Sequence
from fractions import Fraction
from typing import Any

from dra_driver.cel import CelEnvironment
from dra_driver.checker.inputs import (
    Alternative,
    ClaimSpec,
    Device,
    capacity_key_of,
    claim_key,
    parse_claim,
    share_amounts,
)
from dra_driver.checker.rules import ClusterChecker, Holdings, accepted_node_selectors

Choice = tuple[Alternative, tuple[Device, ...]]


class TooManyCandidatesError(RuntimeError):
    """The input is too large for the brute force; the caller should use a smaller case."""


def format_quantity(value: Fraction) -> str:
    """A quantity string for an exact amount (whole numbers as digits, else milli-units)."""
    if value.denominator == 1:
        return str(value.numerator)
    milli = value * 1000
    if milli.denominator == 1:
        return f"{milli.numerator}m"
    nano = value * 10**9
    return f"{math.ceil(nano)}n"


def _choices(
    checker: ClusterChecker, spec: ClaimSpec, node: str, base: Holdings
) -> list[list[Choice]]:
    """Per request, its candidate choices in search order: subrequest first, then slot tuples."""
    devices = checker.node_devices(node)
    per_request: list[list[Choice]] = []
    for request in spec.requests:
        options: list[Choice] = []
        for alternative in request.alternatives:
            if alternative.all_mode:
                options.append((alternative, tuple(checker.all_devices(alternative, node, base))))
            else:
                options.extend(
                    (alternative, combo)
                    for combo in itertools.combinations(devices, alternative.count)
                )
        per_request.append(options)
    return per_request


def _result(alternative: Alternative, device: Device) -> dict[str, Any]:
    result: dict[str, Any] = {
        "request": alternative.result_name,
        "driver": device.key[0],
        "pool": device.key[1],
        "device": device.key[2],
    }
    if alternative.admin:
        result["adminAccess"] = True
    if alternative.tolerations:
        result["tolerations"] = [dict(t) for t in alternative.tolerations]
    if device.multiple:
        amounts = share_amounts(device, alternative.capacity)
        result["shareID"] = str(uuid.uuid4())
        if isinstance(amounts, dict):
            result["consumedCapacity"] = {
                capacity_key_of(device, name): format_quantity(amount)
                for name, amount in amounts.items()
            }
    return result


def _allocation(
    checker: ClusterChecker, spec: ClaimSpec, picks: Sequence[Choice]
) -> dict[str, Any]:
    results = [_result(alternative, d) for alternative, devices in picks for d in devices]
    configs = _configs(checker, spec, picks)
    devices_part: dict[str, Any] = {"results": results}
    if configs:
        devices_part["config"] = configs
    allocation: dict[str, Any] = {"devices": devices_part}
    accepted = accepted_node_selectors([d for _, devices in picks for d in devices])
    if accepted and accepted[0] is not None:
        allocation["nodeSelector"] = copy.deepcopy(dict(accepted[0]))
    return allocation


def _configs(
    checker: ClusterChecker, spec: ClaimSpec, picks: Sequence[Choice]
) -> list[dict[str, Any]]:
    """Class configs once per class (naming its requests), claim configs that reach a chosen
    request, then `requests` dropped where a config reaches every request."""
    users: dict[str, list[str]] = {}
    listed: list[tuple[dict[str, Any], list[str]]] = []
    for alternative, _ in picks:
        device_class = checker.classes.get(alternative.class_name)
        if device_class is None:
            continue
        if alternative.class_name not in users:
            users[alternative.class_name] = []
            for config in device_class.configs:
                entry = {k: v for k, v in config.items() if k not in ("requests", "source")}
                listed.append(({"source": "FromClass", **entry}, users[alternative.class_name]))
        users[alternative.class_name].append(alternative.result_name)
    chosen = [
        (request.name, alternative.result_name)
        for request, (alternative, _) in zip(spec.requests, picks, strict=True)
    ]
    for config in spec.configs:
        wanted = list(config.get("requests") or [])
        entry = {k: v for k, v in config.items() if k != "requests"}
        if wanted and not any(n in wanted or r in wanted for n, r in chosen):
            continue
        listed.append(({**entry, "source": "FromClaim"}, wanted))
    configs: list[dict[str, Any]] = []
    for entry, wanted in listed:
        if wanted and not all(n in wanted or r in wanted for n, r in chosen):
            configs.append({**entry, "requests": list(wanted)})
        else:
            configs.append(entry)
    return configs


def _over_committed_pool(
    checker: ClusterChecker, base: Holdings, picks: Sequence[Choice], node: str
) -> bool:
    """A pick whose counters are checked, in a pool already over-committed by earlier claims.

    Upstream's checkAvailableCounters compares every counter of the pool, so such a pool
    yields no device that draws counters; the final state cannot show this.
    """
    pools = checker.view(checker.node(node)).pools
    for _, devices in picks:
        for device in devices:
            if not device.consumes or (device.multiple and device.key in base.in_use):
                continue
            pool = pools.get((device.key[0], device.key[1]))
            if pool is None:
                continue
            for set_name, counters in pool.counter_sets.items():
                for counter, limit in counters.items():
                    if base.counters[(device.key[0], device.key[1], set_name, counter)] > limit:
                        return True
    return False


def _pod_local_conflict(
    claims: Sequence[tuple[ClaimSpec, Sequence[Choice]]],
) -> bool:
    """A later claim's non-admin pick of a device an earlier claim of the pod picked."""
    picked_before: set[tuple[str, str, str]] = set()
    for _, picks in claims:
        mine: set[tuple[str, str, str]] = set()
        for alternative, devices in picks:
            for device in devices:
                if not alternative.admin and not device.multiple and device.key in picked_before:
                    return True
                mine.add(device.key)
        picked_before |= mine
    return False


def _pod_capacity_exceeded(
    base: Holdings, claims: Sequence[tuple[ClaimSpec, Sequence[Choice]]]
) -> bool:
    """Whether a share of the pod does not fit, counting the admin shares of earlier claims.

    Upstream's allocatingCapacity spans every claim of one Allocate call, and an admin pick of
    a device with multiple allocations takes a share there like any other pick; a written admin
    result takes nothing, so the checker counts an admin share only against the rest of its own
    claim. Here every share of the pod, in search order, must fit what the earlier claims and
    the earlier picks of the pod leave.
    """
    consumed: dict[tuple[tuple[str, str, str], str], Fraction] = dict(base.consumed)
    for _, picks in claims:
        for alternative, devices in picks:
            for device in devices:
                if not device.multiple:
                    continue
                amounts = share_amounts(device, alternative.capacity)
                if not isinstance(amounts, dict):
                    continue  # the checker reports it
                for name, amount in amounts.items():
                    slot = (device.key, name)
                    consumed[slot] = consumed.get(slot, Fraction(0)) + amount
                    if consumed[slot] > device.capacity[name].value:
                        return True
    return False


def _admin_counters_exceed(
    checker: ClusterChecker,
    base: Holdings,
    after: Holdings,
    claims: Sequence[tuple[ClaimSpec, Sequence[Choice]]],
    node: str,
) -> bool:
    """Whether the pod's admin picks leave no room for their devices' counters.

    Upstream's allocateDevice checks counters for an admin-access pick like for any other, and
    counts them on top of whatever already holds the device; a written admin result takes
    nothing, so the final state cannot show this and the reference applies it here. A device
    with multiple allocations counts once per allocation (and not at all when a share of it is
    in use), whoever picks it; the checker counts it already when a non-admin pick shares it.
    """
    extra: dict[tuple[str, str, str, str], Fraction] = {}
    shared_by_others = {
        d.key for _, picks in claims for alt, devices in picks for d in devices if not alt.admin
    }
    counted: set[tuple[str, str, str]] = set()
    for _, picks in claims:
        for alternative, devices in picks:
            if not alternative.admin:
                continue
            for device in devices:
                if device.multiple:
                    if device.key in base.in_use or device.key in shared_by_others:
                        continue
                    if device.key in counted:
                        continue
                    counted.add(device.key)
                for set_name, counters in device.consumes:
                    for counter, amount in counters.items():
                        slot = (device.key[0], device.key[1], set_name, counter)
                        extra[slot] = extra.get(slot, Fraction(0)) + amount
    pools = checker.view(checker.node(node)).pools
    for slot, amount in extra.items():
        pool = pools.get((slot[0], slot[1]))
        limit = (pool.counter_sets.get(slot[2]) or {}).get(slot[3]) if pool else None
        if limit is not None and after.counters[slot] + amount > limit:
            return True
    return False


def first_fit_reference(
    slices: Iterable[Mapping[str, Any]],
    classes: Iterable[Mapping[str, Any]],
    claims: Sequence[Mapping[str, Any]],
    node: str,
    *,
    in_use: Iterable[Mapping[str, Any]] = (),
    nodes: Iterable[Mapping[str, Any]] = (),
    cel: CelEnvironment | None = None,
    max_candidates: int = 200_000,
) -> list[dict[str, Any]] | None:
    """The first candidate in search order that the checker accepts, one allocation per claim.

    ``claims`` are one pod's claims, allocated together on ``node``; ``in_use`` are claims
    already allocated. Returns None when no candidate is accepted; raises
    TooManyCandidatesError when more than ``max_candidates`` candidates would be enumerated.
    """
    checker = ClusterChecker(slices, classes, nodes, cel=cel)
    _, base = checker.check(in_use)
    specs = [parse_claim(c) for c in claims]
    per_claim = [_choices(checker, spec, node, base) for spec in specs]
    slots = [options for per_request in per_claim for options in per_request]
    total = math.prod(len(options) for options in slots)
    if total > max_candidates:
        raise TooManyCandidatesError(f"{total} candidates, more than {max_candidates}")
    keys = {claim_key(c) for c in claims}
    for combination in itertools.product(*slots):
        grouped: list[tuple[ClaimSpec, Sequence[Choice]]] = []
        position = 0
        for spec in specs:
            grouped.append((spec, combination[position : position + len(spec.requests)]))
            position += len(spec.requests)
        if _pod_local_conflict(grouped) or _pod_capacity_exceeded(base, grouped):
            continue
        if any(_over_committed_pool(checker, base, picks, node) for _, picks in grouped):
            continue
        allocations = [_allocation(checker, spec, picks) for spec, picks in grouped]
        candidate = [
            {**dict(raw), "status": {**dict(raw.get("status") or {}), "allocation": allocation}}
            for raw, allocation in zip(claims, allocations, strict=True)
        ]
        violations, after = checker.check(candidate, base.copy(), node_hint=node)
        if any(v.claim in keys or v.claim is None for v in violations):
            continue
        if _admin_counters_exceed(checker, base, after, grouped, node):
            continue
        return allocations
    return None
