"""The queues as a tree, with the bad ones set aside and a reason for each.

What the API server cannot check one object at a time is checked here across all of them: a
parent that does not exist, a cycle, children that together guarantee more than their parent,
and a namespace named by two queues (the older queue keeps it). A bad queue is left out of the
tree (its namespaces fall to the default queue) and keeps its reason, which the controller shows
as a condition on it; one bad queue never stops the others.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from dra_driver.queues.spec import KIND, RESOURCES, QueueSpec, QueueSpecError, parse_queue

DEFAULT_QUEUE = "default"


@dataclass(slots=True)
class QueueTree:
    queues: dict[str, QueueSpec]
    """The good queues by name, the default queue included."""
    problems: dict[str, str] = field(default_factory=dict)
    """Bad queue → why it is left out."""
    default: str = DEFAULT_QUEUE
    _by_namespace: dict[str, str] = field(default_factory=dict)
    _children: dict[str, list[str]] = field(default_factory=dict)

    @classmethod
    def build(
        cls, objects: Iterable[Mapping[str, Any]], default: QueueSpec | None = None
    ) -> QueueTree:
        default = default or QueueSpec(name=DEFAULT_QUEUE, last=True)
        specs: dict[str, QueueSpec] = {}
        problems: dict[str, str] = {}
        for obj in objects:
            try:
                spec = parse_queue(obj)
            except QueueSpecError as err:
                name = str((obj.get("metadata") or {}).get("name") or "")
                problems[name] = str(err)
                continue
            if spec.name == default.name:
                problems[spec.name] = (
                    f"{KIND} {spec.name}: metadata.name: the name is taken by the default queue "
                    "(set in the controller's settings)"
                )
                continue
            specs[spec.name] = spec
        _drop_unrooted(specs, problems)
        _drop_overcommitted(specs, problems)
        tree = cls({**specs, default.name: default}, problems, default.name)
        tree._index_namespaces()
        for spec in tree.queues.values():
            if spec.parent is not None:
                tree._children.setdefault(spec.parent, []).append(spec.name)
        return tree

    def _index_namespaces(self) -> None:
        owners = sorted(self.queues.values(), key=lambda s: (s.created, s.name))
        for spec in owners:
            taken = [n for n in spec.namespaces if n in self._by_namespace]
            if taken:
                self.problems[spec.name] = (
                    f"{KIND} {spec.name}: spec.namespaces: namespace {taken[0]} already belongs "
                    f"to queue {self._by_namespace[taken[0]]}"
                )
                continue
            for namespace in spec.namespaces:
                self._by_namespace[namespace] = spec.name
        for name in self.problems:
            if name != self.default:  # a GpuQueue refused for taking its name, not the queue
                self.queues.pop(name, None)
        # Queues below one that lost a namespace here have lost their root too.
        specs = {name: spec for name, spec in self.queues.items() if name != self.default}
        kept = len(specs)
        _drop_unrooted(specs, self.problems)
        if len(specs) != kept:
            self.queues = {**specs, self.default: self.queues[self.default]}
            self._by_namespace = {
                namespace: owner
                for namespace, owner in self._by_namespace.items()
                if owner in self.queues
            }

    def queue_for(self, namespace: str) -> str:
        return self._by_namespace.get(namespace, self.default)

    def path(self, name: str) -> list[str]:
        """The queue and its ancestors, root first."""
        chain: list[str] = []
        current: str | None = name
        while current is not None:
            chain.append(current)
            current = self.queues[current].parent
        chain.reverse()
        return chain

    def children(self, name: str) -> list[str]:
        return list(self._children.get(name, ()))


def _drop_unrooted(specs: dict[str, QueueSpec], problems: dict[str, str]) -> None:
    """Queues whose chain of parents ends at a missing or bad queue, or loops, are bad."""
    bad: dict[str, str] = {}
    for start in sorted(specs):
        chain = [start]
        while True:
            parent = specs[chain[-1]].parent
            if parent is None:
                break
            if parent in chain:
                loop = [*chain[chain.index(parent) :], parent]
                cycle = f"the queues {' -> '.join(loop)} form a cycle"
                bad[start] = cycle if start in loop[:-1] else f"an ancestor is in a cycle ({cycle})"
                break
            if parent not in specs:
                missing = "is not valid" if parent in problems else "does not exist"
                own = len(chain) == 1
                bad[start] = (
                    f"{KIND} {parent} {missing}"
                    if own
                    else f"an ancestor's parent {KIND} {parent} {missing}"
                )
                break
            chain.append(parent)
    for name, why in bad.items():
        problems[name] = f"{KIND} {name}: spec.parent: {why}"
        specs.pop(name, None)


def _drop_overcommitted(specs: dict[str, QueueSpec], problems: dict[str, str]) -> None:
    """Children that together guarantee more than their parent are all left out: which of them
    should lose is the admin's call, and a partial tree would hand out what was never there."""
    children: dict[str, list[str]] = {}
    for spec in specs.values():
        if spec.parent is not None:
            children.setdefault(spec.parent, []).append(spec.name)
    for parent, kids in sorted(children.items()):
        for resource in RESOURCES:
            total = sum(specs[k].guaranteed.get(resource) or 0.0 for k in kids)
            own = specs[parent].guaranteed.get(resource) or 0.0
            if total > own + 1e-9:
                for kid in kids:
                    problems[kid] = (
                        f"{KIND} {kid}: spec.guaranteed.{resource}: the children of {parent} "
                        f"({', '.join(sorted(kids))}) guarantee {total:g} together, more than "
                        f"its {own:g}"
                    )
                break
    for name in problems:
        specs.pop(name, None)
    # Descendants of a queue dropped here have lost their root too.
    _drop_unrooted(specs, problems)
