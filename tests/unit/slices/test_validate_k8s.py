"""`dra-driver devices` output is accepted by the real API schemas of 1.36 and 1.37, strictly."""

from __future__ import annotations

import json
import subprocess
import sys

import kubernetes_validate
import pytest

from dra_driver.cli.main import main
from dra_driver.inventory.products import known_products
from dra_driver.slices import check_limits

VERSIONS = ("1.36.0", "1.37.0")


def devices_json(capsys: pytest.CaptureFixture[str], *args: str) -> list[dict]:
    assert main(["devices", *args, "--output", "json"]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("key", sorted(known_products()))
def test_every_profile_validates_strictly_and_within_limits(key, capsys):
    slices = devices_json(capsys, "--fake", f"{key}:8")
    assert isinstance(slices, list)
    assert len(slices) == 9
    assert check_limits(slices) == []
    for version in VERSIONS:
        for item in slices:
            kubernetes_validate.validate(item, version, strict=True)


@pytest.mark.parametrize(
    "args",
    [
        ("--no-partitionable",),
        ("--shapes", "gpu,mig"),
        ("--timeslice-shares", "40"),
    ],
)
def test_other_layouts_validate_too(args, capsys):
    slices = devices_json(capsys, "--fake", "A100-SXM4-80GB:4", *args)
    assert check_limits(slices) == []
    for version in VERSIONS:
        for item in slices:
            kubernetes_validate.validate(item, version, strict=True)


def test_strict_validation_would_catch_a_stray_field(capsys):
    slices = devices_json(capsys, "--fake", "A30-24GB:1")
    slices[1]["spec"]["devices"][0]["colour"] = "green"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(slices[1], "1.37.0", strict=True)


def test_console_entry_point_prints_yaml():
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "dra_driver.cli.main",
            "devices",
            "--fake",
            "A30-24GB:1",
            "--node-name",
            "worker-7",
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert "kind: ResourceSlice" in done.stdout
    assert "nodeName: worker-7" in done.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--fake", "H100-SXM9:8"], "unknown GPU profile 'H100-SXM9'"),
        (["--fake", "A30-24GB:zero"], "A30-24GB:zero"),
    ],
)
def test_bad_fake_spec_is_a_clear_error(args, message, capsys):
    assert main(["devices", *args]) == 2
    assert message in capsys.readouterr().err


def test_unknown_shape_is_refused(capsys):
    with pytest.raises(SystemExit):
        main(["devices", "--fake", "A30-24GB:1", "--shapes", "gpu,tpu"])
    assert "unknown shape" in capsys.readouterr().err
