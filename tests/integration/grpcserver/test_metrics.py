from __future__ import annotations

import asyncio
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

from dra_driver.kubeletapi import DRA_V1, DRA_V1BETA1
from dra_driver.kubeletapi.client import DraClient
from dra_driver.kubeletapi.types import ClaimRef
from kubeletplugin.metrics import PluginMetrics
from kubeletplugin.server import PluginServers
from tests.integration.grpcserver.fakes import FakeNodeDriver


def _scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


async def test_calls_show_up_in_scrape(
    servers: PluginServers, driver: FakeNodeDriver, metrics: PluginMetrics
) -> None:
    endpoint = metrics.serve(0, "127.0.0.1")
    try:
        driver.omit.add("uid-b")
        async with DraClient(servers.dra_socket, DRA_V1) as v1:
            await v1.prepare([ClaimRef("ns", "uid-a", "a"), ClaimRef("ns", "uid-b", "b")])
        async with DraClient(servers.dra_socket, DRA_V1BETA1) as v1beta1:
            await v1beta1.unprepare([ClaimRef("ns", "uid-a", "a"), ClaimRef("ns", "uid-c", "c")])
        metrics.set_prepared_devices(3)

        samples = await asyncio.to_thread(_scrape, endpoint.port)
    finally:
        await asyncio.to_thread(endpoint.shutdown)

    assert samples[("dra_prepare_claims_total", (("outcome", "success"),))] == 1
    assert samples[("dra_prepare_claims_total", (("outcome", "error"),))] == 1
    assert samples[("dra_unprepare_claims_total", (("outcome", "success"),))] == 1
    assert samples[("dra_unprepare_claims_total", (("outcome", "error"),))] == 1
    assert samples[("dra_prepared_devices", ())] == 3
    prepare_v1 = (("method", "NodePrepareResources"), ("version", DRA_V1))
    unprepare_beta = (("method", "NodeUnprepareResources"), ("version", DRA_V1BETA1))
    assert samples[("dra_grpc_request_duration_seconds_count", prepare_v1)] == 1
    assert samples[("dra_grpc_request_duration_seconds_count", unprepare_beta)] == 1
