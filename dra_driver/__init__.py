"""Shared core of the GPU DRA driver: production code that both daemons and the tools use.

`inventory` (the GPU model) and `backends` (NVML, or fake GPUs that follow the same hardware
rules) discover GPUs; `slices` turns them into ResourceSlices; `allocator` is the
kube-scheduler's allocation with placement scoring, and `checker` judges its results
independently; `cel` is the selector environment; `cdi`, `checkpoint` and `kubeletapi` serve the
kubelet plugin; `cli` is the `dra-driver` command. Nothing here imports either daemon or the
local cluster (see docs/architecture.md, enforced by tests/unit/test_layering.py).
"""

__version__ = "0.1.0"

DEFAULT_DRIVER_NAME = "gpu.dra-driver.dev"
