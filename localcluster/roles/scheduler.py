"""Stand-in for the kube-scheduler's DRA part: allocate and bind pods that carry no gate.

For each pending pod (no `spec.nodeName`, no scheduling gates) whose claims all exist, it
allocates the unallocated ones together with the allocator in first-fit mode — nodes in name
order, exactly what the kube-scheduler's structured allocator would choose for one pod — writes
each claim's `status.allocation` and `reservedFor`, and binds the pod by setting
`spec.nodeName`. Like the real scheduler, whose informers see the controller's allocations, it
re-reads the claims right before writing and gives up a choice whose devices were taken since
the pass began (the pass reads the cluster once and can take seconds). Pods that carry a
gate are left to the controller. Nothing is scored, nothing
is preempted; a pod that does not fit stays pending with `PodScheduled=False` (reason
`Unschedulable`, as the real scheduler reports it) and is tried again on the next pass.
"""

from __future__ import annotations

from typing import Any

import structlog
from kubernetes import dynamic

from dra_driver.allocator import AllocationError, AllocationMode, ClusterSnapshot, Placer, Usage
from dra_driver.allocator.result import allocation_node
from dra_driver.pod_claims import claim_names

log = structlog.get_logger(__name__)

MERGE = "application/merge-patch+json"


def _items(resource: Any) -> list[dict[str, Any]]:
    return list(resource.get().to_dict().get("items") or [])


def _mark_unschedulable(pods: Any, pod: dict[str, Any], message: str) -> None:
    """`PodScheduled=False, Unschedulable`, as the scheduler reports a pod it cannot place."""
    conditions = list((pod.get("status") or {}).get("conditions") or [])
    mine = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}
    if any(c.get("message") == message and c.items() >= mine.items() for c in conditions):
        return
    others = [c for c in conditions if c.get("type") != "PodScheduled"]
    pods.status.patch(
        body={"status": {"conditions": [*others, {**mine, "message": message}]}},
        name=pod["metadata"]["name"],
        namespace=pod["metadata"]["namespace"],
        content_type=MERGE,
    )


def _clash(
    snapshot: ClusterSnapshot,
    claims: Any,
    mine: list[dict[str, Any]],
    allocations: list[dict[str, Any]],
) -> str | None:
    """Re-check a choice against every claim as the API server has it right now."""
    keys = {(c["metadata"]["namespace"], c["metadata"]["name"]) for c in mine}
    others = [
        c for c in _items(claims) if (c["metadata"]["namespace"], c["metadata"]["name"]) not in keys
    ]
    usage = Usage.from_claims(snapshot, others)
    for allocation in allocations:
        why = usage.conflict(snapshot, allocation)
        if why is not None:
            return why
        usage.record(snapshot, allocation)
    return None


def reconcile_once(client: dynamic.DynamicClient) -> int:
    pods = client.resources.get(api_version="v1", kind="Pod")
    claims = client.resources.get(api_version="resource.k8s.io/v1", kind="ResourceClaim")
    slices = client.resources.get(api_version="resource.k8s.io/v1", kind="ResourceSlice")
    classes = client.resources.get(api_version="resource.k8s.io/v1", kind="DeviceClass")
    nodes = client.resources.get(api_version="v1", kind="Node")
    all_claims = _items(claims)
    node_objects = _items(nodes)
    snapshot = ClusterSnapshot.build(_items(slices), _items(classes), node_objects)
    schedulable = snapshot.schedulable_node_names()
    placer = Placer(
        snapshot,
        Usage.from_claims(snapshot, all_claims),
        AllocationMode.FIRST_FIT,
        nodes=schedulable,
    )
    by_key = {(c["metadata"]["namespace"], c["metadata"]["name"]): c for c in all_claims}
    bound = 0
    pending = [
        p
        for p in _items(pods)
        if not (p.get("spec") or {}).get("nodeName")
        and not (p.get("spec") or {}).get("schedulingGates")
        and not p["metadata"].get("deletionTimestamp")
    ]
    for pod in sorted(
        pending, key=lambda p: (p["metadata"].get("creationTimestamp", ""), p["metadata"]["name"])
    ):
        meta = pod["metadata"]
        names = claim_names(pod)
        if names is None or any((meta["namespace"], n) not in by_key for n in names):
            continue  # its claims are not all there yet
        pod_claims = [by_key[(meta["namespace"], n)] for n in names]
        unallocated = [c for c in pod_claims if not (c.get("status") or {}).get("allocation")]
        nodes_of = {
            allocation_node(c["status"]["allocation"]) for c in pod_claims if c not in unallocated
        }
        if unallocated:
            try:
                placement = placer.place(unallocated, nodes=schedulable)
            except AllocationError as err:
                log.warning("pod cannot be scheduled", pod=meta["name"], error=err.message)
                _mark_unschedulable(pods, pod, err.message)
                continue
            if placement.allocations is None:
                log.info("pod does not fit", pod=meta["name"], reason=placement.reason)
                _mark_unschedulable(pods, pod, placement.reason or "no node fits")
                continue
            clash = _clash(snapshot, claims, unallocated, placement.allocations)
            if clash is not None:
                # Another allocator (the controller) took devices since this pass read the
                # claims: drop the choice and look again next pass, as the scheduler would
                # after its cache caught up.
                for allocation in placement.allocations:
                    placer.release(allocation, str(placement.node))
                log.info("pod's devices were taken meanwhile", pod=meta["name"], reason=clash)
                continue
            for claim, allocation in zip(unallocated, placement.allocations, strict=True):
                claim.setdefault("status", {})["allocation"] = allocation
            nodes_of.add(placement.node)
        nodes_of.discard(None)
        if len(nodes_of) > 1:
            log.warning("pod's claims are allocated on different nodes", pod=meta["name"])
            continue
        # A pod without claims may go anywhere: the first schedulable node.
        node = next(iter(nodes_of), None) or (schedulable[0] if schedulable else None)
        if node is None:
            continue
        consumer = {"resource": "pods", "name": meta["name"], "uid": meta["uid"]}
        for claim in pod_claims:
            status = claim.setdefault("status", {})
            reserved = [r for r in status.get("reservedFor") or [] if r.get("uid") != meta["uid"]]
            status["reservedFor"] = [*reserved, consumer]
            written = claims.status.patch(
                body={
                    "status": {
                        "allocation": status["allocation"],
                        "reservedFor": status["reservedFor"],
                    }
                },
                name=claim["metadata"]["name"],
                namespace=meta["namespace"],
                content_type=MERGE,
            ).to_dict()
            by_key[(meta["namespace"], claim["metadata"]["name"])] = written
        pods.patch(
            body={"spec": {"nodeName": node}},
            name=meta["name"],
            namespace=meta["namespace"],
            content_type=MERGE,
        )
        bound += 1
    return bound
