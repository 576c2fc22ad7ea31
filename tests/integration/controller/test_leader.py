"""Leader election against the local API server, through the official client."""

from __future__ import annotations

import asyncio
import re
import threading
import time
import urllib.request
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config, watch
from prometheus_client.parser import text_string_to_metric_families

from controller.config import LeaderElection
from controller.leader import LeaderElector, micro_time
from controller.metrics import ACQUIRED, LOST, RELEASED, ControllerMetrics
from localcluster.control_planes import Server
from tests.integration.controller.conftest import (
    LEASE,
    NAMESPACE,
    Candidate,
    LeaderWatch,
    candidates,
    read_lease,
    settings,
)
from tests.support.polling import eventually

MICRO_TIME = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$")


def _holder(custom: client.CustomObjectsApi) -> str | None:
    try:
        return read_lease(custom)["spec"].get("holderIdentity")
    except client.ApiException as err:
        if err.status == 404:
            return None
        raise


def _stamp(text: str) -> datetime:
    return datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ")


def _lease_history(custom: client.CustomObjectsApi, since: str) -> list[dict[str, Any]]:
    """Every version of the Lease written after resourceVersion `since`, oldest first."""
    stream = watch.Watch().stream(
        custom.list_namespaced_custom_object,
        "coordination.k8s.io",
        "v1",
        NAMESPACE,
        "leases",
        resource_version=since,
        timeout_seconds=1,
    )
    return [event["object"] for event in stream if event["type"] in ("ADDED", "MODIFIED")]


def _leaders(group: list[Candidate]) -> list[str]:
    return [c.name for c in group if c.elector.is_leader()]


async def test_one_of_two_leads_and_writes_a_valid_lease(
    api_client: client.ApiClient, custom: client.CustomObjectsApi
) -> None:
    async with candidates(api_client, "a", "b") as group:
        electors = [c.elector for c in group]
        with LeaderWatch(electors) as seen:
            await eventually(lambda: len(_leaders(group)) == 1, what="a leader")
            leader = next(c for c in group if c.elector.is_leader())
            other = next(c for c in group if c is not leader)
            # A few renewals later the standby is still standing by.
            first = read_lease(custom)["spec"]["renewTime"]
            await eventually(lambda: read_lease(custom)["spec"]["renewTime"] != first)
        assert seen.overlaps == []
        assert _leaders(group) == [leader.name]

        spec = read_lease(custom)["spec"]
        assert spec["holderIdentity"] == leader.name
        assert spec["leaseDurationSeconds"] == 1
        assert spec["leaseTransitions"] == 0
        assert MICRO_TIME.match(spec["renewTime"]) and MICRO_TIME.match(spec["acquireTime"])
        typed = client.CoordinationV1Api(api_client).read_namespaced_lease(LEASE, NAMESPACE)
        assert typed.spec.holder_identity == leader.name
        assert typed.spec.renew_time.microsecond == _stamp(spec["renewTime"]).microsecond

        assert leader.metrics.registry.get_sample_value("dra_controller_leader") == 1
        assert other.metrics.registry.get_sample_value("dra_controller_leader") == 0
        assert leader.transitions(ACQUIRED) == 1 and other.transitions(ACQUIRED) == 0
        assert await asyncio.wait_for(leader.elector.wait_leading(), 5) == 1


async def test_standby_does_not_take_over_while_the_leader_renews(
    api_client: client.ApiClient, custom: client.CustomObjectsApi
) -> None:
    async with candidates(api_client, "a") as (a,):
        await asyncio.wait_for(a.elector.wait_leading(), 15)
        async with candidates(api_client, "b") as (b,):
            with LeaderWatch([a.elector, b.elector]) as seen:
                start = time.monotonic()
                renewals: set[str] = set()

                def renewed_for_three_lease_durations() -> bool:
                    renewals.add(read_lease(custom)["spec"]["renewTime"])
                    return time.monotonic() - start > 3 * 1.0 and len(renewals) >= 5

                await eventually(renewed_for_three_lease_durations, what="renewals")
            assert seen.ever_led == {"a"}
            assert seen.overlaps == []
            assert b.transitions(ACQUIRED) == 0
            assert a.elector.term == 1 and a.transitions(LOST) == 0
            assert read_lease(custom)["spec"]["leaseTransitions"] == 0


