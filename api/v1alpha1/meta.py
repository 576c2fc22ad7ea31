"""Identity of this API version and the limits that come with it."""

from typing import Final

API_GROUP: Final = "resource.dra-driver.dev"
"""Fixed even when the driver runs under another name, so claims stay portable."""

API_VERSION: Final = f"{API_GROUP}/v1alpha1"

GPU_CONFIG_KIND: Final = "GpuConfig"
MIG_DEVICE_CONFIG_KIND: Final = "MigDeviceConfig"
KNOWN_KINDS: Final = (GPU_CONFIG_KIND, MIG_DEVICE_CONFIG_KIND)

MAX_PARAMETERS_BYTES: Final = 10 * 1024
"""Opaque parameters travel inside every claim and slice status the API
server stores; a tight bound keeps a typo (a pasted file, a runaway
template) from bloating etcd objects or our decode time."""
