"""Versioned opaque-configuration API of the GPU DRA driver.

Everything the rest of the driver needs is re-exported here; the versioned
package holds the wire types. This package must not import the driver so
that tools and tests can use the API on their own.
"""

from api.device_type import DeviceType
from api.errors import ConfigError, Problem
from api.precedence import (
    AllocatedDevice,
    ConfigOrigin,
    ConfigSource,
    ResolvedConfig,
    resolve_device_configs,
)
from api.quantity import ByteQuantity, Quantity, parse_byte_quantity, parse_quantity
from api.v1alpha1 import (
    API_GROUP,
    API_VERSION,
    MAX_PARAMETERS_BYTES,
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
    config_json_schema,
    decode_config,
    default_config_for,
    encode_config,
)

__all__ = [
    "API_GROUP",
    "API_VERSION",
    "MAX_PARAMETERS_BYTES",
    "AllocatedDevice",
    "ByteQuantity",
    "ConfigError",
    "ConfigOrigin",
    "ConfigSource",
    "DeviceConfig",
    "DeviceType",
    "GpuConfig",
    "GpuSharing",
    "Lending",
    "MigDeviceConfig",
    "MigSharing",
    "MpsConfig",
    "Problem",
    "Quantity",
    "ResolvedConfig",
    "SharingStrategy",
    "TimeSliceInterval",
    "TimeSlicingConfig",
    "config_json_schema",
    "decode_config",
    "default_config_for",
    "encode_config",
    "parse_byte_quantity",
    "parse_quantity",
    "resolve_device_configs",
]
