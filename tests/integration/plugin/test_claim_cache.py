"""The optional claim cache: a watched copy of every claim that prepare uses instead of a GET."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from dra_driver.kubeletapi.client import DraClient
from dra_driver.kubeletapi.types import ClaimRef
from kubeletplugin.prepare.claim_cache import ClaimCache, _interrupt
from localcluster.apiserver import ApiServer
from localcluster.control_planes import Server
from tests.integration.plugin.harness import (
    MERGE,
    create_claim,
    create_node,
    delete_claim,
    result,
    running_plugin,
    short_dir,
)
from tests.support.polling import eventually, wait_until

NODE = "cache-node"
WAIT_S = 10.0


@pytest.fixture(scope="module", autouse=True)
def nodes(api: client.ApiClient) -> None:
    create_node(api, NODE)


@pytest.fixture
def cache(api: client.ApiClient) -> Iterator[ClaimCache]:
    running = ClaimCache(api)
    running.start()
    try:
        assert running.wait_synced(WAIT_S)
        yield running
    finally:
        running.stop()


def patch_status(api: client.ApiClient, name: str, status: dict[str, Any]) -> None:
    client.CustomObjectsApi(api).patch_namespaced_custom_object_status(
        "resource.k8s.io",
        "v1",
        "default",
        "resourceclaims",
        name,
        {"status": status},
        _content_type=MERGE,
    )


def cached_uid(cache: ClaimCache, name: str) -> str | None:
    claim = cache._claims.get(("default", name))
    return None if claim is None else str(claim["metadata"]["uid"])


def test_serves_only_allocated_reserved_claims_and_follows_changes(
    api: client.ApiClient, cache: ClaimCache
) -> None:
    name, uid = create_claim(api, None)
    wait_until(lambda: cached_uid(cache, name) == uid)
    assert cache.lookup("default", name, uid) is None  # not allocated yet

    allocation = {"devices": {"results": [result("gpu", "gpu-0", NODE)], "config": []}}
    patch_status(api, name, {"allocation": allocation})
    wait_until(lambda: "allocation" in (cache._claims[("default", name)].get("status") or {}))
    assert cache.lookup("default", name, uid) is None  # allocated, not reserved yet

    patch_status(api, name, {"reservedFor": [{"resource": "pods", "name": "p", "uid": "p1"}]})
    wait_until(lambda: cache.lookup("default", name, uid) is not None)
    served = cache.lookup("default", name, uid)
    assert served is not None
    assert served["status"]["allocation"]["devices"]["results"][0]["device"] == "gpu-0"

    # Released again: the copy follows, and stops standing in for a GET.
    patch_status(api, name, {"reservedFor": None})
    wait_until(lambda: cache.lookup("default", name, uid) is None)

    delete_claim(api, name)
    wait_until(lambda: cached_uid(cache, name) is None)


def test_another_uid_under_the_same_name_is_not_served(
    api: client.ApiClient, cache: ClaimCache
) -> None:
    name, old_uid = create_claim(api, [result("gpu", "gpu-1", NODE)], reserved=True)
    wait_until(lambda: cache.lookup("default", name, old_uid) is not None)
    delete_claim(api, name)
    _, new_uid = create_claim(api, [result("gpu", "gpu-1", NODE)], name=name, reserved=True)
    wait_until(lambda: cache.lookup("default", name, new_uid) is not None)
    assert cache.lookup("default", name, old_uid) is None
    delete_claim(api, name)


def test_nothing_is_served_before_the_first_list_or_after_stop(api: client.ApiClient) -> None:
    name, uid = create_claim(api, [result("gpu", "gpu-0", NODE)], reserved=True)
    cache = ClaimCache(api)
    assert not cache.synced
    assert cache.lookup("default", name, uid) is None
    cache.start()
    try:
        assert cache.wait_synced(WAIT_S)
        assert cache.lookup("default", name, uid) is not None  # from the list
    finally:
        cache.stop()
    assert not cache.synced
    assert cache.lookup("default", name, uid) is None
    delete_claim(api, name)


def test_a_watch_behind_the_history_asks_for_a_new_list() -> None:
    # A tiny event history: after a burst of other writes, a watch from an old position is
    # answered with 410 Gone, which means "list again", not a failure.
    with (
        ApiServer(port=0, history=5) as small,
        client.ApiClient(client.Configuration(host=small.url)) as api,
    ):
        create_node(api, "history-node")
        cache = ClaimCache(api)
        version = cache._list()
        for index in range(10):
            create_node(api, f"burst-{index}")
        assert cache._watch(version) is None


def test_a_dropped_watch_is_listed_again_and_catches_up(
    api: client.ApiClient, cache: ClaimCache
) -> None:
    wait_until(lambda: cache._response is not None)
    lists = cache.lists
    _interrupt(cache._response)  # the connection to the API server breaks
    name, uid = create_claim(api, [result("gpu", "gpu-0", NODE)], reserved=True)
    wait_until(lambda: cache.lists > lists)
    wait_until(lambda: cache.lookup("default", name, uid) is not None)
    delete_claim(api, name)


def reads(running: Any, source: str) -> float:
    value = running.daemon.metrics.registry.get_sample_value(
        "dra_claim_reads_total", {"source": source}
    )
    return float(value or 0.0)


async def test_prepare_uses_the_cache_and_reads_the_api_server_when_it_cannot(
    server: Server, api: client.ApiClient
) -> None:
    with short_dir() as root:
        async with running_plugin(server, root, NODE, claim_cache=True) as plugin:
            cache = plugin.daemon.claim_cache
            assert cache is not None
            assert await asyncio.to_thread(cache.wait_synced, WAIT_S)
            name, uid = create_claim(api, [result("gpu", "gpu-0", NODE)], reserved=True)
            await eventually(lambda: cache.lookup("default", name, uid) is not None, in_thread=True)
            before = reads(plugin, "cache")
            async with DraClient(plugin.dra_socket) as dra:
                claim = ClaimRef("default", uid, name)
                outcome = (await dra.prepare([claim]))[uid]
                assert outcome.error == ""
                assert reads(plugin, "cache") == before + 1
                assert (await dra.unprepare([claim]))[uid] == ""

                # Replaced under the same name: the copy has the new UID, so the call for the
                # old one goes to the API server, which says why it is refused.
                delete_claim(api, name)
                _, new_uid = create_claim(
                    api, [result("gpu", "gpu-0", NODE)], name=name, reserved=True
                )
                await eventually(lambda: cached_uid(cache, name) == new_uid, in_thread=True)
                api_reads = reads(plugin, "api")
                error = (await dra.prepare([claim]))[uid].error
                assert "metadata.uid" in error and new_uid in error
                assert reads(plugin, "api") == api_reads + 1
        assert not cache.synced
