"""What fake GPUs a node has, from a one-line spec or a YAML file.

The one-line form is meant for flags and environment variables:

    H100-SXM5-80GB:8
    A100-SXM4-40GB:2,H100-SXM5-80GB:2

Each part is `<product key>:<count>`; product keys are those of the packaged GPU facts
(`dra_driver.inventory.products.known_products()`). Anything that names an existing file, or ends
in `.yaml`/`.yml`, is read as a YAML file instead:

    driverVersion: "580.95.05"      # optional, a string (quote it)
    cudaDriverVersion: "13.0"       # optional, a string (quote it: 12.10 is not 12.1)
    gpus:
      - profile: A100-SXM4-40GB     # a packaged product key
        count: 2                    # optional, default 1, a positive integer
        migEnabled: false           # optional, default true for MIG-capable products
      - profile: H100-NVL-94GB
        count: 2
        nvlinkDomain: rack7-bridge  # optional override ("" for none), at most 64 characters
      - product:                    # a product not in the packaged file, same JSON shape
          key: L4
          product_name: NVIDIA L4
          architecture: Ada Lovelace
          cuda_compute_capability: "8.9"
          memory_mib: 23034
          multiprocessors: 58
        count: 1

GPUs get minors 0..N-1 in the order they are listed. Every mistake raises `ValueError` naming
the offending part, so a typo in a demo config fails at startup rather than as a missing device.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from dra_driver.inventory.products import GpuProduct, product, product_from_dict

MAX_NVLINK_DOMAIN_LENGTH = 64

_TOP_KEYS = ("gpus", "driverVersion", "cudaDriverVersion")
_ENTRY_KEYS = ("profile", "product", "count", "migEnabled", "nvlinkDomain")


@dataclass(frozen=True, slots=True)
class FakeGpuSpec:
    """`count` identical GPUs of one product.

    `mig_enabled=None` means "as the product allows" (on for MIG-capable products);
    `nvlink_domain=None` means "derived from the product's form factor" (see fake.topology).
    """

    product: GpuProduct
    count: int = 1
    mig_enabled: bool | None = None
    nvlink_domain: str | None = None

    def __post_init__(self) -> None:
        if isinstance(self.count, bool) or not isinstance(self.count, int) or self.count < 1:
            raise ValueError(
                f"{self.product.key}: count must be a positive integer, got {self.count!r}"
            )
        if self.mig_enabled and not self.product.mig_capable:
            raise ValueError(f"{self.product.key}: migEnabled is true but the product has no MIG")
        if self.nvlink_domain is not None and len(self.nvlink_domain) > MAX_NVLINK_DOMAIN_LENGTH:
            raise ValueError(
                f"{self.product.key}: nvlinkDomain is longer than {MAX_NVLINK_DOMAIN_LENGTH} "
                f"characters: {self.nvlink_domain!r}"
            )

    @classmethod
    def of(
        cls,
        key: str,
        count: int = 1,
        *,
        mig_enabled: bool | None = None,
        nvlink_domain: str | None = None,
    ) -> FakeGpuSpec:
        """Spec for a packaged product; an unknown key raises ValueError listing the known ones."""
        return cls(_known_product(key), count, mig_enabled, nvlink_domain)

    @property
    def effective_mig_enabled(self) -> bool:
        if self.mig_enabled is None:
            return self.product.mig_capable
        return self.mig_enabled


@dataclass(frozen=True, slots=True)
class FakeNodeSpec:
    """A parsed spec; versions are None where the spec leaves them to the caller's defaults."""

    gpus: tuple[FakeGpuSpec, ...]
    driver_version: str | None = None
    cuda_driver_version: str | None = None


def parse_spec(spec: str) -> FakeNodeSpec:
    """Parse either spec form (see the module docstring)."""
    text = spec.strip()
    if not text:
        raise ValueError("empty fake GPU spec: expected PROFILE:COUNT[,...] or a YAML file path")
    path = Path(text)
    if text.endswith((".yaml", ".yml")) or path.is_file():
        return load_yaml_spec(path)
    return parse_compact_spec(text)


def parse_compact_spec(spec: str) -> FakeNodeSpec:
    gpus = []
    for part in spec.split(","):
        item = part.strip()
        key, sep, count_text = item.rpartition(":")
        if not sep or not key:
            raise ValueError(f"fake GPU spec part {item!r}: expected PROFILE:COUNT")
        try:
            count = int(count_text)
        except ValueError:
            count = 0
        if count < 1:
            raise ValueError(
                f"fake GPU spec part {item!r}: count must be a positive integer, got {count_text!r}"
            )
        try:
            gpus.append(FakeGpuSpec.of(key, count))
        except ValueError as error:
            raise ValueError(f"fake GPU spec part {item!r}: {error}") from None
    return FakeNodeSpec(tuple(gpus))


