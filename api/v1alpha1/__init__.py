"""Version v1alpha1 of the opaque configuration (``resource.dra-driver.dev``)."""

from api.v1alpha1.applicability import (
    default_config_for,
    kind_misfit,
    lending_misfit,
    strategy_misfit,
)
from api.v1alpha1.decode import Parameters, decode_config, encode_config
from api.v1alpha1.meta import (
    API_GROUP,
    API_VERSION,
    GPU_CONFIG_KIND,
    KNOWN_KINDS,
    MAX_PARAMETERS_BYTES,
    MIG_DEVICE_CONFIG_KIND,
)
from api.v1alpha1.schema import config_json_schema
from api.v1alpha1.types import (
    DeviceConfig,
    GpuConfig,
    GpuSharing,
    Lending,
    MigDeviceConfig,
    MigSharing,
    MpsConfig,
    SharingStrategy,
    TimeSliceInterval,
    TimeSlicingConfig,
)

__all__ = [
    "API_GROUP",
    "API_VERSION",
    "GPU_CONFIG_KIND",
    "KNOWN_KINDS",
    "MAX_PARAMETERS_BYTES",
    "MIG_DEVICE_CONFIG_KIND",
    "DeviceConfig",
    "GpuConfig",
    "GpuSharing",
    "Lending",
    "MigDeviceConfig",
    "MigSharing",
    "MpsConfig",
    "Parameters",
    "SharingStrategy",
    "TimeSliceInterval",
    "TimeSlicingConfig",
    "config_json_schema",
    "decode_config",
    "default_config_for",
    "encode_config",
    "kind_misfit",
    "lending_misfit",
    "strategy_misfit",
]
