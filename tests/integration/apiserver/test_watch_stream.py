"""Watch streams driven straight from a `Store`, without HTTP: where a watch starts, what each
stored event becomes for a watcher's namespace and selector, 410 Gone at the start and while
watching, bookmarks and their pace, and the three ways a watch ends (its timeout, the client
gone, the store closed).

A stream is a generator: the test writes, then takes the next event, so what a watch has seen
is exact. Every stream has a timeout (and a client that gives up after a while), so a watch
that never ends fails the test instead of hanging it."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Generator, Mapping
from typing import Any, cast

import pytest

from localcluster import watch
from localcluster.errors import ApiError
from localcluster.resources import ResourceType
from localcluster.storage import Event, Store
from localcluster.watch import WatchRequest, parse_start, stream, translate

# The embedded server's watch streams, driven from its `Store`: no HTTP to compare.
pytestmark = pytest.mark.embedded_only

CONFIGMAPS = ResourceType("", "v1", "configmaps", "ConfigMap", True)
SECRETS = ResourceType("", "v1", "secrets", "Secret", True)
NODES = ResourceType("", "v1", "nodes", "Node", False)


def _everything(_: Mapping[str, Any]) -> bool:
    return True


def _chosen(obj: Mapping[str, Any]) -> bool:
    return bool((obj["metadata"].get("labels") or {}).get("role") == "chosen")


def _cm(name: str, **labels: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": labels}, "data": {"v": "0"}}


def _seen(events: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(e["type"], e["object"]["metadata"].get("name", "")) for e in events]


def _patience(seconds: float = 10) -> Callable[[], bool]:
    """A client that fails the test once a stream outlives `seconds`: every stream here ends
    well before (its timeout, an error, the client or the test closing it)."""
    until = time.monotonic() + seconds

    def alive() -> bool:
        assert time.monotonic() < until, f"the watch went on for more than {seconds} s"
        return True

    return alive


def _stream(
    store: Store,
    request: WatchRequest,
    interval: float = 60.0,
    alive: Callable[[], bool] | None = None,
) -> Generator[dict[str, Any], None, None]:
    # Closing the store ends any wait, even one a broken stream would never end on its own.
    safety = threading.Timer(8, store.close)
    safety.daemon = True
    safety.start()
    events = stream(store, request, bookmark_interval_s=interval, alive=alive or _patience())
    return cast(Generator[dict[str, Any], None, None], events)


@pytest.fixture
def store() -> Store:
    return Store([CONFIGMAPS, SECRETS, NODES])


# First, as every other test's stream relies on it to end.
def test_a_watch_ends_at_its_timeout(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(watch, "_POLL_S", 30.0)  # the timeout alone must end the wait
    request = WatchRequest(CONFIGMAPS, "ns", _everything, "0", timeout_s=0.3)
    began = time.monotonic()
    assert list(_stream(store, request, alive=_patience(10))) == []
    elapsed = time.monotonic() - began
    assert 0.3 <= elapsed < 5


# ---- where a watch starts --------------------------------------------------------------------


@pytest.mark.parametrize("rv", [None, "", "0"])
def test_without_a_version_a_watch_lists_then_follows(store: Store, rv: str | None) -> None:
    store.create(CONFIGMAPS, "ns", _cm("b"))
    store.create(CONFIGMAPS, "ns", _cm("a"))
    store.create(CONFIGMAPS, "other", _cm("elsewhere"))
    store.create(SECRETS, "ns", _cm("secret"))
    request = WatchRequest(CONFIGMAPS, "ns", _everything, rv, timeout_s=1.0)
    events = _stream(store, request, interval=0.01)
    assert _seen([next(events), next(events)]) == [("ADDED", "a"), ("ADDED", "b")]
    store.patch(CONFIGMAPS, "ns", "a", "application/merge-patch+json", {"data": {"v": "1"}})
    store.create(CONFIGMAPS, "other", _cm("also-elsewhere"))
    store.create(SECRETS, "ns", _cm("another-secret"))
    store.create(CONFIGMAPS, "ns", _cm("c"))
    store.delete(CONFIGMAPS, "ns", "b")
    rest = list(events)  # to the end of the watch: no bookmarks were asked for
    assert _seen(rest) == [("MODIFIED", "a"), ("ADDED", "c"), ("DELETED", "b")]
    assert [e["object"]["metadata"]["resourceVersion"] for e in rest] == ["5", "8", "9"]


def test_a_watch_of_every_namespace_lists_them_all(store: Store) -> None:
    store.create(CONFIGMAPS, "b", _cm("x"))
    store.create(CONFIGMAPS, "a", _cm("y"))
    events = _stream(store, WatchRequest(CONFIGMAPS, None, _everything, timeout_s=0.2))
    seen = [(e["type"], e["object"]["metadata"]["namespace"]) for e in events]
    assert seen == [("ADDED", "a"), ("ADDED", "b")]


def test_from_a_version_a_watch_replays_what_came_after(store: Store) -> None:
    store.create(CONFIGMAPS, "ns", _cm("before"))
    start = str(store.resource_version)
    store.create(CONFIGMAPS, "ns", _cm("a"))
    store.create(CONFIGMAPS, "other", _cm("elsewhere"))
    store.create(SECRETS, "ns", _cm("secret"))
    store.delete(CONFIGMAPS, "ns", "a")
    request = WatchRequest(CONFIGMAPS, "ns", _everything, start, timeout_s=0.5)
    assert _seen(list(_stream(store, request))) == [("ADDED", "a"), ("DELETED", "a")]


def test_start_versions_that_are_not_numbers_are_bad_requests(store: Store) -> None:
    def request(rv: str | None) -> WatchRequest:
        return WatchRequest(CONFIGMAPS, "ns", _everything, rv, timeout_s=0.1)

    assert [parse_start(request(rv)) for rv in (None, "", "0", "12")] == [None, None, None, 12]
    with pytest.raises(ApiError) as caught:
        parse_start(request("12a"))
    assert caught.value.status()["code"] == 400
    assert caught.value.message == "invalid resourceVersion '12a'"
    with pytest.raises(ApiError):
        next(_stream(store, request("abc")))


# ---- what a watcher sees of each event -------------------------------------------------------


def _event(kind: str, new: dict[str, Any] | None, old: dict[str, Any] | None) -> Event:
    obj = new if new is not None else old
    assert obj is not None
    return Event(7, "configmaps", kind, obj, old)


def _obj(namespace: str, *, chosen: bool) -> dict[str, Any]:
    labels = {"role": "chosen" if chosen else "other"}
    return {"metadata": {"name": "x", "namespace": namespace, "labels": labels}}


YES = _obj("ns", chosen=True)
NO = _obj("ns", chosen=False)


@pytest.mark.parametrize(
    ("kind", "new", "old", "expected"),
    [
        ("ADDED", YES, None, "ADDED"),
        ("ADDED", NO, None, None),
        ("MODIFIED", YES, YES, "MODIFIED"),
        ("MODIFIED", YES, NO, "ADDED"),
        ("MODIFIED", NO, YES, "DELETED"),
        ("MODIFIED", NO, NO, None),
        ("DELETED", YES, YES, "DELETED"),
        ("DELETED", NO, YES, "DELETED"),
        ("DELETED", YES, NO, "DELETED"),
        ("DELETED", NO, NO, None),
        ("DELETED", YES, None, "DELETED"),
        ("ADDED", _obj("other", chosen=True), None, None),
        ("MODIFIED", _obj("other", chosen=True), _obj("other", chosen=True), None),
    ],
)
def test_each_event_through_a_selector(
    kind: str, new: dict[str, Any], old: dict[str, Any] | None, expected: str | None
) -> None:
    request = WatchRequest(CONFIGMAPS, "ns", _chosen)
    seen = translate(request, _event(kind, new, old))
    assert seen == (None if expected is None else {"type": expected, "object": new})


def test_events_of_other_resources_and_namespaces(store: Store) -> None:
    everywhere = WatchRequest(CONFIGMAPS, None, _everything)
    event = _event("ADDED", _obj("other", chosen=False), None)
    assert translate(everywhere, event) == {"type": "ADDED", "object": event.obj}
    secret = Event(7, "secrets", "ADDED", YES, None)
    assert translate(everywhere, secret) is None
    no_metadata = Event(7, "configmaps", "ADDED", {"data": {}}, None)
    assert translate(WatchRequest(CONFIGMAPS, "ns", _everything), no_metadata) is None


def test_an_object_leaving_the_selection_as_it_is_deleted(store: Store) -> None:
    store.create(CONFIGMAPS, "ns", {"metadata": {"name": "x", "labels": {"role": "chosen"}}})
    start = str(store.resource_version)
    store.patch(
        CONFIGMAPS, "ns", "x", "application/merge-patch+json", {"metadata": {"finalizers": ["f"]}}
    )
    store.delete(CONFIGMAPS, "ns", "x")
    # The last write takes the finalizer and the label away together: the object goes.
    store.patch(
        CONFIGMAPS,
        "ns",
        "x",
        "application/merge-patch+json",
        {"metadata": {"finalizers": None, "labels": None}},
    )
    request = WatchRequest(CONFIGMAPS, "ns", _chosen, start, timeout_s=0.5)
    events = list(_stream(store, request))
    assert [e["type"] for e in events] == ["MODIFIED", "MODIFIED", "DELETED"]
    assert "labels" not in events[-1]["object"]["metadata"]


# ---- 410 Gone --------------------------------------------------------------------------------


def _expired(message: str) -> dict[str, Any]:
    return {
        "type": "ERROR",
        "object": {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": message,
            "code": 410,
            "reason": "Expired",
        },
    }


def test_a_start_older_than_the_history_is_gone() -> None:
    store = Store([CONFIGMAPS], history=2)
    for name in ("a", "b", "c", "d"):
        store.create(CONFIGMAPS, "ns", _cm(name))
    old = WatchRequest(CONFIGMAPS, "ns", _everything, "1", timeout_s=5)
    assert list(_stream(store, old)) == [_expired("too old resource version: 1 (2)")]
    held = WatchRequest(CONFIGMAPS, "ns", _everything, "2", timeout_s=0.3)
    assert _seen(list(_stream(store, held))) == [("ADDED", "c"), ("ADDED", "d")]


def test_a_watch_that_falls_behind_the_history_is_gone() -> None:
    store = Store([CONFIGMAPS], history=3)
    store.create(CONFIGMAPS, "ns", _cm("a"))
    events = _stream(store, WatchRequest(CONFIGMAPS, "ns", _everything, timeout_s=5))
    assert _seen([next(events)]) == [("ADDED", "a")]
    for name in ("b", "c", "d", "e", "f"):  # the watcher is not reading: 2 and 3 are lost
        store.create(CONFIGMAPS, "ns", _cm(name))
    assert next(events) == _expired("too old resource version: 1 (3)")
    assert list(events) == []


# ---- how a watch ends ------------------------------------------------------------------------


def test_a_watch_ends_when_its_client_is_gone(store: Store) -> None:
    store.create(CONFIGMAPS, "ns", _cm("a"))
    looks = iter([True, False])
    events = _stream(
        store, WatchRequest(CONFIGMAPS, "ns", _everything, timeout_s=5), alive=lambda: next(looks)
    )
    assert _seen([next(events)]) == [("ADDED", "a")]
    store.create(CONFIGMAPS, "ns", _cm("b"))
    assert _seen([next(events)]) == [("ADDED", "b")]  # the client was there for this one
    store.create(CONFIGMAPS, "ns", _cm("c"))
    assert list(events) == []  # and then gone


def test_a_watch_without_a_timeout_looks_for_its_client_every_half_second(store: Store) -> None:
    looks: list[float] = []
    until = time.monotonic() + 2.4

    def alive() -> bool:
        looks.append(time.monotonic())
        return looks[-1] < until

    began = time.monotonic()
    assert list(_stream(store, WatchRequest(CONFIGMAPS, "ns", _everything), alive=alive)) == []
    assert time.monotonic() - began < 5
    assert len(looks) >= 4  # at 0, 0.5, 1, 1.5, 2 and 2.5 s


def test_a_watch_without_a_client_sends_only_its_list(store: Store) -> None:
    store.create(CONFIGMAPS, "ns", _cm("a"))
    events = _stream(
        store, WatchRequest(CONFIGMAPS, "ns", _everything, timeout_s=5), alive=lambda: False
    )
    assert _seen([next(events)]) == [("ADDED", "a")]
    store.create(CONFIGMAPS, "ns", _cm("b"))
    assert list(events) == []


def test_closing_the_store_ends_a_waiting_watch(store: Store) -> None:
    store.create(CONFIGMAPS, "ns", _cm("a"))
    events = _stream(store, WatchRequest(CONFIGMAPS, "ns", _everything, "1", timeout_s=30))
    closer = threading.Timer(0.1, store.close)
    closer.start()
    began = time.monotonic()
    assert list(events) == []
    closer.join()
    assert time.monotonic() - began < 10


# ---- bookmarks -------------------------------------------------------------------------------


def _bookmark(rv: int, **metadata: Any) -> dict[str, Any]:
    return {
        "type": "BOOKMARK",
        "object": {
            "kind": "ConfigMap",
            "apiVersion": "v1",
            "metadata": {"resourceVersion": str(rv), **metadata},
        },
    }


def test_no_bookmarks_unless_asked_for(store: Store) -> None:
    store.create(CONFIGMAPS, "ns", _cm("a"))
    plain = WatchRequest(CONFIGMAPS, "ns", _everything, "1", timeout_s=0.3)
    assert list(_stream(store, plain, interval=0.0)) == []
    listed = WatchRequest(CONFIGMAPS, "ns", _everything, timeout_s=0.3, send_initial_events=True)
    assert _seen(list(_stream(store, listed, interval=0.0))) == [("ADDED", "a")]


def test_bookmarks_come_at_their_pace_with_the_version_seen(store: Store) -> None:
    store.create(CONFIGMAPS, "ns", _cm("a"))
    store.create(CONFIGMAPS, "other", _cm("unseen"))
    request = WatchRequest(CONFIGMAPS, "ns", _everything, "1", timeout_s=1.5, bookmarks=True)
    events = list(_stream(store, request, interval=0.1))
    assert 5 <= len(events) <= 20  # one every 0.1 s at most, and not much later than that
    assert all(e == _bookmark(2) for e in events)


def test_the_first_bookmark_waits_for_its_interval(store: Store) -> None:
    request = WatchRequest(CONFIGMAPS, "ns", _everything, "0", timeout_s=0.3, bookmarks=True)
    assert list(_stream(store, request, interval=5.0)) == []


def test_a_bookmark_is_not_held_back_by_a_quiet_history(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(watch, "_POLL_S", 30.0)  # only the bookmark's own time may end a wait
    request = WatchRequest(CONFIGMAPS, "ns", _everything, "0", timeout_s=10, bookmarks=True)
    events = _stream(store, request, interval=0.1)
    began = time.monotonic()
    assert next(events) == _bookmark(0)
    assert time.monotonic() - began < 5
    events.close()


def test_initial_events_end_with_a_marked_bookmark(store: Store) -> None:
    store.create(CONFIGMAPS, "ns", _cm("b"))
    store.create(CONFIGMAPS, "ns", _cm("a"))
    store.create(CONFIGMAPS, "other", _cm("c"))
    # A start version does not skip the list: the list is what sendInitialEvents asks for.
    request = WatchRequest(
        CONFIGMAPS, "ns", _everything, "1", timeout_s=5, bookmarks=True, send_initial_events=True
    )
    events = _stream(store, request)
    first = [next(events) for _ in range(3)]
    assert _seen(first[:2]) == [("ADDED", "a"), ("ADDED", "b")]
    assert first[2] == _bookmark(3, annotations={"k8s.io/initial-events-end": "true"})
    store.create(CONFIGMAPS, "ns", _cm("d"))
    assert _seen([next(events)]) == [("ADDED", "d")]
    events.close()
