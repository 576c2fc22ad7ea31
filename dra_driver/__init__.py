"""Shared core of the GPU DRA driver: inventory, GPU backends, ResourceSlice building."""

__version__ = "0.1.0"

DEFAULT_DRIVER_NAME = "gpu.dra-driver.dev"
