"""Parsing of fake GPU specs: one-line form and YAML files."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from dra_driver.backends.fake.backend import (
    DEFAULT_CUDA_DRIVER_VERSION,
    DEFAULT_DRIVER_VERSION,
    FakeBackend,
)
from dra_driver.backends.fake.spec import FakeGpuSpec, parse_spec
from dra_driver.inventory.products import known_products


def write_yaml(tmp_path: Path, text: str, name: str = "gpus.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def test_single_profile() -> None:
    spec = parse_spec("H100-SXM5-80GB:8")
    assert [(g.product.key, g.count) for g in spec.gpus] == [("H100-SXM5-80GB", 8)]
    assert spec.driver_version is None
    assert spec.gpus[0].effective_mig_enabled is True


def test_comma_list_keeps_order_and_assigns_minors_in_order() -> None:
    backend = FakeBackend.from_spec(" A100-SXM4-40GB:2 , H100-SXM5-80GB:1 ", "n", boot_id="b")
    assert [g.product_name for g in backend.gpus] == [
        "NVIDIA A100-SXM4-40GB",
        "NVIDIA A100-SXM4-40GB",
        known_products()["H100-SXM5-80GB"].product_name,
    ]
    assert [g.minor for g in backend.gpus] == [0, 1, 2]
    assert [g.index for g in backend.gpus] == [0, 1, 2]


@pytest.mark.parametrize(
    ("spec", "fragment"),
    [
        ("", "empty fake GPU spec"),
        ("H100-SXM5-80GB", "'H100-SXM5-80GB': expected PROFILE:COUNT"),
        ("H100-SXM5-80GB:0", "count must be a positive integer, got '0'"),
        ("H100-SXM5-80GB:-2", "count must be a positive integer, got '-2'"),
        ("H100-SXM5-80GB:two", "count must be a positive integer, got 'two'"),
        ("A100-SXM4-40GB:1,", "'': expected PROFILE:COUNT"),
        ("V100:2", "unknown GPU profile 'V100'"),
    ],
)
def test_bad_compact_specs(spec: str, fragment: str) -> None:
    with pytest.raises(ValueError) as caught:
        parse_spec(spec)
    assert fragment in str(caught.value)


def test_unknown_profile_lists_known_keys() -> None:
    with pytest.raises(ValueError) as caught:
        parse_spec("A100-SXM4-40GB:1,V100:2")
    message = str(caught.value)
    assert "'V100:2'" in message
    for key in known_products():
        assert key in message


def test_yaml_with_custom_product_mig_disabled_and_versions(tmp_path: Path) -> None:
    path = write_yaml(
        tmp_path,
        """
        driverVersion: "570.1.2"
        cudaDriverVersion: "12.10"
        gpus:
          - profile: A100-SXM4-40GB
            count: 2
            migEnabled: false
          - profile: H100-NVL-94GB
            nvlinkDomain: rack7
          - product:
              key: L4
              product_name: NVIDIA L4
              architecture: Ada Lovelace
              cuda_compute_capability: "8.9"
              memory_mib: 23034
              multiprocessors: 58
        """,
    )
    backend = FakeBackend.from_spec(str(path), "n", boot_id="b")
    a100, a100b, nvl, l4 = backend.gpus
    assert (a100.mig_capable, a100.mig_enabled, a100b.mig_enabled) == (True, False, False)
    assert nvl.mig_enabled is True
    assert nvl.nvlink_domain == "rack7"
    assert l4.product_name == "NVIDIA L4"
    assert (l4.mig_capable, l4.mig_enabled, l4.memory_slices, l4.mig_profiles) == (
        False,
        False,
        0,
        (),
    )
    assert l4.memory_bytes == 23034 * 1024 * 1024
    assert l4.multiprocessors == 58
    assert {g.driver_version for g in backend.gpus} == {"570.1.2"}
    assert {g.cuda_driver_version for g in backend.gpus} == {"12.10"}


def test_yml_suffix_is_read_as_yaml(tmp_path: Path) -> None:
    path = write_yaml(tmp_path, "gpus: [{profile: A30-24GB, count: 3}]\n", "node.yml")
    spec = parse_spec(str(path))
    assert [(g.product.key, g.count) for g in spec.gpus] == [("A30-24GB", 3)]


def test_version_precedence_explicit_over_yaml_over_default(tmp_path: Path) -> None:
    path = write_yaml(tmp_path, 'driverVersion: "570.1.2"\ngpus: [{profile: A30-24GB}]\n')
    from_yaml = FakeBackend.from_spec(str(path), "n", boot_id="b")
    assert from_yaml.gpus[0].driver_version == "570.1.2"
    assert from_yaml.gpus[0].cuda_driver_version == DEFAULT_CUDA_DRIVER_VERSION
    explicit = FakeBackend.from_spec(str(path), "n", boot_id="b", driver_version="999.0")
    assert explicit.gpus[0].driver_version == "999.0"
    plain = FakeBackend.from_spec("A30-24GB:1", "n", boot_id="b")
    assert plain.gpus[0].driver_version == DEFAULT_DRIVER_VERSION


@pytest.mark.parametrize(
    ("document", "fragment"),
    [
        ("- profile: A30-24GB\n", "expected a mapping with a 'gpus' list"),
        ("gpus: []\n", "'gpus' must be a non-empty list"),
        ("gpu: [{profile: A30-24GB}]\n", "unknown top-level key 'gpu'"),
        (
            "gpus: [{profile: A30-24GB}, {profile: A30-24GB, cout: 2}]\n",
            "gpus[1]: unknown key 'cout'",
        ),
        (
            "gpus: [{profile: A30-24GB, count: 0}]\n",
            "gpus[0]: count must be a positive integer, got 0",
        ),
        ("gpus: [{profile: A30-24GB, count: true}]\n", "gpus[0]: count must be a positive integer"),
        ("gpus: [{profile: A30-24GB, count: '2'}]\n", "gpus[0]: count must be a positive integer"),
        ("gpus: [{profile: V100}]\n", "gpus[0]: unknown GPU profile 'V100'; known profiles: A100"),
        ("gpus: [{count: 2}]\n", "gpus[0]: give exactly one of 'profile'"),
        (
            "gpus: [{profile: A30-24GB, migEnabled: 'yes'}]\n",
            "gpus[0]: migEnabled must be true or false",
        ),
        (
            "gpus: [{profile: A30-24GB, nvlinkDomain: 7}]\n",
            "gpus[0]: nvlinkDomain must be a string",
        ),
        (f"gpus: [{{profile: A30-24GB, nvlinkDomain: {'x' * 65}}}]\n", "longer than 64"),
        ("gpus: [A30-24GB]\n", "gpus[0]: expected a mapping, got str"),
        (
            "cudaDriverVersion: 12.10\ngpus: [{profile: A30-24GB}]\n",
            "cudaDriverVersion must be a quoted string",
        ),
        ("gpus: [{product: {key: X}}]\n", "gpus[0]: product is missing field 'product_name'"),
        (
            "gpus: [{product: {key: X, product_name: X, architecture: A,"
            " cuda_compute_capability: '9.0', memory_mib: 1, multiprocessors: 1},"
            " migEnabled: true}]\n",
            "gpus[0]: X: migEnabled is true but the product has no MIG",
        ),
        ("gpus: [{profile: A30-24GB}\n", "is not valid YAML"),
    ],
)
def test_bad_yaml_specs(tmp_path: Path, document: str, fragment: str) -> None:
    path = write_yaml(tmp_path, document)
    with pytest.raises(ValueError) as caught:
        parse_spec(str(path))
    assert fragment in str(caught.value)
    assert str(path) in str(caught.value)


def test_custom_mig_placement_outside_memory_slices_is_rejected(tmp_path: Path) -> None:
    path = write_yaml(
        tmp_path,
        """
        gpus:
          - product:
              key: X
              product_name: X
              architecture: A
              cuda_compute_capability: "9.0"
              memory_mib: 1024
              multiprocessors: 8
              memory_slices: 2
              mig_profiles:
                - {name: 1g.1gb, profile_index: 0, gi_profile_id: 19, ci_profile_index: 0,
                   ci_profile_id: 0, slice_count: 1, instance_count: 3, memory_mib: 512,
                   multiprocessors: 4, copy_engines: 0, decoders: 0, encoders: 0,
                   jpeg_engines: 0, ofa_engines: 0, placements: [[0, 1], [1, 1], [2, 1]]}
        """,
    )
    with pytest.raises(ValueError, match=r"placement 2:1 lies outside the product's 2 memory"):
        parse_spec(str(path))


def test_missing_yaml_file_is_named(tmp_path: Path) -> None:
    missing = tmp_path / "absent.yaml"
    with pytest.raises(ValueError, match="cannot read fake GPU spec file") as caught:
        parse_spec(str(missing))
    assert str(missing) in str(caught.value)


def test_gpu_spec_constructor_validates() -> None:
    with pytest.raises(ValueError, match="count must be a positive integer"):
        FakeGpuSpec.of("A30-24GB", 0)
    with pytest.raises(ValueError, match="unknown GPU profile 'nope'"):
        FakeGpuSpec.of("nope")
    assert FakeGpuSpec.of("A30-24GB", 2, mig_enabled=False).effective_mig_enabled is False
