"""The chart's install on the real control plane, and the daemons' logins as its ServiceAccounts.

What `helm install` would create, minus the workloads: the release namespace, ServiceAccounts,
ClusterRoles, Roles and their bindings, the ValidatingAdmissionPolicy that keeps each node's plugin
to its own ResourceSlices. The DaemonSet and Deployment are not created: the local cluster runs
the daemons as processes instead, each with a kubeconfig holding a token of the chart's
ServiceAccount, so a permission the chart lacks fails here as it would on a cluster. Nor are the
DeviceClasses: callers install them as on the embedded server (`dra_driver.deviceclasses`, which
the deploy tests hold equal to the chart's), so the same code runs on both.

A plugin's token must carry its node's name (the admission policy reads it from the token's user
info), which kube-apiserver puts only into tokens bound to a pod on that node. So each node gets a
stand-in of the DaemonSet's pod (bound to the node, never run: it has no claims, so the node agent
leaves it alone) and the plugin's token is bound to it, as kubelet binds the projected token of
the real pod.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubernetes import client, dynamic

from localcluster.chart import NAMESPACE, render_objects
from localcluster.upstream.control_plane import SERVICE_ACCOUNT_ISSUER, UpstreamControlPlane

#: What the local cluster installs of the chart, in this order (bindings after their roles).
INSTALLED_KINDS = (
    "ServiceAccount",
    "ClusterRole",
    "ClusterRoleBinding",
    "Role",
    "RoleBinding",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
)

#: Seconds a daemon's token is valid: longer than any test or demo run.
TOKEN_SECONDS = 24 * 3600


@dataclass(frozen=True)
class ChartInstall:
    namespace: str
    plugin_account: str
    controller_account: str
    plugin_image: str
    #: Environment values the chart gives the controller (lease and ConfigMap names).
    controller_env: dict[str, str]
    objects: tuple[dict[str, Any], ...]


def render_install(driver_name: str) -> ChartInstall:
    """The chart with the local cluster's driver name, and the names the daemons need from it."""
    objects = render_objects({"driverName": driver_name}, "1.37.0", namespace=NAMESPACE)
    daemonset = next(o for o in objects if o["kind"] == "DaemonSet")
    deployment = next(o for o in objects if o["kind"] == "Deployment")
    plugin_pod = daemonset["spec"]["template"]["spec"]
    controller_pod = deployment["spec"]["template"]["spec"]
    env = {
        e["name"]: str(e["value"])
        for e in controller_pod["containers"][0].get("env", [])
        if "value" in e
    }
    return ChartInstall(
        namespace=NAMESPACE,
        plugin_account=plugin_pod["serviceAccountName"],
        controller_account=controller_pod["serviceAccountName"],
        plugin_image=plugin_pod["containers"][0]["image"],
        controller_env=env,
        objects=tuple(o for o in objects if o["kind"] in INSTALLED_KINDS),
    )


def install(dyn: dynamic.DynamicClient, chart: ChartInstall) -> None:
    namespaces = dyn.resources.get(api_version="v1", kind="Namespace")
    namespaces.create(body={"apiVersion": "v1", "kind": "Namespace",
                            "metadata": {"name": chart.namespace}})  # fmt: skip
    for kind in INSTALLED_KINDS:
        for obj in chart.objects:
            if obj["kind"] != kind:
                continue
            resource = dyn.resources.get(api_version=obj["apiVersion"], kind=kind)
            if resource.namespaced:
                resource.create(body=obj, namespace=obj["metadata"].get("namespace", "default"))
            else:
                resource.create(body=obj)


def _token(
    core: client.CoreV1Api, chart: ChartInstall, account: str, bound_pod: dict[str, Any] | None
) -> str:
    bound = None
    if bound_pod is not None:
        meta = bound_pod["metadata"]
        bound = client.V1BoundObjectReference(
            api_version="v1", kind="Pod", name=meta["name"], uid=meta["uid"]
        )
    request = client.AuthenticationV1TokenRequest(
        spec=client.V1TokenRequestSpec(
            audiences=[SERVICE_ACCOUNT_ISSUER],
            expiration_seconds=TOKEN_SECONDS,
            bound_object_ref=bound,
        )
    )
    answer = core.create_namespaced_service_account_token(account, chart.namespace, request)
    if answer.status is None or not answer.status.token:
        raise RuntimeError(f"TokenRequest for {chart.namespace}/{account} returned no token")
    return answer.status.token


def plugin_kubeconfig(
    plane: UpstreamControlPlane,
    api: client.ApiClient,
    chart: ChartInstall,
    node_name: str,
    path: Path,
) -> Path:
    """A kubeconfig for the plugin of `node_name`: the chart's plugin ServiceAccount, with a
    token bound to a stand-in of its DaemonSet pod on that node."""
    core = client.CoreV1Api(api)
    pods = dynamic.DynamicClient(api).resources.get(  # type: ignore[no-untyped-call]
        api_version="v1", kind="Pod"
    )
    bound = pods.create(
        namespace=chart.namespace,
        body={
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": f"{chart.plugin_account}-{node_name}",
                "labels": {"app.kubernetes.io/component": "kubelet-plugin"},
            },
            "spec": {
                "nodeName": node_name,
                "serviceAccountName": chart.plugin_account,
                "containers": [{"name": "plugin", "image": chart.plugin_image}],
            },
        },
    ).to_dict()
    token = _token(core, chart, chart.plugin_account, bound)
    return plane.write_kubeconfig(path, token, chart.plugin_account)


def controller_kubeconfig(
    plane: UpstreamControlPlane, api: client.ApiClient, chart: ChartInstall, path: Path
) -> Path:
    """A kubeconfig for the allocation controller: the chart's controller ServiceAccount."""
    token = _token(client.CoreV1Api(api), chart, chart.controller_account, None)
    return plane.write_kubeconfig(path, token, chart.controller_account)
