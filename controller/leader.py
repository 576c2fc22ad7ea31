"""Leader election over a coordination.k8s.io/v1 Lease, for an asyncio daemon.

Only one replica may allocate claims at a time, or two of them could hand the same device to two
claims. The replicas therefore compete for one Lease, with the rules client-go's elector uses, so
that our controller behaves like every other Kubernetes controller an operator knows:

* A replica takes the Lease when it does not exist, when it has no holder, when the replica holds
  it already, or when its record has not changed for `leaseDurationSeconds` as measured on this
  process's monotonic clock since this process last saw it change. Time stamps written by other
  machines are never compared with ours: clocks drift, a monotonic interval does not.
* Every write carries the resourceVersion it read, so of two replicas that read the same record
  only one write succeeds; the other gets 409 Conflict and tries again a retry period later.
* The leader renews every retry period. Its leadership is valid for `renew_deadline` from the
  moment it sent its last successful write; since a standby waits `lease_duration` (longer) from
  a moment after that write landed, the old leader has stopped before a new one can start.
* On a clean stop the leader stops leading first, then clears the holder, so a standby takes over
  at its next retry rather than a whole lease duration later.

`is_leader()` is the fence: the daemon calls it immediately before every write, and it answers
from the clock as well as from the elector's state, so it turns false at the deadline even when
the renewal loop is stuck in a slow API call.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import enum
import math
import random
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import structlog
import urllib3
from kubernetes import client

from controller.config import LeaderElection
from controller.metrics import ACQUIRED, LOST, RELEASED, ControllerMetrics

log = structlog.get_logger(__name__)

GROUP = "coordination.k8s.io"
VERSION = "v1"
PLURAL = "leases"

RETRY_JITTER = 0.2
"""Standbys wait up to this fraction longer than the retry period, so they do not move in step."""


class _Attempt(enum.Enum):
    WON = "won"
    """The Lease is ours, written with a fresh renewTime."""
    HELD = "held"
    """Another replica holds the Lease and its record has not expired."""
    FAILED = "failed"
    """The API call failed or lost a race; nothing is known to have changed."""


def micro_time(moment: datetime | None = None) -> str:
    """A MicroTime as the API server writes it: RFC 3339, UTC, exactly six fractional digits."""
    return (moment or datetime.now(UTC)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaderElector:
    """Competes for the Lease while `run` runs; see the module docstring for the rules.

    The daemon's side of it::

        elector = LeaderElector(config.leader, api, metrics=metrics)
        runner = asyncio.create_task(elector.run(stop))
        term = await elector.wait_leading()
        ...  # before each write: if not elector.is_leader(term): abandon the work
        await elector.wait_not_leading()  # lost: stop every task started for `term`

    A term is a number that grows with every acquisition, so work started under one term can
    never write under a later one. With `settings.enabled` false the elector always leads and
    touches no Lease. Set `stop` once the work begun as leader has ended: `run` then drops the
    lead and releases the Lease, so a standby starts at once. Cancelling `run` drops the lead
    without releasing (the Lease expires, as a crashed leader's would).
    """

    def __init__(
        self,
        settings: LeaderElection,
        api: client.ApiClient | None,
        *,
        metrics: ControllerMetrics | None = None,
    ) -> None:
        if settings.enabled:
            settings.validate()
            if api is None:
                raise ValueError("leader election needs an API client")
            if not settings.identity:
                raise ValueError("leader election needs a non-empty identity")
        self._settings = settings
        self._objects = client.CustomObjectsApi(api) if api is not None else None
        self._metrics = metrics if metrics is not None else ControllerMetrics()
        self._duration_s = max(1, math.ceil(settings.lease_duration_s))
        self._leading = False
        self._term = 0
        self._renewed_at = -math.inf
        self._lease: dict[str, Any] | None = None
        self._observed_spec: dict[str, Any] | None = None
        self._observed_at = -math.inf
        self._became_leader = asyncio.Event()
        self._became_standby = asyncio.Event()
        self._became_standby.set()

    @property
    def identity(self) -> str:
        return self._settings.identity

    @property
    def lease(self) -> str:
        return f"{self._settings.lease_namespace}/{self._settings.lease_name}"

    @property
    def term(self) -> int:
        """The current (or last) term; 0 before the first acquisition."""
        return self._term

    def is_leader(self, term: int | None = None) -> bool:
        """True while this replica may act as leader (for `term`, when given).

        Cheap and thread-safe to call: the daemon calls it right before every write.
        """
        if not self._settings.enabled:
            return True
        if not self._leading or (term is not None and term != self._term):
            return False
        return time.monotonic() - self._renewed_at < self._settings.renew_deadline_s

    async def wait_leading(self) -> int:
        """Return the term once this replica leads (at once when it does already)."""
        if not self._settings.enabled:
            return self._term
        await self._became_leader.wait()
        return self._term

    async def wait_not_leading(self) -> None:
        """Return once this replica does not lead (at once when it does not)."""
        await self._became_standby.wait()

    async def run(self, stop: asyncio.Event) -> None:
        """Compete for, hold and renew the Lease until `stop` is set; then release it."""
        if not self._settings.enabled:
            self._start_leading(reason="leader election disabled")
            try:
                await stop.wait()
            finally:
                self._stop_leading(RELEASED, reason="stopped")
            return
        clean = False
        try:
            while not stop.is_set():
                if await self._acquire(stop):
                    await self._keep_renewing(stop)
            clean = True
        finally:
            if self._leading:
                if clean:
                    self._stop_leading(RELEASED, reason="stopped")
                    await self._release()
                else:
                    self._stop_leading(LOST, reason="cancelled")

    async def _acquire(self, stop: asyncio.Event) -> bool:
        """Try until this replica holds the Lease (True) or `stop` is set (False)."""
        while not stop.is_set():
            try:
                outcome = await asyncio.wait_for(self._attempt(), self._settings.renew_deadline_s)
            except TimeoutError:
                outcome = _Attempt.FAILED
            if outcome is _Attempt.WON:
                self._start_leading(reason="acquired the Lease")
                return True
            jitter = 1.0 + random.uniform(0.0, RETRY_JITTER)
            await _wait(stop, self._settings.retry_period_s * jitter)
        return False

    async def _keep_renewing(self, stop: asyncio.Event) -> None:
        """Renew every retry period; return when `stop` is set or leadership is lost."""
        settings = self._settings
        while True:
            await _wait(stop, settings.retry_period_s)
            if stop.is_set():
                return
            while True:
                remaining = self._renewed_at + settings.renew_deadline_s - time.monotonic()
                if remaining <= 0:
                    self._stop_leading(LOST, reason="could not renew before the deadline")
                    return
                try:
                    outcome = await asyncio.wait_for(self._attempt(), remaining)
                except TimeoutError:
                    outcome = _Attempt.FAILED
                if outcome is _Attempt.WON:
                    break
                if outcome is _Attempt.HELD:
                    holder = (self._observed_spec or {}).get("holderIdentity")
                    self._stop_leading(LOST, reason=f"the Lease is held by {holder}")
                    return
                remaining = self._renewed_at + settings.renew_deadline_s - time.monotonic()
                await _wait(stop, max(0.0, min(settings.retry_period_s, remaining)))
                if stop.is_set():
                    return

    async def _attempt(self) -> _Attempt:
        """Read the Lease once and write it when the rules allow this replica to hold it."""
        started = time.monotonic()
        settings = self._settings
        try:
            lease = await self._call(
                self._api().get_namespaced_custom_object,
                GROUP,
                VERSION,
                settings.lease_namespace,
                PLURAL,
                settings.lease_name,
            )
        except client.ApiException as err:
            if err.status == 404:
                return await self._create(started)
            return self._failed("read", err)
        except (urllib3.exceptions.HTTPError, OSError) as err:
            return self._failed("read", err)

        spec: dict[str, Any] = dict(lease.get("spec") or {})
        now = time.monotonic()
        if spec != self._observed_spec:
            self._observed_spec = copy.deepcopy(spec)
            self._observed_at = now
        holder = spec.get("holderIdentity") or ""
        if holder and holder != self.identity:
            duration = _positive_int(spec.get("leaseDurationSeconds")) or self._duration_s
            if now < self._observed_at + duration:
                return _Attempt.HELD

        stamp = micro_time()
        transitions = _positive_int(spec.get("leaseTransitions")) or 0
        if holder == self.identity:
            acquired = spec.get("acquireTime") or stamp
        else:
            acquired = stamp
            transitions += 1
        spec.update(
            holderIdentity=self.identity,
            leaseDurationSeconds=self._duration_s,
            acquireTime=acquired,
            renewTime=stamp,
            leaseTransitions=transitions,
        )
        body = dict(lease)
        body["spec"] = spec
        try:
            written = await self._call(
                self._api().replace_namespaced_custom_object,
                GROUP,
                VERSION,
                settings.lease_namespace,
                PLURAL,
                settings.lease_name,
                body,
            )
        except client.ApiException as err:
            return self._failed("update", err)
        except (urllib3.exceptions.HTTPError, OSError) as err:
            return self._failed("update", err)
        return self._won(written, started)

    async def _create(self, started: float) -> _Attempt:
        settings = self._settings
        stamp = micro_time()
        body = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "Lease",
            "metadata": {"name": settings.lease_name, "namespace": settings.lease_namespace},
            "spec": {
                "holderIdentity": self.identity,
                "leaseDurationSeconds": self._duration_s,
                "acquireTime": stamp,
                "renewTime": stamp,
                "leaseTransitions": 0,
            },
        }
        try:
            created = await self._call(
                self._api().create_namespaced_custom_object,
                GROUP,
                VERSION,
                settings.lease_namespace,
                PLURAL,
                body,
            )
        except client.ApiException as err:
            return self._failed("create", err)
        except (urllib3.exceptions.HTTPError, OSError) as err:
            return self._failed("create", err)
        return self._won(created, started)

    def _won(self, lease: dict[str, Any], started: float) -> _Attempt:
        self._lease = lease
        self._observed_spec = copy.deepcopy(dict(lease.get("spec") or {}))
        self._observed_at = time.monotonic()
        self._renewed_at = started
        return _Attempt.WON

    def _failed(self, action: str, err: Exception) -> _Attempt:
        if isinstance(err, client.ApiException) and err.status == 409:
            # Someone else wrote the Lease between our read and our write.
            log.debug("lost a race for the Lease", action=action, lease=self.lease)
        else:
            log.warning(
                "Lease request failed",
                action=action,
                lease=self.lease,
                identity=self.identity,
                error=_describe(err),
            )
        return _Attempt.FAILED

    async def _release(self) -> None:
        """Clear the holder so a standby need not wait out the lease duration."""
        lease = self._lease
        if lease is None or (lease.get("spec") or {}).get("holderIdentity") != self.identity:
            return
        body = copy.deepcopy(lease)
        spec = body.setdefault("spec", {})
        spec.pop("holderIdentity", None)
        spec["leaseDurationSeconds"] = 1
        spec["renewTime"] = micro_time()
        settings = self._settings
        try:
            await asyncio.wait_for(
                self._call(
                    self._api().replace_namespaced_custom_object,
                    GROUP,
                    VERSION,
                    settings.lease_namespace,
                    PLURAL,
                    settings.lease_name,
                    body,
                ),
                settings.renew_deadline_s,
            )
        except (client.ApiException, urllib3.exceptions.HTTPError, OSError, TimeoutError) as err:
            # Not fatal: the Lease then expires after its duration, as a crashed leader's does.
            log.warning("could not release the Lease", lease=self.lease, error=_describe(err))
            return
        self._lease = None
        log.info("released the Lease", identity=self.identity, lease=self.lease)

    def _start_leading(self, *, reason: str) -> None:
        self._leading = True
        self._term += 1
        self._became_standby.clear()
        self._became_leader.set()
        self._metrics.record_leadership(ACQUIRED)
        log.info(
            "acquired leadership",
            identity=self.identity,
            lease=self.lease,
            term=self._term,
            reason=reason,
        )

    def _stop_leading(self, event: str, *, reason: str) -> None:
        if not self._leading:
            return
        self._leading = False
        self._became_leader.clear()
        self._became_standby.set()
        self._metrics.record_leadership(event)
        log_at = log.info if event == RELEASED else log.warning
        log_at(
            "lost leadership" if event == LOST else "stopped leading",
            identity=self.identity,
            lease=self.lease,
            term=self._term,
            reason=reason,
        )

    def _api(self) -> client.CustomObjectsApi:
        if self._objects is None:
            raise RuntimeError("leader election is disabled: there is no Lease to talk to")
        return self._objects

    async def _call(self, method: Callable[..., Any], *args: Any) -> dict[str, Any]:
        """Run one blocking client call in a thread, bounded so a hung server cannot stall us."""
        result = await asyncio.to_thread(
            method, *args, _request_timeout=self._settings.renew_deadline_s
        )
        return dict(result)


async def _wait(stop: asyncio.Event, seconds: float) -> None:
    """Sleep `seconds`, or less when `stop` is set meanwhile."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), seconds)


def _positive_int(value: object) -> int | None:
    return value if isinstance(value, int) and value > 0 else None


def _describe(err: BaseException) -> str:
    if isinstance(err, client.ApiException):
        return f"{err.status} {err.reason}"
    return str(err) or type(err).__name__


__all__ = ["GROUP", "PLURAL", "VERSION", "LeaderElector", "micro_time"]
