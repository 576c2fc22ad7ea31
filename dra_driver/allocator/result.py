"""Search picks turned into `status.allocation` objects, exactly as Kubernetes writes them."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from dra_driver.allocator.claims import ClaimPlan
from dra_driver.allocator.quantities import format_amount
from dra_driver.allocator.search import Pick
from dra_driver.allocator.snapshot import ClusterSnapshot

_SHARE_NAMESPACE = uuid.UUID("8f4c0e52-3a51-4b7e-9a7c-2f0d7d1c9b11")


def share_id(plan: ClaimPlan, index: int, pick: Pick) -> str:
    """Deterministic per claim and result, so a re-run of the same input prints the same IDs.

    Unique among live shares: one claim is allocated at most once at a time, and the result
    index separates two shares of one device within a claim.
    """
    name = f"{plan.uid}/{index}/{pick.alternative.result_name}/{pick.device.name}"
    return str(uuid.uuid5(_SHARE_NAMESPACE, name))


def _unqualified(name: str, driver: str) -> str:
    prefix = f"{driver}/"
    return name[len(prefix) :] if name.startswith(prefix) else name


def allocation_node(allocation: Mapping[str, Any]) -> str | None:
    """The node a `status.allocation` is tied to (its `metadata.name` field selector), if any."""
    for term in (allocation.get("nodeSelector") or {}).get("nodeSelectorTerms") or []:
        for field in term.get("matchFields") or []:
            if field.get("key") == "metadata.name" and field.get("values"):
                return str(field["values"][0])
    return None


def build_allocation(
    snapshot: ClusterSnapshot, plan: ClaimPlan, picks: Sequence[Pick], node: str
) -> dict[str, Any]:
    results: list[dict[str, Any]] = []
    node_local = False
    selector: Mapping[str, Any] | None = None
    for index, pick in enumerate(picks):
        device = pick.device
        result: dict[str, Any] = {
            "request": pick.alternative.result_name,
            "driver": device.driver,
            "pool": snapshot.pool_of(device).name,
            "device": device.name,
        }
        if pick.alternative.admin_access:
            result["adminAccess"] = True
        if pick.alternative.tolerations:
            result["tolerations"] = [dict(t.raw) for t in pick.alternative.tolerations]
        if pick.share is not None:
            result["shareID"] = share_id(plan, index, pick)
            result["consumedCapacity"] = {
                _unqualified(name, device.driver): format_amount(amount)
                for name, amount in pick.share.items()
            }
        results.append(result)
        if device.node_name is not None:
            node_local = True
        elif device.node_selector is not None and selector is None:
            selector = device.node_selector
    config: list[dict[str, Any]] = []
    for request in plan.requests:
        chosen = next((p.alternative for p in picks if p.alternative.request == request.name), None)
        if chosen is None:
            continue
        for entry in chosen.device_class.config:
            config.append({"source": "FromClass", "requests": [chosen.result_name], **entry})
    for entry in plan.config:
        config.append({"source": "FromClaim", **entry})
    allocation: dict[str, Any] = {"devices": {"results": results}}
    if config:
        allocation["devices"]["config"] = config
    if node_local:
        allocation["nodeSelector"] = {
            "nodeSelectorTerms": [
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
            ]
        }
    elif selector is not None:
        allocation["nodeSelector"] = dict(selector)
    return allocation
