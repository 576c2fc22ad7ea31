"""MPS control daemons: one per GPU (or MIG device) that has MPS clients, started, adopted after
a restart, watched and stopped by the kubelet plugin. `daemon.py` talks to the control tool,
`manager.py` decides which daemons run and keeps them running."""
