"""The plugin's gRPC servers: registration with kubelet, the DRA node service (v1 and v1beta1),
device health, and a TCP liveness endpoint for Kubernetes' grpc probe.

The servers translate between protobuf and plain values and guarantee the response rules kubelet
relies on; the actual preparation is delegated to a :class:`~.contract.NodeDriver`.
"""

from dra_driver.signals import install_signal_handlers
from kubeletplugin.server.contract import HealthSource, NodeDriver
from kubeletplugin.server.liveness import LivenessServer
from kubeletplugin.server.servers import PluginServers
from kubeletplugin.server.sockets import SocketPathError

__all__ = [
    "HealthSource",
    "LivenessServer",
    "NodeDriver",
    "PluginServers",
    "SocketPathError",
    "install_signal_handlers",
]
