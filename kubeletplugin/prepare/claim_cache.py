"""An optional copy of every ResourceClaim, kept current by a watch, so prepare can skip its GET.

Reading the claim is the largest single cost of a prepare call after gRPC itself. With the cache
on (`--claim-cache`), a call whose claim is in the copy with the UID kubelet sent, allocated and
reserved, is answered from the copy; anything else (not yet seen, another UID, not allocated or
reserved yet, the watch not synced) falls back to the GET, so a claim is never refused because
the copy lags.

Why it is off by default: the API server cannot filter claims by the node they are allocated on,
so every node would list and watch every claim of the cluster: memory for all of them on each
node, and every claim change sent to every node. And a copy can be stale where a GET never is: a
claim deallocated and allocated again under the same UID while this node's watch lags by those
updates would be prepared with its old devices. The cache suits small clusters that start many
pods per node; it needs `list` and `watch` on `resourceclaims` in every namespace besides the
`get` the plugin always needs.

The watch runs in its own thread (the client's streaming reads block); the table is replaced
whole on each list and changed one key at a time for each event, and lookups from the event loop
only read it.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from typing import Any

import structlog
from kubernetes import client

from kubeletplugin.prepare.claims import GROUP, PLURAL, VERSION

log = structlog.get_logger(__name__)

Key = tuple[str, str]


class ClaimCache:
    """Every ResourceClaim by namespace and name, as the last list and watch events left it."""

    def __init__(
        self,
        api: client.ApiClient,
        *,
        watch_timeout_s: int = 300,
        retry_s: float = 1.0,
        on_lookup: Callable[[bool], None] | None = None,
    ) -> None:
        self._objects = client.CustomObjectsApi(api)
        self._watch_timeout_s = watch_timeout_s
        self._retry_s = retry_s
        self._on_lookup = on_lookup
        self._claims: dict[Key, dict[str, Any]] = {}
        self._synced = threading.Event()
        self._stopping = threading.Event()
        self._response: Any = None
        self._thread: threading.Thread | None = None
        # How many full lists filled the table: one at the start, one per lost watch.
        self.lists = 0

    # ---- reading ---------------------------------------------------------------------------

    @property
    def synced(self) -> bool:
        """True once a list has filled the table and while the watch after it runs."""
        return self._synced.is_set()

    def wait_synced(self, timeout: float) -> bool:
        return self._synced.wait(timeout)

    def lookup(self, namespace: str, name: str, uid: str) -> dict[str, Any] | None:
        """The claim if the copy can stand in for a GET: synced, same UID, allocated and
        reserved (kubelet prepares only such claims); otherwise None, and the caller reads the
        API server. The dict is shared: callers must not change it."""
        claim = self._claims.get((namespace, name)) if self._synced.is_set() else None
        usable = claim is not None and _usable(claim, uid)
        if self._on_lookup is not None:
            self._on_lookup(usable)
        return claim if usable else None

    def __len__(self) -> int:
        return len(self._claims)

    # ---- running ---------------------------------------------------------------------------

    def start(self) -> None:
        if self._thread is not None:
            raise RuntimeError("claim cache already started")
        self._thread = threading.Thread(target=self._run, name="claim-cache", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stopping.set()
        self._synced.clear()
        response, self._response = self._response, None
        if response is not None:
            _interrupt(response)
        if self._thread is not None:
            self._thread.join(timeout)

    def _run(self) -> None:
        while not self._stopping.is_set():
            try:
                version: str | None = self._list()
                while not self._stopping.is_set() and version is not None:
                    version = self._watch(version)
                continue  # the history after our version is gone: list again at once
            except Exception as err:  # the API server went away, a bad answer: list again
                if self._stopping.is_set():
                    break
                log.warning("claim cache: list or watch failed, listing again", error=str(err))
            # Until a list succeeds the copy may miss changes: prepare reads the API server.
            self._synced.clear()
            self._stopping.wait(self._retry_s)

    def _list(self) -> str:
        response: Any = self._objects.list_cluster_custom_object(
            GROUP, VERSION, PLURAL, _preload_content=False
        )
        listed = json.loads(response.data)
        claims: dict[Key, dict[str, Any]] = {}
        for item in listed.get("items") or []:
            key = _key(item)
            if key is not None:
                claims[key] = item
        self._claims = claims
        self.lists += 1
        self._synced.set()
        return str((listed.get("metadata") or {}).get("resourceVersion", ""))

    def _watch(self, version: str) -> str | None:
        """Follow events from `version`; the version to go on from, or None to list again."""
        response: Any = self._objects.list_cluster_custom_object(
            GROUP,
            VERSION,
            PLURAL,
            watch=True,
            allow_watch_bookmarks=True,
            resource_version=version,
            timeout_seconds=self._watch_timeout_s,
            _preload_content=False,
        )
        self._response = response
        try:
            if self._stopping.is_set():
                return None
            for line in _lines(response):
                event = json.loads(line)
                kind, obj = event.get("type"), event.get("object") or {}
                if kind == "ERROR":
                    # 410 Gone: the history after `version` is gone; anything else is a failure.
                    if obj.get("code") != 410:
                        log.warning("claim cache: watch error", status=obj)
                    return None
                version = str((obj.get("metadata") or {}).get("resourceVersion") or version)
                key = _key(obj)
                if key is None:
                    continue
                if kind == "DELETED":
                    self._claims.pop(key, None)
                elif kind in ("ADDED", "MODIFIED"):
                    self._claims[key] = obj
        finally:
            self._response = None
            response.close()
            response.release_conn()
        return version


def _lines(raw: Any) -> Iterator[bytes]:
    """The non-empty lines of a streaming response (a watch sends one JSON event per line)."""
    pending = b""
    for chunk in raw.stream(amt=None, decode_content=False):
        pending += chunk
        *complete, pending = pending.split(b"\n")
        yield from (line for line in complete if line.strip())
    if pending.strip():
        yield pending


def _key(obj: dict[str, Any]) -> Key | None:
    meta = obj.get("metadata") or {}
    namespace, name = meta.get("namespace"), meta.get("name")
    if not isinstance(namespace, str) or not isinstance(name, str):
        return None
    return namespace, name


def _usable(claim: dict[str, Any], uid: str) -> bool:
    if (claim.get("metadata") or {}).get("uid") != uid:
        return False
    status = claim.get("status") or {}
    return bool(status.get("allocation")) and bool(status.get("reservedFor"))


def _interrupt(response: Any) -> None:
    """Unblock a thread reading a streaming response (urllib3 2.3+ can shut the socket down;
    closing is the fallback for older versions)."""
    raw = response
    shutdown = getattr(raw, "shutdown", None)
    try:
        if shutdown is not None:
            shutdown()
        else:
            raw.close()
    except OSError:
        pass
