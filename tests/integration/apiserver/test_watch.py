"""Watches through `kubernetes.watch.Watch`: initial state, history replay, live events,
selector transitions, bookmarks, 410 Gone and timeouts. Every stream is bounded by
`timeout_seconds`, so a missing event fails the test instead of hanging it."""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes import client, watch
from kubernetes.client.rest import ApiException

from localcluster import ApiServer
from tests.integration.apiserver.support import Raw, namespaces_fixture

namespaces = namespaces_fixture("w1", "w2", "w3", "w4", "w5", "w6", "w7", "other-ns", "wl", "ka")


#: kube-controller-manager publishes the cluster's CA into every namespace as this ConfigMap;
#: the watches leave it out, so they see the test's own objects on either control plane.
MINE = "metadata.name!=kube-root-ca.crt"


def _cm(name: str, **labels: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": labels}, "data": {"v": "0"}}


def _kinds(events: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(e["type"], e["raw_object"]["metadata"].get("name", "")) for e in events]


def test_watch_without_rv_lists_then_streams(core: client.CoreV1Api) -> None:
    core.create_namespaced_config_map("w1", _cm("before"))
    seen: list[dict[str, Any]] = []
    stream = watch.Watch().stream(
        core.list_namespaced_config_map, "w1", field_selector=MINE, timeout_seconds=5
    )
    for event in stream:
        seen.append(event)
        if len(seen) == 1:
            core.patch_namespaced_config_map(
                "before", "w1", {"data": {"v": "1"}}, _content_type="application/merge-patch+json"
            )
            core.create_namespaced_config_map("w1", _cm("after"))
            core.delete_namespaced_config_map("before", "w1")
        if len(seen) == 4:
            break
    assert _kinds(seen) == [
        ("ADDED", "before"),
        ("MODIFIED", "before"),
        ("ADDED", "after"),
        ("DELETED", "before"),
    ]
    rvs = [int(e["raw_object"]["metadata"]["resourceVersion"]) for e in seen]
    assert rvs == sorted(rvs)


def test_watch_from_resource_version_replays_history(core: client.CoreV1Api) -> None:
    start = core.list_namespaced_config_map("w2").metadata.resource_version
    core.create_namespaced_config_map("w2", _cm("a"))
    core.create_namespaced_config_map("w2", _cm("b"))
    core.delete_namespaced_config_map("a", "w2")
    core.create_namespaced_config_map("other-ns", _cm("elsewhere"))
    events = []
    for event in watch.Watch().stream(
        core.list_namespaced_config_map,
        "w2",
        resource_version=start,
        field_selector=MINE,
        timeout_seconds=5,
    ):
        events.append(event)
        if len(events) == 3:
            break
    assert _kinds(events) == [("ADDED", "a"), ("ADDED", "b"), ("DELETED", "a")]


def test_label_selector_transitions_become_added_and_deleted(core: client.CoreV1Api) -> None:
    start = core.list_namespaced_config_map("w3").metadata.resource_version
    core.create_namespaced_config_map("w3", _cm("x", role="other"))
    core.patch_namespaced_config_map(
        "x",
        "w3",
        {"metadata": {"labels": {"role": "chosen"}}},
        _content_type="application/merge-patch+json",
    )
    core.patch_namespaced_config_map(
        "x", "w3", {"data": {"v": "2"}}, _content_type="application/merge-patch+json"
    )
    core.patch_namespaced_config_map(
        "x",
        "w3",
        {"metadata": {"labels": {"role": "gone"}}},
        _content_type="application/merge-patch+json",
    )
    events = []
    for event in watch.Watch().stream(
        core.list_namespaced_config_map,
        "w3",
        resource_version=start,
        label_selector="role=chosen",
        timeout_seconds=5,
    ):
        events.append(event)
        if len(events) == 3:
            break
    assert [e["type"] for e in events] == ["ADDED", "MODIFIED", "DELETED"]


def test_field_selector_on_watch(core: client.CoreV1Api) -> None:
    start = core.list_node().metadata.resource_version
    core.create_node({"metadata": {"name": "watched-a"}})
    core.create_node({"metadata": {"name": "watched-b"}})
    events = []
    for event in watch.Watch().stream(
        core.list_node,
        resource_version=start,
        field_selector="metadata.name=watched-b",
        timeout_seconds=5,
    ):
        events.append(event)
        break
    assert _kinds(events) == [("ADDED", "watched-b")]


# The embedded server's bookmark pace is a knob (0.2 s here); kube-apiserver sends them about
# once a minute, longer than a test should wait.
@pytest.mark.embedded_only
def test_bookmarks_carry_the_current_resource_version(core: client.CoreV1Api) -> None:
    core.create_namespaced_config_map("w4", _cm("bm"))
    latest = int(core.list_namespaced_config_map("w4").metadata.resource_version)
    for event in watch.Watch().stream(
        core.list_namespaced_config_map,
        "w4",
        resource_version=str(latest),
        allow_watch_bookmarks=True,
        timeout_seconds=5,
    ):
        assert event["type"] == "BOOKMARK"
        obj = event["raw_object"]
        assert obj["kind"] == "ConfigMap"
        assert set(obj["metadata"]) == {"resourceVersion"}
        assert int(obj["metadata"]["resourceVersion"]) >= latest
        break
    else:
        pytest.fail("no bookmark before the timeout")


def test_timeout_ends_the_stream(core: client.CoreV1Api) -> None:
    latest = core.list_namespaced_config_map("w5").metadata.resource_version
    events = list(
        watch.Watch().stream(
            core.list_namespaced_config_map,
            "w5",
            resource_version=latest,
            field_selector=MINE,
            timeout_seconds=1,
        )
    )
    assert events == []


def _outgrow_history(core: client.CoreV1Api, namespace: str) -> None:
    """Make more events than the module's server keeps (50), so resourceVersion 1 is gone."""
    for i in range(60):
        core.create_namespaced_config_map(namespace, _cm(f"fill-{i}"))


# Both 410 tests outgrow the embedded server's bounded history (`history=50`); kube-apiserver
# serves any resourceVersion etcd has not compacted yet (compaction runs every 5 minutes).
@pytest.mark.embedded_only
def test_expired_resource_version_is_gone(core: client.CoreV1Api) -> None:
    _outgrow_history(core, "w6")
    with pytest.raises(ApiException) as caught:
        for _ in watch.Watch().stream(
            core.list_namespaced_config_map, "w6", resource_version="1", timeout_seconds=5
        ):
            pass
    assert caught.value.status == 410
    assert "Expired" in str(caught.value.reason)


@pytest.mark.embedded_only
def test_gone_is_an_error_event_with_a_status(core: client.CoreV1Api) -> None:
    _outgrow_history(core, "w7")
    resp = core.list_namespaced_config_map(
        "w7", watch=True, resource_version="1", timeout_seconds=5, _preload_content=False
    )
    try:
        line = next(iter(watch.watch.iter_resp_lines(resp)))
    finally:
        resp.close()
    event = json.loads(line)
    assert event["type"] == "ERROR"
    assert event["object"]["kind"] == "Status"
    assert event["object"]["code"] == 410
    assert event["object"]["reason"] == "Expired"


@pytest.mark.embedded_only  # stops the embedded server it starts
def test_stop_ends_open_watches() -> None:
    import threading

    from kubernetes import config

    with ApiServer() as server:
        api = client.CoreV1Api(
            config.new_client_from_config_dict(server.kubeconfig())  # type: ignore[no-untyped-call]
        )
        api.create_node({"metadata": {"name": "n"}})
        started = threading.Event()
        ended = threading.Event()

        def consume() -> None:
            for _ in watch.Watch().stream(api.list_node, timeout_seconds=30):
                started.set()  # the initial ADDED: the watch is open on the server
            ended.set()

        thread = threading.Thread(target=consume, daemon=True)
        thread.start()
        assert started.wait(10)
        server.stop()
        assert ended.wait(10)


def test_connection_is_reusable_after_a_watch_ends(raw: Raw) -> None:
    """A cleanly ended watch leaves keep-alive intact (closing it raced with client pools)."""
    conn = raw.connection()
    try:
        first = raw.request(
            conn,
            "GET",
            f"/api/v1/namespaces/ka/configmaps?watch=1&timeoutSeconds=1&fieldSelector={MINE}",
        )
        assert first.status == 200
        assert first.getheader("Transfer-Encoding") == "chunked"
        assert first.read() == b""
        sock = conn.sock
        second = raw.request(conn, "GET", "/api/v1/namespaces/ka/configmaps")
        assert second.status == 200
        assert json.loads(second.read())["kind"] == "ConfigMapList"
        assert conn.sock is sock
    finally:
        conn.close()


def test_send_initial_events_ends_the_list_with_a_marked_bookmark(
    core: client.CoreV1Api, raw: Raw
) -> None:
    core.create_namespaced_config_map("wl", _cm("one"))
    core.create_namespaced_config_map("wl", _cm("two"))
    path = (
        f"/api/v1/namespaces/wl/configmaps?fieldSelector={MINE}&watch=true&sendInitialEvents=true"
        "&allowWatchBookmarks=true&resourceVersionMatch=NotOlderThan&timeoutSeconds=5"
    )
    conn = raw.connection()
    try:
        resp = raw.request(conn, "GET", path)
        events = [json.loads(resp.readline()) for _ in range(3)]
    finally:
        conn.close()
    assert [(e["type"], e["object"]["metadata"].get("name")) for e in events] == [
        ("ADDED", "one"),
        ("ADDED", "two"),
        ("BOOKMARK", None),
    ]
    annotations = events[2]["object"]["metadata"]["annotations"]
    assert annotations == {"k8s.io/initial-events-end": "true"}
