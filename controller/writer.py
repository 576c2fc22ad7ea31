"""Writing a decision: claims first, the gate last, and undoing a half-written decision.

Order matters for crash safety. The finalizer goes on before the allocation, so no allocation of
ours ever exists without the mark that makes us responsible for clearing it. The gate comes off
only after every claim of the pod (of the whole gang) is written and re-checked, so a pod never
reaches the scheduler with a claim that another allocator also holds. A crash in between leaves
claims allocated and reserved for a still-gated pod; the next leader sees them, pins the pod to
their node and finishes the job.

These functions block (HTTP); the reconciler runs them in threads.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import structlog
from kubernetes import client

from controller.informer import Key, Obj, resource_version
from controller.kube_calls import ControllerApi

log = structlog.get_logger(__name__)


class NotLeaderError(RuntimeError):
    """Leadership was lost: nothing more may be written."""


def consumer(pod: Mapping[str, Any]) -> Obj:
    meta = pod["metadata"]
    return {"resource": "pods", "name": meta["name"], "uid": meta["uid"]}


def reserved_for(claim: Mapping[str, Any], pods: Sequence[Mapping[str, Any]]) -> list[Obj]:
    current = list((claim.get("status") or {}).get("reservedFor") or [])
    uids = {r.get("uid") for r in current}
    return current + [consumer(p) for p in pods if p["metadata"]["uid"] not in uids]


class ClaimWriter:
    def __init__(self, api: ControllerApi, finalizer: str, fence: Callable[[], bool]) -> None:
        self.api = api
        self.finalizer = finalizer
        self._fence = fence

    def _check_leader(self) -> None:
        if not self._fence():
            raise NotLeaderError("this replica no longer holds the leader Lease")

    def mark(self, claim: Obj) -> Obj | None:
        """Put our finalizer on a claim we are about to allocate; None when it has it."""
        finalizers = list(claim["metadata"].get("finalizers") or [])
        if self.finalizer in finalizers:
            return None
        self._check_leader()
        return self.api.patch_claim(claim, {"finalizers": [*finalizers, self.finalizer]})

    def allocate(
        self, claim: Obj, allocation: Obj | None, pods: Sequence[Mapping[str, Any]]
    ) -> Obj:
        """Allocation (when given) and reservation, after `mark`; the claim as written."""
        status: Obj = {"reservedFor": reserved_for(claim, pods)}
        if allocation is not None:
            status["allocation"] = allocation
        elif status["reservedFor"] == (claim.get("status") or {}).get("reservedFor"):
            return claim  # allocated and reserved already: nothing to write
        self._check_leader()
        return self.api.patch_claim_status(claim, status)

    def withdraw(
        self, key: Key, pods: Sequence[Mapping[str, Any]], attempts: int = 3
    ) -> int | None:
        """Clear an allocation this controller wrote for `pods` (their gates are still on): the
        resourceVersion written (0 when the claim is gone), None when it gave up.

        Re-reads the claim on a conflict: the watch may lag behind our own writes.
        """
        uids = {p["metadata"]["uid"] for p in pods}
        for _ in range(attempts):
            try:
                claim = self.api.get_claim(*key)
            except client.ApiException as err:
                if err.status == 404:
                    return 0
                raise
            status = claim.get("status") or {}
            keep = [r for r in status.get("reservedFor") or [] if r.get("uid") not in uids]
            body: Obj = {"reservedFor": keep or None}
            if not keep:
                body["allocation"] = None
            try:
                self._check_leader()
                return resource_version(self.api.patch_claim_status(claim, body))
            except client.ApiException as err:
                if err.status == 404:
                    return 0
                if err.status != 409:
                    raise
        log.warning("could not withdraw an allocation", claim=f"{key[0]}/{key[1]}")
        return None

    def deallocate(self, claim: Obj) -> int:
        """Clear the allocation of a claim nobody uses any more, then drop our finalizer. The
        resourceVersion of the write that freed the devices (0 when it had none allocated).

        A claim being deleted that only our finalizer holds goes with that finalizer, and its
        devices with it: one write instead of two (reclaim releases hundreds of such claims at
        once). The answer to that write carries the resourceVersion of the deletion
        (kube-apiserver's store decodes the deleted object at the revision of the delete), the
        one its DELETED watch event brings.
        """
        finalizers = list(claim["metadata"].get("finalizers") or [])
        allocated = bool((claim.get("status") or {}).get("allocation"))
        if claim["metadata"].get("deletionTimestamp") and finalizers == [self.finalizer]:
            self._check_leader()
            gone = self.api.patch_claim(claim, {"finalizers": None})
            return resource_version(gone) if allocated else 0
        freed = 0
        if allocated:
            self._check_leader()
            claim = self.api.patch_claim_status(claim, {"allocation": None, "reservedFor": None})
            freed = resource_version(claim)
        finalizers = [f for f in claim["metadata"].get("finalizers") or [] if f != self.finalizer]
        self._check_leader()
        self.api.patch_claim(claim, {"finalizers": finalizers or None})
        return freed

    def lift_gate(self, pod: Obj, gate: str, attempts: int = 3) -> Obj:
        """Take our gate off, keeping the others (the write is conditional on the pod's
        resourceVersion, so a gate added or removed meanwhile is not lost).

        A conflict is most often a status write (a condition, ours included) that the watch
        has not brought yet: the pod is read again and the lift retried, rather than the pod
        decided again and settled a second time. A pod of that name with another uid is a new
        pod, not ours to lift: 404.
        """
        uid = pod["metadata"].get("uid")
        for attempt in range(attempts):
            gates = [g for g in (pod.get("spec") or {}).get("schedulingGates") or []]
            if not any(g.get("name") == gate for g in gates):
                return pod  # lifted already
            remaining = [g for g in gates if g.get("name") != gate]
            self._check_leader()
            try:
                return self.api.patch_pod(pod, {"schedulingGates": remaining or None})
            except client.ApiException as err:
                if err.status != 409 or attempt == attempts - 1:
                    raise
            meta = pod["metadata"]
            pod = self.api.get_pod(meta["namespace"], meta["name"])
            if pod["metadata"].get("uid") != uid:
                raise client.ApiException(status=404, reason="the pod was replaced")
        raise AssertionError("unreachable")
