"""The independent allocation checker: judges allocations without sharing the allocator's code.

It reads the same objects the allocator reads (slices, classes, claims, nodes) with its own
parser (`inputs.py`) and checks every rule of the upstream allocator on a finished result
(`checker.py`). It imports nothing from `dra_driver.allocator`, so a bug there cannot hide
itself here; a layering test keeps it that way.
"""
