"""Replaying pods and claims against a recorded cluster, pod by pod (the trace benchmark uses it;
`dra-driver simulate` still allocates claims without pods).

A pod goes to a node only where its CPU, memory and other requests fit what the node has left and
its claims fit the node's devices. See docs/allocation.md ("Simulating pods") for the contract.
"""
