"""A component whose picked port was taken before it could bind it is started again on
another: `free_port` only knows the port was free when it looked."""

from __future__ import annotations

import socket
import sys
from pathlib import Path

from localcluster.upstream.control_plane import Component, UpstreamControlPlane

# Binds 127.0.0.1:PORT as the control plane's components do, and says so as they do when it
# cannot; else answers every GET with 200 until it is stopped.
COMPONENT = """
import http.server, socketserver, sys
port = int(sys.argv[1].split("=")[1])
class Ok(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers()
    def log_message(self, *args):
        pass
try:
    server = socketserver.TCPServer(("127.0.0.1", port), Ok)
except OSError:
    print(f"failed to listen on 127.0.0.1:{port}: listen tcp 127.0.0.1:{port}: "
          "bind: address already in use", flush=True)
    sys.exit(1)
server.serve_forever()
"""


async def test_a_component_whose_port_was_taken_starts_on_another(tmp_path: Path) -> None:
    script = tmp_path / "component.py"
    script.write_text(COMPONENT)
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        taken = squatter.getsockname()[1]
        plane = UpstreamControlPlane(tmp_path)
        (tmp_path / "admin.kubeconfig").write_text(f"server: https://127.0.0.1:{taken}\n")
        plane.port = taken  # as if the API server's port had been the one taken
        component = Component(
            "kube-scheduler",
            [sys.executable, str(script), f"--secure-port={taken}"],
            tmp_path / "kube-scheduler.log",
        )
        plane.components[component.name] = component
        component.start()
        try:
            await plane._healthy(component.name, f"http://127.0.0.1:{taken}/healthz", tls=False)
            (port_arg,) = component.argv[2:]
            moved = int(port_arg.split("=")[1])
            assert moved != taken
            assert plane.port == moved
            assert (tmp_path / "admin.kubeconfig").read_text() == (
                f"server: https://127.0.0.1:{moved}\n"
            )
            assert "address already in use" in component.log_path.read_text()
        finally:
            component.stop()
