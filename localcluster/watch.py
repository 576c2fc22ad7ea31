"""Watch streams: the events one watch request should see, in resourceVersion order.

Kept apart from HTTP so the rules are in one place: start from a list (RV omitted or "0") or
from the history after a given RV (410 Gone as an ERROR event once that history is gone);
translate each stored event through the request's selectors the way upstream does (an object
that stops matching is DELETED for this watcher, one that starts matching is ADDED); send
BOOKMARKs when asked (and, for `sendInitialEvents`, the one that marks the end of the initial
list); stop at `timeoutSeconds`, at server shutdown or when the client left.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from localcluster.errors import ApiError, bad_request
from localcluster.resources import ResourceType
from localcluster.storage import Event, Predicate, Store

WatchEvent = dict[str, Any]
_POLL_S = 0.5
INITIAL_EVENTS_END = "k8s.io/initial-events-end"


@dataclass(frozen=True)
class WatchRequest:
    """What one watch asks for; `namespace` None means every namespace."""

    resource: ResourceType
    namespace: str | None
    match: Predicate
    resource_version: str | None = None
    timeout_s: float | None = None
    bookmarks: bool = False
    send_initial_events: bool = False


def _start_rv(text: str | None) -> int | None:
    if text in (None, "", "0"):
        return None
    assert text is not None
    try:
        return int(text)
    except ValueError:
        raise bad_request(f"invalid resourceVersion {text!r}") from None


def parse_start(request: WatchRequest) -> int | None:
    """Validate the start RV before any response is sent (a bad one is a plain 400)."""
    return _start_rv(request.resource_version)


def _visible(request: WatchRequest, obj: dict[str, Any] | None) -> bool:
    if obj is None:
        return False
    if request.namespace is not None:
        namespace = (obj.get("metadata") or {}).get("namespace", "")
        if namespace != request.namespace:
            return False
    return request.match(obj)


def translate(request: WatchRequest, event: Event) -> WatchEvent | None:
    """What this watcher sees of a stored event, or None when it sees nothing."""
    if event.resource != request.resource.key:
        return None
    now = _visible(request, event.obj)
    before = _visible(request, event.old)
    if event.type == "DELETED":
        return {"type": "DELETED", "object": event.obj} if (now or before) else None
    if now and before:
        return {"type": "MODIFIED", "object": event.obj}
    if now:
        return {"type": "ADDED", "object": event.obj}
    if before:
        return {"type": "DELETED", "object": event.obj}
    return None


def _bookmark(rt: ResourceType, rv: int) -> WatchEvent:
    return {
        "type": "BOOKMARK",
        "object": {
            "kind": rt.kind,
            "apiVersion": rt.api_version,
            "metadata": {"resourceVersion": str(rv)},
        },
    }


def _error(err: ApiError) -> WatchEvent:
    return {"type": "ERROR", "object": err.status()}


def stream(
    store: Store,
    request: WatchRequest,
    *,
    bookmark_interval_s: float,
    alive: Callable[[], bool],
) -> Iterator[WatchEvent]:
    """The events of one watch, ending when it should end."""
    start = parse_start(request)
    deadline = None if request.timeout_s is None else time.monotonic() + request.timeout_s
    if start is None or request.send_initial_events:
        items, after = store.list_objects(request.resource, request.namespace, request.match)
        for item in items:
            yield {"type": "ADDED", "object": item}
        if request.send_initial_events and request.bookmarks:
            # The "watch list" protocol: this bookmark tells the client its list is complete.
            end = _bookmark(request.resource, after)
            end["object"]["metadata"]["annotations"] = {INITIAL_EVENTS_END: "true"}
            yield end
    else:
        after = start
        try:
            store.check_watchable(after)
        except ApiError as err:
            yield _error(err)
            return
    next_bookmark = time.monotonic() + bookmark_interval_s
    while not store.closed and alive():
        now = time.monotonic()
        if deadline is not None and now >= deadline:
            return
        wait = _POLL_S
        if request.bookmarks:
            wait = min(wait, max(0.0, next_bookmark - now))
        if deadline is not None:
            wait = min(wait, deadline - now)
        try:
            events, after = store.events_after(after, wait)
        except ApiError as err:
            yield _error(err)
            return
        for event in events:
            seen = translate(request, event)
            if seen is not None:
                yield seen
        if request.bookmarks and time.monotonic() >= next_bookmark:
            yield _bookmark(request.resource, after)
            next_bookmark = time.monotonic() + bookmark_interval_s
