"""The object store on its own: resourceVersions, the event history, metadata the server owns,
preconditions, finalizers, garbage collection and the resource table, without HTTP in between.

Every test builds its own `Store`, so resourceVersions are exact: the first write is 1 and each
write takes the next value, as the store promises (one counter, like etcd's revision)."""

from __future__ import annotations

import datetime
import json
import re
import threading
import time
from collections.abc import Iterator, Mapping
from typing import Any

import pytest

from localcluster import storage
from localcluster.errors import ApiError
from localcluster.resources import ResourceType
from localcluster.storage import Event, Store

# The embedded server's `Store`, without HTTP: nothing upstream to compare.
pytestmark = pytest.mark.embedded_only

CONFIGMAPS = ResourceType("", "v1", "configmaps", "ConfigMap", True)
SECRETS = ResourceType("", "v1", "secrets", "Secret", True)
NODES = ResourceType("", "v1", "nodes", "Node", False, has_status=True)
NAMESPACES = ResourceType("", "v1", "namespaces", "Namespace", False, has_status=True)
WIDGETS = ResourceType("example.com", "v1", "widgets", "Widget", True, has_status=True)
GADGETS = ResourceType("example.com", "v1", "gadgets", "Gadget", False)
#: A namespaced kind of a named group: error messages and details name the group.
THINGS = ResourceType("example.com", "v1", "things", "Thing", True)
TYPES = (CONFIGMAPS, SECRETS, NODES, NAMESPACES, WIDGETS, GADGETS, THINGS)
TIMESTAMP = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$")
UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[0-9a-f]{4}-[0-9a-f]{12}$")


def _everything(_: Mapping[str, Any]) -> bool:
    return True


def _cm(name: str, **meta: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, **meta}, "data": {"v": "0"}}


def _error(call: Any, *args: Any, **kwargs: Any) -> dict[str, Any]:
    with pytest.raises(ApiError) as caught:
        call(*args, **kwargs)
    status: dict[str, Any] = caught.value.status()
    return status


@pytest.fixture
def store() -> Iterator[Store]:
    store = Store(TYPES)
    # Closing the store ends any wait, even one a broken store would never end on its own.
    safety = threading.Timer(8, store.close)
    safety.daemon = True
    safety.start()
    yield store
    safety.cancel()


@pytest.fixture
def events(store: Store) -> list[Event]:
    seen: list[Event] = []
    store.observe(seen.append)
    return seen


def _summary(events: list[Event]) -> list[tuple[int, str, str, str]]:
    return [(e.rv, e.resource, e.type, e.obj["metadata"]["name"]) for e in events]


# ---- resourceVersions and events -------------------------------------------------------------


def test_each_write_takes_the_next_resource_version_and_is_observed(
    store: Store, events: list[Event]
) -> None:
    assert store.resource_version == 0
    created = store.create(CONFIGMAPS, "ns", _cm("a"))
    assert created["metadata"]["resourceVersion"] == "1"
    changed = {**created, "data": {"v": "1"}}
    updated = store.update(CONFIGMAPS, "ns", "a", changed)
    assert updated["metadata"]["resourceVersion"] == "2"
    store.create(NODES, "", {"metadata": {"name": "n"}})
    deleted = store.delete(CONFIGMAPS, "ns", "a")
    assert deleted["metadata"]["resourceVersion"] == "4"
    assert store.resource_version == 4
    assert _summary(events) == [
        (1, "configmaps", "ADDED", "a"),
        (2, "configmaps", "MODIFIED", "a"),
        (3, "nodes", "ADDED", "n"),
        (4, "configmaps", "DELETED", "a"),
    ]
    assert events[0].old is None
    assert events[1].old is not None and events[1].old["data"] == {"v": "0"}
    assert events[1].obj["data"] == {"v": "1"}
    assert events[3].old is not None and events[3].old["metadata"]["resourceVersion"] == "2"
    assert events[3].obj["metadata"]["resourceVersion"] == "4"


def test_events_after_returns_the_newer_events_and_the_version_seen(store: Store) -> None:
    began = time.monotonic()
    assert store.events_after(0, 0) == ([], 0)  # nothing written yet, nothing lost either
    assert time.monotonic() - began < 4
    for name in ("a", "b", "c"):
        store.create(CONFIGMAPS, "ns", _cm(name))
    found, seen = store.events_after(1, 0)
    assert [e.rv for e in found] == [2, 3]
    assert seen == 3
    found, seen = store.events_after(3, 0)
    assert (found, seen) == ([], 3)


def test_events_after_waits_for_a_write_or_the_timeout(store: Store) -> None:
    store.create(CONFIGMAPS, "ns", _cm("a"))
    safety = threading.Timer(5, store.close)  # ends a wait that would otherwise never end
    safety.start()
    try:
        began = time.monotonic()
        assert store.events_after(1, 0.3) == ([], 1)
        assert time.monotonic() - began >= 0.3
        began = time.monotonic()
        found, _ = store.events_after(0, 10)  # an event is there already: no waiting
        assert [e.rv for e in found] == [1]
        assert time.monotonic() - began < 4
        writer = threading.Timer(0.1, store.create, (CONFIGMAPS, "ns", _cm("b")))
        writer.start()
        began = time.monotonic()
        found, seen = store.events_after(1, 10)
        writer.join()
        assert [e.rv for e in found] == [2]
        assert seen == 2
        assert time.monotonic() - began < 4
    finally:
        safety.cancel()
    assert store.closed is False


