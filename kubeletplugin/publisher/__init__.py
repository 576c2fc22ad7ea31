"""Publishing the node's ResourceSlices: what to write (plan.py) and writing it."""
