"""Each GpuQueue's `status`: what it holds, borrows and holds idle, how many pods wait, and
whether the controller accepted it (`Valid`, with the reason when not).

Written only when it changed, and at most once per `MIN_INTERVAL_S` per queue, so a burst of
admissions costs one write per queue per second, not one per pod.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from typing import Any, Final

import structlog
import urllib3
from kubernetes import client

from controller.informer import Obj
from controller.kube_calls import ControllerApi
from dra_driver.queues import Ledger
from dra_driver.queues.spec import format_gpu, format_memory

log = structlog.get_logger(__name__)

MIN_INTERVAL_S: Final = 1.0
VALID: Final = "Valid"


def queue_status(
    name: str,
    ledger: Ledger,
    pending: Mapping[str, int],
    problem: str | None,
    idle: Mapping[str, float] | None = None,
) -> dict[str, Any]:
    if problem is not None:
        # Nulls remove the figures of a time it was valid: a merge patch keeps what it omits.
        return {
            "used": None,
            "borrowed": None,
            "idle": None,
            "pending": None,
            "conditions": [_condition(False, "InvalidSpec", problem)],
        }
    used = ledger.used(name)
    borrowed = ledger.borrowed(name)
    return {
        "used": {"gpu": format_gpu(used.gpu), "memory": format_memory(used.memory)},
        "borrowed": {"gpu": format_gpu(borrowed.gpu), "memory": format_memory(borrowed.memory)},
        "idle": {"gpu": format_gpu((idle or {}).get(name, 0.0))},
        "pending": pending.get(name, 0),
        "conditions": [_condition(True, "Accepted", "the controller serves this queue")],
    }


def _condition(ok: bool, reason: str, message: str) -> Obj:
    status = "True" if ok else "False"
    return {"type": VALID, "status": status, "reason": reason, "message": message}


class QueueStatusWriter:
    def __init__(self, api: ControllerApi) -> None:
        self.api = api
        self._written: dict[str, tuple[str, dict[str, Any]]] = {}
        """Queue → (its uid, the status last written), to skip writes that change nothing."""
        self._last: dict[str, float] = {}
        self.due: float | None = None
        """When a change held back by the interval should be written (for the loop's timer)."""

    async def write(
        self,
        queues: Mapping[tuple[str, str], Obj],
        ledger: Ledger,
        pending: Mapping[str, int],
        idle: Mapping[str, float] | None = None,
    ) -> None:
        now = time.monotonic()
        self.due = None
        problems = ledger.tree.problems
        for (_, name), obj in sorted(queues.items()):
            uid = str(obj["metadata"].get("uid") or "")
            wanted = queue_status(name, ledger, pending, problems.get(name), idle)
            previous = self._written.get(name)
            if previous is not None and previous[0] == uid and previous[1] == wanted:
                continue
            last = self._last.get(name, 0.0)
            if now - last < MIN_INTERVAL_S:
                due = last + MIN_INTERVAL_S
                self.due = due if self.due is None else min(self.due, due)
                continue
            now_text = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            body = {
                **wanted,
                "conditions": [{**c, "lastTransitionTime": now_text} for c in wanted["conditions"]],
            }
            try:
                await asyncio.to_thread(self.api.patch_queue_status, name, body)
            except (client.ApiException, urllib3.exceptions.HTTPError, OSError) as err:
                log.info("cannot write a queue's status", queue=name, error=str(err))
                continue
            self._written[name] = (uid, wanted)
            self._last[name] = now
        for name in [n for n in self._written if ("", n) not in queues]:
            del self._written[name]
            self._last.pop(name, None)
