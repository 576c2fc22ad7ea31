"""The v1alpha1 configuration objects users put in ``opaque.parameters``.

Field names and nesting deliberately match NVIDIA's own DRA driver
(``GpuConfig``/``MigDeviceConfig`` with ``sharing``) so that claims can be
moved between the two drivers by changing only ``driver`` and
``apiVersion``. Models are frozen because one decoded configuration is
shared by every device it applies to.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema, field_validator, model_validator
from pydantic_core import PydanticCustomError

from api.v1alpha1.memory import PerDeviceLimits, PinnedMemoryLimit

CONFLICT_ERROR = "dra_sharing_conflict"
"""Error type for sharing settings that contradict the chosen strategy; its
context names the offending field so the message can point at it."""

NOT_FOR_MIG_ERROR = "dra_not_for_mig"

ApiVersion = Literal["resource.dra-driver.dev/v1alpha1"]


class SharingStrategy(StrEnum):
    """How several workloads share one device."""

    TIME_SLICING = "TimeSlicing"
    MPS = "MPS"


# Named values rather than a boolean, like the API's other choices, so that a claim reads as its
# owner's decision. The docstring is published in the JSON Schema, so it speaks to users.
class Lending(StrEnum):
    """Whether the node may lend the owner's GPU to best-effort borrowers while it idles."""

    ALLOWED = "Allowed"
    NEVER = "Never"


class TimeSliceInterval(StrEnum):
    """Length of each time slice; named levels because drivers map them to
    implementation-defined durations."""

    DEFAULT = "Default"
    SHORT = "Short"
    MEDIUM = "Medium"
    LONG = "Long"


def _require_identity(schema: dict[str, Any]) -> None:
    """Top-level kinds must spell out apiVersion and kind on the wire, even
    though Python code may omit them when building a config."""
    properties = schema["properties"]
    for name in ("apiVersion", "kind"):
        properties[name].pop("default", None)
    schema["required"] = ["apiVersion", "kind", *schema.get("required", [])]


class _WireModel(BaseModel):
    """Shared settings: strict types, unknown fields rejected, camelCase on
    the wire and snake_case in Python."""

    model_config = ConfigDict(
        strict=True,
        extra="forbid",
        frozen=True,
        validate_by_name=True,
        validate_by_alias=True,
        serialize_by_alias=True,
    )


class TimeSlicingConfig(_WireModel):
    """Settings for time-slicing a GPU between workloads."""

    interval: TimeSliceInterval = Field(
        default=TimeSliceInterval.DEFAULT,
        description="How long each workload runs before the GPU switches to the next.",
    )


Percentage = Annotated[int, Field(ge=0, le=100)]


class MpsConfig(_WireModel):
    """Limits the MPS control daemon applies to every client of a device."""

    default_active_thread_percentage: Percentage | None = Field(
        default=None,
        alias="defaultActiveThreadPercentage",
        description="Share of the device's streaming multiprocessors each client may use.",
    )
    default_pinned_device_memory_limit: PinnedMemoryLimit | None = Field(
        default=None,
        alias="defaultPinnedDeviceMemoryLimit",
        description="Device memory each client may pin, on every device of the claim.",
    )
    default_per_device_pinned_memory_limit: PerDeviceLimits | None = Field(
        default=None,
        alias="defaultPerDevicePinnedMemoryLimit",
        description=(
            "Pinned-memory limit for particular devices, keyed by GPU index or UUID; "
            "overrides defaultPinnedDeviceMemoryLimit for those devices."
        ),
    )


def _conflict(field: str, reason: str) -> PydanticCustomError:
    return PydanticCustomError(CONFLICT_ERROR, "{reason}", {"field": field, "reason": reason})


def _fill(model: BaseModel, attribute: str, value: object) -> None:
    """Apply a default that depends on another field.

    The models are frozen and pydantic wants after-validators to return the
    instance they were given, so the one sanctioned write is done here.
    """
    object.__setattr__(model, attribute, value)


