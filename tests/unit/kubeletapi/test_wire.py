"""Protobuf <-> dataclass translation, including what each DRA version can carry."""

from __future__ import annotations

import pytest

from dra_driver.kubeletapi import DRA_V1, DRA_V1BETA1, HEALTH_V1ALPHA1, wire
from dra_driver.kubeletapi.gen import (
    dra_health_v1alpha1_pb2,
    dra_v1_pb2,
    dra_v1beta1_pb2,
    pluginregistration_pb2,
)
from dra_driver.kubeletapi.types import (
    ClaimRef,
    DeviceHealthStatus,
    Health,
    PluginInfo,
    PreparedDevice,
    PrepareOutcome,
)

DEV = PreparedDevice(
    request_names=("gpu",),
    pool_name="node-a",
    device_name="gpu-0-shared",
    cdi_device_ids=("k8s.gpu.dra-driver.dev/gpu=abc",),
    share_id="share-1",
)


def test_service_names_match_the_wire_facts() -> None:
    assert wire.prepare_path(DRA_V1) == (
        "/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/NodePrepareResources"
    )
    assert wire.unprepare_path(DRA_V1BETA1) == (
        "/k8s.io.kubelet.pkg.apis.dra.v1beta1.DRAPlugin/NodeUnprepareResources"
    )
    assert wire.HEALTH_SERVICE == HEALTH_V1ALPHA1
    health = dra_health_v1alpha1_pb2.DESCRIPTOR.services_by_name["DRAResourceHealth"]
    assert health.full_name == HEALTH_V1ALPHA1
    reg = pluginregistration_pb2.DESCRIPTOR.services_by_name["Registration"]
    assert f"/{reg.full_name}/GetInfo" == wire.GET_INFO
    with pytest.raises(ValueError, match="v2"):
        wire.dra_module("v2.DRAPlugin")


def test_v1beta1_device_has_no_share_id() -> None:
    assert "share_id" in dra_v1_pb2.Device.DESCRIPTOR.fields_by_name
    assert "share_id" not in dra_v1beta1_pb2.Device.DESCRIPTOR.fields_by_name


@pytest.mark.parametrize("version", [DRA_V1, DRA_V1BETA1])
def test_prepare_round_trip(version: str) -> None:
    outcomes = {
        "u1": PrepareOutcome(devices=(DEV, PreparedDevice((), "p", "d", ()))),
        "u2": PrepareOutcome(error="boom"),
    }
    message = wire.prepare_response(version, outcomes)
    back = wire.prepare_outcomes(type(message).FromString(message.SerializeToString()))
    if version == DRA_V1:
        assert back == outcomes
    else:
        assert back["u1"].devices[0].share_id is None
        assert back["u1"].devices[0].cdi_device_ids == DEV.cdi_device_ids
        assert back["u2"] == PrepareOutcome(error="boom")


def test_unset_share_id_stays_unset_on_v1() -> None:
    device = PreparedDevice(("a",), "p", "d", ("x",))
    message = wire.prepare_response(DRA_V1, {"u": PrepareOutcome(devices=(device,))})
    assert not message.claims["u"].devices[0].HasField("share_id")
    assert wire.prepare_outcomes(message)["u"].devices[0].share_id is None


@pytest.mark.parametrize("version", [DRA_V1, DRA_V1BETA1])
def test_claims_and_unprepare_round_trip(version: str) -> None:
    claims = [ClaimRef("ns", "u1", "a"), ClaimRef("ns2", "u2", "b")]
    request = wire.prepare_request(version, claims)
    assert wire.claim_refs(request.claims) == claims
    assert wire.claim_refs(wire.unprepare_request(version, claims).claims) == claims
    errors = {"u1": "", "u2": "busy"}
    assert wire.unprepare_errors(wire.unprepare_response(version, errors)) == errors


def test_plugin_info_round_trip() -> None:
    info = PluginInfo("DRAPlugin", "drv", "/x/dra.sock", ("v1.DRAPlugin", "v1beta1.DRAPlugin"))
    assert wire.plugin_info(wire.plugin_info_message(info)) == info


def test_health_round_trip_and_truncation() -> None:
    long = "é" * 600  # 1200 bytes; 1024 would split the 513th character
    statuses = [
        DeviceHealthStatus("p", "gpu-0", Health.UNHEALTHY, 1700000000, 30, long),
        DeviceHealthStatus("p", "gpu-1", Health.HEALTHY, 1700000001, 0, "ok"),
    ]
    back = wire.health_statuses(wire.health_response(statuses))
    assert back[1] == statuses[1]
    assert back[0].message == "é" * 512
    assert len(back[0].message.encode()) == 1024
    assert back[0].health is Health.UNHEALTHY


def test_truncate_utf8_keeps_whole_characters() -> None:
    assert wire.truncate_utf8("abc", 2) == "ab"
    assert wire.truncate_utf8("a€", 3) == "a"
    assert wire.truncate_utf8("short") == "short"
