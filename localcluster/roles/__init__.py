"""Stand-ins for the parts of Kubernetes the local cluster needs (test and demo harness only).

The control-plane roles (`claims_from_templates`, `scheduler`) are one `reconcile_once(client)`
function each that does a full pass over the objects it looks after and returns how many it
changed; `cluster.py` runs them in a loop. `node_agent` plays kubelet on one node: plugin
registration (`registry`), prepare and unprepare over the plugin's real gRPC sockets.
"""
