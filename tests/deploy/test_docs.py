"""The user docs: the configuration reference is generated from the code and up to date, and
links between the docs point at files that exist."""

from __future__ import annotations

import importlib.util
import re
from types import ModuleType

import pytest

from tests.deploy.chart import ROOT

PAGES = [
    "install.md",
    "concepts.md",
    "deviceclasses-and-claims.md",
    "configuration.md",
    "troubleshooting.md",
    "driver-root.md",
    "upgrade.md",
    "security.md",
    "performance.md",
    "performance/allocator.md",
    "performance/fragmentation.md",
    "performance/traces.md",
    "performance/plugin.md",
    "performance/telemetry.md",
    "performance/controller.md",
    "performance/queues.md",
    "testing.md",
    "architecture.md",
    "queues.md",
]
LINK = re.compile(r"\]\(([^)#\s]+)(#[^)]*)?\)")


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "gen_config_docs", ROOT / "hack" / "gen-config-docs.py"
    )
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_configuration_reference_is_up_to_date() -> None:
    committed = (ROOT / "docs" / "configuration.md").read_text()
    assert committed == _generator().render(), "run: python hack/gen-config-docs.py"


def test_configuration_reference_lists_every_flag_and_value() -> None:
    text = (ROOT / "docs" / "configuration.md").read_text()
    for flag in ("--pod-uid", "--healthcheck-port", "--gate-name", "--lease-duration"):
        assert f"`{flag}`" in text
    for value in ("`driverName`", "`fakeGpus.count`", "`deviceClasses.extendedResourceNames`"):
        assert value in text


@pytest.mark.parametrize("page", ["../README.md", *PAGES])
def test_relative_links_resolve(page: str) -> None:
    path = (ROOT / "docs" / page).resolve()
    assert path.exists(), f"docs/{page} is missing"
    for target, _ in LINK.findall(path.read_text()):
        if target.startswith(("http://", "https://", "mailto:")):
            continue
        assert (path.parent / target).exists(), f"{page} links to {target}, which does not exist"
