"""List-then-watch caches of one resource, fed to the controller's event loop.

Objects stay plain JSON dicts: the typed models of the `kubernetes` client drop fields they do not
know (ResourceClaim and ResourceSlice fields grow every release) and cost a lot to build, so lists
and watches are requested with `_preload_content=False` and parsed here. Each informer runs its
blocking HTTP in a thread of its own and hands events to the loop with `call_soon_threadsafe`.

The watch resumes from the last resourceVersion it saw (bookmarks included), so a dropped
connection costs no relist; only a `410 Gone` (the version fell out of the server's history) makes
it list again, and the relist is turned into the ADDED / MODIFIED / DELETED events that the missed
history would have delivered, so consumers never see a jump.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final

import structlog
from kubernetes import client
from kubernetes.watch.watch import iter_resp_lines

log = structlog.get_logger(__name__)

Obj = dict[str, Any]
Key = tuple[str, str]
"""(namespace, name); the namespace is "" for cluster-scoped objects."""

#: The server ends each watch after this long; the informer resumes from where it was.
WATCH_TIMEOUT_S: Final = 300
#: Between attempts after a failed list or watch (connection refused, 5xx).
RETRY_S: Final = 1.0
#: Between attempts to list an optional resource the server does not serve (CRD not installed).
ABSENT_RETRY_S: Final = 30.0


def key_of(obj: Mapping[str, Any]) -> Key:
    meta = obj.get("metadata") or {}
    return (str(meta.get("namespace") or ""), str(meta["name"]))


def resource_version(obj: Mapping[str, Any] | None) -> int:
    """The object's resourceVersion as a number (0 when absent).

    Kubernetes calls resourceVersions opaque; they are etcd revisions in practice, and the
    kube-scheduler's own assume cache compares them as integers to drop stale updates. The
    controller does the same, to merge fresh reads with the watch without ever going back in time.
    """
    if not obj:
        return 0
    raw = (obj.get("metadata") or {}).get("resourceVersion") or "0"
    try:
        return int(raw)
    except ValueError:
        return 0


@dataclass(frozen=True, slots=True)
class Event:
    kind: str
    """ADDED, MODIFIED or DELETED."""
    resource: str
    key: Key
    obj: Obj
    old: Obj | None


ListCall = Callable[..., Any]
"""A list (or watch) call of the official client with everything but the request options bound,
returning the raw HTTP response."""


class Informer:
    """Reports every change of one resource's objects on the server, in resourceVersion order."""

    def __init__(
        self,
        resource: str,
        list_call: ListCall,
        watch_call: ListCall,
        deliver: Callable[[Event], None],
        *,
        loop: asyncio.AbstractEventLoop,
        watch_timeout_s: int = WATCH_TIMEOUT_S,
        optional: bool = False,
    ) -> None:
        self.resource = resource
        self.optional = optional
        """A resource from a CRD that may not be installed: while the server answers 404 it
        counts as synced and empty, and is looked for again every ABSENT_RETRY_S."""
        self._absent_logged = False
        self._known: dict[Key, Obj] = {}
        """The thread's own copy, to turn a relist into events; the loop keeps its own view."""
        self.synced = asyncio.Event()
        """Set (on the loop) once the first list has been delivered."""
        self.last_resource_version = ""
        self.relists = 0
        self.watches = 0
        """Watch requests made: more than one means the watch was resumed."""
        self._list_call = list_call
        self._watch_call = watch_call
        self._watch_timeout_s = watch_timeout_s
        self._deliver = deliver
        self._loop = loop
        self._stopping = threading.Event()
        self._response: Any = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Start (or, after `stop` and `join`, restart) watching from where it left off."""
        self._stopping.clear()
        self._thread = threading.Thread(
            target=self._run, name=f"informer-{self.resource}", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        response = self._response
        if response is not None:
            try:
                response.shutdown()  # wakes the thread out of its blocking read
            except Exception as err:  # already closed: nothing to wake
                log.debug("closing a watch", resource=self.resource, error=str(err))

    def join(self, timeout: float | None = None) -> None:
        if self._thread is not None:
            self._thread.join(timeout)

    # --- the thread -------------------------------------------------------------------------

    def _run(self) -> None:
        while not self._stopping.is_set():
            try:
                if not self.last_resource_version:
                    self._relist()
                self._watch()
            except client.ApiException as err:
                if err.status == 410:
                    self._expire()
                    continue
                if err.status == 404 and self.optional:
                    self._absent()
                    continue
                self._pause("API error", err)
            except Exception as err:  # connection reset, server gone: try again
                self._pause("connection error", err)

    def _pause(self, what: str, err: BaseException) -> None:
        if self._stopping.is_set():
            return
        log.warning(f"watch {what}; retrying", resource=self.resource, error=str(err))
        self._stopping.wait(RETRY_S)

    def _absent(self) -> None:
        if not self._absent_logged:
            log.info(
                "resource not served (its CRD is not installed); treating it as empty",
                resource=self.resource,
            )
            self._absent_logged = True
        for key, old in list(self._known.items()):
            self._emit("DELETED", key, old, old)
        self.last_resource_version = ""
        self._loop.call_soon_threadsafe(self.synced.set)
        self._stopping.wait(ABSENT_RETRY_S)

    def _expire(self) -> None:
        log.info("watch history expired; listing again", resource=self.resource)
        self.last_resource_version = ""

    def _relist(self) -> None:
        response = self._list_call()
        body = json.loads(response.data)
        fresh = {key_of(o): o for o in body.get("items") or []}
        self.relists += 1
        for key, old in list(self._known.items()):
            if key not in fresh:
                self._emit("DELETED", key, old, old)
        for key, obj in fresh.items():
            known = self._known.get(key)
            if known is None:
                self._emit("ADDED", key, obj, None)
            elif resource_version(known) != resource_version(obj):
                self._emit("MODIFIED", key, obj, known)
        self.last_resource_version = str((body.get("metadata") or {}).get("resourceVersion", ""))
        self._loop.call_soon_threadsafe(self.synced.set)

    def _watch(self) -> None:
        self.watches += 1
        response = self._watch_call(
            resource_version=self.last_resource_version,
            allow_watch_bookmarks=True,
            timeout_seconds=self._watch_timeout_s,
        )
        self._response = response
        try:
            for line in self._lines(response):
                if self._stopping.is_set():
                    return
                self._handle(json.loads(line))
        finally:
            self._response = None
            response.release_conn()

    def _lines(self, response: Any) -> Iterator[str]:
        yield from iter_resp_lines(response)  # type: ignore[no-untyped-call]

    def _handle(self, event: Mapping[str, Any]) -> None:
        kind = event.get("type")
        obj = event.get("object") or {}
        if kind == "ERROR":
            if obj.get("code") == 410:
                raise client.ApiException(status=410, reason="Gone")
            raise client.ApiException(status=int(obj.get("code") or 500), reason=obj.get("message"))
        rv = str((obj.get("metadata") or {}).get("resourceVersion") or "")
        if kind == "BOOKMARK":
            self.last_resource_version = rv or self.last_resource_version
            return
        key = key_of(obj)
        old = self._known.get(key)
        if kind == "DELETED":
            self._emit("DELETED", key, obj, old)
        elif kind in ("ADDED", "MODIFIED"):
            self._emit("MODIFIED" if old is not None else "ADDED", key, obj, old)
        if rv:
            self.last_resource_version = rv

    def _emit(self, kind: str, key: Key, obj: Obj, old: Obj | None) -> None:
        if kind == "DELETED":
            self._known.pop(key, None)
        else:
            self._known[key] = obj
        self._loop.call_soon_threadsafe(self._deliver, Event(kind, self.resource, key, obj, old))