async def test_clean_stop_releases_and_the_standby_takes_over_at_once(
    api_client: client.ApiClient, custom: client.CustomObjectsApi
) -> None:
    # A long lease duration: a handover much faster than it can only come from the release.
    slow = {"lease_duration_s": 10.0, "renew_deadline_s": 6.0}
    async with candidates(api_client, "a", **slow) as (a,):
        await asyncio.wait_for(a.elector.wait_leading(), 15)
        async with candidates(api_client, "b", **slow) as (b,):
            with LeaderWatch([a.elector, b.elector]) as seen:
                since = read_lease(custom)["metadata"]["resourceVersion"]
                stopped = time.monotonic()
                await a.stop_cleanly()
                assert not a.elector.is_leader()
                await asyncio.wait_for(b.elector.wait_leading(), 15)
                handover = time.monotonic() - stopped
            assert seen.overlaps == []
            assert handover < 5.0
            history = await asyncio.to_thread(_lease_history, custom, since)
            holders = [v["spec"].get("holderIdentity") for v in history]
            released = holders.index(None)
            assert set(holders[:released]) <= {"a"} and holders[released + 1 :][0] == "b"
            spec = read_lease(custom)["spec"]
            assert spec["holderIdentity"] == "b"
            assert spec["leaseTransitions"] == 1
            assert a.transitions(RELEASED) == 1 and a.transitions(LOST) == 0
            assert a.metrics.registry.get_sample_value("dra_controller_leader") == 0


async def test_release_without_standby_clears_the_holder(
    api_client: client.ApiClient, custom: client.CustomObjectsApi
) -> None:
    async with candidates(api_client, "a") as (a,):
        await asyncio.wait_for(a.elector.wait_leading(), 15)
        await a.stop_cleanly()
    spec = read_lease(custom)["spec"]
    assert "holderIdentity" not in spec or not spec["holderIdentity"]
    assert spec["leaseDurationSeconds"] == 1


async def test_crashed_leader_is_replaced_after_the_lease_duration(
    api_client: client.ApiClient, custom: client.CustomObjectsApi
) -> None:
    async with candidates(api_client, "a") as (a,):
        await asyncio.wait_for(a.elector.wait_leading(), 15)
        async with candidates(api_client, "b") as (b,):
            with LeaderWatch([a.elector, b.elector]) as seen:
                before = read_lease(custom)
                await a.crash()
                assert not a.elector.is_leader()
                await asyncio.wait_for(b.elector.wait_leading(), 15)
            assert seen.overlaps == []
            assert a.transitions(LOST) == 1 and a.transitions(RELEASED) == 0
            since = before["metadata"]["resourceVersion"]
            history = [before, *await asyncio.to_thread(_lease_history, custom, since)]
            last_by_a = [v for v in history if v["spec"].get("holderIdentity") == "a"][-1]
            taken = next(v for v in history if v["spec"].get("holderIdentity") == "b")
            assert all(v["spec"].get("holderIdentity") for v in history), "a must not release"
            # b waited out a whole lease duration after a's last renewal (same host's clock).
            waited = _stamp(taken["spec"]["acquireTime"]) - _stamp(last_by_a["spec"]["renewTime"])
            assert waited.total_seconds() >= 1.0
            assert taken["spec"]["leaseTransitions"] == 1


async def test_leader_stops_at_once_when_another_writer_takes_the_lease(
    api_client: client.ApiClient, custom: client.CustomObjectsApi
) -> None:
    async with candidates(api_client, "a") as (a,):
        term = await asyncio.wait_for(a.elector.wait_leading(), 15)

        def take_by_force() -> None:
            while True:
                lease = read_lease(custom)
                lease["spec"].update(holderIdentity="intruder", renewTime=micro_time())
                try:
                    custom.replace_namespaced_custom_object(
                        "coordination.k8s.io", "v1", NAMESPACE, "leases", LEASE, lease
                    )
                    return
                except client.ApiException as err:
                    if err.status != 409:  # a renewal came in between: read again
                        raise

        await asyncio.to_thread(take_by_force)
        taken = time.monotonic()
        await asyncio.wait_for(a.elector.wait_not_leading(), 15)
        assert not a.elector.is_leader() and not a.elector.is_leader(term)
        assert a.transitions(LOST) == 1
        assert a.metrics.registry.get_sample_value("dra_controller_leader") == 0

        # The intruder never renews, so a takes the Lease back once it expires: a new term,
        # and the old one stays fenced off.
        new_term = await asyncio.wait_for(a.elector.wait_leading(), 15)
        assert time.monotonic() - taken >= 1.0
        assert new_term == term + 1
        assert a.elector.is_leader(new_term) and not a.elector.is_leader(term)
        assert read_lease(custom)["spec"]["holderIdentity"] == "a"


async def test_leader_stops_within_renew_deadline_when_the_api_server_is_gone(
    server: Server, api_client: client.ApiClient
) -> None:
    async with candidates(api_client, "a") as (a,):
        term = await asyncio.wait_for(a.elector.wait_leading(), 15)
        gone = time.monotonic()
        await asyncio.to_thread(server.stop)
        # The stopped server's handler threads would go on serving kept-alive connections.
        api_client.rest_client.pool_manager.clear()
        # Whatever the renewal loop is doing, the fence holds at the deadline.
        await asyncio.sleep(max(0.0, gone + settings("a").renew_deadline_s - time.monotonic()))
        assert not a.elector.is_leader(term)
        await asyncio.wait_for(a.elector.wait_not_leading(), 15)
        assert not a.elector.is_leader()
        assert a.transitions(LOST) == 1
        await a.stop_cleanly()
        assert not a.elector.is_leader(term) and a.transitions(RELEASED) == 0


