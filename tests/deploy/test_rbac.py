"""The chart's RBAC grants each ServiceAccount exactly what its daemon's code calls.

The permissions are derived from the code (tests/deploy/api_calls.py); the rendered chart's
Roles and ClusterRoles are compared with them in both directions.
"""

from __future__ import annotations

from collections.abc import Iterable

import pytest

from tests.deploy.api_calls import (
    Permission,
    UnmappedCall,
    _Module,
    _parse,
    _Scanner,
    granted_permissions,
    needed_permissions,
)
from tests.deploy.chart import render

SERVICE_ACCOUNTS = {
    "kubelet-plugin": "dra-gpu-dra-driver-kubelet-plugin",
    "controller": "dra-gpu-dra-driver-controller",
}

BINDING = "resourceclaims/binding"
DRIVER = "resourceclaims/driver"

#: Which claim status fields each component's status writes change, as the synthetic
#: subresource and verb kube-apiserver also authorises them against (1.36+, KEP-4817's
#: DRAResourceClaimGranularStatusAuthorization). The controller allocates: status.allocation
#: and status.reservedFor, `binding` with the write's own verb. The kubelet plugin only sets
#: its devices' conditions: status.devices, `driver` named after the driver, with
#: `associated-node:<verb>`, which holds only for a service account whose pod-bound token
#: names the node the claim is allocated on.
STATUS_WRITES = {
    "controller": (BINDING, "{verb}"),
    "kubelet-plugin": (DRIVER, "associated-node:{verb}"),
}


def implied(component: str, needed: Iterable[Permission]) -> set[Permission]:
    """Permissions the API server checks although no call names them: a write to a claim's
    status is also authorised against the synthetic subresource of the fields it changes
    (:data:`STATUS_WRITES`)."""
    subresource, verb = STATUS_WRITES[component]
    return {
        Permission(p.group, subresource, verb.format(verb=p.verb))
        for p in needed
        if (p.group, p.resource) == ("resource.k8s.io", "resourceclaims/status")
    }


#: Permissions only granted with a chart value that turns on the code path needing them.
OPTIONAL: dict[str, tuple[str, frozenset[Permission]]] = {
    "kubelet-plugin": (
        "kubeletPlugin.claimCache (the watched claim copy, --claim-cache)",
        frozenset(
            {
                Permission("resource.k8s.io", "resourceclaims", "list"),
                Permission("resource.k8s.io", "resourceclaims", "watch"),
            }
        ),
    ),
}


def expected(component: str, value_set: str = "defaults") -> set[Permission]:
    needed = set(needed_permissions(component))
    if component in OPTIONAL and value_set == "defaults":
        needed -= OPTIONAL[component][1]
    return needed | implied(component, needed)


@pytest.mark.parametrize("component", sorted(SERVICE_ACCOUNTS))
@pytest.mark.parametrize("value_set", ["defaults", "kind"])
def test_rbac_grants_exactly_what_the_code_calls(component: str, value_set: str) -> None:
    """Defaults: everything but the optional permissions; `kind` turns the options on."""
    granted = granted_permissions(render(value_set), SERVICE_ACCOUNTS[component])
    wanted = expected(component, value_set)
    missing = sorted(str(p) for p in wanted - granted)
    extra = sorted(str(p) for p in granted - wanted)
    assert not missing, f"{component}: the code needs {missing}, the chart does not grant them"
    assert not extra, f"{component}: the chart grants {extra}, which the code never uses"


def test_optional_permissions_are_ones_the_code_calls() -> None:
    for component, (_, permissions) in OPTIONAL.items():
        assert permissions <= set(needed_permissions(component))


def test_the_plugin_calls_are_found_where_they_are() -> None:
    """The scanner sees the plugin's calls through every pattern the plugin uses."""
    needed = needed_permissions("kubelet-plugin")
    where = {str(p): " ".join(w) for p, w in needed.items()}
    assert "resource.k8s.io/resourceslices:list" in where  # CustomObjectsApi, module constants
    assert "publisher/store.py" in where["resource.k8s.io/resourceslices:update"]  # replace
    assert "prepare/claims.py" in where["resource.k8s.io/resourceclaims:get"]
    assert "daemon.py" in where["core/nodes:get"]  # chained client.CoreV1Api(api).read_node
    assert "events.py" in where["core/events:create"]  # self attribute under cast(Any, ...)
    # The Idle condition: PUT to the status subresource through the custom-objects method.
    assert "telemetry/status_writer.py" in where["resource.k8s.io/resourceclaims/status:update"]


def _scan(source: str, tmp_name: str = "probe") -> set[str]:
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / f"{tmp_name}.py"
        path.write_text(source)
        module: _Module = _parse(tmp_name, path)
        return {str(p) for p, _ in _Scanner(module).scan()}


def test_watches_and_workers_are_understood() -> None:
    found = _scan(
        "import asyncio\n"
        "from kubernetes import client, watch\n"
        "GROUP = 'resource.k8s.io'\n"
        "class Loop:\n"
        "    def __init__(self, api):\n"
        "        self.core = client.CoreV1Api(api)\n"
        "        self.objects = client.CustomObjectsApi(api)\n"
        "    async def run(self):\n"
        "        for event in watch.Watch().stream(self.core.list_pod_for_all_namespaces):\n"
        "            pass\n"
        "        await asyncio.to_thread(self.core.patch_namespaced_pod_status, 'p', 'ns', {})\n"
        "        self.objects.list_cluster_custom_object(\n"
        "            GROUP, 'v1', 'deviceclasses', watch=True)\n"
        "        coord = client.CoordinationV1Api()\n"
        "        coord.replace_namespaced_lease('l', 'ns', {})\n"
    )
    assert found == {
        "core/pods:watch",
        "core/pods/status:patch",
        "resource.k8s.io/deviceclasses:watch",
        "coordination.k8s.io/leases:update",
    }


@pytest.mark.parametrize(
    ("source", "why"),
    [
        ("def f(api, g):\n    api.list_cluster_custom_object(g, 'v1', 'x')\n", "group"),
        ("def f(api):\n    api.create_namespaced_event('ns', {})\n", "which client API class"),
        ("def f(api):\n    handlers = [api.read_namespaced_pod]\n", "cannot map"),
        ("from kubernetes import dynamic\n", "dynamic client"),
        ("def f(api, path):\n    api.call_api(path, 'GET')\n", "computed path"),
    ],
)
def test_calls_the_scanner_cannot_map_fail_loudly(source: str, why: str) -> None:
    with pytest.raises(UnmappedCall, match=why):
        _scan(source)
