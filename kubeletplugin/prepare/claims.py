"""Reading a ResourceClaim and picking out what this plugin must prepare.

Kubelet sends only namespace, name and UID, so the claim is read from the API server. It is read
as plain parsed JSON, never through the typed client models: those drop fields they do not know
(new DRA fields arrive every release), and a dropped consumedCapacity or adminAccess would
silently change what prepare does. The client's custom-objects method is asked for the raw
response (`_preload_content=False`), so no model objects are built on the hot path; calling the
public method (not a hand-built URL) keeps the chart's RBAC derivable from the code.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from kubernetes import client

GROUP = "resource.k8s.io"
VERSION = "v1"
PLURAL = "resourceclaims"


class ClaimError(ValueError):
    """The claim cannot be prepared as it stands; the text is shown to the user as it is."""


class ClaimSource(Protocol):
    def get(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The claim as the API server has it, or None when it does not exist."""
        ...


class KubernetesClaimSource:
    def __init__(self, api: client.ApiClient) -> None:
        self._objects = client.CustomObjectsApi(api)

    def get(self, namespace: str, name: str) -> dict[str, Any] | None:
        if not namespace or not name:  # an empty segment would turn the GET into a list
            return None
        try:
            response: Any = self._objects.get_namespaced_custom_object(
                GROUP, VERSION, namespace, PLURAL, name, _preload_content=False
            )
        except client.ApiException as err:
            if err.status == 404:
                return None
            raise
        found = json.loads(response.data)
        if not isinstance(found, dict):
            raise client.ApiException(
                status=response.status, reason=f"ResourceClaim {namespace}/{name}: not an object"
            )
        return found


@dataclass(frozen=True, slots=True)
class AllocatedResult:
    """One entry of `status.allocation.devices.results` that names our driver."""

    index: int
    request: str
    pool: str
    device: str
    share_id: str | None
    admin_access: bool
    consumed_capacity: Mapping[str, object] | None

    @property
    def base_request(self) -> str:
        """What kubelet wants in `request_names`: `req` for a firstAvailable choice `req/sub`."""
        return self.request.split("/", 1)[0]

    @property
    def where(self) -> str:
        return f"status.allocation.devices.results[{self.index}]"


@dataclass(frozen=True, slots=True)
class ClaimAllocation:
    results: tuple[AllocatedResult, ...]
    config: Sequence[Mapping[str, Any]]


def claim_label(namespace: str, name: str) -> str:
    return f"ResourceClaim {namespace}/{name}"


def read_allocation(claim: Mapping[str, Any], uid: str, driver: str, pool: str) -> ClaimAllocation:
    """Check the claim is the one kubelet meant and allocated here; return our results.

    Results for other drivers are left to them. A result of our driver in another pool means
    the claim was allocated for another node, which kubelet would never ask us about unless
    something is badly wrong, so it is refused rather than skipped.
    """
    meta = claim.get("metadata") or {}
    label = claim_label(str(meta.get("namespace", "")), str(meta.get("name", "")))
    if meta.get("uid") != uid:
        raise ClaimError(
            f"{label}: metadata.uid is {meta.get('uid')!r}, kubelet asked for {uid!r}: "
            "the claim was deleted and created again; the old claim is no longer prepared here"
        )
    allocation = (claim.get("status") or {}).get("allocation")
    if not isinstance(allocation, Mapping):
        raise ClaimError(f"{label}: status.allocation is missing: the claim is not allocated")
    devices = allocation.get("devices") or {}
    raw_results = devices.get("results") or []
    if not isinstance(raw_results, list):
        raise ClaimError(f"{label}: status.allocation.devices.results must be a list")
    results: list[AllocatedResult] = []
    for index, raw in enumerate(raw_results):
        where = f"status.allocation.devices.results[{index}]"
        if not isinstance(raw, Mapping):
            raise ClaimError(f"{label}: {where} must be an object")
        if raw.get("driver") != driver:
            continue
        for key in ("request", "pool", "device"):
            if not isinstance(raw.get(key), str) or not raw.get(key):
                raise ClaimError(f"{label}: {where}.{key} must be a non-empty string")
        if raw["pool"] != pool:
            raise ClaimError(
                f"{label}: {where}.pool is {raw['pool']!r} but this is node {pool!r}: "
                "the claim was allocated for another node"
            )
        consumed = raw.get("consumedCapacity")
        if consumed is not None and not isinstance(consumed, Mapping):
            raise ClaimError(f"{label}: {where}.consumedCapacity must be an object")
        share = raw.get("shareID")
        results.append(
            AllocatedResult(
                index=index,
                request=str(raw["request"]),
                pool=str(raw["pool"]),
                device=str(raw["device"]),
                share_id=str(share) if share else None,
                admin_access=bool(raw.get("adminAccess")),
                consumed_capacity=consumed,
            )
        )
    config = devices.get("config") or []
    if not isinstance(config, list):
        raise ClaimError(f"{label}: status.allocation.devices.config must be a list")
    return ClaimAllocation(tuple(results), config)
