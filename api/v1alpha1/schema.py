"""JSON Schema for the v1alpha1 parameters object, derived from the models.

Generating it (rather than writing it by hand) keeps editors, CRD-style
validation and documentation in step with what the decoder accepts; the
committed copy is checked against this output by the tests.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field, TypeAdapter
from pydantic.json_schema import GenerateJsonSchema

from api.v1alpha1.meta import API_VERSION, MAX_PARAMETERS_BYTES
from api.v1alpha1.types import GpuConfig, MigDeviceConfig

JSON_SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"


class _UntitledFields(GenerateJsonSchema):
    """Leave out per-field titles: pydantic derives them from Python names
    ("Apiversion"), which would only confuse readers of the wire format."""

    def field_title_should_be_set(self, schema: Any) -> bool:
        return False


_ANY_KIND: TypeAdapter[GpuConfig | MigDeviceConfig] = TypeAdapter(
    Annotated[GpuConfig | MigDeviceConfig, Field(discriminator="kind")]
)


def config_json_schema() -> dict[str, Any]:
    """One schema document accepting either kind, told apart by ``kind``."""
    body = _ANY_KIND.json_schema(by_alias=True, mode="validation", schema_generator=_UntitledFields)
    return {
        "$schema": JSON_SCHEMA_DIALECT,
        "title": f"{API_VERSION} opaque device configuration",
        "description": (
            "The parameters object of an opaque device configuration for the GPU DRA "
            f"driver. At most {MAX_PARAMETERS_BYTES} bytes of JSON. Some rules are checked "
            "only by the driver: quantities must come to whole bytes, and "
            "sharing settings must match the strategy."
        ),
        **body,
    }