def load_yaml_spec(path: Path) -> FakeNodeSpec:
    try:
        text = path.read_text()
    except OSError as error:
        raise ValueError(f"cannot read fake GPU spec file {path}: {error}") from None
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise ValueError(f"fake GPU spec file {path} is not valid YAML: {error}") from None
    return parse_spec_document(document, str(path))


def parse_spec_document(document: object, source: str) -> FakeNodeSpec:
    """Validate an already-loaded YAML document; `source` prefixes every error message."""
    if not isinstance(document, Mapping):
        raise ValueError(f"{source}: expected a mapping with a 'gpus' list at the top level")
    for key in document:
        if key not in _TOP_KEYS:
            raise ValueError(
                f"{source}: unknown top-level key {key!r} (allowed: {', '.join(_TOP_KEYS)})"
            )
    entries = document.get("gpus")
    if not isinstance(entries, list) or not entries:
        raise ValueError(f"{source}: 'gpus' must be a non-empty list")
    gpus = tuple(
        _parse_entry(entry, f"{source}: gpus[{index}]") for index, entry in enumerate(entries)
    )
    return FakeNodeSpec(
        gpus,
        driver_version=_optional_string(document, "driverVersion", source),
        cuda_driver_version=_optional_string(document, "cudaDriverVersion", source),
    )


def _parse_entry(entry: object, where: str) -> FakeGpuSpec:
    if not isinstance(entry, Mapping):
        raise ValueError(f"{where}: expected a mapping, got {type(entry).__name__}")
    for key in entry:
        if key not in _ENTRY_KEYS:
            raise ValueError(f"{where}: unknown key {key!r} (allowed: {', '.join(_ENTRY_KEYS)})")
    if ("profile" in entry) == ("product" in entry):
        raise ValueError(f"{where}: give exactly one of 'profile' (a known key) or 'product'")
    count = entry.get("count", 1)
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise ValueError(f"{where}: count must be a positive integer, got {count!r}")
    mig_enabled = entry.get("migEnabled")
    if mig_enabled is not None and not isinstance(mig_enabled, bool):
        raise ValueError(f"{where}: migEnabled must be true or false, got {mig_enabled!r}")
    nvlink_domain = entry.get("nvlinkDomain")
    if nvlink_domain is not None and not isinstance(nvlink_domain, str):
        raise ValueError(f"{where}: nvlinkDomain must be a string, got {nvlink_domain!r}")
    if "profile" in entry:
        key = entry["profile"]
        if not isinstance(key, str):
            raise ValueError(f"{where}: profile must be a string, got {key!r}")
        gpu_product = _known_product(key, where)
    else:
        gpu_product = _custom_product(entry["product"], where)
    try:
        return FakeGpuSpec(gpu_product, count, mig_enabled, nvlink_domain)
    except ValueError as error:
        raise ValueError(f"{where}: {error}") from None


def _known_product(key: str, where: str = "") -> GpuProduct:
    try:
        return product(key)
    except KeyError as error:
        prefix = f"{where}: " if where else ""
        raise ValueError(f"{prefix}{error.args[0]}") from None


def _custom_product(raw: object, where: str) -> GpuProduct:
    if not isinstance(raw, Mapping):
        raise ValueError(f"{where}: product must be a mapping in the packaged JSON shape")
    try:
        custom = product_from_dict(dict(raw))
    except KeyError as error:
        raise ValueError(f"{where}: product is missing field {error.args[0]!r}") from None
    except (TypeError, ValueError) as error:
        raise ValueError(f"{where}: product is malformed: {error}") from None
    for mig_profile in custom.mig_profiles:
        if not mig_profile.placements:
            raise ValueError(f"{where}: MIG profile {mig_profile.name!r} has no placements")
        for placement in mig_profile.placements:
            if placement.start < 0 or placement.end > custom.memory_slices:
                raise ValueError(
                    f"{where}: MIG profile {mig_profile.name!r} placement "
                    f"{placement.start}:{placement.size} lies outside the product's "
                    f"{custom.memory_slices} memory slices"
                )
    return custom


def _optional_string(document: Mapping[Any, Any], key: str, source: str) -> str | None:
    value = document.get(key)
    if value is not None and not isinstance(value, str):
        raise ValueError(f"{source}: {key} must be a quoted string, got {value!r}")
    return value
