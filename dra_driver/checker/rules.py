"""An independent checker for allocations: does a cluster's state obey docs/allocation.md?

The allocator is a search with many shortcuts (caches, incremental counters, scoring); the
checker re-derives every rule from the claims' final ``status.allocation`` and the published
slices, so a bug in the search shows up as a violation rather than as a silently wrong
allocation. It deliberately shares no code with the allocator: it has its own parsing in
``inputs.py``, its own reading of a device as the CEL ``device`` variable (``cel_device.py``),
and only uses the CEL runtime (compile and evaluate) and quantity parsing, which are not part of
the search.

Claims are taken in the order given, as if allocated in that order: rules that involve several
claims (a device used twice, counters, shared capacity) are reported on the later claim. For
exclusive use, counters and shared capacity the order cannot change whether the cluster as a
whole is valid, only which claim the violation names.
"""

from __future__ import annotations

import copy
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from dra_driver.cel import CelCompileError, CelEnvironment, CelRuntimeError, default_environment
from dra_driver.checker.cel_device import DeviceValueError, checker_device_variable
from dra_driver.checker.inputs import (
    Alternative,
    ClaimSpec,
    Constraint,
    Device,
    DeviceClass,
    DeviceKey,
    MalformedInputError,
    NodeInfo,
    Pool,
    PoolKey,
    Slice,
    allocation_node,
    build_pools,
    claim_key,
    device_order,
    exclusive_capacity_problem,
    lookup_attribute,
    node_name_selector,
    parse_claim,
    parse_classes,
    parse_nodes,
    parse_slice,
    qualify,
    quantity,
    share_amounts,
    untolerated_taints,
)

MAX_RESULTS_PER_CLAIM = 32

_Flag = Callable[[str, str], None]
"""The local ``flag(rule, message)`` helpers that collect a claim's violations."""

__all__ = [
    "MAX_RESULTS_PER_CLAIM",
    "ClusterChecker",
    "Holdings",
    "MalformedInputError",
    "Violation",
    "accepted_node_selectors",
    "check_allocations",
]


@dataclass(frozen=True)
class Violation:
    """One broken rule. ``claim`` is "namespace/name", None when no single claim is to blame."""

    claim: str | None
    rule: str
    message: str


@dataclass
class Holdings:
    """What the claims checked so far hold, to judge the next claim against."""

    exclusive: dict[DeviceKey, str] = field(default_factory=dict)
    """Devices held by a non-admin result without a shareID, and the claim holding each."""
    holders: dict[DeviceKey, set[str]] = field(default_factory=dict)
    """Every claim holding each device through a non-admin result, shared or not."""
    in_use: set[DeviceKey] = field(default_factory=set)
    """Devices held by any non-admin result; each consumes its counters once."""
    counters: dict[tuple[str, str, str, str], Fraction] = field(
        default_factory=lambda: defaultdict(Fraction)
    )
    """(driver, pool, counter set, counter) -> consumed."""
    consumed: dict[tuple[DeviceKey, str], Fraction] = field(
        default_factory=lambda: defaultdict(Fraction)
    )
    """(device, qualified capacity name) -> consumed by non-admin shares."""
    share_ids: set[tuple[DeviceKey, str]] = field(default_factory=set)
    claims: set[str] = field(default_factory=set)

    def copy(self) -> Holdings:
        return copy.deepcopy(self)


@dataclass(frozen=True)
class _Resolved:
    """One result of a claim with what it refers to; ``None`` where the checker could not tell."""

    result: Mapping[str, Any]
    request_index: int | None
    alternative: Alternative | None
    device: Device | None


@dataclass
class _NodeView:
    node: NodeInfo
    pools: dict[PoolKey, Pool]
    order: list[Device]
    position: dict[DeviceKey, int]

    @property
    def unusable(self) -> list[Pool]:
        return [p for p in self.pools.values() if not p.usable]


def _node_text(node: NodeInfo) -> str:
    return f"node {node.name}" if node.name is not None else "no particular node"


def _normal_config(entry: Mapping[str, Any]) -> dict[str, Any]:
    normal = dict(entry)
    normal["requests"] = list(entry.get("requests") or [])
    return normal


def _normal_selector(selector: Any) -> Any:
    """Drop empty lists and missing values, which JSON writers emit or omit at will."""
    if isinstance(selector, Mapping):
        kept = {k: _normal_selector(v) for k, v in selector.items() if v not in (None, [], {})}
        return kept or None
    if isinstance(selector, list):
        return [_normal_selector(v) for v in selector]
    return selector


