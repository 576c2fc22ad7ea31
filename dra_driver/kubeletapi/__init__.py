"""Kubelet's gRPC protocols for DRA drivers: our .proto files, their generated modules, plain
dataclasses for the values that cross the wire, and a typed asyncio client.

It lives in the shared core rather than in the node daemon because two sides speak these
protocols: the kubelet plugin serves them (``kubeletplugin.server``), and the local cluster's
kubelet stand-in and the integration tests call them. Keeping the wire format and its
translation in one place means both sides cannot drift apart, and the daemons never have to
import each other.

``gen/`` is produced by ``hack/gen-protos.sh`` from ``proto/``; a unit test fails when the two
are out of step.
"""

from typing import Final

#: The plugin type kubelet's plugin watcher expects from a DRA driver.
PLUGIN_TYPE: Final = "DRAPlugin"
#: Service names as they appear in PluginInfo.supported_versions (``<proto package>.<service>``).
DRA_V1: Final = "v1.DRAPlugin"
DRA_V1BETA1: Final = "v1beta1.DRAPlugin"
HEALTH_V1ALPHA1: Final = "v1alpha1.DRAResourceHealth"

#: Kubelet gives each call this many seconds.
KUBELET_CALL_TIMEOUT_S: Final = 45.0

__all__ = [
    "DRA_V1",
    "DRA_V1BETA1",
    "HEALTH_V1ALPHA1",
    "KUBELET_CALL_TIMEOUT_S",
    "PLUGIN_TYPE",
]
