"""What a queued replay tells an admin per queue: usage over time, evictions, queueing delay.

The numbers answer the questions a queue setup raises before it goes to a cluster: does each
queue get its guarantee, how long do its pods wait (p50, p99 and the worst, from arrival to
placement), how often is it reclaimed from, and by whom. GPU counts are GPU-equivalents and
memory is bytes, as the queues count them (`dra_driver.queues.amounts`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from dra_driver.queues import Amounts, Bounds, QueueTree
from dra_driver.queues.spec import format_gpu, format_memory
from dra_driver.simulation.queued import Eviction, QueuedReplay, UsageRow

Rows = list[tuple[str, ...]]


def percentile(values: list[float], fraction: float) -> float | None:
    """Nearest rank: the smallest value with at least `fraction` of the values at or below it."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(fraction * len(ordered)))
    return ordered[rank - 1]


@dataclass(frozen=True, slots=True)
class QueueSummary:
    name: str
    parent: str | None
    guaranteed: Bounds
    limit: Bounds
    weight: float
    reclaim: str
    placed: int
    """Placements, a pod placed again after an eviction counted again."""
    waiting: int
    """Pods still waiting when the replay ends."""
    evicted: int
    """Its pods evicted for other queues."""
    reclaimed: int
    """Pods of other queues evicted for its pods."""
    delays: tuple[float, ...]
    peak: Amounts

    def delay_json(self) -> dict[str, float | None]:
        values = list(self.delays)
        return {
            "p50": percentile(values, 0.5),
            "p99": percentile(values, 0.99),
            "max": max(values, default=None),
        }

    def as_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "parent": self.parent,
            "guaranteed": _bounds_json(self.guaranteed),
            "limit": _bounds_json(self.limit),
            "weight": self.weight,
            "reclaim": self.reclaim,
            "placed": self.placed,
            "waitingAtEnd": self.waiting,
            "evicted": self.evicted,
            "reclaimed": self.reclaimed,
            "delaySeconds": self.delay_json(),
            "peak": _amounts_json(self.peak),
        }


@dataclass(frozen=True, slots=True)
class QueueReport:
    queues: list[QueueSummary]
    evictions: list[Eviction]
    timeline: list[UsageRow]
    problems: dict[str, str]

    def as_json(self) -> dict[str, Any]:
        return {
            "queues": [q.as_json() for q in self.queues],
            "evictions": [
                {
                    "time": e.time,
                    "pod": e.pod,
                    "queue": e.queue,
                    "byPod": e.by_pod,
                    "byQueue": e.by_queue,
                    "node": e.node,
                }
                for e in self.evictions
            ],
            "reclaimedFrom": self.reclaimed_from(),
            "usage": [
                {"time": row.time, "queues": {q: _amounts_json(a) for q, a in row.used.items()}}
                for row in self.timeline
            ],
            "ignored": dict(sorted(self.problems.items())),
        }

    def reclaimed_from(self) -> list[dict[str, Any]]:
        """(reclaiming queue, queue reclaimed from) → evicted pods, most first."""
        counts: dict[tuple[str, str], int] = {}
        for e in self.evictions:
            counts[(e.by_queue, e.queue)] = counts.get((e.by_queue, e.queue), 0) + 1
        ordered = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
        return [{"queue": by, "from": victim, "pods": n} for (by, victim), n in ordered]

    def tables(self) -> list[Rows]:
        """The text output: queues, evictions, GPUs held over time, ignored queues."""
        out: list[Rows] = []
        summary: Rows = [
            (
                "QUEUE",
                "PARENT",
                "GUARANTEED",
                "LIMIT",
                "PLACED",
                "WAITING",
                "EVICTED",
                "RECLAIMED",
                "PEAK GPUS",
                "DELAY P50/P99/MAX",
            )
        ]
        for q in self.queues:
            delay = q.delay_json()
            summary.append(
                (
                    q.name,
                    q.parent or "-",
                    _bounds_text(q.guaranteed),
                    _bounds_text(q.limit),
                    str(q.placed),
                    str(q.waiting),
                    str(q.evicted),
                    str(q.reclaimed),
                    format_gpu(q.peak.gpu),
                    "/".join(_seconds(delay[k]) for k in ("p50", "p99", "max")),
                )
            )
        out.append(summary)
        if self.evictions:
            evictions: Rows = [("TIME", "EVICTED", "QUEUE", "NODE", "FOR", "BY QUEUE")]
            evictions += [
                (_seconds(e.time), e.pod, e.queue, e.node, e.by_pod, e.by_queue)
                for e in self.evictions
            ]
            out.append(evictions)
        names = [q.name for q in self.queues]
        usage: Rows = [("TIME", *(f"{n} GPUS" for n in names))]
        usage += [
            (_seconds(row.time), *(format_gpu(row.used[n].gpu) for n in names))
            for row in self.timeline
        ]
        if len(usage) > 1:
            out.append(usage)
        if self.problems:
            ignored: Rows = [("IGNORED QUEUE", "REASON")]
            ignored += sorted(self.problems.items())
            out.append(ignored)
        return out


def build_report(replay: QueuedReplay) -> QueueReport:
    tree = replay.tree
    placed: dict[str, int] = {}
    for queue, delays in replay.delays.items():
        placed[queue] = len(delays)
    waiting: dict[str, int] = {}
    for job in replay.waiting:
        waiting[job.queue] = waiting.get(job.queue, 0) + 1
    evicted: dict[str, int] = {}
    reclaimed: dict[str, int] = {}
    for e in replay.evictions:
        evicted[e.queue] = evicted.get(e.queue, 0) + 1
        reclaimed[e.by_queue] = reclaimed.get(e.by_queue, 0) + 1
    summaries = []
    for name in queue_order(tree):
        spec = tree.queues[name]
        peak = Amounts(
            max((row.used[name].gpu for row in replay.timeline), default=0.0),
            max((row.used[name].memory for row in replay.timeline), default=0.0),
        )
        summaries.append(
            QueueSummary(
                name=name,
                parent=spec.parent,
                guaranteed=spec.guaranteed,
                limit=spec.limit,
                weight=spec.weight,
                reclaim=spec.reclaim,
                placed=placed.get(name, 0),
                waiting=waiting.get(name, 0),
                evicted=evicted.get(name, 0),
                reclaimed=reclaimed.get(name, 0),
                delays=tuple(replay.delays.get(name, ())),
                peak=peak,
            )
        )
    return QueueReport(summaries, list(replay.evictions), list(replay.timeline), tree.problems)


def queue_order(tree: QueueTree) -> list[str]:
    """Parents before their children, siblings by name, the default queue last."""
    return sorted(tree.queues, key=lambda q: (tree.queues[q].last, tree.path(q)))


def _amounts_json(amounts: Amounts) -> dict[str, float]:
    return {"gpu": round(amounts.gpu, 6), "memory": round(amounts.memory)}


def _bounds_json(bounds: Bounds) -> dict[str, float | None]:
    return {"gpu": bounds.gpu, "memory": bounds.memory}


def _bounds_text(bounds: Bounds) -> str:
    parts = []
    if bounds.gpu is not None:
        parts.append(f"{format_gpu(bounds.gpu)} gpu")
    if bounds.memory is not None:
        parts.append(format_memory(bounds.memory))
    return ", ".join(parts) or "-"


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:g}s"