def test_close_wakes_a_waiting_reader(store: Store) -> None:
    assert store.closed is False
    closer = threading.Timer(0.1, store.close)
    closer.start()
    began = time.monotonic()
    assert store.events_after(0, 10) == ([], 0)
    closer.join()
    assert time.monotonic() - began < 5
    assert store.closed


def test_a_bounded_history_answers_gone_for_what_it_no_longer_holds() -> None:
    store = Store(TYPES, history=2)
    for name in ("a", "b", "c", "d"):
        store.create(CONFIGMAPS, "ns", _cm(name))
    store.check_watchable(2)  # events 3 and 4 are still held
    found, _ = store.events_after(2, 0)
    assert [e.rv for e in found] == [3, 4]
    for call in (store.check_watchable, lambda rv: store.events_after(rv, 0)):
        status = _error(call, 1)
        assert (status["code"], status["reason"]) == (410, "Expired")
        assert status["message"] == "too old resource version: 1 (2)"


def test_a_history_holds_at_least_one_event() -> None:
    store = Store(TYPES, history=0)
    store.create(CONFIGMAPS, "ns", _cm("a"))
    store.create(CONFIGMAPS, "ns", _cm("b"))
    store.check_watchable(1)
    assert [e.rv for e in store.events_after(1, 0)[0]] == [2]
    assert _error(store.check_watchable, 0)["message"] == "too old resource version: 0 (1)"


def test_what_the_store_takes_in_and_hands_out_are_copies(
    store: Store, events: list[Event]
) -> None:
    def stored() -> Any:
        return store.get(CONFIGMAPS, "ns", "a")["data"]

    body = _cm("a")
    created = store.create(CONFIGMAPS, "ns", body)
    body["data"]["v"] = "changed"
    created["data"]["v"] = "changed"
    store.get(CONFIGMAPS, "ns", "a")["data"]["v"] = "changed"
    assert stored() == {"v": "0"}
    update = {"metadata": {"name": "a"}, "data": {"v": "1"}}
    updated = store.update(CONFIGMAPS, "ns", "a", update)
    assert update == {"metadata": {"name": "a"}, "data": {"v": "1"}}
    update["data"]["v"] = "changed"
    updated["data"]["v"] = "changed"
    assert stored() == {"v": "1"}
    patch = {"data": {"v": "2"}}
    patched = store.patch(CONFIGMAPS, "ns", "a", "application/merge-patch+json", patch)
    patched["data"]["v"] = "changed"
    assert stored() == {"v": "2"}
    deleted = store.delete(CONFIGMAPS, "ns", "a")
    deleted["data"]["v"] = "changed"
    assert events[-1].obj["data"] == {"v": "2"}
    store.create(CONFIGMAPS, "ns", _cm("b"))
    collected = store.delete_collection(CONFIGMAPS, "ns", _everything)
    collected[0]["data"]["v"] = "changed"
    assert events[-1].obj["data"] == {"v": "0"}


