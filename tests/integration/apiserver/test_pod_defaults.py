"""What a pod is stored as: kube-apiserver's `core/v1` defaults and the defaults of its
`DefaultTolerationSeconds` and `Priority` admission plugins (`localcluster/pod_defaults.py`)."""

from __future__ import annotations

from typing import Any

from kubernetes import client

from tests.integration.apiserver.support import namespaces_fixture

namespaces = namespaces_fixture("poddefaults")

NS = "poddefaults"
DIGEST = "x@sha256:" + "a" * 64


def created(core: client.CoreV1Api, name: str, spec: dict[str, Any]) -> dict[str, Any]:
    pod = core.create_namespaced_pod(NS, {"metadata": {"name": name}, "spec": spec})
    stored: dict[str, Any] = core.api_client.sanitize_for_serialization(pod)
    return stored


def test_a_pod_gets_its_defaults(core: client.CoreV1Api) -> None:
    pod = created(
        core,
        "full",
        {
            "hostNetwork": True,
            "containers": [
                {
                    "name": "c",
                    "image": "registry:5000/x:1",
                    "resources": {"limits": {"cpu": "1"}, "requests": {"memory": "1Gi"}},
                    "ports": [{"containerPort": 80}],
                },
                {"name": "d", "image": DIGEST},
            ],
            "initContainers": [{"name": "i", "image": "x:latest"}],
            "tolerations": [
                {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"}
            ],
        },
    )
    common = {"terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File"}
    assert pod["spec"] == {
        "hostNetwork": True,
        "containers": [
            {
                "name": "c",
                "image": "registry:5000/x:1",
                "imagePullPolicy": "IfNotPresent",
                # Requests default to limits, name by name.
                "resources": {"limits": {"cpu": "1"}, "requests": {"cpu": "1", "memory": "1Gi"}},
                # With the host's network a port is a host port.
                "ports": [{"containerPort": 80, "hostPort": 80, "protocol": "TCP"}],
                **common,
            },
            {"name": "d", "image": DIGEST, "imagePullPolicy": "IfNotPresent", "resources": {}}
            | common,
        ],
        "initContainers": [
            {"name": "i", "image": "x:latest", "imagePullPolicy": "Always", "resources": {}}
            | common
        ],
        "restartPolicy": "Always",
        "terminationGracePeriodSeconds": 30,
        "dnsPolicy": "ClusterFirst",
        "securityContext": {},
        "schedulerName": "default-scheduler",
        "enableServiceLinks": True,
        "priority": 0,
        "preemptionPolicy": "PreemptLowerPriority",
        # Not-ready was tolerated already (without a time): only unreachable is added.
        "tolerations": [
            {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"},
            {
                "key": "node.kubernetes.io/unreachable",
                "operator": "Exists",
                "effect": "NoExecute",
                "tolerationSeconds": 300,
            },
        ],
    }
    assert pod["status"]["qosClass"] == "Burstable"


def test_set_values_are_kept(core: client.CoreV1Api) -> None:
    pod = created(
        core,
        "set",
        {
            "containers": [{"name": "c", "image": "x", "imagePullPolicy": "Never"}],
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 0,
            "enableServiceLinks": False,
            "schedulerName": "mine",
            "tolerations": [{"operator": "Exists"}],
        },
    )
    spec = pod["spec"]
    assert spec["containers"][0]["imagePullPolicy"] == "Never"
    assert (spec["restartPolicy"], spec["terminationGracePeriodSeconds"]) == ("Never", 0)
    assert (spec["enableServiceLinks"], spec["schedulerName"]) == (False, "mine")
    # A toleration of every taint tolerates both: nothing is added.
    assert spec["tolerations"] == [{"operator": "Exists"}]


def test_an_image_without_a_tag_is_latest(core: client.CoreV1Api) -> None:
    pod = created(core, "untagged", {"containers": [{"name": "c", "image": "registry:5000/x"}]})
    assert pod["spec"]["containers"][0]["imagePullPolicy"] == "Always"
