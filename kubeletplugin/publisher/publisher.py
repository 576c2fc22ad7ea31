"""Publishing one node's pool: plan, write, and recover from conflicts and dropped fields.

`publish()` reads what the API server holds for this node and driver, plans the writes
(plan.py) and performs them: updates and creates first, deletions last. A conflict (someone else
wrote a slice since it was read) or a transient API error restarts the round from a fresh read,
with exponential backoff, up to `attempts` times. When the API server drops the partitionable or
consumable-capacity fields, the publisher switches to the fallback layout, says why (log and a
warning Event through `warn`) and publishes again.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import structlog
from kubernetes import client

from kubeletplugin.publisher.dropped import dropped_fields
from kubeletplugin.publisher.plan import NodeOwner, PublishPlan, plan_publication
from kubeletplugin.publisher.store import SliceStore

log = structlog.get_logger(__name__)

BuildSlices = Callable[[bool], Sequence[Mapping[str, Any]]]
"""Builds the node's slices; the argument says whether partitionable devices may be used."""

RETRYABLE = {409, 429, 500, 502, 503, 504}


class PublishError(RuntimeError):
    """Publishing gave up after its retries; the message says what the API server answered."""


@dataclass(slots=True)
class PublishResult:
    generation: int
    written: int
    deleted: int
    partitionable: bool
    attempts: int
    dropped: list[str] = field(default_factory=list)


class SlicePublisher:
    def __init__(
        self,
        store: SliceStore,
        owner: NodeOwner,
        driver: str,
        build: BuildSlices,
        *,
        warn: Callable[[str], None] | None = None,
        attempts: int = 6,
        backoff_s: float = 0.1,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.store = store
        self.owner = owner
        self.driver = driver
        self.build = build
        self.partitionable = True
        self._warn = warn
        self._attempts = attempts
        self._backoff_s = backoff_s
        self._sleep = sleep

    def publish(self) -> PublishResult:
        delay = self._backoff_s
        last: Exception | None = None
        for attempt in range(1, self._attempts + 1):
            try:
                return self._round(attempt)
            except client.ApiException as err:
                if err.status not in RETRYABLE:
                    raise PublishError(
                        f"node {self.owner.name}: the API server refused a ResourceSlice write: "
                        f"{err.status} {err.reason}: {err.body}"
                    ) from err
                last = err
            except OSError as err:  # connection refused or reset
                last = err
            log.info(
                "slice publication retried", node=self.owner.name, attempt=attempt, error=str(last)
            )
            self._sleep(delay)
            delay = min(delay * 2, 5.0)
        raise PublishError(
            f"node {self.owner.name}: gave up publishing ResourceSlices after {self._attempts} "
            f"attempts: {last}"
        )

    def _round(self, attempt: int) -> PublishResult:
        existing = self.store.list(self.owner.name, self.driver)
        plan = plan_publication(self.build(self.partitionable), existing, self.owner)
        dropped = self._execute(plan)
        if dropped and self.partitionable:
            self.partitionable = False
            message = (
                f"the API server dropped {', '.join(dropped[:3])}"
                f"{' and more' if len(dropped) > 3 else ''}: partitionable devices or consumable "
                "capacity are not enabled; publishing whole GPUs and pre-created MIG devices only"
            )
            log.warning(
                "falling back to the plain slice layout", node=self.owner.name, reason=message
            )
            if self._warn is not None:
                self._warn(message)
            fallback = plan_publication(
                self.build(False), self.store.list(self.owner.name, self.driver), self.owner
            )
            self._execute(fallback)
            return PublishResult(
                fallback.generation,
                len(fallback.creates) + len(fallback.updates),
                len(fallback.deletes),
                False,
                attempt,
                dropped,
            )
        return PublishResult(
            plan.generation,
            len(plan.creates) + len(plan.updates),
            len(plan.deletes),
            self.partitionable,
            attempt,
        )

    def _execute(self, plan: PublishPlan) -> list[str]:
        dropped: list[str] = []
        for obj in plan.updates:
            dropped += dropped_fields(obj, self.store.replace(obj))
        for obj in plan.creates:
            dropped += dropped_fields(obj, self.store.create(obj))
        for name, version in plan.deletes:
            self.store.delete(name, version)
        return dropped

    def withdraw(self) -> int:
        """Delete every slice of this node and driver (clean shutdown, when asked to)."""
        existing = self.store.list(self.owner.name, self.driver)
        for obj in existing:
            meta = obj["metadata"]
            self.store.delete(str(meta["name"]), str(meta.get("resourceVersion", "")))
        return len(existing)
