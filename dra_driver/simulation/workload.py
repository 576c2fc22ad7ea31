"""The shapes of the pods of a workload: what the fragmentation score weighs by.

A shape is what decides where a pod can go: its node resource requests (CPU, memory, ...) and its
dominant device demand (how many devices, of which class and selectors, how large a share of
each). The distribution holds every shape, by its share of the pods (the fragmentation index
keeps the most common ones).

When every pod to come is known in advance (`simulate`'s input, a trace), the distribution is
theirs from the start and stays (`Workload.of`). Otherwise shapes are counted as pods arrive:
until a pod has been seen, the prior is "future pods look like this one" (the distribution holds
the arriving pod alone), so the first placements degrade to best fit, and the distribution is
refreshed when the count of pods seen doubles (and every `refresh` pods later, `next_refresh`),
so cached scores stay valid between refreshes. Weights learned that way can be far from the
whole workload's (docs/performance/traces.md).

The controller learns this way (`workload_source.WorkloadSource`), and `simulate --workload
learned` replays it: both count through `Workload.observe`, so the rule is one.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from dra_driver.allocator.claims import ALL, Alternative, ClaimPlan


@dataclass(frozen=True, slots=True)
class Demand:
    """`count` devices chosen by `alternative`'s selectors, each with `capacity` requested."""

    key: tuple[object, ...]
    count: int
    alternative: Alternative


@dataclass(frozen=True, slots=True)
class PodShape:
    """What decides where a pod can go: its node resource requests and its dominant demand."""

    requests: tuple[tuple[str, int], ...]
    demand: Demand | None

    @property
    def key(self) -> tuple[object, ...]:
        return (self.requests, None if self.demand is None else self.demand.key)


def shape_of(requests: Mapping[str, int], plans: Sequence[ClaimPlan]) -> PodShape:
    """The pod's shape; its dominant demand is its request asking for the most devices (ties:
    the most capacity), using the preferred `firstAvailable` alternative."""
    best: Demand | None = None
    best_rank: tuple[int, float] = (-1, -1.0)
    for plan in plans:
        for request in plan.requests:
            alt = request.alternatives[0]
            if alt.admin_access:
                continue
            count = 1 if alt.mode == ALL else alt.count
            rank = (count, float(sum(float(v) for v in alt.capacity.values())))
            if rank > best_rank:
                key = (alt.selector_key, tuple(sorted(alt.capacity.items())), count)
                best, best_rank = Demand(key, count, alt), rank
    kept = tuple(sorted((k, int(v)) for k, v in requests.items() if v))
    return PodShape(kept, best)


REFRESH_PODS = 2048
"""Past this many pods, learned weights are refreshed every this many pods instead of at each
doubling of the count."""


def next_refresh(seen: int, every: int = REFRESH_PODS) -> int:
    """The count of pods at which learned weights are next refreshed, once they weigh by `seen`
    pods: the count doubled (1, 2, 4, ... up to `every`), then `every` pods more."""
    return seen * 2 if seen < every else seen + every


class Workload:
    def __init__(self, refresh: int = REFRESH_PODS) -> None:
        self.refresh = refresh
        self.counts: Counter[tuple[object, ...]] = Counter()
        self.shapes: dict[tuple[object, ...], PodShape] = {}
        self.seen = 0
        self.version = 0
        self.fixed = False
        """The distribution was given whole (`of`): arrivals no longer change it."""
        self._next = 1
        self._distribution: list[tuple[PodShape, float]] = []

    @classmethod
    def of(cls, shapes: Sequence[PodShape]) -> Workload:
        """The distribution of a workload known in advance (every pod of a replay's input, a
        configured profile), kept as it is whatever arrives."""
        return cls.weighted([(shape, 1.0) for shape in shapes])

    @classmethod
    def weighted(cls, shapes: Sequence[tuple[PodShape, float]]) -> Workload:
        """A fixed distribution of shapes with weights (a profile): only proportions matter."""
        workload = cls()
        weights: dict[tuple[object, ...], float] = {}
        for shape, weight in shapes:
            workload.shapes.setdefault(shape.key, shape)
            weights[shape.key] = weights.get(shape.key, 0.0) + weight
        total = sum(weights.values())
        ranked = sorted(weights.items(), key=lambda item: -item[1])
        workload._distribution = [(workload.shapes[k], w / total) for k, w in ranked]
        workload.seen = len(shapes)
        workload.version += 1
        workload.fixed = True
        return workload

    def observe(self, shape: PodShape, times: int = 1) -> None:
        """Count `times` pods of `shape` (more than one: pods counted before, brought back)."""
        if self.fixed:
            return
        key = shape.key
        self.shapes.setdefault(key, shape)
        self.counts[key] += times
        self.seen += times
        if self.seen >= self._next:
            self._publish()

    def publish(self) -> None:
        """Weigh by every pod counted so far now, not at the next doubling (counts brought
        back at once, as the controller does when the cluster's classes change); the next
        refresh is then the doubling of this count, whatever order the counts came in."""
        self._publish()

    def _publish(self) -> None:
        self._next = next_refresh(self.seen, self.refresh)
        common = self.counts.most_common()
        total = sum(n for _, n in common)
        self._distribution = [(self.shapes[k], n / total) for k, n in common]
        self.version += 1

    def distribution(self) -> list[tuple[PodShape, float]]:
        return self._distribution
