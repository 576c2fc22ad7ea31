"""Informers resume a dropped watch where they were, and list again only when the server's
history no longer reaches back that far (410 Gone), reporting what the gap hid."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from functools import partial

import pytest
from kubernetes import client

from controller.informer import Event, Informer
from localcluster.apiserver import ApiServer
from localcluster.control_planes import Server
from tests.support.objects import claim
from tests.support.polling import eventually

GROUP, VERSION, PLURAL = "resource.k8s.io", "v1", "resourceclaims"


@pytest.fixture
def server() -> Iterator[Server]:
    with ApiServer(port=0, history=5, bookmark_interval_s=0.2) as running:
        yield running


@pytest.fixture
def objects(server: Server) -> Iterator[client.CustomObjectsApi]:
    with server.api_client() as api:
        yield client.CustomObjectsApi(api)


def _informer(
    objects: client.CustomObjectsApi, events: list[Event], watch_timeout_s: int = 300
) -> Informer:
    return Informer(
        PLURAL,
        partial(objects.list_cluster_custom_object, GROUP, VERSION, PLURAL, _preload_content=False),
        partial(
            objects.list_cluster_custom_object,
            GROUP,
            VERSION,
            PLURAL,
            watch=True,
            _preload_content=False,
        ),
        events.append,
        loop=asyncio.get_running_loop(),
        watch_timeout_s=watch_timeout_s,
    )


def _names(events: list[Event], kind: str) -> list[str]:
    return [e.key[1] for e in events if e.kind == kind]


async def test_watch_resumes_after_the_server_ends_it_without_listing_again(
    objects: client.CustomObjectsApi,
) -> None:
    objects.create_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, claim("a"))
    events: list[Event] = []
    informer = _informer(objects, events, watch_timeout_s=1)
    informer.start()
    try:
        await asyncio.wait_for(informer.synced.wait(), 20)
        # The server ends every watch after a second; claims made across several of them all
        # arrive, in order, and the informer never lists again.
        for i in range(3):
            objects.create_namespaced_custom_object(
                GROUP, VERSION, "default", PLURAL, claim(f"b{i}")
            )
            await eventually(lambda i=i: f"b{i}" in _names(events, "ADDED"), f"claim b{i}")
            await asyncio.sleep(0.6)  # let the server's 1 s watch timeout pass between claims
        assert _names(events, "ADDED") == ["a", "b0", "b1", "b2"]
        assert informer.relists == 1
    finally:
        informer.stop()
        informer.join(5)


async def test_gone_history_means_a_relist_that_reports_what_was_missed(
    objects: client.CustomObjectsApi,
) -> None:
    for name in ("keep", "drop"):
        objects.create_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, claim(name))
    events: list[Event] = []
    informer = _informer(objects, events)
    informer.start()
    await asyncio.wait_for(informer.synced.wait(), 20)
    informer.stop()
    await asyncio.to_thread(informer.join, 10)
    # While it is away: one claim goes, one changes, and more happens than the history keeps.
    objects.delete_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, "drop")
    objects.patch_namespaced_custom_object(
        GROUP, VERSION, "default", PLURAL, "keep", {"metadata": {"labels": {"x": "1"}}}
    )
    for i in range(6):
        objects.create_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, claim(f"n{i}"))
    events.clear()
    informer.start()
    try:
        await eventually(lambda: informer.relists == 2, "the relist after 410 Gone")
        await eventually(lambda: len(_names(events, "ADDED")) == 6, "the new claims")
        assert _names(events, "DELETED") == ["drop"]
        assert _names(events, "MODIFIED") == ["keep"]
        modified = next(e for e in events if e.kind == "MODIFIED")
        assert modified.obj["metadata"]["labels"] == {"x": "1"}
    finally:
        informer.stop()
        informer.join(5)
