"""The learned workload profile outlives the controller: kept in a ConfigMap, read back by the
next one before its first decision."""

from __future__ import annotations

from typing import Any

import yaml
from kubernetes import client

from dra_driver.workload_profile import PROFILE_KEY, profile_text
from tests.integration.allocation.harness import Cluster, claim, eventually, pod, start_controller

NAME = "dra-workload"


def _kept(cluster: Cluster) -> list[Any]:
    try:
        found = cluster.core.read_namespaced_config_map(NAME, "default")
    except client.ApiException as err:
        if err.status == 404:
            return []
        raise
    return profile_text(found.data[PROFILE_KEY], NAME)


async def test_the_learned_profile_is_kept_and_taken_back(
    cluster: Cluster, api: client.ApiClient
) -> None:
    cluster.add_nodes(1)
    settings = {"workload_configmap": NAME, "workload_write_s": 0.05, "settle_s": 0.05}
    first = await start_controller(api, **settings)
    try:
        for name, count in (("one", 1), ("two", 2), ("one-more", 1)):
            cluster.create_claim(claim(f"{name}-gpu", count=count))
            cluster.create_pod(pod(name, [f"{name}-gpu"]))
        await eventually(
            lambda: sorted(e.weight for e in _kept(cluster)) == [1.0, 2.0],
            what="the learned profile in the ConfigMap",
        )
    finally:
        await first.shutdown()
    text = cluster.core.read_namespaced_config_map(NAME, "default").data[PROFILE_KEY]
    assert yaml.safe_load(text)["shapes"][0]["count"] == 2  # most common first, readable

    second = await start_controller(api, **settings)
    try:
        # Taken back when it starts leading, before any pod is decided.
        await eventually(lambda: second.daemon.profile.pods() == 3, what="the profile read back")
        assert second.daemon.profile.counted == set()
        cluster.create_claim(claim("three-gpu", count=1))
        cluster.create_pod(pod("three", ["three-gpu"]))
        await eventually(
            lambda: sorted(e.weight for e in _kept(cluster)) == [1.0, 3.0],
            what="the new pod counted on top",
        )
    finally:
        await second.shutdown()
