"""Who goes next and who may take more: guarantees, limits and weighted dominant shares.

Order: a queue short of its guarantee goes before any queue that is not; among equals the one
with the lowest weighted dominant share (Dominant Resource Fairness over GPU-equivalents and GPU
memory: a queue's share of a resource is what it holds over what the cluster has, its dominant
share the larger of the two, divided by its weight). Queues in a tree compare as their paths from
the root: two organisations first by their own shares, then teams inside the winner by theirs,
so an organisation that holds little wins for every team in it. The default queue comes last at
equal standing.

Admission: a pod may not take its queue, or any ancestor, past a limit; and beyond its queue's
guarantee it may only take capacity that no queue short of its guarantee is waiting for.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from dra_driver.queues.spec import RESOURCES, ZERO, Amounts, format_gpu, format_memory
from dra_driver.queues.tree import QueueTree


@dataclass(slots=True)
class Ledger:
    """What each queue holds (its own pods, then with its descendants') and who waits."""

    tree: QueueTree
    capacity: Amounts
    own: dict[str, Amounts] = field(default_factory=dict)
    waiting: set[str] = field(default_factory=set)
    """Queues with pods that wait for devices."""

    def add(self, queue: str, amounts: Amounts) -> None:
        self.own[queue] = self.own.get(queue, ZERO) + amounts

    def remove(self, queue: str, amounts: Amounts) -> None:
        self.own[queue] = self.own.get(queue, ZERO) - amounts

    def used(self, queue: str) -> Amounts:
        """The queue's own pods and its descendants' together."""
        total = self.own.get(queue, ZERO)
        for child in self.tree.children(queue):
            total = total + self.used(child)
        return total

    def borrowed(self, queue: str) -> Amounts:
        """What the queue holds beyond its guarantee."""
        used = self.used(queue)
        guaranteed = self.tree.queues[queue].guaranteed
        return Amounts(
            max(0.0, used.gpu - (guaranteed.gpu or 0.0)),
            max(0.0, used.memory - (guaranteed.memory or 0.0)),
        )

    def short_of_guarantee(self, queue: str) -> bool:
        return self.tree.queues[queue].guaranteed.short_of(self.used(queue))

    def dominant_share(self, queue: str) -> float:
        used = self.used(queue)
        shares = [used.get(r) / total for r in RESOURCES if (total := self.capacity.get(r)) > 0]
        return max(shares, default=0.0) / self.tree.queues[queue].weight

    def order_key(self, queue: str) -> tuple[object, ...]:
        """Smaller goes first (see the module's docstring)."""
        spec = self.tree.queues[queue]
        path = [(self.dominant_share(q), q) for q in self.tree.path(queue)]
        return (0 if self.short_of_guarantee(queue) else 1, spec.last, path)

    def next_queue(self, candidates: Iterable[str]) -> str | None:
        return min(candidates, key=self.order_key, default=None)

    def refusal(self, queue: str, asks: Amounts) -> str | None:
        """Why the queue may not take `asks` more now, or None when it may."""
        for name in reversed(self.tree.path(queue)):
            spec = self.tree.queues[name]
            after = self.used(name) + asks
            over = spec.limit.exceeded(after)
            if over:
                resource = over[0]
                return (
                    f"queue {name} would pass its {resource} limit "
                    f"({_text(resource, spec.limit.get(resource) or 0.0)}): it holds "
                    f"{_text(resource, self.used(name).get(resource))} and the pod asks "
                    f"{_text(resource, asks.get(resource))}"
                )
        spec = self.tree.queues[queue]
        if spec.guaranteed.covers(self.used(queue) + asks):
            return None  # within its guarantee: never held back for others
        reserved = ZERO
        for other in sorted(self.waiting):
            if other != queue and other in self.tree.queues and self.short_of_guarantee(other):
                reserved = reserved + self.tree.queues[other].guaranteed.deficit(self.used(other))
        if reserved.is_zero():
            return None
        free = self.capacity - self.total_used()
        for resource in RESOURCES:
            if free.get(resource) - asks.get(resource) < reserved.get(resource) - 1e-9:
                return (
                    f"queue {queue} is at its guarantee and the free {resource} "
                    f"({_text(resource, max(0.0, free.get(resource)))}) is held for queues "
                    f"below theirs ({_text(resource, reserved.get(resource))})"
                )
        return None

    def total_used(self) -> Amounts:
        total = ZERO
        for amounts in self.own.values():
            total = total + amounts
        return total


def _text(resource: str, value: float) -> str:
    return format_gpu(value) if resource == "gpu" else format_memory(value)
