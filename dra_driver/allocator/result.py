"""Search picks turned into `status.allocation` objects, exactly as Kubernetes writes them."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from dra_driver.allocator.claims import Alternative, ClaimPlan
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


def allocation_config(plan: ClaimPlan, picks: Sequence[Pick]) -> list[dict[str, Any]]:
    """`devices.config` as the newest kube-scheduler writes it (Kubernetes 1.37).

    Each DeviceClass's configs appear once, at the first request that uses the class, naming
    every request (or chosen `request/subrequest`) that uses it. Each claim config appears once
    when it names no request, names a request, or names the subrequest chosen for one; a
    config naming only subrequests that were not chosen is left out. Finally a config that
    covers every request of the claim (by name or by its chosen subrequest) loses `requests`,
    since an empty list already means "all requests" and drivers read it that way.
    """
    chosen: dict[str, Alternative] = {}
    for request in plan.requests:
        alternative = next(
            (p.alternative for p in picks if p.alternative.request == request.name), None
        )
        if alternative is not None:
            chosen[request.name] = alternative
    config: list[dict[str, Any]] = []
    by_class: dict[str, list[dict[str, Any]]] = {}
    for alternative in chosen.values():
        entries = by_class.get(alternative.device_class.name)
        if entries is not None:
            for entry in entries:
                entry["requests"].append(alternative.result_name)
            continue
        entries = [
            {**entry, "source": "FromClass", "requests": [alternative.result_name]}
            for entry in alternative.device_class.config
        ]
        by_class[alternative.device_class.name] = entries
        config.extend(entries)
    for written in plan.config:
        names = written.get("requests") or []
        if names and not any(_covers(names, request, chosen) for request in chosen):
            continue
        config.append({**written, "source": "FromClaim"})
    for entry in config:
        names = entry.get("requests") or []
        if not names or all(_covers(names, r.name, chosen) for r in plan.requests):
            entry.pop("requests", None)
    return config


def _covers(names: Sequence[str], request: str, chosen: Mapping[str, Alternative]) -> bool:
    """Whether a config's `requests` reach a request: by its name or its chosen subrequest."""
    if request in names:
        return True
    alternative = chosen.get(request)
    return (
        alternative is not None
        and alternative.result_name != request
        and (alternative.result_name in names)
    )


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
    config = allocation_config(plan, picks)
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
