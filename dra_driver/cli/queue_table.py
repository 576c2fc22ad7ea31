"""What `dra-driver queues` shows: GpuQueue objects as rows in tree order, as a table or JSON.

A listing has to show every queue, the ones the controller refused included (those are what a
reader most needs to find), so the objects are read leniently here rather than through
`parse_queue`, which rejects a bad spec: a missing or malformed field shows as "-", and the
`Valid` condition the controller wrote says what is wrong. Spec quantities are shown as written
and the status as the controller formatted it, so the table reads like the objects themselves;
a refused queue shows no usage, since the controller counts its pods in the default queue.

The IDLE column is not the controller's: it counts the devices whose claims' status says they
are idle (the kubelet plugins' `Idle` condition), in the queue's namespaces and those of the
queues below it, as the claims are now; "-" when the claims could not be read, and for a refused
queue.

Tree order is depth first from the roots, siblings by name. A queue whose parent is not listed
counts as a root (its PARENT column still names the parent); queues caught in a cycle have no
root, so they follow the tree, each with whatever of the cycle hangs below it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from dra_driver.queues.spec import RECLAIM_BORROWED, RESOURCES

VALID = "Valid"
HEADER = (
    "NAME",
    "PARENT",
    "NAMESPACES",
    "GUARANTEED",
    "LIMIT",
    "WEIGHT",
    "RECLAIM",
    "USED",
    "BORROWED",
    "IDLE",
    "PENDING",
    "VALID",
)
_INDENT = "  "


@dataclass(frozen=True, slots=True)
class QueueRow:
    """One queue as listed; amounts are {resource: quantity text} with absent resources left
    out."""

    name: str
    depth: int
    parent: str | None
    namespaces: tuple[str, ...]
    guaranteed: dict[str, str]
    limit: dict[str, str]
    weight: float
    reclaim: str
    used: dict[str, str]
    borrowed: dict[str, str]
    pending: int | None
    valid: dict[str, str] | None
    """The `Valid` condition's status, reason and message; None before the controller saw it."""
    idle: int | None = None
    """Devices of its namespaces (and its descendants') whose claims say they are idle; None
    when unknown."""

    def as_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "depth": self.depth,
            "parent": self.parent,
            "namespaces": list(self.namespaces),
            "guaranteed": self.guaranteed,
            "limit": self.limit,
            "weight": self.weight,
            "reclaim": self.reclaim,
            "used": self.used,
            "borrowed": self.borrowed,
            "idle": self.idle,
            "pending": self.pending,
            "valid": self.valid,
        }

    def cells(self) -> tuple[str, ...]:
        return (
            _INDENT * self.depth + self.name,
            self.parent or "-",
            ",".join(self.namespaces) or "-",
            _pair(self.guaranteed),
            _pair(self.limit),
            f"{self.weight:g}",
            self.reclaim,
            _pair(self.used),
            _pair(self.borrowed),
            "-" if self.idle is None else str(self.idle),
            "-" if self.pending is None else str(self.pending),
            (self.valid or {}).get("status", "-"),
        )


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _name(obj: Mapping[str, Any]) -> str:
    return str(_mapping(obj.get("metadata")).get("name") or "")


def _parent(obj: Mapping[str, Any]) -> str | None:
    parent = _mapping(obj.get("spec")).get("parent")
    return parent if isinstance(parent, str) and parent else None


def _amounts(raw: object) -> dict[str, str]:
    found = _mapping(raw)
    return {r: str(found[r]) for r in RESOURCES if found.get(r) is not None}


def _pair(amounts: Mapping[str, str]) -> str:
    """`gpu/memory`, "-" for an absent side, and "-" alone when both are absent."""
    if not amounts:
        return "-"
    return "/".join(amounts.get(r, "-") for r in RESOURCES)


def _weight(raw: object) -> float:
    if isinstance(raw, int | float) and not isinstance(raw, bool):
        return float(raw)
    return 1.0  # the controller's default, and what it uses for a queue that leaves it out