class RacingApiClient(client.ApiClient):
    """Holds the first two writes until both have been sent, so they race for the same record."""

    def __init__(self, configuration: client.Configuration) -> None:
        super().__init__(configuration)
        self._barrier = threading.Barrier(2, timeout=15)
        self._lock = threading.Lock()
        self._held = 0
        self.write_statuses: list[int] = []

    def call_api(self, method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        if method not in ("POST", "PUT"):
            return super().call_api(method, url, *args, **kwargs)
        with self._lock:
            self._held += 1
            hold = self._held <= 2
        if hold:
            self._barrier.wait()
        try:
            response = super().call_api(method, url, *args, **kwargs)
        except client.ApiException as err:
            status = int(err.status)
            raise
        else:
            status = int(response.status)
            return response
        finally:
            with self._lock:
                self.write_statuses.append(status)


@pytest.mark.parametrize("existing", [False, True], ids=["create-race", "update-race"])
async def test_standbys_racing_for_the_lease_end_with_one_leader(
    kubeconfig: Path, custom: client.CustomObjectsApi, existing: bool
) -> None:
    if existing:  # a released Lease: no holder, anyone may take it at once
        custom.create_namespaced_custom_object(
            "coordination.k8s.io",
            "v1",
            NAMESPACE,
            "leases",
            {"metadata": {"name": LEASE}, "spec": {"leaseDurationSeconds": 1}},
        )
    configuration = client.Configuration()
    config.load_kube_config(config_file=str(kubeconfig), client_configuration=configuration)
    racing = RacingApiClient(configuration)

    async with candidates(racing, "a", "b") as group:
        with LeaderWatch([c.elector for c in group]) as seen:
            await eventually(lambda: len(_leaders(group)) == 1, what="a leader")
            winner = _leaders(group)[0]
            renewed = read_lease(custom)["spec"]["renewTime"]
            await eventually(lambda: read_lease(custom)["spec"]["renewTime"] != renewed)
        assert seen.overlaps == [] and seen.ever_led == {winner}
        assert sorted(racing.write_statuses[:2]) == [200 if existing else 201, 409]
        spec = read_lease(custom)["spec"]
        assert spec["holderIdentity"] == winner
        assert spec["leaseTransitions"] == (1 if existing else 0)


async def test_disabled_election_always_leads_and_touches_no_lease(
    custom: client.CustomObjectsApi,
) -> None:
    metrics = ControllerMetrics()
    elector = LeaderElector(LeaderElection(enabled=False), None, metrics=metrics)
    assert elector.is_leader()
    stop = asyncio.Event()
    runner = asyncio.create_task(elector.run(stop))
    await asyncio.wait_for(elector.wait_leading(), 5)
    await eventually(lambda: metrics.registry.get_sample_value("dra_controller_leader") == 1)
    stop.set()
    await asyncio.wait_for(runner, 5)
    assert elector.is_leader()
    with pytest.raises(client.ApiException) as info:
        read_lease(custom)
    assert info.value.status == 404


def test_micro_time_always_has_six_fractional_digits() -> None:
    assert micro_time(datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC)) == "2025-01-02T03:04:05.000000Z"
    assert (
        micro_time(datetime(2025, 1, 2, 3, 4, 5, 70, tzinfo=UTC)) == "2025-01-02T03:04:05.000070Z"
    )


def test_enabled_election_needs_a_client_an_identity_and_sane_timing(
    api_client: client.ApiClient,
) -> None:
    with pytest.raises(ValueError, match="API client"):
        LeaderElector(settings("a"), None)
    with pytest.raises(ValueError, match="identity"):
        LeaderElector(settings(""), api_client)
    with pytest.raises(ValueError, match="lease-duration > renew-deadline"):
        LeaderElector(settings("a", renew_deadline_s=2.0), api_client)


async def test_leadership_shows_in_a_metrics_scrape(api_client: client.ApiClient) -> None:
    async with candidates(api_client, "a") as (a,):
        await asyncio.wait_for(a.elector.wait_leading(), 15)
        endpoint = a.metrics.serve(0, "127.0.0.1")
        try:

            def scrape() -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
                url = f"http://127.0.0.1:{endpoint.port}/metrics"
                with urllib.request.urlopen(url, timeout=5) as response:
                    text = response.read().decode()
                return {
                    (s.name, tuple(sorted(s.labels.items()))): s.value
                    for family in text_string_to_metric_families(text)
                    for s in family.samples
                }

            samples = await asyncio.to_thread(scrape)
        finally:
            await asyncio.to_thread(endpoint.shutdown)
    assert samples[("dra_controller_leader", ())] == 1
    assert samples[("dra_controller_leader_transitions_total", (("event", ACQUIRED),))] == 1
    assert samples[("dra_controller_leader_transitions_total", (("event", LOST),))] == 0
