"""`POST .../pods/<name>/eviction`: delete a pod unless a PodDisruptionBudget forbids it.

The rules are kube-apiserver's eviction REST handler's (`pkg/registry/core/pod/storage/
eviction.go`), in the order it applies them:

* a missing pod is 404; an Eviction whose name differs from the URL's is 400;
* a pod already terminating, or in phase Pending, Succeeded or Failed, is deleted without
  looking at budgets (it is not running, so evicting it disrupts nothing);
* more than one PodDisruptionBudget selecting the pod: 500, which the subresource does not
  support; none: the pod is evicted;
* one: a not-ready pod may be evicted under `unhealthyPodEvictionPolicy` (AlwaysAllow, or
  IfHealthyBudget while the budget is met); otherwise the budget must allow a disruption, or
  the answer is 429 TooManyRequests with a `DisruptionBudget` cause;
* evicting means the `DisruptionTarget` condition on the pod, then a normal delete (with
  finalizers the pod only gets its deletionTimestamp, as with any delete).

One deliberate difference: the real handler trusts `status.disruptionsAllowed`, written by the
disruption controller in kube-controller-manager. The local cluster has no such controller, so
the budget is computed here, at the time of the request, the way that controller computes it
(`getExpectedPodCount` and `updatePdbStatus` in `pkg/controller/disruption/disruption.go`):
healthy pods are the selected ones that are not terminating and have `Ready=True`; an integer
`minAvailable` expects every selected pod; `maxUnavailable` and a percentage `minAvailable`
expect the scale of the pods' controllers, and a pod without a controller counts for none (so
a budget of bare pods allows no disruption, as upstream). This harness serves no workload
controllers, so a controller's scale is taken to be the number of selected pods it owns.
Percentages round up. The PDB's status is not updated, and there is no "still being processed"
answer (upstream's until the controller has seen the budget).
"""

from __future__ import annotations

import datetime
import math
from collections.abc import Mapping
from typing import Any

from localcluster import errors
from localcluster.errors import ApiError, StatusCause
from localcluster.resources import ResourceType
from localcluster.selectors import label_selector_matches
from localcluster.storage import Store

PDB_KEY = "poddisruptionbudgets.policy"
_EVICTION_VERSIONS = ("policy/v1", "policy/v1beta1")
_NOT_RUNNING = ("Pending", "Succeeded", "Failed")
VIOLATES = "Cannot evict pod as it would violate the pod's disruption budget."
TOO_MANY_PDBS = (
    "This pod has more than one PodDisruptionBudget, which the eviction subresource does not "
    "support."
)
SUCCESS = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def pod_ready(pod: Mapping[str, Any]) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or ()
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def scaled(value: int | str, total: int) -> int:
    """An int-or-percent against `total`, percentages rounded up (as the disruption controller
    does for both minAvailable and maxUnavailable)."""
    if isinstance(value, int):
        return value
    text = str(value)
    if not text.endswith("%"):
        try:
            return int(text)
        except ValueError:
            raise errors.bad_request(f"invalid value for IntOrString: {text!r}") from None
    return math.ceil(int(text[:-1]) * total / 100)


def budget(pdb: Mapping[str, Any], pods: list[dict[str, Any]]) -> tuple[int, int, int]:
    """(disruptions allowed, currently healthy, desired healthy) for the selected pods."""
    spec = pdb.get("spec") or {}
    healthy = sum(1 for p in pods if not _meta(p).get("deletionTimestamp") and pod_ready(p))
    expected = sum(1 for p in pods if _controlled(p))
    if spec.get("maxUnavailable") is not None:
        desired = max(0, expected - scaled(spec["maxUnavailable"], expected))
    elif isinstance(spec.get("minAvailable"), int):
        expected = len(pods)
        desired = spec["minAvailable"]
    elif spec.get("minAvailable") is not None:
        desired = scaled(spec["minAvailable"], expected)
    else:
        desired = 0
    allowed = healthy - desired
    if expected <= 0 or allowed <= 0:
        allowed = 0
    return allowed, healthy, desired


def _controlled(pod: Mapping[str, Any]) -> bool:
    """Whether a pod has a controller (an owner reference with `controller: true`)."""
    owners = _meta(pod).get("ownerReferences") or ()
    return any(isinstance(o, Mapping) and o.get("controller") is True for o in owners)


