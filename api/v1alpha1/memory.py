"""Pydantic field types for MPS pinned-memory limits and the devices they name.

The parsing rules live in :mod:`api.quantity`; this module only teaches
pydantic to use them, to write the original text back out, and to describe
the accepted shapes in the JSON Schema.
"""

from __future__ import annotations

import json
import re
from typing import Annotated, Any

from pydantic import AfterValidator, PlainSerializer, PlainValidator, WithJsonSchema
from pydantic_core import PydanticCustomError

from api.errors import ConfigError
from api.quantity import QUANTITY_PATTERN, ByteQuantity, parse_byte_quantity

QUANTITY_ERROR = "dra_quantity"
DEVICE_KEY_ERROR = "dra_device_key"

# An index as nvidia-smi prints it (no leading zeros, so one device cannot be
# listed twice under two spellings) or a GPU/MIG UUID.
DEVICE_KEY_PATTERN = r"^(0|[1-9][0-9]*|(GPU|MIG)-[0-9a-fA-F]+(-[0-9a-fA-F]+)*)$"
_DEVICE_KEY = re.compile(DEVICE_KEY_PATTERN)


def _validate_byte_quantity(value: Any) -> ByteQuantity:
    if isinstance(value, ByteQuantity):
        return value
    try:
        return parse_byte_quantity(value)
    except ConfigError as err:
        reason = err.problems[0].reason
        raise PydanticCustomError(QUANTITY_ERROR, "{reason}", {"reason": reason}) from None


def _validate_device_key(key: str) -> str:
    if _DEVICE_KEY.fullmatch(key) is None:
        reason = (
            f"key {json.dumps(key)} does not name a device; use a GPU index "
            'such as "0" or a UUID such as "GPU-<hex digits and dashes>" or "MIG-<...>"'
        )
        raise PydanticCustomError(DEVICE_KEY_ERROR, "{reason}", {"reason": reason})
    return key


QUANTITY_JSON_SCHEMA: dict[str, Any] = {
    "description": (
        'Bytes, as a Kubernetes quantity string such as "4Gi" or "1.5e9" '
        "or as a plain integer; it must come to a non-negative whole number."
    ),
    "anyOf": [
        {"type": "string", "pattern": QUANTITY_PATTERN},
        {"type": "integer", "minimum": 0},
    ],
}

PinnedMemoryLimit = Annotated[
    ByteQuantity,
    PlainValidator(_validate_byte_quantity),
    PlainSerializer(lambda quantity: quantity.text, return_type=str),
    WithJsonSchema(QUANTITY_JSON_SCHEMA),
]
"""A memory limit in bytes, kept together with the text the user wrote."""

DeviceKey = Annotated[str, AfterValidator(_validate_device_key)]
"""Which GPU a per-device limit is for: its index on the node or its UUID."""

PerDeviceLimits = Annotated[
    dict[DeviceKey, PinnedMemoryLimit],
    # Spelled out because pydantic would describe the keys with
    # patternProperties, which lets keys that match no pattern through.
    WithJsonSchema(
        {
            "type": "object",
            "propertyNames": {"pattern": DEVICE_KEY_PATTERN},
            "additionalProperties": QUANTITY_JSON_SCHEMA,
        }
    ),
]
