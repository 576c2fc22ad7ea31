"""Method paths and the translation between protobuf messages and :mod:`.types`.

Client and servers both go through these functions, so a field mapping exists exactly once.
The DRA v1 and v1beta1 messages have the same shape apart from ``Device.share_id``; one
function per direction serves both, choosing the message classes by version.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from types import ModuleType
from typing import Final

from dra_driver.kubeletapi import DRA_V1, DRA_V1BETA1
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

REGISTRATION_SERVICE: Final = "pluginregistration.Registration"
GET_INFO: Final = f"/{REGISTRATION_SERVICE}/GetInfo"
NOTIFY_REGISTRATION_STATUS: Final = f"/{REGISTRATION_SERVICE}/NotifyRegistrationStatus"

HEALTH_SERVICE: Final = "v1alpha1.DRAResourceHealth"
NODE_WATCH_RESOURCES: Final = f"/{HEALTH_SERVICE}/NodeWatchResources"

GRPC_HEALTH_SERVICE: Final = "grpc.health.v1.Health"
GRPC_HEALTH_CHECK: Final = f"/{GRPC_HEALTH_SERVICE}/Check"

#: Kubelet rejects longer health messages; we cut them instead.
HEALTH_MESSAGE_LIMIT: Final = 1024

_DRA_MODULES: Final[Mapping[str, ModuleType]] = {
    DRA_V1: dra_v1_pb2,
    DRA_V1BETA1: dra_v1beta1_pb2,
}

DraPrepareRequest = (
    dra_v1_pb2.NodePrepareResourcesRequest | dra_v1beta1_pb2.NodePrepareResourcesRequest
)
DraPrepareResponse = (
    dra_v1_pb2.NodePrepareResourcesResponse | dra_v1beta1_pb2.NodePrepareResourcesResponse
)
DraUnprepareRequest = (
    dra_v1_pb2.NodeUnprepareResourcesRequest | dra_v1beta1_pb2.NodeUnprepareResourcesRequest
)
DraUnprepareResponse = (
    dra_v1_pb2.NodeUnprepareResourcesResponse | dra_v1beta1_pb2.NodeUnprepareResourcesResponse
)


def dra_module(version: str) -> ModuleType:
    """The generated module of a DRA service version; unknown versions are a caller bug."""
    try:
        return _DRA_MODULES[version]
    except KeyError:
        raise ValueError(
            f"unknown DRA service version {version!r}; expected one of {sorted(_DRA_MODULES)}"
        ) from None


def dra_service_name(version: str) -> str:
    """Full gRPC service name, e.g. ``k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin``."""
    module = dra_module(version)
    return str(module.DESCRIPTOR.services_by_name["DRAPlugin"].full_name)


def prepare_path(version: str) -> str:
    return f"/{dra_service_name(version)}/NodePrepareResources"


def unprepare_path(version: str) -> str:
    return f"/{dra_service_name(version)}/NodeUnprepareResources"


def claim_refs(claims: Iterable[object]) -> list[ClaimRef]:
    """Claims of a prepare or unprepare request, of either version."""
    return [
        ClaimRef(namespace=str(c.namespace), uid=str(c.uid), name=str(c.name))  # type: ignore[attr-defined]
        for c in claims
    ]


def prepare_request(version: str, claims: Sequence[ClaimRef]) -> DraPrepareRequest:
    module = dra_module(version)
    request: DraPrepareRequest = module.NodePrepareResourcesRequest(
        claims=[module.Claim(namespace=c.namespace, uid=c.uid, name=c.name) for c in claims]
    )
    return request


def unprepare_request(version: str, claims: Sequence[ClaimRef]) -> DraUnprepareRequest:
    module = dra_module(version)
    request: DraUnprepareRequest = module.NodeUnprepareResourcesRequest(
        claims=[module.Claim(namespace=c.namespace, uid=c.uid, name=c.name) for c in claims]
    )
    return request


def prepare_response(version: str, outcomes: Mapping[str, PrepareOutcome]) -> DraPrepareResponse:
    """Encode outcomes; v1beta1 has no share_id, so it is dropped there."""
    module = dra_module(version)
    with_share_id = version == DRA_V1
    response: DraPrepareResponse = module.NodePrepareResourcesResponse()
    for uid, outcome in outcomes.items():
        entry = response.claims[uid]
        entry.error = outcome.error
        for device in outcome.devices:
            message = entry.devices.add()
            message.request_names.extend(device.request_names)
            message.pool_name = device.pool_name
            message.device_name = device.device_name
            message.cdi_device_ids.extend(device.cdi_device_ids)
            if with_share_id and device.share_id is not None:
                message.share_id = device.share_id
    return response


def prepare_outcomes(response: DraPrepareResponse) -> dict[str, PrepareOutcome]:
    outcomes: dict[str, PrepareOutcome] = {}
    for uid, entry in response.claims.items():
        devices = []
        for device in entry.devices:
            share_id: str | None = None
            if isinstance(device, dra_v1_pb2.Device) and device.HasField("share_id"):
                share_id = device.share_id
            devices.append(
                PreparedDevice(
                    request_names=tuple(device.request_names),
                    pool_name=device.pool_name,
                    device_name=device.device_name,
                    cdi_device_ids=tuple(device.cdi_device_ids),
                    share_id=share_id,
                )
            )
        outcomes[uid] = PrepareOutcome(devices=tuple(devices), error=entry.error)
    return outcomes


def unprepare_response(version: str, errors: Mapping[str, str]) -> DraUnprepareResponse:
    module = dra_module(version)
    response: DraUnprepareResponse = module.NodeUnprepareResourcesResponse()
    for uid, error in errors.items():
        response.claims[uid].error = error
    return response


def unprepare_errors(response: DraUnprepareResponse) -> dict[str, str]:
    return {uid: entry.error for uid, entry in response.claims.items()}


def plugin_info_message(info: PluginInfo) -> pluginregistration_pb2.PluginInfo:
    return pluginregistration_pb2.PluginInfo(
        type=info.type,
        name=info.name,
        endpoint=info.endpoint,
        supported_versions=list(info.supported_versions),
    )


def plugin_info(message: pluginregistration_pb2.PluginInfo) -> PluginInfo:
    return PluginInfo(
        type=message.type,
        name=message.name,
        endpoint=message.endpoint,
        supported_versions=tuple(message.supported_versions),
    )


def truncate_utf8(text: str, limit: int = HEALTH_MESSAGE_LIMIT) -> str:
    """Cut ``text`` to at most ``limit`` UTF-8 bytes without splitting a character."""
    encoded = text.encode("utf-8")
    if len(encoded) <= limit:
        return text
    return encoded[:limit].decode("utf-8", errors="ignore")


def health_response(
    statuses: Iterable[DeviceHealthStatus],
) -> dra_health_v1alpha1_pb2.NodeWatchResourcesResponse:
    response = dra_health_v1alpha1_pb2.NodeWatchResourcesResponse()
    for status in statuses:
        entry = response.devices.add()
        entry.device.pool_name = status.pool_name
        entry.device.device_name = status.device_name
        entry.health = status.health.value
        entry.last_updated_time = status.last_updated
        entry.health_check_timeout_seconds = status.timeout_seconds
        entry.message = truncate_utf8(status.message)
    return response


def health_statuses(
    response: dra_health_v1alpha1_pb2.NodeWatchResourcesResponse,
) -> list[DeviceHealthStatus]:
    return [
        DeviceHealthStatus(
            pool_name=entry.device.pool_name,
            device_name=entry.device.device_name,
            health=_health(entry.health),
            last_updated=entry.last_updated_time,
            timeout_seconds=entry.health_check_timeout_seconds,
            message=entry.message,
        )
        for entry in response.devices
    ]


def _health(value: int) -> Health:
    """Values a newer server might add read as UNKNOWN rather than failing the stream."""
    try:
        return Health(value)
    except ValueError:
        return Health.UNKNOWN