def _valid(status: Mapping[str, Any]) -> dict[str, str] | None:
    conditions = status.get("conditions")
    for condition in conditions if isinstance(conditions, list) else []:
        if isinstance(condition, Mapping) and condition.get("type") == VALID:
            return {key: str(condition.get(key) or "") for key in ("status", "reason", "message")}
    return None


def _row(obj: Mapping[str, Any], depth: int, idle: int | None = None) -> QueueRow:
    spec = _mapping(obj.get("spec"))
    status = _mapping(obj.get("status"))
    valid = _valid(status)
    if valid is not None and valid["status"] == "False":
        # The controller writes only the condition for a queue it refuses, and a merge patch
        # leaves what it wrote while the queue was served; those numbers mean nothing now.
        status = {}
    namespaces = spec.get("namespaces")
    pending = status.get("pending")
    return QueueRow(
        name=_name(obj),
        depth=depth,
        parent=_parent(obj),
        namespaces=tuple(str(n) for n in namespaces) if isinstance(namespaces, list) else (),
        guaranteed=_amounts(spec.get("guaranteed")),
        limit=_amounts(spec.get("limit")),
        weight=_weight(spec.get("weight")),
        reclaim=str(spec.get("reclaim") or RECLAIM_BORROWED),
        used=_amounts(status.get("used")),
        borrowed=_amounts(status.get("borrowed")),
        pending=pending if isinstance(pending, int) and not isinstance(pending, bool) else None,
        valid=valid,
        idle=None if valid is not None and valid["status"] == "False" else idle,
    )


def tree_rows(
    objects: Iterable[Mapping[str, Any]], idle: Mapping[str, int] | None = None
) -> list[QueueRow]:
    """The queues depth first (see the module's docstring); `idle` is idle devices per
    namespace (None: unknown)."""
    by_name = {_name(obj): obj for obj in objects}
    children: dict[str, list[str]] = {}
    roots: list[str] = []
    for name in sorted(by_name):
        parent = _parent(by_name[name])
        if parent is None or parent not in by_name:
            roots.append(name)
        else:
            children.setdefault(parent, []).append(name)
    idle_of = _idle_per_queue(by_name, children, idle)
    rows: list[QueueRow] = []
    seen: set[str] = set()
    for start in [*roots, *sorted(by_name)]:
        stack = [(start, 0)]
        while stack:
            name, depth = stack.pop()
            if name in seen:
                continue
            seen.add(name)
            rows.append(_row(by_name[name], depth, idle_of.get(name)))
            stack.extend((kid, depth + 1) for kid in reversed(children.get(name, [])))
    return rows


def _idle_per_queue(
    by_name: Mapping[str, Mapping[str, Any]],
    children: Mapping[str, list[str]],
    idle: Mapping[str, int] | None,
) -> dict[str, int]:
    """Idle devices of each queue's namespaces and of its descendants' (a cycle counted once)."""
    if idle is None:
        return {}

    def own(name: str) -> int:
        namespaces = _mapping(by_name[name].get("spec")).get("namespaces")
        listed = namespaces if isinstance(namespaces, list) else []
        return sum(idle.get(str(n), 0) for n in listed)

    def total(name: str, seen: frozenset[str]) -> int:
        below = [k for k in children.get(name, []) if k not in seen]
        return own(name) + sum(total(k, seen | {k}) for k in below)

    return {name: total(name, frozenset({name})) for name in by_name}


def _columns(rows: Sequence[tuple[str, ...]]) -> list[str]:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return [
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows
    ]


def render_table(rows: Sequence[QueueRow]) -> str:
    """The table, then one line per queue the controller refused, with its reason."""
    if not rows:
        return "No GpuQueues: every pod is in the controller's default queue.\n"
    lines = _columns([HEADER, *(row.cells() for row in rows)])
    refused = [row for row in rows if row.valid is not None and row.valid["status"] == "False"]
    if refused:
        lines.append("")
        lines.extend(f"{row.name}: {row.valid['message']}" for row in refused if row.valid)
    return "\n".join(lines) + "\n"


def render_json(rows: Sequence[QueueRow]) -> str:
    return json.dumps({"queues": [row.as_json() for row in rows]}, indent=2) + "\n"