def accepted_node_selectors(devices: Sequence[Device]) -> list[Mapping[str, Any] | None]:
    """The nodeSelector values an allocation of these devices may carry, the preferred first.

    docs/allocation.md names "that selector" of a device; when devices disagree, Kubernetes
    merges their one-term selectors into one term, which is accepted too.
    """
    for device in devices:
        if device.placement.node_name:
            return [node_name_selector(device.placement.node_name)]
    selectors = [d.placement.node_selector for d in devices if d.placement.node_selector]
    if not selectors:
        return [None]
    accepted: list[Mapping[str, Any] | None] = []
    if all(s == selectors[0] for s in selectors):
        accepted.append(selectors[0])
    merged = _merged_selector(selectors)
    if merged is not None:
        accepted.append(merged)
    return accepted


def _merged_selector(selectors: Sequence[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """Kubernetes' combination of one-term node selectors: one term with every requirement."""
    fields: list[Any] = []
    expressions: list[Any] = []
    for selector in selectors:
        terms = selector.get("nodeSelectorTerms") or []
        if len(terms) != 1:
            return None
        for requirement in terms[0].get("matchFields") or []:
            if requirement not in fields:
                fields.append(requirement)
        for requirement in terms[0].get("matchExpressions") or []:
            if requirement not in expressions:
                expressions.append(requirement)
    term: dict[str, Any] = {}
    if fields:
        term["matchFields"] = fields
    if expressions:
        term["matchExpressions"] = expressions
    return {"nodeSelectorTerms": [term]} if term else None


class ClusterChecker:
    """The parsed cluster (slices, classes, nodes) with cached CEL verdicts.

    Built once and reused: the reference search checks thousands of candidates against the same
    cluster, and parsing or evaluating selectors again for each would dominate its time.
    """

    def __init__(
        self,
        slices: Iterable[Mapping[str, Any]],
        classes: Iterable[Mapping[str, Any]],
        nodes: Iterable[Mapping[str, Any]] = (),
        *,
        cel: CelEnvironment | None = None,
    ) -> None:
        self.slices: list[Slice] = [parse_slice(s) for s in slices]
        self.classes: dict[str, DeviceClass] = parse_classes(classes)
        self.nodes: dict[str, NodeInfo] = parse_nodes(nodes)
        self.cel: CelEnvironment = cel if cel is not None else default_environment()
        self.global_pools: dict[PoolKey, Pool] = build_pools(self.slices)
        self._views: dict[tuple[str | None, tuple[tuple[str, str], ...]], _NodeView] = {}
        self._verdicts: dict[tuple[str, int], bool | str] = {}
        self._variables: dict[int, Any] = {}

    # --- nodes ---------------------------------------------------------------------------------

    def node(self, name: str | None) -> NodeInfo:
        if name is None:
            return NodeInfo(None)
        return self.nodes.get(name) or NodeInfo(name)

    def candidate_nodes(self) -> list[NodeInfo]:
        """Nodes an allocation without a node name may have been made for."""
        names = set(self.nodes)
        names.update(s.placement.node_name for s in self.slices if s.placement.node_name)
        for s in self.slices:
            names.update(d.placement.node_name for d in s.devices if d.placement.node_name)
        if not names:
            return [NodeInfo(None)]
        return [self.node(n) for n in sorted(names)]

    def view(self, node: NodeInfo) -> _NodeView:
        view_key = (node.name, tuple(sorted(node.labels.items())))
        found = self._views.get(view_key)
        if found is None:
            pools = build_pools(s for s in self.slices if s.applies_to(node))
            order = device_order(pools.values(), node)
            found = _NodeView(node, pools, order, {d.key: i for i, d in enumerate(order)})
            self._views[view_key] = found
        return found

    def node_devices(self, node_name: str) -> list[Device]:
        """The device order on a node: what the search walks for each slot."""
        return list(self.view(self.node(node_name)).order)

    # --- selectors -----------------------------------------------------------------------------

    def verdict(self, expression: str, device: Device) -> bool | str:
        """True/False, or the error text when the expression does not compile or evaluate."""
        cache_key = (expression, id(device.raw))
        found = self._verdicts.get(cache_key)
        if found is not None:
            return found
        outcome: bool | str
        try:
            variable = self._variables.get(id(device.raw))
            if variable is None:
                variable = checker_device_variable(device.driver, device.raw)
                self._variables[id(device.raw)] = variable
            value = self.cel.compile(expression).evaluate(variable)
        except (CelCompileError, CelRuntimeError, DeviceValueError) as err:
            outcome = f"{expression!r} on device {device}: {err}"
        else:
            outcome = value if isinstance(value, bool) else f"{expression!r} gave {value!r}"
        self._verdicts[cache_key] = outcome
        return outcome

    def selection(self, alternative: Alternative, device: Device) -> tuple[bool | str, str]:
        """Class selectors, then request selectors, stopping at the first that is not true.

        Returns the verdict and the expression that decided it ("" when all were true).
        """
        device_class = self.classes.get(alternative.class_name)
        expressions = (device_class.selectors if device_class else ()) + alternative.selectors
        for expression in expressions:
            outcome = self.verdict(expression, device)
            if outcome is not True:
                return outcome, expression
        return True, ""

    def all_devices(
        self, alternative: Alternative, node_name: str | None, usage: Holdings | None = None
    ) -> list[Device]:
        """What ``allocationMode: All`` must take on a node: every selectable device, in order,
        whose capacity serves the request given what ``usage`` (earlier claims) consumes."""
        view = self.view(self.node(node_name))
        return [
            d
            for d in view.order
            if self.selection(alternative, d)[0] is True
            and capacity_serves(d, alternative, usage or Holdings())
        ]

    # --- checking -----------------------------------------------------------------------------

    def check(
        self,
        claims: Iterable[Mapping[str, Any]],
        usage: Holdings | None = None,
        *,
        node_hint: str | None = None,
    ) -> tuple[list[Violation], Holdings]:
        """Check allocated claims in order on top of ``usage``; returns violations and new usage.

        ``node_hint`` names the node when the caller knows it (an allocation without node-local
        devices names none); otherwise such an allocation is accepted if some node fits it.
        """
        usage = usage if usage is not None else Holdings()
        violations: list[Violation] = []
        for raw in claims:
            allocation = (raw.get("status") or {}).get("allocation")
            if not isinstance(allocation, Mapping):
                continue
            key = claim_key(raw)
            if key in usage.claims:
                violations.append(
                    Violation(None, "duplicate-claim", f"claim {key} appears more than once")
                )
            usage.claims.add(key)
            try:
                spec = parse_claim(raw)
            except MalformedInputError as err:
                violations.append(Violation(key, "malformed", str(err)))
                continue
            violations.extend(self._check_one(spec, allocation, usage, node_hint))
        return violations, usage

    def _check_one(
        self,
        spec: ClaimSpec,
        allocation: Mapping[str, Any],
        usage: Holdings,
        node_hint: str | None,
    ) -> list[Violation]:
        named = allocation_node(allocation) or node_hint
        candidates = [self.node(named)] if named is not None else self.candidate_nodes()
        best: tuple[list[Violation], list[_Resolved], _NodeView] | None = None
        for node in candidates:
            view = self.view(node)
            found, resolved = self._claim_rules(spec, allocation, view, usage)
            if best is None or len(found) < len(best[0]):
                best = (found, resolved, view)
            if not found:
                break
        assert best is not None
        found, resolved, view = best
        return found + self._usage_rules(spec, resolved, view, usage)

    def _claim_rules(
        self, spec: ClaimSpec, allocation: Mapping[str, Any], view: _NodeView, usage: Holdings
    ) -> tuple[list[Violation], list[_Resolved]]:
        """Everything that can be judged from this claim alone, on one node."""
        found: list[Violation] = []

        def flag(rule: str, message: str) -> None:
            found.append(Violation(spec.key, rule, message))

        devices_part = allocation.get("devices") or {}
        results = list(devices_part.get("results") or [])
        if len(results) > MAX_RESULTS_PER_CLAIM:
            flag(
                "too-many-results",
                f"claim {spec.key} has {len(results)} results; at most "
                f"{MAX_RESULTS_PER_CLAIM} are allowed",
            )

        by_name: dict[str, tuple[int, Alternative]] = {}
        for index, request in enumerate(spec.requests):
            for alternative in request.alternatives:
                by_name[alternative.result_name] = (index, alternative)

        chosen: dict[int, Alternative] = {}
        resolved: list[_Resolved] = []
        last_index, last_position = -1, -1
        for result in results:
            name = str(result.get("request", ""))
            entry = by_name.get(name)
            if entry is None:
                flag("unknown-request", f"claim {spec.key}: result names unknown request {name!r}")
                resolved.append(_Resolved(result, None, None, None))
                continue
            index, alternative = entry
            earlier = chosen.setdefault(index, alternative)
            if earlier is not alternative:
                flag(
                    "unknown-request",
                    f"claim {spec.key} request {spec.requests[index].name}: results use both "
                    f"{earlier.result_name} and {alternative.result_name}; one firstAvailable "
                    "entry must be chosen",
                )
            device = self._resolve(spec, result, view, flag)
            position = view.position.get(device.key, -1) if device is not None else -1
            if index < last_index:
                flag(
                    "result-order",
                    f"claim {spec.key}: the result for request {name} comes after a result of a "
                    "later request",
                )
            elif index == last_index and position >= 0 and position <= last_position:
                flag(
                    "result-order",
                    f"claim {spec.key} request {name}: device {device} does not come after the "
                    "previous device of the request in the device order",
                )
            if index != last_index:
                last_position = -1
            last_index = index
            if position >= 0:
                last_position = position
            resolved.append(_Resolved(result, index, alternative, device))

        self._request_rules(spec, view, chosen, resolved, flag, usage)
        for item in resolved:
            if item.device is not None and item.alternative is not None:
                self._device_rules(spec, item, item.alternative, item.device, flag)
        self._duplicate_rules(spec, resolved, flag)
        for constraint in spec.constraints:
            self._constraint_rule(spec, constraint, resolved, flag)
        self._config_rule(spec, devices_part, chosen, flag)
        self._node_selector_rule(spec, allocation, resolved, view, flag)
        return found, resolved

    def _resolve(
        self, spec: ClaimSpec, result: Mapping[str, Any], view: _NodeView, flag: _Flag
    ) -> Device | None:
        pool_key = (str(result.get("driver", "")), str(result.get("pool", "")))
        name = str(result.get("device", ""))
        text = f"{pool_key[0]}/{pool_key[1]}/{name}"
        pool = view.pools.get(pool_key)
        device = pool.devices.get(name) if pool is not None else None
        if (
            device is not None
            and device.per_device_placement
            and not device.placement.applies_to(view.node)
        ):
            device = None
        if pool is None or device is None:
            elsewhere = self.global_pools.get(pool_key)
            if elsewhere is not None and name in elsewhere.devices:
                flag(
                    "node-selector",
                    f"claim {spec.key} request {result.get('request')}: device {text} is not "
                    f"available on {_node_text(view.node)}",
                )
            else:
                flag(
                    "unknown-device",
                    f"claim {spec.key} request {result.get('request')}: device {text} is not "
                    "published in the newest generation of its pool",
                )
            return None
        if not pool.usable:
            flag(
                "pool-unusable",
                f"claim {spec.key} request {result.get('request')}: device {text} is in an "
                f"unusable pool: {pool.problem}",
            )
            return None
        return device

    def _request_rules(
        self,
        spec: ClaimSpec,
        view: _NodeView,
        chosen: Mapping[int, Alternative],
        resolved: Sequence[_Resolved],
        flag: _Flag,
        usage: Holdings,
    ) -> None:
        # "All" must be known before the search starts: every All entry, chosen or not (a
        # firstAvailable entry that was not reached), runs its selectors on every device of the
        # node, and a node with an unusable pool makes it unknowable. Either is fatal.
        all_sets: dict[str, list[Device]] = {}
        for request in spec.requests:
            for entry in request.alternatives:
                if not entry.all_mode:
                    continue
                for pool in view.unusable:
                    flag(
                        "pool-unusable",
                        f"claim {spec.key} request {entry.result_name} asks for all "
                        f"devices, but on {_node_text(view.node)} {pool.problem}",
                    )
                selected: list[Device] = []
                for device in view.order:
                    outcome, _ = self.selection(entry, device)
                    if isinstance(outcome, str):
                        flag(
                            "selector-error",
                            f"claim {spec.key} request {entry.result_name}: {outcome}",
                        )
                    elif outcome and capacity_serves(device, entry, usage):
                        # A device whose capacity cannot serve the request is not in the set.
                        selected.append(device)
                all_sets[entry.result_name] = selected
        for index, request in enumerate(spec.requests):
            alternative = chosen.get(index)
            if alternative is None:
                flag("count", f"claim {spec.key}: request {request.name} has no results")
                continue
            if alternative.class_name not in self.classes:
                flag(
                    "unknown-class",
                    f"claim {spec.key} request {alternative.result_name}: DeviceClass "
                    f"{alternative.class_name!r} does not exist",
                )
            mine = [r for r in resolved if r.request_index == index]
            if not alternative.all_mode:
                if len(mine) != alternative.count:
                    flag(
                        "count",
                        f"claim {spec.key} request {alternative.result_name} asks for "
                        f"{alternative.count} device(s) but has {len(mine)} result(s)",
                    )
                continue
            expected = all_sets[alternative.result_name]
            got = [r.device.key for r in mine if r.device is not None]
            if not expected:
                flag(
                    "count",
                    f"claim {spec.key} request {alternative.result_name} asks for all devices, "
                    f"but no device on {_node_text(view.node)} is selectable",
                )
            elif sorted(got) != sorted(d.key for d in expected) or len(mine) != len(expected):
                flag(
                    "count",
                    f"claim {spec.key} request {alternative.result_name} asks for all devices: "
                    f"expected {[str(d) for d in expected]}, got {['/'.join(k) for k in got]}",
                )

    def _device_rules(
        self,
        spec: ClaimSpec,
        item: _Resolved,
        alternative: Alternative,
        device: Device,
        flag: _Flag,
    ) -> None:
        where = f"claim {spec.key} request {alternative.result_name} device {device}"
        result = item.result
        if alternative.class_name in self.classes:
            outcome, expression = self.selection(alternative, device)
            if isinstance(outcome, str):
                flag("selector-error", f"{where}: {outcome}")
            elif not outcome:
                flag("selector-false", f"{where}: selector {expression!r} is false")
        if bool(result.get("adminAccess")) != alternative.admin:
            flag(
                "admin-access",
                f"{where}: the result's adminAccess does not match the request's "
                f"({alternative.admin})",
            )
        if list(result.get("tolerations") or []) != list(alternative.tolerations):
            flag("tolerations", f"{where}: the result does not carry the request's tolerations")
        for taint in untolerated_taints(device, alternative.tolerations):
            flag(
                "taint",
                f"{where}: taint {taint.get('key')}={taint.get('value', '')}:"
                f"{taint.get('effect')} is not tolerated",
            )
        share_id = result.get("shareID")
        consumed = result.get("consumedCapacity")
        if not device.multiple:
            if share_id is not None or consumed is not None:
                flag(
                    "share-id",
                    f"{where}: the result carries a shareID or consumedCapacity, but the device "
                    "does not allow multiple allocations",
                )
            problem = exclusive_capacity_problem(device, alternative.capacity)
            if problem is not None:
                flag("capacity-exceeded", f"{where}: {problem}")
            return
        amounts = share_amounts(device, alternative.capacity)
        if isinstance(amounts, str):
            flag("capacity-exceeded", f"{where}: {amounts}")
        if not share_id:
            # Admin access included: upstream gives an admin pick of such a device a share too.
            flag("share-id", f"{where}: a share of a device needs a shareID")
        if isinstance(amounts, dict):
            try:
                written = {
                    qualify(str(k), device.driver): quantity(v, f"{where} consumedCapacity")
                    for k, v in (consumed or {}).items()
                }
            except MalformedInputError as err:
                flag("consumed-capacity", f"{where}: {err}")
                return
            if written != amounts:
                flag(
                    "consumed-capacity",
                    f"{where}: consumedCapacity {dict(consumed or {})} differs from the rounded "
                    f"request {_amounts_text(amounts)}",
                )

    def _duplicate_rules(self, spec: ClaimSpec, resolved: Sequence[_Resolved], flag: _Flag) -> None:
        """Within one claim a device is used once, except shares taken by different requests."""
        seen: dict[DeviceKey, list[Alternative]] = defaultdict(list)
        for item in resolved:
            if item.device is None or item.alternative is None:
                continue
            earlier = seen[item.device.key]
            if earlier and (not item.device.multiple or item.alternative in earlier):
                flag(
                    "device-twice",
                    f"claim {spec.key}: device {item.device} is used more than once "
                    f"(request {item.alternative.result_name})",
                )
            earlier.append(item.alternative)

    def _constraint_rule(
        self,
        spec: ClaimSpec,
        constraint: Constraint,
        resolved: Sequence[_Resolved],
        flag: _Flag,
    ) -> None:
        kind = "distinctAttribute" if constraint.distinct else "matchAttribute"
        seen: list[tuple[Device, tuple[str, Any]]] = []
        for item in resolved:
            alternative, device = item.alternative, item.device
            if alternative is None or device is None:
                continue
            if constraint.requests:
                request_name = alternative.result_name.split("/", 1)[0]
                if (
                    request_name not in constraint.requests
                    and alternative.result_name not in constraint.requests
                ):
                    continue
            value = lookup_attribute(device, constraint.attribute)
            if value is None:
                flag(
                    "constraint",
                    f"claim {spec.key}: {kind} {constraint.attribute}: device {device} "
                    "does not have the attribute",
                )
                continue
            for other, other_value in seen:
                if constraint.distinct and other_value == value:
                    flag(
                        "constraint",
                        f"claim {spec.key}: distinctAttribute {constraint.attribute}: devices "
                        f"{other} and {device} have the same value",
                    )
                elif not constraint.distinct and other_value != value:
                    flag(
                        "constraint",
                        f"claim {spec.key}: matchAttribute {constraint.attribute}: devices "
                        f"{other} and {device} differ ({other_value[1]!r} vs {value[1]!r})",
                    )
                    break
            seen.append((device, value))

    def _config_rule(
        self,
        spec: ClaimSpec,
        devices_part: Mapping[str, Any],
        chosen: Mapping[int, Alternative],
        flag: _Flag,
    ) -> None:
        """devices.config as Kubernetes 1.37 writes it (see docs/allocation.md, The result)."""
        if len(chosen) != len(spec.requests):
            return  # a request without results is reported as "count"; coverage is unknowable
        names = {index: spec.requests[index].name for index in chosen}

        def reaches(listed: Sequence[str], index: int) -> bool:
            return names[index] in listed or chosen[index].result_name in listed

        expected: list[dict[str, Any]] = []
        class_users: dict[str, list[str]] = {}
        class_entries: list[tuple[str, dict[str, Any]]] = []
        for index in sorted(chosen):
            alternative = chosen[index]
            device_class = self.classes.get(alternative.class_name)
            if device_class is None:
                continue
            if alternative.class_name not in class_users:
                class_users[alternative.class_name] = []
                for config in device_class.configs:
                    entry = {k: v for k, v in config.items() if k not in ("requests", "source")}
                    class_entries.append((alternative.class_name, entry))
            class_users[alternative.class_name].append(alternative.result_name)
        listed: list[tuple[dict[str, Any], list[str]]] = []
        for class_name, entry in class_entries:
            listed.append(({**entry, "source": "FromClass"}, class_users[class_name]))
        for config in spec.configs:
            wanted = [str(n) for n in config.get("requests") or []]
            if wanted and not any(reaches(wanted, index) for index in chosen):
                continue
            entry = {k: v for k, v in config.items() if k != "requests"}
            listed.append(({**entry, "source": "FromClaim"}, wanted))
        for entry, wanted in listed:
            if wanted and not all(reaches(wanted, i) for i in chosen):
                entry["requests"] = wanted
            expected.append(_normal_config(entry))
        written = [_normal_config(c) for c in devices_part.get("config") or []]
        if written != expected:
            flag(
                "config",
                f"claim {spec.key}: devices.config is {written}, expected class configs then "
                f"claim configs: {expected}",
            )

    def _node_selector_rule(
        self,
        spec: ClaimSpec,
        allocation: Mapping[str, Any],
        resolved: Sequence[_Resolved],
        view: _NodeView,
        flag: _Flag,
    ) -> None:
        if any(r.device is None for r in resolved):
            return  # already reported; the expected selector cannot be known
        accepted = accepted_node_selectors([r.device for r in resolved if r.device is not None])
        actual = _normal_selector(allocation.get("nodeSelector"))
        if all(actual != _normal_selector(a) for a in accepted):
            flag(
                "node-selector",
                f"claim {spec.key}: nodeSelector is {allocation.get('nodeSelector')}, expected "
                f"{accepted[0] if accepted else 'one of the devices selectors'} "
                f"(allocation checked on {_node_text(view.node)})",
            )

    def _usage_rules(
        self,
        spec: ClaimSpec,
        resolved: Sequence[_Resolved],
        view: _NodeView,
        usage: Holdings,
    ) -> list[Violation]:
        """Rules between this claim and the claims before it; records this claim's use."""
        found: list[Violation] = []

        def flag(rule: str, message: str) -> None:
            found.append(Violation(spec.key, rule, message))

        fresh: list[Device] = []
        # An admin share counts against the rest of its own claim, never against later claims.
        admin_taken: dict[tuple[DeviceKey, str], Fraction] = defaultdict(Fraction)
        for item in resolved:
            device, alternative = item.device, item.alternative
            if device is None or alternative is None:
                continue
            key = device.key
            admin = bool(item.result.get("adminAccess"))
            amounts = share_amounts(device, alternative.capacity) if device.multiple else {}
            if device.multiple and isinstance(amounts, dict):
                for name, amount in amounts.items():
                    value = device.capacity[name].value
                    so_far = usage.consumed[(key, name)] + admin_taken[(key, name)]
                    if so_far + amount > value:
                        flag(
                            "capacity-exceeded",
                            f"claim {spec.key} request {alternative.result_name}: capacity "
                            f"{name} of device {device}: {so_far} already consumed, {amount} "
                            f"more exceeds {value}",
                        )
                    if admin:
                        admin_taken[(key, name)] += amount
                    else:
                        usage.consumed[(key, name)] += amount
            share_id = item.result.get("shareID")
            if share_id:
                if (key, str(share_id)) in usage.share_ids:
                    flag(
                        "share-id",
                        f"claim {spec.key}: shareID {share_id} of device {device} is not unique",
                    )
                usage.share_ids.add((key, str(share_id)))
            if admin:
                continue
            # As docs/allocation.md defines usage: a result with a shareID shares the device,
            # any other non-admin result holds it alone.
            holders = usage.holders.setdefault(key, set())
            others = sorted(holders - {spec.key})
            owner = usage.exclusive.get(key)
            if share_id:
                conflict = owner if owner not in (None, spec.key) else None
            else:
                conflict = others[0] if others else None
                usage.exclusive.setdefault(key, spec.key)
            if conflict is not None:
                flag(
                    "device-twice",
                    f"claim {spec.key} request {alternative.result_name}: device {device} "
                    f"is already allocated to claim {conflict}",
                )
            holders.add(spec.key)
            if key not in usage.in_use:
                usage.in_use.add(key)
                fresh.append(device)
        touched: list[tuple[str, str, str, str]] = []
        for device in fresh:
            for set_name, counters in device.consumes:
                for counter, amount in counters.items():
                    slot = (device.key[0], device.key[1], set_name, counter)
                    usage.counters[slot] += amount
                    if slot not in touched:
                        touched.append(slot)
        for slot in touched:
            pool = view.pools.get((slot[0], slot[1]))
            limit = (pool.counter_sets.get(slot[2]) or {}).get(slot[3]) if pool else None
            if limit is not None and usage.counters[slot] > limit:
                flag(
                    "counter-exceeded",
                    f"claim {spec.key}: counter {slot[3]} of set {slot[2]} in pool "
                    f"{slot[0]}/{slot[1]}: devices in use consume {usage.counters[slot]}, "
                    f"more than its {limit}",
                )
        return found


def capacity_serves(device: Device, alternative: Alternative, usage: Holdings) -> bool:
    """Whether ``device`` can serve ``alternative``'s capacity requests, given what earlier
    claims consume of it; what decides whether an ``All`` set includes the device."""
    if not device.multiple:
        return exclusive_capacity_problem(device, alternative.capacity) is None
    amounts = share_amounts(device, alternative.capacity)
    if isinstance(amounts, str):
        return False
    return all(
        usage.consumed[(device.key, name)] + amount <= device.capacity[name].value
        for name, amount in amounts.items()
    )


def _amounts_text(amounts: Mapping[str, Fraction]) -> str:
    return "{" + ", ".join(f"{k}: {v}" for k, v in amounts.items()) + "}"


def check_allocations(
    slices: Iterable[Mapping[str, Any]],
    classes: Iterable[Mapping[str, Any]],
    claims: Iterable[Mapping[str, Any]],
    nodes: Iterable[Mapping[str, Any]] = (),
    *,
    cel: CelEnvironment | None = None,
) -> list[Violation]:
    """Every rule of docs/allocation.md that the allocated claims break; empty when all hold.

    Claims without ``status.allocation`` are ignored. Slices that cannot be read at all raise
    ``MalformedInputError``; everything else is reported as a violation.
    """
    checker = ClusterChecker(slices, classes, nodes, cel=cel)
    violations, _ = checker.check(claims)
    return violations
