"""`pods/eviction` with PodDisruptionBudgets: the answers kube-apiserver gives, through the
official client's `create_namespaced_pod_eviction`."""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.integration.apiserver.support import namespaces_fixture
from tests.support.polling import wait_until

namespaces = namespaces_fixture("evict")

NS = "evict"


@pytest.fixture(scope="module")
def policy(api_client: client.ApiClient) -> client.PolicyV1Api:
    return client.PolicyV1Api(api_client)


def running_pod(core: client.CoreV1Api, name: str, app: str, *, ready: bool = True) -> None:
    core.create_namespaced_pod(
        NS,
        {
            "metadata": {"name": name, "labels": {"app": app}},
            "spec": {"containers": [{"name": "c", "image": "x"}]},
        },
    )
    status = "True" if ready else "False"
    core.patch_namespaced_pod_status(
        name,
        NS,
        {"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": status}]}},
    )


def pdb(policy: client.PolicyV1Api, name: str, app: str, **spec: Any) -> None:
    policy.create_namespaced_pod_disruption_budget(
        NS,
        {"metadata": {"name": name}, "spec": {"selector": {"matchLabels": {"app": app}}, **spec}},
    )


def evict(core: client.CoreV1Api, name: str) -> Any:
    """The eviction's answer. kube-apiserver answers 429 "still being processed" until the
    disruption controller has seen a new budget; that answer is waited out (the embedded
    server computes the budget at each eviction and never gives it)."""
    body = client.V1Eviction(metadata=client.V1ObjectMeta(name=name, namespace=NS))
    answered: list[Any] = []

    def attempt() -> bool:
        try:
            answered.append(
                core.create_namespaced_pod_eviction(name, NS, body, _preload_content=False)
            )
        except ApiException as err:
            if err.status == 429 and "is still being processed" in str(err.body):
                return False
            raise
        return True

    wait_until(attempt, f"an answer to the eviction of {name} that is not 'still processing'")
    return answered[0]


def refused(core: client.CoreV1Api, name: str) -> dict[str, Any]:
    with pytest.raises(ApiException) as caught:
        evict(core, name)
    status: dict[str, Any] = json.loads(caught.value.body)
    assert status["code"] == caught.value.status
    return status


def exists(core: client.CoreV1Api, name: str) -> bool:
    try:
        core.read_namespaced_pod(name, NS)
    except ApiException as err:
        assert err.status == 404
        return False
    return True


def test_plain_eviction_deletes_the_pod(core: client.CoreV1Api) -> None:
    running_pod(core, "plain", "solo")
    response = evict(core, "plain")
    assert response.status == 201
    assert json.loads(response.data) == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "code": 201,
    }
    assert not exists(core, "plain")


def test_graceful_eviction_marks_the_pod(core: client.CoreV1Api) -> None:
    running_pod(core, "held", "held")
    core.patch_namespaced_pod("held", NS, {"metadata": {"finalizers": ["example.com/hold"]}})
    evict(core, "held")
    pod = core.read_namespaced_pod("held", NS)
    assert pod.metadata.deletion_timestamp is not None
    (target,) = [c for c in pod.status.conditions if c.type == "DisruptionTarget"]
    assert (target.status, target.reason) == ("True", "EvictionByEvictionAPI")


def test_a_budget_that_allows_no_disruption_refuses(
    core: client.CoreV1Api, policy: client.PolicyV1Api
) -> None:
    for name in ("web-1", "web-2"):
        running_pod(core, name, "web")
    pdb(policy, "web", "web", minAvailable=2)
    status = refused(core, "web-1")
    assert status["code"] == 429 and status["reason"] == "TooManyRequests"
    assert status["message"] == "Cannot evict pod as it would violate the pod's disruption budget."
    assert status["details"]["causes"] == [
        {
            "reason": "DisruptionBudget",
            "message": "The disruption budget web needs 2 healthy pods and has 2 currently",
        }
    ]
    assert exists(core, "web-1")


def test_a_budget_with_room_allows_one(core: client.CoreV1Api, policy: client.PolicyV1Api) -> None:
    # Held pods stay while terminating, as kubelet holds them: they count as expected, not
    # as healthy, so each eviction uses up one allowed disruption.
    for name in ("api-1", "api-2", "api-3"):
        running_pod(core, name, "api")
        core.patch_namespaced_pod(name, NS, {"metadata": {"finalizers": ["example.com/hold"]}})
    pdb(policy, "api", "api", minAvailable=1)  # 3 healthy, 1 needed: 2 may go
    evict(core, "api-1")
    evict(core, "api-2")
    assert refused(core, "api-3")["code"] == 429
    terminating = [
        core.read_namespaced_pod(n, NS).metadata.deletion_timestamp is not None
        for n in ("api-1", "api-2", "api-3")
    ]
    assert terminating == [True, True, False]


def test_unready_pods_use_up_the_budget(core: client.CoreV1Api, policy: client.PolicyV1Api) -> None:
    running_pod(core, "job-1", "job")
    running_pod(core, "job-2", "job")
    running_pod(core, "job-3", "job", ready=False)
    pdb(policy, "job", "job", minAvailable=2)
    assert refused(core, "job-1")["code"] == 429
    # The not-ready pod itself may go: the budget is met without it (IfHealthyBudget).
    evict(core, "job-3")
    assert [exists(core, n) for n in ("job-1", "job-2", "job-3")] == [True, True, False]


def test_a_budget_over_pods_without_a_controller_expects_none(
    core: client.CoreV1Api, policy: client.PolicyV1Api
) -> None:
    # maxUnavailable counts against the scale of the pods' controllers; bare pods have none, so
    # the budget expects no pods and allows no disruption (the disruption controller's rule).
    for name in ("bare-1", "bare-2"):
        running_pod(core, name, "bare")
    pdb(policy, "bare", "bare", maxUnavailable=1)
    status = refused(core, "bare-1")
    assert status["code"] == 429
    assert status["details"]["causes"] == [
        {
            "reason": "DisruptionBudget",
            "message": "The disruption budget bare does not allow evicting pods currently",
        }
    ]


def test_two_budgets_are_an_error(core: client.CoreV1Api, policy: client.PolicyV1Api) -> None:
    running_pod(core, "db-1", "db")
    pdb(policy, "db-a", "db", minAvailable=0)
    pdb(policy, "db-b", "db", maxUnavailable=1)
    status = refused(core, "db-1")
    assert status["code"] == 500
    assert status["message"] == (
        "This pod has more than one PodDisruptionBudget, which the eviction subresource does "
        "not support."
    )
    assert exists(core, "db-1")


def test_a_pending_pod_ignores_its_budget(
    core: client.CoreV1Api, policy: client.PolicyV1Api
) -> None:
    core.create_namespaced_pod(
        NS,
        {
            "metadata": {"name": "queued", "labels": {"app": "queued"}},
            "spec": {"containers": [{"name": "c", "image": "x"}]},
        },
    )
    pdb(policy, "queued", "queued", minAvailable=5)
    evict(core, "queued")
    assert not exists(core, "queued")


def test_a_missing_pod_is_not_found(core: client.CoreV1Api) -> None:
    status = refused(core, "nobody")
    assert (status["code"], status["reason"]) == (404, "NotFound")


def test_discovery_lists_the_subresource(core: client.CoreV1Api) -> None:
    entries = {r.name: r for r in core.get_api_resources().resources}
    eviction = entries["pods/eviction"]
    assert (eviction.group, eviction.version, eviction.kind) == ("policy", "v1", "Eviction")
    assert eviction.verbs == ["create"]
