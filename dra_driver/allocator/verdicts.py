"""Selector verdicts, computed once per (expression, device) and replayed in search order.

Kubernetes evaluates selectors lazily: a device already in use never meets a selector, class
selectors run before request selectors, and the first `false` stops. A runtime error is fatal only
when the search reaches that device. Caching keeps those semantics by storing an error as a
verdict (`SelectorFailure`) that the search raises at the moment it would have evaluated it.

Most selectors only read attributes they name; for those, devices that agree on what the selector
can see share one verdict (projection.py), kept in a `VerdictCache` shared across snapshots: it
is keyed by content, so it stays right whatever changes. For other selectors, verdicts of
devices whose slice carries a resourceVersion are shared across snapshots until that slice (new
version) or the class (new expression text) changes; the rest live as long as the snapshot.

Caches:
- `VerdictCache` (shared across snapshots, passed to `ClusterSnapshot.build`): (expression,
  projection key or slice version and device) → verdict. Keyed by content, so never stale;
  emptied all at once when full;
- `SelectorEvaluator` (one per snapshot): per-device verdicts where no projection applies (an
  opaque selector, or sections that are not maps); each expression's projection names; per
  candidate list and names, the numbering of its projection keys; and the most recent CEL
  device values (the only part evicted one by one, oldest first). All follow from the
  snapshot, so they go with it.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from dra_driver.allocator.projection import projection_of
from dra_driver.cel import CelRuntimeError, CompiledSelector, DeviceVariable


class Device(Protocol):
    """What a verdict needs of a published device (the snapshot's `Device` has it).

    A protocol rather than the snapshot's class, so the snapshot can own the caches without
    the two modules importing each other.
    """

    @property
    def id(self) -> int: ...
    @property
    def driver(self) -> str: ...
    @property
    def allow_multiple(self) -> bool: ...
    def projection_key(self, names: frozenset[str] | None) -> tuple[object, ...] | None: ...
    @property
    def cache_key(self) -> tuple[str, ...] | None: ...

    def variable(self) -> DeviceVariable: ...


@dataclass(frozen=True, slots=True)
class SelectorFailure:
    """A selector that raised on a device; raised as an AllocationError when reached."""

    expression: str
    message: str


Verdict = bool | SelectorFailure


class VerdictCache:
    """(expression, slice version, device) → verdict, bounded by evicting everything when full."""

    def __init__(self, max_entries: int = 2_000_000) -> None:
        self._entries: dict[tuple[str, tuple[object, ...]], Verdict] = {}
        self._max = max_entries

    def get(self, expression: str, key: tuple[object, ...]) -> Verdict | None:
        return self._entries.get((expression, key))

    def put(self, expression: str, key: tuple[object, ...], verdict: Verdict) -> None:
        if len(self._entries) >= self._max:
            self._entries.clear()
        self._entries[(expression, key)] = verdict

    def __len__(self) -> int:
        return len(self._entries)


D = TypeVar("D", bound=Device)

_OPAQUE: frozenset[str] = frozenset({"\0not looked up"})


class SelectorEvaluator:
    """Evaluates compiled selectors on devices, through the caches."""

    def __init__(self, shared: VerdictCache, variables_kept: int = 512) -> None:
        self._shared = shared
        self._local: dict[tuple[str, int], Verdict] = {}
        self._names: dict[str, frozenset[str] | None] = {}
        self._numbers: dict[tuple[object, frozenset[str]], tuple[list[int], list[Any]]] = {}
        """(list, names) → `_numbered`'s numbers and keys, for lists that do not change."""
        self.entry_ids: frozenset[str] | None = None
        """Every id an entry of the snapshot's devices has (set by the snapshot), when known."""
        self.evaluations = 0
        # CEL device values are large; verdicts are what must last, so only recent values stay.
        self._variables: OrderedDict[int, DeviceVariable] = OrderedDict()
        self._variables_kept = variables_kept

    def _variable(self, device: Device) -> DeviceVariable:
        found = self._variables.get(device.id)
        if found is None:
            found = device.variable()
            self._variables[device.id] = found
            if len(self._variables) > self._variables_kept:
                self._variables.popitem(last=False)
        return found

    def verdict(self, selector: CompiledSelector, device: Device) -> Verdict:
        expression = selector.expression
        names = self._names.get(expression, _OPAQUE)
        if names is _OPAQUE:
            names = self._names[expression] = projection_of(expression).names
        seen = device.projection_key(names)
        if seen is not None:
            found = self._shared.get(expression, seen)
            if found is None:
                found = self._evaluate(selector, device)
                self._shared.put(expression, seen, found)
            return found
        local_key = (expression, device.id)
        found = self._local.get(local_key)
        if found is not None:
            return found
        if device.cache_key is not None:
            found = self._shared.get(expression, device.cache_key)
        if found is None:
            found = self._evaluate(selector, device)
            if device.cache_key is not None:
                self._shared.put(expression, device.cache_key, found)
        self._local[local_key] = found
        return found

    def _evaluate(self, selector: CompiledSelector, device: Device) -> Verdict:
        self.evaluations += 1
        try:
            return selector.evaluate(self._variable(device))
        except CelRuntimeError as err:
            return SelectorFailure(selector.expression, err.message)
        except ValueError as err:  # the device itself cannot become a CEL value
            return SelectorFailure(selector.expression, str(err))

    def filter(
        self,
        selectors: tuple[CompiledSelector, ...],
        devices: Iterable[tuple[D, Verdict]],
    ) -> list[tuple[D, Verdict]]:
        """(device, verdict) for each device whose verdict so far is true, ANDed with
        `selectors` (as `chain`), dropping those that come out false.

        The same verdicts as `chain` device by device, with the per-selector look-ups done once
        for the list: listing a node's candidates for a request runs this over a few hundred
        devices, once per node and request shape."""
        expressions = [s.expression for s in selectors]
        names: list[frozenset[str] | None] = []
        for expression in expressions:
            found = self._names.get(expression, _OPAQUE)
            if found is _OPAQUE:
                found = self._names[expression] = projection_of(expression).names
            names.append(found)
        steps = list(zip(selectors, expressions, names, strict=True))
        shared = self._shared
        kept: list[tuple[D, Verdict]] = []
        for device, before in devices:
            verdict = before
            if verdict is True:
                for selector, expression, seen_names in steps:
                    key = device.projection_key(seen_names) if seen_names is not None else None
                    if key is None:
                        verdict = self.verdict(selector, device)
                    else:
                        found_verdict = shared.get(expression, key)
                        if found_verdict is None:
                            found_verdict = self._evaluate(selector, device)
                            shared.put(expression, key, found_verdict)
                        verdict = found_verdict
                    if verdict is not True:
                        break
            if verdict is not False:
                kept.append((device, verdict))
        return kept

    def filter_list(
        self,
        selectors: tuple[CompiledSelector, ...],
        devices: list[tuple[D, Verdict]],
        list_key: object,
    ) -> list[tuple[D, Verdict]]:
        """`filter` over a list that stays the same for `list_key` (a node's class candidates).

        Request selectors that read the same attribute names (the MIG profiles) see the same
        projection of each device: the list's projection keys for those names are worked out
        once, numbered, and kept, so each further selector costs one verdict per distinct key
        and a pass over the numbers. Verdicts are looked up and evaluated in device order, on
        the same devices as `filter` would, so they and any failure are the same."""
        steps = []
        for selector in selectors:
            names = self._names_of(selector.expression)
            if names is None:
                return self.filter(selectors, devices)
            steps.append((selector, selector.expression, self._numbered(devices, list_key, names)))
        shared = self._shared
        kept: list[tuple[D, Verdict]] = []
        for position, (device, before) in enumerate(devices):
            verdict = before
            if verdict is True:
                for selector, expression, (numbers, keys, known) in steps:
                    number = numbers[position]
                    if number < 0:  # this device may see more than the names: its own verdict
                        verdict = self.verdict(selector, device)
                    else:
                        found = known[number]
                        if found is None:
                            key = keys[number]
                            found = shared.get(expression, key)
                            if found is None:
                                found = self._evaluate(selector, device)
                                shared.put(expression, key, found)
                            known[number] = found
                        verdict = found
                    if verdict is not True:
                        break
            if verdict is not False:
                kept.append((device, verdict))
        return kept

    def _names_of(self, expression: str) -> frozenset[str] | None:
        found = self._names.get(expression, _OPAQUE)
        if found is _OPAQUE:
            found = self._names[expression] = projection_of(expression).names
        return found

    def _numbered(
        self, devices: list[tuple[D, Verdict]], list_key: object, names: frozenset[str]
    ) -> tuple[list[int], list[tuple[object, ...]], list[Verdict | None]]:
        """Per device of the list, the number of its projection key for `names` (-1: none),
        the keys by number, and a fresh slot per number for this call's verdicts.

        Names that are no entry id of any device select nothing (a selector's names include its
        string literals, "1g.10gb"), so the numbering is kept for the names left: selectors on
        the same attribute share it."""
        if self.entry_ids is not None:
            names = names & self.entry_ids
        found = self._numbers.get((list_key, names))
        if found is None:
            numbering: dict[tuple[object, ...], int] = {}
            numbers: list[int] = []
            for device, _ in devices:
                key = device.projection_key(names)
                numbers.append(-1 if key is None else numbering.setdefault(key, len(numbering)))
            found = self._numbers[(list_key, names)] = (numbers, list(numbering))
        return found[0], found[1], [None] * len(found[1])

    def chain(self, selectors: tuple[CompiledSelector, ...], device: Device) -> Verdict:
        """Verdict of selectors ANDed in order, stopping at the first false or failure."""
        for selector in selectors:
            verdict = self.verdict(selector, device)
            if verdict is not True:
                return verdict
        return True
