"""What the allocation loop keeps from one pass to the next, and within a pass, in one place.

Each field says what it holds, which part of the reconciler fills it, and when it is emptied. An
entry that outlives its reason (a pod forgotten in one map and kept in another) shows up as a
pod decided twice or a gate never lifted, which is easiest to rule out with every map and the
code that empties it named together. Everything here is touched on the event loop's thread only
(watch events reach it through `call_soon_threadsafe`), so nothing needs a lock; but events land
between a pass's awaits, so the maps a pass walks through with awaits in between (`stale`,
`dealloc`) it takes whole first, and what comes in meanwhile is for the next pass. Times
are `time.monotonic()` seconds.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from controller.decide import Decision
from controller.informer import Key, Obj
from dra_driver.queues import Ledger


@dataclass(slots=True)
class ReconcilerState:
    queue: dict[Key, None] = field(default_factory=dict)
    """Pods to decide in the next pass, in the order they came (the dict is an ordered set).
    Filled by watch events of gated pods and of the claims they use, by `resync`, by a decision
    dropped at a re-check or a write that failed (`_retry`), by a gate lift that failed, and at
    the start of a pass by the waiting pods whose view generation moved. Emptied at the start of
    every pass; a pod leaves it early when it is forgotten (`_forget_pod`)."""

    waiting: dict[Key, int] = field(default_factory=dict)
    """Pod → the view generation at which it could not be allocated; the pod is queued again
    once the generation changes. Filled by `_failed`; a pod leaves it when it is forgotten."""

    idle_due: list[float] = field(default_factory=list)
    """A heap of monotonic times at which some claim's devices will have been idle as long as
    its queue's `idleReclaim.after`: every waiting pod is decided again then (it may evict
    them now), and only then, not at every device condition the plugins write."""

    seen_at: dict[Key, float] = field(default_factory=dict)
    """Gated pod → when it was first seen gated: the start of its allocation latency, and the
    pods the pending gauges count. Filled by pod events and `resync`; a pod leaves it when it is
    forgotten."""

    dealloc: set[Key] = field(default_factory=set)
    """Claims to look at for deallocation at the start of the next pass (before it decides, so
    the devices they free are used in that pass): every claim that had an event, the claims of a
    pod that changed, all of ours on taking over the lead. Taken whole by `_deallocate`, which
    puts back the claims whose deallocation failed."""

    in_flight: list[Decision] = field(default_factory=list)
    """The pass's decisions while they are written. Set after deciding and emptied once the
    writes are over; after a failed pass `_recover` decides the pods of those not yet settling
    again and empties it."""

    settling: list[tuple[float, Decision]] = field(default_factory=list)
    """Written decisions and when their gates may come off (`ControllerConfig.settle_s`).
    Filled by `_write_all` for the decisions that passed the re-check after writing; the due ones
    are taken by `_lift_settled` in every pass; emptied on stepping down (the next leader
    finishes them)."""

    lifting: set[Key] = field(default_factory=set)
    """Pods whose decision left `settling` and whose gate lift (or withdrawal) is under way,
    which may overlap a pass now that lifts start when the settle time is over: a pass leaves
    them queued rather than deciding them a second time. Filled and emptied by
    `_lift_settled`."""

    stale: dict[Key, list[Obj]] = field(default_factory=dict)
    """Claims of ours whose earlier allocation collides with another's, with the pods that use
    them: to withdraw or hold (`held`). Filled by `_still_fits`; taken whole by
    `_withdraw_stale` in the same pass."""

    held: dict[Key, list[Obj]] = field(default_factory=dict)
    """Claims of ours that collide with another claim on a whole device, with the pods that use
    them: kept allocated, the pods gated, until no other claim holds the device, then withdrawn
    (`Reconciler._let_go` says why). Filled by `_let_go`; `_release_held` looks at every one
    at the start of each pass; emptied on stepping down. Their pods are not decided meanwhile,
    and the claims are not deallocated."""

    pass_ledger: Ledger | None = None
    """The queues' usage after the pass's admissions and evictions. Set by `_decide`; taken by
    `_report_queues` at the end of the pass, which counts the usage afresh when it is None."""

    last_resync: float = field(default_factory=time.monotonic)
    """When `resync` last ran from the loop, which runs it every `ControllerConfig.resync_s`."""

    last_pass: float = float("-inf")
    """When the last pass started (never, at first); the loop starts passes at least
    `BATCH_WINDOW_S` apart."""