def test_timestamps_are_utc_whatever_the_local_zone(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TZ", "Etc/GMT-9")  # nine hours east of Greenwich
    time.tzset()
    try:
        created = store.create(CONFIGMAPS, "ns", _cm("a"))
    finally:
        monkeypatch.undo()
        time.tzset()
    stamp = datetime.datetime.strptime(
        created["metadata"]["creationTimestamp"], "%Y-%m-%dT%H:%M:%SZ"
    ).replace(tzinfo=datetime.UTC)
    assert abs(datetime.datetime.now(datetime.UTC) - stamp) < datetime.timedelta(minutes=10)


# ---- create ----------------------------------------------------------------------------------


def test_create_sets_what_the_server_owns(store: Store) -> None:
    body: dict[str, Any] = {
        "kind": "Something",
        "apiVersion": "other/v9",
        "metadata": {
            "name": "a",
            "uid": "from-the-client",
            "creationTimestamp": "2000-01-01T00:00:00Z",
            "generation": 7,
            "resourceVersion": "99",
            "deletionTimestamp": "2000-01-01T00:00:00Z",
            "deletionGracePeriodSeconds": 30,
        },
        "data": {"v": "0"},
    }
    created = store.create(CONFIGMAPS, "ns", body)
    meta = created["metadata"]
    assert (created["kind"], created["apiVersion"]) == ("ConfigMap", "v1")
    assert UUID.match(meta["uid"])
    assert TIMESTAMP.match(meta["creationTimestamp"])
    assert meta["creationTimestamp"] != "2000-01-01T00:00:00Z"
    assert (meta["generation"], meta["resourceVersion"], meta["namespace"]) == (1, "1", "ns")
    assert "deletionTimestamp" not in meta
    assert "deletionGracePeriodSeconds" not in meta
    assert store.get(CONFIGMAPS, "ns", "a") == created
    assert body["metadata"]["uid"] == "from-the-client"  # the caller's body is left alone
    other = store.create(CONFIGMAPS, "ns", _cm("b"))
    assert other["metadata"]["uid"] != meta["uid"]


def test_create_without_a_name_or_metadata(store: Store) -> None:
    bodies: list[dict[str, Any]] = [
        {"data": {}},
        {"metadata": {}},
        {"metadata": {"name": "", "generateName": ""}},
    ]
    for body in bodies:
        status = _error(store.create, THINGS, "ns", body)
        assert (status["code"], status["reason"]) == (422, "Invalid")
        assert status["message"] == (
            'Thing.example.com "" is invalid: metadata.name: Required value: name or '
            "generateName is required"
        )
        assert status["details"] == {
            "kind": "Thing",
            "group": "example.com",
            "causes": [
                {
                    "reason": "FieldValueInvalid",
                    "field": "metadata.name",
                    "message": "Required value: name or generateName is required",
                }
            ],
        }
    status = _error(store.create, CONFIGMAPS, "ns", {"metadata": "a"})
    assert (status["code"], status["message"]) == (400, "metadata must be an object")
    assert store.resource_version == 0


def test_generated_names_take_five_letters_and_skip_names_in_use(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    store.create(CONFIGMAPS, "ns", _cm("web-bbbbb"))
    letters = iter("bbbbbbbbbbccccc")  # the first two tries are taken, the third is free
    alphabets: set[str] = set()

    class Picks:
        @staticmethod
        def choice(alphabet: str) -> str:
            alphabets.add(alphabet)
            return next(letters)

    monkeypatch.setattr(storage, "secrets", Picks)
    created = store.create(CONFIGMAPS, "ns", {"metadata": {"generateName": "web-"}})
    assert created["metadata"]["name"] == "web-ccccc"
    assert alphabets == {"bcdfghjklmnpqrstvwxz2456789"}  # upstream's: no vowels, no 0, 1, 3


def test_generated_name_in_another_namespace_is_free(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    store.create(CONFIGMAPS, "ns", _cm("web-bbbbb"))

    class Picks:
        @staticmethod
        def choice(alphabet: str) -> str:
            return "b"

    monkeypatch.setattr(storage, "secrets", Picks)
    created = store.create(CONFIGMAPS, "other", {"metadata": {"generateName": "web-"}})
    assert created["metadata"]["name"] == "web-bbbbb"
    assert created["metadata"]["namespace"] == "other"


def test_a_name_given_wins_over_generate_name(store: Store) -> None:
    created = store.create(CONFIGMAPS, "ns", _cm("fixed", generateName="gen-"))
    assert created["metadata"]["name"] == "fixed"


def test_a_duplicate_name_already_exists(store: Store) -> None:
    store.create(WIDGETS, "ns", {"metadata": {"name": "w"}})
    status = _error(store.create, WIDGETS, "ns", {"metadata": {"name": "w"}})
    assert status["code"] == 409
    assert status["reason"] == "AlreadyExists"
    assert status["message"] == 'widgets.example.com "w" already exists'
    assert status["details"] == {"name": "w", "group": "example.com", "kind": "widgets"}
    assert store.create(WIDGETS, "other", {"metadata": {"name": "w"}})["metadata"]["uid"]


def test_namespaces_of_a_create(store: Store) -> None:
    node = store.create(NODES, "", {"metadata": {"name": "n", "namespace": "ns"}})
    assert "namespace" not in node["metadata"]
    assert store.get(NODES, "anything", "n") == node  # a cluster-scoped name has no namespace
    from_body = store.create(CONFIGMAPS, "", _cm("a", namespace="body"))
    assert from_body["metadata"]["namespace"] == "body"
    assert store.get(CONFIGMAPS, "body", "a") == from_body
    same = store.create(CONFIGMAPS, "ns", _cm("b", namespace="ns"))
    assert same["metadata"]["namespace"] == "ns"
    status = _error(store.create, CONFIGMAPS, "ns", _cm("c", namespace="other"))
    assert (status["code"], status["message"]) == (
        400,
        "the namespace of the provided object does not match the namespace sent on the request",
    )
    status = _error(store.create, CONFIGMAPS, "", _cm("d"))
    assert (status["code"], status["message"]) == (400, "a namespaced object needs a namespace")
    assert store.resource_version == 3


def test_status_on_create_for_kinds_with_and_without_the_subresource(store: Store) -> None:
    widget = store.create(WIDGETS, "ns", {"metadata": {"name": "w"}, "status": {"s": 1}})
    assert "status" not in widget
    gadget = store.create(GADGETS, "", {"metadata": {"name": "g"}, "status": {"s": 1}})
    assert gadget["status"] == {"s": 1}
    node = store.create(NODES, "", {"metadata": {"name": "n"}, "status": {"s": 1}})
    assert node["status"] == {"s": 1}
    namespace = store.create(NAMESPACES, "", {"metadata": {"name": "x"}})
    assert namespace["status"] == {"phase": "Active"}


# ---- admission and validation ----------------------------------------------------------------


def _checked(**hooks: Any) -> ResourceType:
    return ResourceType("example.com", "v1", "checked", "Checked", True, has_status=True, **hooks)


def test_defaulter_and_validator_see_the_new_and_the_old_object(store: Store) -> None:
    calls: list[tuple[Any, Any]] = []

    def default(obj: Mapping[str, Any]) -> dict[str, Any]:
        return {**obj, "spec": {"defaulted": True, **obj.get("spec", {})}}

    def validate(obj: Mapping[str, Any], old: Mapping[str, Any] | None) -> list[tuple[str, str]]:
        calls.append((obj.get("spec"), None if old is None else old.get("spec")))
        return [("spec.bad", "Invalid value: not allowed")] if obj["spec"].get("bad") else []

    rt = _checked(defaulter=default, validator=validate)
    store.register([rt])
    created = store.create(rt, "ns", {"metadata": {"name": "c"}, "spec": {"n": 1}})
    assert created["spec"] == {"defaulted": True, "n": 1}
    updated = store.update(rt, "ns", "c", {"metadata": {"name": "c"}, "spec": {"n": 2}})
    assert updated["spec"] == {"defaulted": True, "n": 2}
    assert calls == [
        ({"defaulted": True, "n": 1}, None),
        ({"defaulted": True, "n": 2}, {"defaulted": True, "n": 1}),
    ]
    status = _error(store.update, rt, "ns", "c", {"metadata": {"name": "c"}, "spec": {"bad": 1}})
    assert (status["code"], status["reason"]) == (422, "Invalid")
    assert (
        status["message"]
        == 'Checked.example.com "c" is invalid: spec.bad: Invalid value: not allowed'
    )
    assert status["details"]["name"] == "c"
    assert store.get(rt, "ns", "c")["spec"] == {"defaulted": True, "n": 2}


def test_admission_prunes_and_refuses(store: Store, events: list[Event]) -> None:
    olds: list[Any] = []

    def admit(
        obj: dict[str, Any], old: Mapping[str, Any] | None
    ) -> tuple[dict[str, Any], list[tuple[str, str]]]:
        olds.append(None if old is None else old["metadata"]["resourceVersion"])
        pruned = {k: v for k, v in obj.items() if k != "junk"}
        status = pruned.get("status")
        if isinstance(status, dict):
            pruned["status"] = {k: v for k, v in status.items() if k != "junk"}
        problems = []
        if obj.get("spec", {}).get("n", 0) < 0:
            problems.append(("spec.n", "Invalid value: negative"))
        if obj.get("status", {}).get("ready") == "maybe":
            problems.append(("status.ready", "Unsupported value: maybe"))
        return pruned, problems

    rt = _checked(admit=admit)
    store.register([rt])
    created = store.create(rt, "ns", {"metadata": {"name": "c"}, "spec": {"n": 1}, "junk": 1})
    assert "junk" not in created
    status = _error(store.create, rt, "ns", {"metadata": {"name": "d"}, "spec": {"n": -1}})
    assert (status["code"], status["message"]) == (
        422,
        'Checked.example.com "d" is invalid: spec.n: Invalid value: negative',
    )
    # A status write on a kind with admission: pruned like any write, and only status changes.
    body = {
        "metadata": {"name": "c", "labels": {"ignored": "yes"}},
        "spec": {"n": 5},
        "status": {"ready": True, "junk": 1},
    }
    written = store.update(rt, "ns", "c", body, status=True)
    assert written["status"] == {"ready": True}
    assert written["spec"] == {"n": 1}
    assert "labels" not in written["metadata"]
    assert written["metadata"]["resourceVersion"] == "2"
    assert events[-1].old is not None
    assert events[-1].old["metadata"]["resourceVersion"] == "1"
    cleared = store.update(rt, "ns", "c", {"metadata": {"name": "c"}}, status=True)
    assert "status" not in cleared
    assert cleared["spec"] == {"n": 1}
    assert olds == [None, None, "1", "2"]
    status = _error(
        store.update,
        rt,
        "ns",
        "c",
        {"metadata": {"name": "c"}, "status": {"ready": "maybe"}},
        status=True,
    )
    assert status["message"] == (
        'Checked.example.com "c" is invalid: status.ready: Unsupported value: maybe'
    )
    assert "status" not in store.get(rt, "ns", "c")


# ---- updates ---------------------------------------------------------------------------------


def test_an_update_keeps_what_the_server_owns(store: Store) -> None:
    created = store.create(CONFIGMAPS, "ns", _cm("a"))
    meta = created["metadata"]
    body = {
        "kind": "Wrong",
        "metadata": {
            "labels": {"l": "1"},
            "uid": "changed",
            "creationTimestamp": "2000-01-01T00:00:00Z",
            "generation": 9,
            "deletionTimestamp": "2000-01-01T00:00:00Z",
            "deletionGracePeriodSeconds": 5,
        },
        "data": {"v": "0"},
    }
    updated = store.update(CONFIGMAPS, "ns", "a", body)
    new = updated["metadata"]
    for key in ("name", "namespace", "uid", "creationTimestamp", "generation"):
        assert new[key] == meta[key], key
    assert "deletionTimestamp" not in new  # not even a delete: the object is still there
    assert "deletionGracePeriodSeconds" not in new
    assert updated["kind"] == "ConfigMap"
    assert new["labels"] == {"l": "1"}
    assert store.get(CONFIGMAPS, "ns", "a") == updated
    # Without any of them in the body, the stored values stay too.
    bare = store.update(CONFIGMAPS, "ns", "a", {"data": {"v": "1"}})
    for key in ("name", "namespace", "uid", "creationTimestamp"):
        assert bare["metadata"][key] == meta[key], key
    assert bare["metadata"]["generation"] == 2


def test_generation_counts_changes_outside_metadata_and_status(store: Store) -> None:
    store.create(WIDGETS, "ns", {"metadata": {"name": "w"}, "spec": {"n": 1}})
    labelled = store.update(
        WIDGETS, "ns", "w", {"metadata": {"labels": {"l": "1"}}, "spec": {"n": 1}}
    )
    assert labelled["metadata"]["generation"] == 1
    assert labelled["metadata"]["resourceVersion"] == "2"
    with_status = store.update(
        WIDGETS, "ns", "w", {"metadata": {"name": "w"}, "status": {"s": 1}}, status=True
    )
    assert with_status["metadata"]["generation"] == 1
    first = store.update(WIDGETS, "ns", "w", {"metadata": {"name": "w"}, "spec": {"n": 2}})
    second = store.update(WIDGETS, "ns", "w", {"metadata": {"name": "w"}, "spec": {"n": 3}})
    assert (first["metadata"]["generation"], second["metadata"]["generation"]) == (2, 3)


def test_a_write_that_changes_nothing_is_no_write(store: Store, events: list[Event]) -> None:
    created = store.create(CONFIGMAPS, "ns", _cm("a", labels={"l": "1"}))
    body = {"metadata": {"name": "a", "labels": {"l": "1"}}, "data": {"v": "0"}}
    again = store.update(CONFIGMAPS, "ns", "a", body)
    assert again == created
    patched = store.patch(
        CONFIGMAPS, "ns", "a", "application/merge-patch+json", {"data": {"v": "0"}}
    )
    assert patched["metadata"]["resourceVersion"] == "1"
    assert store.resource_version == 1
    assert [e.type for e in events] == ["ADDED"]
    relabelled = store.update(CONFIGMAPS, "ns", "a", {**body, "metadata": {"name": "a"}})
    assert relabelled["metadata"]["resourceVersion"] == "2"
    assert "labels" not in relabelled["metadata"]
    changed = store.update(CONFIGMAPS, "ns", "a", {"metadata": {"name": "a"}, "data": {"v": "1"}})
    assert changed["metadata"]["resourceVersion"] == "3"
    assert [e.type for e in events] == ["ADDED", "MODIFIED", "MODIFIED"]


def test_resource_version_preconditions_of_an_update(store: Store) -> None:
    store.create(THINGS, "ns", _cm("a"))
    fresh = store.update(THINGS, "ns", "a", _cm("a", resourceVersion="1", labels={"l": "1"}))
    assert fresh["metadata"]["resourceVersion"] == "2"
    status = _error(store.update, THINGS, "ns", "a", _cm("a", resourceVersion="1"))
    assert (status["code"], status["reason"]) == (409, "Conflict")
    assert status["message"] == (
        'Operation cannot be fulfilled on things.example.com "a": the object has been modified; '
        "please apply your changes to the latest version and try again"
    )
    assert status["details"] == {"name": "a", "group": "example.com", "kind": "things"}
    status = _error(
        store.patch,
        THINGS,
        "ns",
        "a",
        "application/merge-patch+json",
        {"metadata": {"resourceVersion": "1"}, "data": {"v": "9"}},
    )
    assert status["code"] == 409
    assert store.get(THINGS, "ns", "a")["data"] == {"v": "0"}


def test_an_update_must_name_the_object_it_writes(store: Store) -> None:
    store.create(CONFIGMAPS, "ns", _cm("a"))
    status = _error(store.update, CONFIGMAPS, "ns", "a", _cm("b"))
    assert (status["code"], status["message"]) == (
        400,
        "the name of the object (b) does not match the name on the URL (a)",
    )
    status = _error(store.update, CONFIGMAPS, "ns", "a", _cm("a", namespace="other"))
    assert (status["code"], status["message"]) == (
        400,
        "the namespace of the object does not match the URL",
    )
    status = _error(store.update, CONFIGMAPS, "ns", "a", {"metadata": ["a"]})
    assert (status["code"], status["message"]) == (400, "metadata must be an object")
    status = _error(store.update, THINGS, "ns", "missing", _cm("missing"))
    assert (status["code"], status["message"]) == (404, 'things.example.com "missing" not found')
    assert status["details"] == {"name": "missing", "group": "example.com", "kind": "things"}
    assert store.resource_version == 1


def test_status_writes(store: Store, events: list[Event]) -> None:
    store.create(WIDGETS, "ns", {"metadata": {"name": "w", "labels": {"l": "1"}}, "spec": {"n": 1}})
    # Without a status to clear, a status write without one changes nothing.
    same = store.update(WIDGETS, "ns", "w", {"metadata": {"name": "w"}}, status=True)
    assert same["metadata"]["resourceVersion"] == "1"
    body: dict[str, Any] = {
        "metadata": {"name": "w", "labels": {}},
        "spec": {"n": 2},
        "status": {"s": {"n": 1}},
    }
    written = store.update(WIDGETS, "ns", "w", body, status=True)
    assert written["status"] == {"s": {"n": 1}}
    assert written["spec"] == {"n": 1}
    assert written["metadata"]["labels"] == {"l": "1"}
    assert events[-1].old is not None
    assert events[-1].old["metadata"]["resourceVersion"] == "1"
    assert "status" not in events[-1].old
    body["status"]["s"]["n"] = 2  # the store keeps its own copy of what it was sent
    assert store.get(WIDGETS, "ns", "w")["status"] == {"s": {"n": 1}}
    main = store.update(
        WIDGETS, "ns", "w", {"metadata": {"name": "w"}, "spec": {"n": 1}, "status": {"s": 2}}
    )
    assert main["status"] == {"s": {"n": 1}}
    assert main["metadata"]["resourceVersion"] == "3"  # the labels went; the status stayed
    without = store.update(WIDGETS, "ns", "w", {"metadata": {"name": "w"}}, status=True)
    assert "status" not in without
    # A main-resource write cannot give an object without status one either.
    still = store.update(
        WIDGETS, "ns", "w", {"metadata": {"name": "w"}, "spec": {"n": 1}, "status": {"s": 3}}
    )
    assert "status" not in still
    assert still["metadata"]["resourceVersion"] == "4"  # nothing changed: no write
    store.create(THINGS, "ns", _cm("a"))
    status = _error(store.update, THINGS, "ns", "a", _cm("a"), status=True)
    assert (status["code"], status["message"]) == (404, 'things.example.com "a" not found')
    assert status["details"] == {"name": "a", "group": "example.com", "kind": "things"}
    status = _error(store.patch, THINGS, "ns", "a", "application/merge-patch+json", {}, status=True)
    assert status["code"] == 404
    # A kind without the subresource keeps a `status` written through the main resource, and
    # counts it as a change of the object (as upstream for a custom resource without one).
    store.create(GADGETS, "", {"metadata": {"name": "g"}})
    written = store.update(GADGETS, "", "g", {"metadata": {"name": "g"}, "status": {"s": 3}})
    assert written["status"] == {"s": 3}
    assert written["metadata"]["generation"] == 2


def test_a_status_write_of_a_built_in_kind_is_not_defaulted(store: Store) -> None:
    def default(obj: Mapping[str, Any]) -> dict[str, Any]:
        return {**obj, "status": {"defaulted": True, **obj.get("status", {})}}

    rt = _checked(defaulter=default)
    store.register([rt])
    created = store.create(rt, "ns", {"metadata": {"name": "c"}})
    assert created["status"] == {"defaulted": True}
    written = store.update(
        rt, "ns", "c", {"metadata": {"name": "c"}, "status": {"s": 1}}, status=True
    )
    assert written["status"] == {"s": 1}


def test_a_strategic_merge_patch_follows_the_kinds_strategies(store: Store) -> None:
    store.create(NODES, "", {"metadata": {"name": "n", "finalizers": ["x/a"]}})
    patched = store.patch(
        NODES,
        "",
        "n",
        "application/strategic-merge-patch+json",
        {"metadata": {"finalizers": ["x/b"]}},
    )
    assert patched["metadata"]["finalizers"] == ["x/b", "x/a"]  # merged (upstream order)


def test_a_patch_must_leave_an_object(store: Store) -> None:
    store.create(CONFIGMAPS, "ns", _cm("a"))
    status = _error(
        store.patch,
        CONFIGMAPS,
        "ns",
        "a",
        "application/json-patch+json",
        [{"op": "replace", "path": "", "value": ["a"]}],
    )
    # kube-apiserver reads the patched document's apiVersion and kind first, and reports the
    # failure as an invalid `patch`.
    assert (status["code"], status["reason"]) == (422, "Invalid")
    (cause,) = status["details"]["causes"]
    assert cause["field"] == "patch"
    assert cause["message"].startswith(
        'Invalid value: "[\\"a\\"]": couldn\'t get version/kind; json parse error: json: '
        "cannot unmarshal array into Go value of type struct"
    )
    assert store.resource_version == 1


# ---- reads -----------------------------------------------------------------------------------


def test_lists_filter_by_namespace_and_predicate_and_carry_the_version(store: Store) -> None:
    for ns, name, colour in (
        ("b", "x", "red"),
        ("a", "y", "red"),
        ("a", "x", "blue"),
        ("b", "w", "blue"),
    ):
        store.create(CONFIGMAPS, ns, _cm(name, labels={"colour": colour}))
    store.create(SECRETS, "a", _cm("s"))

    def red(obj: Mapping[str, Any]) -> bool:
        return bool(obj["metadata"]["labels"]["colour"] == "red")

    def keys(items: list[dict[str, Any]]) -> list[tuple[str, str]]:
        return [(o["metadata"]["namespace"], o["metadata"]["name"]) for o in items]

    cases: list[tuple[str | None, Any, list[tuple[str, str]]]] = [
        (None, _everything, [("a", "x"), ("a", "y"), ("b", "w"), ("b", "x")]),
        ("a", _everything, [("a", "x"), ("a", "y")]),
        (None, red, [("a", "y"), ("b", "x")]),
        ("b", red, [("b", "x")]),
        ("c", _everything, []),
    ]
    for namespace, match, expected in cases:
        items, rv = store.list_objects(CONFIGMAPS, namespace, match)
        assert (keys(items), rv) == (expected, 5)
        encoded, rv = store.list_json(CONFIGMAPS, namespace, match)
        assert (json.loads(encoded), rv) == (items, 5)
        assert " " not in encoded  # compact, as it is sent
    items, _ = store.list_objects(CONFIGMAPS, "a", _everything)
    items[0]["data"]["v"] = "changed"  # a list is a copy
    assert store.get(CONFIGMAPS, "a", "x")["data"] == {"v": "0"}


def test_get_of_a_missing_object_is_not_found(store: Store) -> None:
    store.create(CONFIGMAPS, "ns", _cm("a"))
    status = _error(store.get, CONFIGMAPS, "other", "a")
    assert status["code"] == 404
    status = _error(store.get, WIDGETS, "ns", "a")
    assert status["message"] == 'widgets.example.com "a" not found'
    assert status["details"] == {"name": "a", "group": "example.com", "kind": "widgets"}


# ---- delete, finalizers ----------------------------------------------------------------------


def test_delete_preconditions(store: Store) -> None:
    created = store.create(THINGS, "ns", _cm("a"))
    uid = created["metadata"]["uid"]
    status = _error(store.delete, THINGS, "ns", "a", {"uid": "other"})
    assert (status["code"], status["reason"]) == (409, "Conflict")
    assert status["message"] == (
        'Operation cannot be fulfilled on things.example.com "a": Precondition failed: UID'
    )
    assert status["details"] == {"name": "a", "group": "example.com", "kind": "things"}
    status = _error(store.delete, THINGS, "ns", "a", {"resourceVersion": "7"})
    assert status["code"] == 409
    assert status["message"] == (
        'Operation cannot be fulfilled on things.example.com "a": Precondition failed: '
        "ResourceVersion"
    )
    assert status["details"] == {"name": "a", "group": "example.com", "kind": "things"}
    status = _error(store.delete, THINGS, "ns", "a", {"uid": uid, "resourceVersion": "7"})
    assert status["code"] == 409
    assert store.resource_version == 1
    deleted = store.delete(THINGS, "ns", "a", {"uid": uid, "resourceVersion": "1"})
    assert deleted["metadata"]["resourceVersion"] == "2"
    assert _error(store.get, THINGS, "ns", "a")["code"] == 404
    store.create(THINGS, "ns", _cm("b"))
    store.delete(THINGS, "ns", "b", {"resourceVersion": "3"})
    store.create(THINGS, "ns", _cm("c"))
    store.delete(THINGS, "ns", "c", {"uid": "", "resourceVersion": ""})
    assert store.list_objects(THINGS, None, _everything) == ([], 6)


def test_finalizers_hold_a_deleted_object_until_the_last_is_gone(
    store: Store, events: list[Event]
) -> None:
    store.create(CONFIGMAPS, "ns", _cm("a", finalizers=["x/one", "x/two"]))
    marked = store.delete(CONFIGMAPS, "ns", "a")
    meta = marked["metadata"]
    assert TIMESTAMP.match(meta["deletionTimestamp"])
    assert meta["deletionGracePeriodSeconds"] == 0
    assert meta["resourceVersion"] == "2"
    before = events[-1].old
    assert before is not None
    assert before["metadata"]["resourceVersion"] == "1"
    assert "deletionTimestamp" not in before["metadata"]
    assert store.delete(CONFIGMAPS, "ns", "a") == marked  # again: nothing more happens
    assert store.resource_version == 2
    # An update cannot take the mark away, whatever its body says.
    kept = store.update(
        CONFIGMAPS,
        "ns",
        "a",
        {"metadata": {"name": "a", "finalizers": ["x/two"]}, "data": {"v": "0"}},
    )
    assert kept["metadata"]["deletionTimestamp"] == meta["deletionTimestamp"]
    assert kept["metadata"]["deletionGracePeriodSeconds"] == 0
    gone = store.update(CONFIGMAPS, "ns", "a", {"metadata": {"name": "a"}, "data": {"v": "0"}})
    assert gone["metadata"]["resourceVersion"] == "4"
    assert _error(store.get, CONFIGMAPS, "ns", "a")["code"] == 404
    assert [e.type for e in events] == ["ADDED", "MODIFIED", "MODIFIED", "DELETED"]
    assert events[-1].old is not None
    assert events[-1].old["metadata"]["finalizers"] == ["x/two"]


def test_delete_collection_in_one_namespace_or_all(store: Store) -> None:
    for namespace in ("a", "b"):
        for name, colour in (("x", "red"), ("y", "blue")):
            store.create(CONFIGMAPS, namespace, _cm(name, labels={"colour": colour}))

    def red(obj: Mapping[str, Any]) -> bool:
        return bool(obj["metadata"]["labels"]["colour"] == "red")

    deleted = store.delete_collection(CONFIGMAPS, "a", red)
    assert [(o["metadata"]["namespace"], o["metadata"]["name"]) for o in deleted] == [("a", "x")]
    deleted = store.delete_collection(CONFIGMAPS, None, _everything)
    assert [(o["metadata"]["namespace"], o["metadata"]["name"]) for o in deleted] == [
        ("a", "y"),
        ("b", "x"),
        ("b", "y"),
    ]
    assert store.list_objects(CONFIGMAPS, None, _everything)[0] == []


# ---- garbage collection ----------------------------------------------------------------------


def _owned(name: str, owner: dict[str, Any], **meta: Any) -> dict[str, Any]:
    ref = {
        "apiVersion": owner["apiVersion"],
        "kind": owner["kind"],
        "name": owner["metadata"]["name"],
        "uid": owner["metadata"]["uid"],
    }
    return _cm(name, ownerReferences=[ref], **meta)


def _names(store: Store, rt: ResourceType = CONFIGMAPS) -> list[tuple[str, str]]:
    items, _ = store.list_objects(rt, None, _everything)
    return [(o["metadata"].get("namespace", ""), o["metadata"]["name"]) for o in items]


def test_a_namespaced_owner_owns_only_in_its_namespace(store: Store) -> None:
    owner = store.create(SECRETS, "a", _cm("owner"))
    store.create(CONFIGMAPS, "a", _owned("mine", owner))
    store.create(CONFIGMAPS, "b", _owned("elsewhere", owner))
    store.create(CONFIGMAPS, "a", _cm("unowned", ownerReferences=["not-a-reference"]))
    other = store.create(SECRETS, "a", _cm("other-owner"))
    store.create(CONFIGMAPS, "a", _owned("others", other))
    store.delete(SECRETS, "a", "owner")
    assert _names(store) == [("a", "others"), ("a", "unowned"), ("b", "elsewhere")]


def test_a_cluster_scoped_owner_owns_in_every_namespace(store: Store) -> None:
    node = store.create(NODES, "", {"metadata": {"name": "n"}})
    store.create(CONFIGMAPS, "a", _owned("x", node))
    store.create(CONFIGMAPS, "b", _owned("y", node))
    gadget = store.create(GADGETS, "", _owned("g", node))
    store.create(CONFIGMAPS, "a", _owned("of-the-gadget", gadget))
    store.create(CONFIGMAPS, "a", _cm("z"))
    store.delete(NODES, "", "n")
    assert _names(store) == [("a", "z")]
    assert _names(store, GADGETS) == []


def test_a_dependent_with_finalizers_is_only_marked(store: Store) -> None:
    owner = store.create(SECRETS, "a", _cm("owner"))
    store.create(CONFIGMAPS, "a", _owned("held", owner, finalizers=["x/f"]))
    store.delete(SECRETS, "a", "owner")
    held = store.get(CONFIGMAPS, "a", "held")
    assert held["metadata"]["deletionTimestamp"]


def test_deleting_a_namespace_deletes_what_is_in_it(store: Store) -> None:
    store.create(NAMESPACES, "", {"metadata": {"name": "a"}})
    store.create(CONFIGMAPS, "a", _cm("x"))
    store.create(SECRETS, "a", _cm("s"))
    store.create(CONFIGMAPS, "b", _cm("a"))
    store.create(GADGETS, "", {"metadata": {"name": "a"}})
    store.delete(NAMESPACES, "", "a")
    assert _names(store) == [("b", "a")]
    assert _names(store, SECRETS) == []
    assert _names(store, GADGETS) == [("", "a")]


def test_only_a_namespace_takes_its_namesakes_contents(store: Store) -> None:
    # Objects named like a namespace, of a core kind or a kind with a "namespaces" resource in
    # another group, take nothing with them.
    lookalike = ResourceType("example.com", "v1", "namespaces", "Namespace", False)
    store.register([lookalike])
    store.create(CONFIGMAPS, "a", _cm("x"))
    store.create(NODES, "", {"metadata": {"name": "a"}})
    store.create(CONFIGMAPS, "a", _cm("a"))
    store.create(lookalike, "", {"metadata": {"name": "a"}})
    store.delete(NODES, "", "a")
    store.delete(CONFIGMAPS, "a", "a")
    store.delete(lookalike, "", "a")
    assert _names(store) == [("a", "x")]


def test_collection_goes_on_past_a_kind_a_deletion_took_away(store: Store) -> None:
    # As when a CustomResourceDefinition is collected: its deletion takes its kind away (the
    # CRD registry observes the store and unregisters the kind) while the pass goes on.
    definitions = ResourceType("example.com", "v1", "definitions", "Definition", False)
    defined = ResourceType("example.com", "v1", "defined", "Defined", True)
    last = ResourceType("example.com", "v1", "lasts", "Last", True)
    for rt in (definitions, defined, last):
        store.register([rt])

    def on_event(event: Event) -> None:
        if event.resource == definitions.key and event.type == "DELETED":
            store.unregister(defined.key)

    store.observe(on_event)
    node = store.create(NODES, "", {"metadata": {"name": "n"}})
    store.create(definitions, "", _owned("d", node))
    store.create(defined, "ns", _cm("x"))
    store.create(last, "ns", _owned("l", node))
    store.delete(NODES, "", "n")
    assert store.find("example.com", "v1", "defined") is None
    assert _names(store, definitions) == []
    assert _names(store, last) == []


# ---- the resource table ----------------------------------------------------------------------


def test_the_same_object_through_another_version_is_no_new_generation(store: Store) -> None:
    v1 = ResourceType("example.com", "v1", "sprockets", "Sprocket", True)
    v2 = ResourceType("example.com", "v2", "sprockets", "Sprocket", True)
    store.register([v1, v2])
    store.create(v1, "ns", {"metadata": {"name": "s"}, "spec": {"n": 1}})
    updated = store.update(v2, "ns", "s", {"metadata": {"name": "s"}, "spec": {"n": 1}})
    assert updated["metadata"]["generation"] == 1


def test_the_default_history_is_a_thousand_events() -> None:
    store = Store(TYPES)
    for i in range(1001):
        store.create(CONFIGMAPS, "ns", _cm(f"c{i}"))
    store.check_watchable(1)  # events 2 to 1001 are held
    assert _error(store.check_watchable, 0)["code"] == 410


def test_register_serves_versions_and_keeps_objects(store: Store) -> None:
    v1 = ResourceType("example.com", "v1", "sprockets", "Sprocket", True)
    v2 = ResourceType("example.com", "v2", "sprockets", "Sprocket", True)
    store.register([])
    assert store.find("example.com", "v1", "sprockets") is None
    store.register([v1])
    assert store.find("example.com", "v1", "sprockets") is v1
    store.create(v1, "ns", {"metadata": {"name": "t"}})
    store.register([v2, v1])
    assert store.find("example.com", "v2", "sprockets") is v2
    assert store.find("example.com", "v1", "sprockets") is v1
    assert store.types["sprockets.example.com"] is v2
    assert store.get(v2, "ns", "t")["metadata"]["name"] == "t"
    store.register([v2])
    assert store.find("example.com", "v1", "sprockets") is None
    assert store.find("example.com", "v2", "sprockets") is v2
    assert store.find("", "v1", "configmaps") is CONFIGMAPS


def test_unregister_deletes_the_objects_then_the_type(store: Store, events: list[Event]) -> None:
    rt = ResourceType("example.com", "v1", "sprockets", "Sprocket", True)
    store.register([rt])
    for namespace, name in (("b", "t1"), ("a", "t2"), ("a", "t1")):
        store.create(rt, namespace, {"metadata": {"name": name}})
    store.create(CONFIGMAPS, "a", _cm("kept"))
    store.unregister("unknown.example.com")
    store.unregister("sprockets.example.com")
    assert store.find("example.com", "v1", "sprockets") is None
    assert "sprockets.example.com" not in store.types
    deleted = [
        (e.type, e.obj["metadata"]["namespace"], e.obj["metadata"]["name"]) for e in events[4:]
    ]
    assert deleted == [("DELETED", "a", "t1"), ("DELETED", "a", "t2"), ("DELETED", "b", "t1")]
    assert _names(store) == [("a", "kept")]
    store.register([rt])
    assert store.list_objects(rt, None, _everything) == ([], 7)


def test_the_lock_is_the_stores_and_reentrant(store: Store) -> None:
    with store.lock, store.lock:
        store.create(CONFIGMAPS, "ns", _cm("a"))
    assert store.resource_version == 1
