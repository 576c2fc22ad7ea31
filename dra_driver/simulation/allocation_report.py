"""The GPU allocation report of a replay, read at points the user chooses (`simulate --report`).

A sharing-aware placement shows its worth once the cluster is contended: how much of the GPUs is
allocated when the demand that arrived reaches the capacity, or goes past it. That is how the
FGD paper (Weng et al., USENIX ATC '23) compares policies, and how the trace benchmark reads
it. A point is a share of the GPU capacity in arrived demand (`110%`: read just after the
arrival that brings the demand to 110 % of the GPUs) or a time (`3600s`: the state after every
event at or before 3600 s). Figures, in GPUs as gpu_units.py counts them:

- `arrived`: what the pods and claims that arrived so far asked for, placed or not; claims
  allocated in the input count as arrived at the start with what they hold;
- `allocated`: what allocations hold at the point (departed pods no longer count);
- `ratio`: allocated / capacity; `idle`: capacity - allocated;
- `unallocated`: what the pods and claims that arrived and have not left asked for and do not
  hold (refused, or waiting in a queue).

A share point that the demand never reaches is reported as not reached.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from dra_driver.allocator import ClusterSnapshot, Usage
from dra_driver.simulation.gpu_units import GpuUnits

EPS = 1e-9
"""Sums of fractional shares are not exact: 0.1 + 0.2 still reaches 30 % of one GPU."""

_POINT = re.compile(r"(\d+(?:\.\d+)?)(%|s)")


@dataclass(frozen=True, slots=True)
class ReportPoint:
    text: str
    """As the user wrote it (trimmed): the report names points this way."""
    demand: float | None = None
    """Arrived demand as a fraction of the GPU capacity (`110%`: 1.1)."""
    time: float | None = None
    """Seconds from the start of the replay."""


def parse_points(text: str) -> list[ReportPoint]:
    """A comma-separated list of `N%` (N > 0) and `Ns` (N >= 0); ValueError naming the bad one."""
    points: list[ReportPoint] = []
    for raw in text.split(","):
        part = raw.strip()
        found = _POINT.fullmatch(part)
        if found is None:
            raise ValueError(
                f"{part!r} is neither a share of the GPU capacity in arrived demand (like 110%) "
                "nor a time in seconds (like 3600s)"
            )
        value = float(found.group(1))
        if found.group(2) == "%":
            if value <= 0:
                raise ValueError(f"{part!r}: a share of the GPU capacity must be above 0%")
            points.append(ReportPoint(part, demand=value / 100))
        else:
            points.append(ReportPoint(part, time=value))
    return points


@dataclass(frozen=True, slots=True)
class ReportRow:
    point: ReportPoint
    capacity: float
    time: float | None = None
    """When the point was read; None when it was not reached."""
    arrived: float = 0.0
    allocated: float = 0.0
    unallocated: float = 0.0

    @property
    def reached(self) -> bool:
        return self.time is not None

    @property
    def ratio(self) -> float:
        return self.allocated / self.capacity if self.capacity else 0.0

    @property
    def idle(self) -> float:
        return self.capacity - self.allocated

    def as_json(self) -> dict[str, Any]:
        def figure(value: float) -> float | None:
            return round(value, 6) if self.reached else None

        return {
            "point": self.point.text,
            "reached": self.reached,
            "time": self.time,
            "capacity": self.capacity,
            "arrived": figure(self.arrived),
            "allocated": figure(self.allocated),
            "ratio": figure(self.ratio),
            "idle": figure(self.idle),
            "unallocated": figure(self.unallocated),
        }


class AllocationReport:
    """Collects the rows as a replay advances. The replay adds to `arrived` and `waiting` and
    asks which points are due; reading a point takes what `usage` holds at that moment."""

    def __init__(
        self, snapshot: ClusterSnapshot, usage: Usage, points: Sequence[ReportPoint]
    ) -> None:
        self.units = GpuUnits(snapshot)
        self.usage = usage
        self.capacity = self.units.capacity
        self.points = list(points)
        if self.capacity == 0:
            shares = [p.text for p in self.points if p.demand is not None]
            if shares:
                raise ValueError(
                    f"{', '.join(shares)}: the input publishes no GPUs, so there is no "
                    "capacity to take a share of"
                )
        self.arrived = self.units.held(usage)
        """GPUs asked for so far: what the input's allocated claims hold, then every arrival."""
        self.waiting = 0.0
        """GPUs asked for by arrivals that hold nothing and have not left."""
        self.waiting_now: Callable[[], float] | None = None
        """Replaces `waiting` when reading, for a replay where pods wait and leave (queues):
        worked out only for the points read, not after every event."""
        self._rows: dict[int, ReportRow] = {}
        self._times = sorted(
            (i for i, p in enumerate(self.points) if p.time is not None),
            key=lambda i: self.points[i].time or 0.0,
        )
        self._shares = sorted(
            (i for i, p in enumerate(self.points) if p.demand is not None),
            key=lambda i: self.points[i].demand or 0.0,
        )

    def arrive(self, asked: float, placed: bool) -> None:
        """A pod or claim decided on arrival: placed, or refused for good."""
        self.arrived += asked
        if not placed:
            self.waiting += asked

    def due_times(self, before: float | None) -> list[tuple[int, float]]:
        """(point number, time) of the time points earlier than `before` (all that are left
        when None), earliest first: the caller brings the replay to each time, then `read`s."""
        due: list[tuple[int, float]] = []
        while self._times:
            time = self.points[self._times[0]].time
            assert time is not None
            if before is not None and time >= before:
                break
            due.append((self._times.pop(0), time))
        return due

    def read_shares(self, now: float) -> None:
        """Read every share point the arrived demand has reached."""
        while self._shares:
            demand = self.points[self._shares[0]].demand
            assert demand is not None
            if self.arrived < demand * self.capacity - EPS:
                return
            self.read(self._shares.pop(0), now)

    def read(self, number: int, now: float) -> None:
        """Read point `number` (its position in the list given) from the state now."""
        self._rows[number] = ReportRow(
            self.points[number],
            self.capacity,
            time=now,
            arrived=self.arrived,
            allocated=self.units.held(self.usage),
            unallocated=self.waiting if self.waiting_now is None else self.waiting_now(),
        )

    def rows(self) -> list[ReportRow]:
        """One row per point, in the order given. A point never reached has no time, and its
        `arrived` is the demand that arrived by the end (for the note that says so)."""
        return [
            self._rows.get(i) or ReportRow(point, self.capacity, arrived=self.arrived)
            for i, point in enumerate(self.points)
        ]
