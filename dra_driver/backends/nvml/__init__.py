"""The NVML backend: the driver's only view of real NVIDIA GPUs.

`adapter.py` is the one module that imports `pynvml`; the rest works on what it returns, so every
failure is mapped to a typed error naming the GPU and the operation. `backend.py` is the
backend, `mig.py` MIG profiles and instances, `topology.py` PCIe, NUMA and NVLink,
`health.py` XID events, `names.py` product and profile names.
"""

from dra_driver.backends.nvml.backend import NvmlBackend

__all__ = ["NvmlBackend"]