class GpuSharing(_WireModel):
    """How a full GPU is shared; the strategy decides which settings apply."""

    strategy: SharingStrategy = Field(description="TimeSlicing or MPS.")
    time_slicing_config: TimeSlicingConfig | None = Field(
        default=None,
        alias="timeSlicingConfig",
        description="Only with strategy TimeSlicing; defaults to interval Default.",
    )
    mps_config: MpsConfig | None = Field(
        default=None,
        alias="mpsConfig",
        description="Only with strategy MPS; defaults to no limits.",
    )

    @model_validator(mode="after")
    def _match_strategy(self) -> Self:
        if self.strategy is SharingStrategy.TIME_SLICING:
            if self.mps_config is not None:
                raise _conflict(
                    "mpsConfig",
                    "is not allowed with strategy TimeSlicing; "
                    "set strategy to MPS or remove mpsConfig",
                )
            if self.time_slicing_config is None:
                _fill(self, "time_slicing_config", TimeSlicingConfig())
        else:
            if self.time_slicing_config is not None:
                raise _conflict(
                    "timeSlicingConfig",
                    "is not allowed with strategy MPS; "
                    "set strategy to TimeSlicing or remove timeSlicingConfig",
                )
            if self.mps_config is None:
                _fill(self, "mps_config", MpsConfig())
        return self


class MigSharing(_WireModel):
    """How a MIG device is shared. MIG devices cannot be time-sliced, so MPS
    is the only strategy; the field exists to keep the shape of GpuSharing."""

    strategy: Annotated[
        SharingStrategy,
        WithJsonSchema({"type": "string", "enum": [SharingStrategy.MPS.value]}),
    ] = Field(description="Must be MPS.")
    mps_config: MpsConfig | None = Field(
        default=None, alias="mpsConfig", description="Defaults to no limits."
    )

    @field_validator("strategy")
    @classmethod
    def _only_mps(cls, strategy: SharingStrategy) -> SharingStrategy:
        if strategy is not SharingStrategy.MPS:
            raise PydanticCustomError(
                NOT_FOR_MIG_ERROR,
                "{reason}",
                {"reason": f"{strategy.value} does not apply to MIG devices; use MPS"},
            )
        return strategy

    @model_validator(mode="after")
    def _default_mps(self) -> Self:
        if self.mps_config is None:
            _fill(self, "mps_config", MpsConfig())
        return self


class GpuConfig(_WireModel):
    """Configuration for whole GPUs and for time-sliced or shared GPUs."""

    model_config = ConfigDict(json_schema_extra=_require_identity)

    api_version: ApiVersion = Field(default="resource.dra-driver.dev/v1alpha1", alias="apiVersion")
    kind: Literal["GpuConfig"] = "GpuConfig"
    sharing: GpuSharing | None = Field(
        default=None, description="Leave out to use the device without sharing settings."
    )
    lending: Lending | None = Field(
        default=None,
        description=(
            "Never keeps the GPU from being lent to best-effort borrowers while this claim "
            "holds it, however long it idles; leave out (or Allowed) to let the node lend it "
            "when idle. Only for an owner's devices, not a borrower's (gpu-opportunistic)."
        ),
    )


class MigDeviceConfig(_WireModel):
    """Configuration for MIG devices (no lending field: a GPU in MIG mode is never lent)."""

    # A borrower's MPS client of the whole GPU cannot share its MIG devices, so a MIG owner has
    # nothing to refuse; a lending field here is refused by name (api/v1alpha1/messages.py).
    model_config = ConfigDict(json_schema_extra=_require_identity)

    api_version: ApiVersion = Field(default="resource.dra-driver.dev/v1alpha1", alias="apiVersion")
    kind: Literal["MigDeviceConfig"] = "MigDeviceConfig"
    sharing: MigSharing | None = Field(
        default=None, description="Leave out to use the device without sharing settings."
    )


DeviceConfig = GpuConfig | MigDeviceConfig
"""Any of the kinds this API version defines."""

CONFIG_KINDS: dict[str, type[GpuConfig] | type[MigDeviceConfig]] = {
    "GpuConfig": GpuConfig,
    "MigDeviceConfig": MigDeviceConfig,
}
