"""Stand-in for the kube-scheduler's DRA part: allocate and bind pods that carry no gate.

For each pending pod (no `spec.nodeName`, no scheduling gates) whose claims all exist, it
allocates the unallocated ones together with the allocator in first-fit mode — nodes in name
order, exactly what the kube-scheduler's structured allocator would choose for one pod — writes
each claim's `status.allocation` and `reservedFor`, and binds the pod by setting
`spec.nodeName`. Like the real scheduler, whose informers see the controller's allocations, it
re-reads the claims right before writing and gives up a choice whose devices were taken since
the pass began (the pass reads the cluster once and can take seconds); and its claim writes,
like the real scheduler's, are conditional on the resourceVersion it read, so a claim written
meanwhile refuses them (409) and the pod is tried again on the next pass. Pods that carry a
gate are left to the controller. As the scheduler's NodeResourcesFit does, it places a pod only
where its CPU, memory and other requests fit what the node's `status.allocatable` has left after
the pods bound or nominated there (`dra_driver.noderesources`). Nothing is scored, nothing
is preempted; a pod that does not fit stays pending with `PodScheduled=False` (reason
`Unschedulable`, as the real scheduler reports it) and is tried again on the next pass.
"""

from __future__ import annotations

from typing import Any

import structlog
from kubernetes import dynamic
from kubernetes.dynamic.exceptions import ConflictError

from dra_driver.allocator import AllocationError, AllocationMode, ClusterSnapshot, Placer, Usage
from dra_driver.allocator.result import allocation_node
from dra_driver.noderesources import (
    NodeUsage,
    Resources,
    Shortfall,
    insufficient,
    node_allocatable,
    pod_requests,
)
from dra_driver.pod_claims import claim_names

log = structlog.get_logger(__name__)

MERGE = "application/merge-patch+json"
Obj = dict[str, Any]


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


def _write_claims(
    claims: Any, pod_claims: list[Obj], consumer: Obj, by_key: dict[tuple[str, str], Obj]
) -> bool:
    """Each claim's allocation and the pod in its `reservedFor`, each write conditional on the
    resourceVersion read (as the kube-scheduler's writes are): False, and the pod left unbound,
    when a claim changed since (another allocator wrote it)."""
    for claim in pod_claims:
        meta = claim["metadata"]
        status = claim.setdefault("status", {})
        reserved = [r for r in status.get("reservedFor") or [] if r.get("uid") != consumer["uid"]]
        status["reservedFor"] = [*reserved, consumer]
        try:
            written = claims.status.patch(
                body={
                    "metadata": {"resourceVersion": meta["resourceVersion"]},
                    "status": {
                        "allocation": status["allocation"],
                        "reservedFor": status["reservedFor"],
                    },
                },
                name=meta["name"],
                namespace=meta["namespace"],
                content_type=MERGE,
            ).to_dict()
        except ConflictError:
            log.info("claim changed since it was read", claim=meta["name"], pod=consumer["name"])
            return False
        by_key[(meta["namespace"], meta["name"])] = written
    return True


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


FINISHED_PHASES = ("Succeeded", "Failed")


class NodeRoom:
    """What each node has left for pods in this pass: allocatable less the requests of the pods
    bound or nominated there (finished pods excepted, as the scheduler does not watch them)."""

    def __init__(self, nodes: list[dict[str, Any]], pods: list[dict[str, Any]]) -> None:
        self.allocatable = {n["metadata"]["name"]: node_allocatable(n) for n in nodes}
        self.used: dict[str, NodeUsage] = {}
        self.nominated: dict[tuple[str, str], tuple[str, Resources]] = {}
        for pod in pods:
            if (pod.get("status") or {}).get("phase") in FINISHED_PHASES:
                continue
            bound = (pod.get("spec") or {}).get("nodeName")
            nominated = (pod.get("status") or {}).get("nominatedNodeName")
            if bound or nominated:
                requests = pod_requests(pod)
                self.take(str(bound or nominated), requests)
                if not bound:
                    meta = pod["metadata"]
                    self.nominated[(meta["namespace"], meta["name"])] = (str(nominated), requests)

    def lacking(self, requests: Resources, node: str) -> list[Shortfall]:
        allocatable = self.allocatable.get(node)
        if allocatable is None:
            return []  # publishes no allocatable: nothing to check against
        return insufficient(requests, allocatable, self.used.get(node, NodeUsage()))

    def take(self, node: str, requests: Resources) -> None:
        self.used[node] = self.used.get(node, NodeUsage()).plus(requests)

    def consider(self, pod: dict[str, Any]) -> None:
        """A pod about to be placed no longer holds the node it was nominated for: it is
        placed afresh (and taken where it lands)."""
        meta = pod["metadata"]
        nominated = self.nominated.pop((meta["namespace"], meta["name"]), None)
        if nominated is not None:
            node, requests = nominated
            self.used[node] = self.used[node].minus(requests)


def no_room_message(lacking: dict[str, list[Shortfall]], total: int) -> str:
    """The scheduler's summary: "0/3 nodes are available: 2 Insufficient cpu, 1 Too many pods"."""
    counts: dict[str, int] = {}
    for shortfalls in lacking.values():
        for shortfall in shortfalls:
            reason = (
                "Too many pods"
                if shortfall.resource == "pods"
                else f"Insufficient {shortfall.resource}"
            )
            counts[reason] = counts.get(reason, 0) + 1
    reasons = ", ".join(f"{n} {reason}" for reason, n in sorted(counts.items()))
    return f"0/{total} nodes are available: {reasons}."


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
    all_pods = _items(pods)
    room = NodeRoom(node_objects, all_pods)
    pending = [
        p
        for p in all_pods
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
        requests = pod_requests(pod)
        room.consider(pod)
        pinned = sorted(n for n in nodes_of if n is not None)
        lacking = {n: lack for n in {*schedulable, *pinned} if (lack := room.lacking(requests, n))}
        roomy = [n for n in schedulable if n not in lacking]
        if any(n in lacking for n in pinned) or not (pinned or roomy):
            shown = {n: lacking[n] for n in pinned} if pinned else lacking
            message = no_room_message(shown, len(pinned) or len(schedulable))
            log.info("pod does not fit", pod=meta["name"], reason=message)
            _mark_unschedulable(pods, pod, message)
            continue
        if unallocated:
            try:
                placement = placer.place(unallocated, nodes=roomy)
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
        node = next(iter(nodes_of), None) or roomy[0]
        if node is None:
            continue
        consumer = {"resource": "pods", "name": meta["name"], "uid": meta["uid"]}
        if not _write_claims(claims, pod_claims, consumer, by_key):
            continue  # a claim changed since it was read: the next pass tries the pod again
        pods.patch(
            body={"spec": {"nodeName": node}},
            name=meta["name"],
            namespace=meta["namespace"],
            content_type=MERGE,
        )
        room.take(node, requests)
        bound += 1
    return bound
