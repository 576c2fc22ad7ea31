"""What kube-apiserver fills into a pod before it stores it, on every create and update.

Defaults of `core/v1` (`pkg/apis/core/v1/defaults.go`):
* `SetDefaults_PodSpec`: `dnsPolicy: ClusterFirst`, `restartPolicy: Always`,
  `terminationGracePeriodSeconds: 30`, `securityContext: {}`, `schedulerName: default-scheduler`;
* `SetDefaults_Pod`: `enableServiceLinks: true`; a container's requests default to its limits,
  name by name; with `hostNetwork`, a port's `hostPort` defaults to its `containerPort`;
* `SetDefaults_Container`: `terminationMessagePath: /dev/termination-log`,
  `terminationMessagePolicy: File`, `imagePullPolicy` `Always` for an image without a tag or
  tagged `latest` (and no digest), `IfNotPresent` otherwise, `resources: {}`;
* `SetDefaults_ContainerPort`: `protocol: TCP`.

And of two admission plugins kube-apiserver runs by default:
* `DefaultTolerationSeconds`: a pod that does not tolerate the `node.kubernetes.io/not-ready`
  and `node.kubernetes.io/unreachable` NoExecute taints tolerates each for 300 s;
* `Priority`: a pod without a `priorityClassName` gets `priority: 0` and `preemptionPolicy:
  PreemptLowerPriority` (no PriorityClass is marked global default here).

Values of the wrong type are left as they are: validation reports them with their field.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any, Final

_DEFAULT_TOLERATION_SECONDS: Final = 300
_TAINTS: Final = ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")
_SPEC_DEFAULTS: Final[Mapping[str, Any]] = {
    "restartPolicy": "Always",
    "terminationGracePeriodSeconds": 30,
    "dnsPolicy": "ClusterFirst",
    "securityContext": {},
    "schedulerName": "default-scheduler",
    "enableServiceLinks": True,
}
_CONTAINER_DEFAULTS: Final[Mapping[str, Any]] = {
    "resources": {},
    "terminationMessagePath": "/dev/termination-log",
    "terminationMessagePolicy": "File",
}


def image_pull_policy(image: str) -> str:
    """`Always` for a `latest` image (`x`, `x:latest`), `IfNotPresent` for any other tag or a
    digest (`parsers.ParseImageName`: an image without tag or digest is `latest`)."""
    if "@" in image:
        return "IfNotPresent"
    last = image.rsplit("/", 1)[-1]
    tag = last.rsplit(":", 1)[1] if ":" in last else "latest"
    return "Always" if tag == "latest" else "IfNotPresent"


def _container(container: object, host_network: bool) -> None:
    if not isinstance(container, dict):
        return
    for key, value in _CONTAINER_DEFAULTS.items():
        if key not in container or container[key] is None:
            container[key] = copy.deepcopy(value)
    if not container.get("imagePullPolicy") and isinstance(container.get("image"), str):
        container["imagePullPolicy"] = image_pull_policy(container["image"])
    resources = container.get("resources")
    if isinstance(resources, dict) and isinstance(resources.get("limits"), dict):
        requests = resources.get("requests")
        if requests is None:
            requests = resources["requests"] = {}
        if isinstance(requests, dict):
            for name, quantity in resources["limits"].items():
                requests.setdefault(name, quantity)
    ports = container.get("ports")
    for port in ports if isinstance(ports, list) else ():
        if not isinstance(port, dict):
            continue
        if not port.get("protocol"):
            port["protocol"] = "TCP"
        if host_network and not port.get("hostPort") and port.get("containerPort"):
            port["hostPort"] = port["containerPort"]


def _tolerates(tolerations: list[Any], taint: str) -> bool:
    return any(
        isinstance(t, dict)
        and t.get("key", "") in (taint, "")
        and t.get("effect", "") in ("NoExecute", "")
        for t in tolerations
    )


def _admitted(spec: dict[str, Any]) -> None:
    tolerations = spec.get("tolerations")
    if tolerations is None:
        tolerations = []
    if isinstance(tolerations, list):
        added = [
            {
                "key": taint,
                "operator": "Exists",
                "effect": "NoExecute",
                "tolerationSeconds": _DEFAULT_TOLERATION_SECONDS,
            }
            for taint in _TAINTS
            if not _tolerates(tolerations, taint)
        ]
        if added:
            spec["tolerations"] = [*tolerations, *added]
    if not spec.get("priorityClassName"):
        spec.setdefault("priority", 0)
        spec.setdefault("preemptionPolicy", "PreemptLowerPriority")


def with_pod_defaults(pod: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of `pod` as kube-apiserver would store it: defaults and admission filled in."""
    result: dict[str, Any] = copy.deepcopy(dict(pod))
    spec = result.get("spec")
    if not isinstance(spec, dict):
        return result
    for key, value in _SPEC_DEFAULTS.items():
        if key not in spec or spec[key] is None or spec[key] == "":
            spec[key] = copy.deepcopy(value)
    host_network = spec.get("hostNetwork") is True
    for key in ("initContainers", "containers"):
        containers = spec.get(key)
        for container in containers if isinstance(containers, list) else ():
            _container(container, host_network)
    _admitted(spec)
    return result
