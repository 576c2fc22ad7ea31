"""Stand-ins for the control-plane parts the local cluster needs (test and demo harness only).

Each role is one `reconcile_once(client)` function that does a full pass over the objects it
looks after and returns how many it changed; a caller runs it in a loop or after each change.
"""