def _selects(pdb: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    selector = (pdb.get("spec") or {}).get("selector")
    if selector is None:
        return False  # policy/v1: a missing selector selects nothing, an empty one everything
    return label_selector_matches(selector, labels)


class Evictions:
    """The eviction subresource over one store (pods and, when served, PDBs)."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def evict(self, namespace: str, name: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """Evict or refuse; returns the success Status, raises ApiError otherwise."""
        api_version = body.get("apiVersion")
        if api_version and api_version not in _EVICTION_VERSIONS:
            raise errors.bad_request(f"unsupported Eviction apiVersion {api_version!r}")
        if body.get("kind") not in (None, "", "Eviction"):
            raise errors.bad_request(f"expected an Eviction, got {body.get('kind')!r}")
        given = _meta(body).get("name")
        if given and given != name:
            raise errors.bad_request("name in URL does not match name in Eviction object")
        options = body.get("deleteOptions") or {}
        pods = self.store.types["pods"]
        with self.store.lock:
            pod = self.store.get(pods, namespace, name)
            if self._can_ignore_budgets(pod):
                return self._evict(pods, pod, options)
            pdbs = self._budgets_for(namespace, pod)
            if len(pdbs) > 1:
                raise ApiError(500, "", TOO_MANY_PDBS)
            if not pdbs:
                return self._evict(pods, pod, options)
            pdb = pdbs[0]
            selected, _ = self.store.list_objects(
                pods, namespace, lambda p: _selects(pdb, _meta(p).get("labels") or {})
            )
            allowed, healthy, desired = budget(pdb, selected)
            policy = (pdb.get("spec") or {}).get("unhealthyPodEvictionPolicy")
            if not pod_ready(pod) and (
                policy == "AlwaysAllow" or (healthy >= desired > 0 and policy != "AlwaysAllow")
            ):
                return self._evict(pods, pod, options)
            if allowed <= 0:
                pdb_name = _meta(pdb).get("name", "")
                # `checkAndDecrement`'s words (`pkg/registry/core/pod/storage/eviction.go`).
                if healthy <= desired:
                    why = f"needs {desired} healthy pods and has {healthy} currently"
                else:
                    why = "does not allow evicting pods currently"
                raise errors.too_many_requests(
                    VIOLATES,
                    [
                        StatusCause(
                            f"The disruption budget {pdb_name} {why}", reason="DisruptionBudget"
                        )
                    ],
                )
            return self._evict(pods, pod, options)

    @staticmethod
    def _can_ignore_budgets(pod: Mapping[str, Any]) -> bool:
        phase = (pod.get("status") or {}).get("phase")
        return bool(_meta(pod).get("deletionTimestamp")) or phase in _NOT_RUNNING

    def _budgets_for(self, namespace: str, pod: Mapping[str, Any]) -> list[dict[str, Any]]:
        pdb_type = self.store.types.get(PDB_KEY)
        if pdb_type is None:
            return []
        labels = _meta(pod).get("labels") or {}
        found, _ = self.store.list_objects(pdb_type, namespace, lambda b: _selects(b, labels))
        return found

    def _evict(
        self, pods: ResourceType, pod: dict[str, Any], options: Mapping[str, Any]
    ) -> dict[str, Any]:
        meta = _meta(pod)
        namespace, name = str(meta.get("namespace", "")), str(meta.get("name", ""))
        preconditions = options.get("preconditions") if isinstance(options, Mapping) else None
        if not meta.get("deletionTimestamp"):
            status = dict(pod.get("status") or {})
            conditions = [
                c for c in status.get("conditions") or () if c.get("type") != "DisruptionTarget"
            ]
            conditions.append(
                {
                    "type": "DisruptionTarget",
                    "status": "True",
                    "reason": "EvictionByEvictionAPI",
                    "message": "Eviction API: evicting",
                    "lastTransitionTime": _now(),
                }
            )
            status["conditions"] = conditions
            rv = (preconditions or {}).get("resourceVersion") or meta.get("resourceVersion")
            self.store.update(
                pods,
                namespace,
                name,
                {"metadata": {**meta, "resourceVersion": rv}, "status": status},
                status=True,
            )
            if preconditions and preconditions.get("resourceVersion"):
                # The condition write moved the version on; the check was made against it.
                preconditions = {k: v for k, v in preconditions.items() if k != "resourceVersion"}
        self.store.delete(pods, namespace, name, preconditions)
        return dict(SUCCESS)
