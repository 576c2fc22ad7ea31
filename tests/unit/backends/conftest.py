"""Shared fixtures for the fake backend tests."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from dra_driver.backends.fake import FakeBackend

NODE = "node-a"
BOOT = "boot-1"


@pytest.fixture
def state_dir(tmp_path: Path) -> Path:
    return tmp_path / "fake-state"


@pytest.fixture
def make_backend() -> Iterator[Callable[..., FakeBackend]]:
    """Build backends from a spec string (fixed boot ID, so tests never depend on the host) and
    close them afterwards."""
    made: list[FakeBackend] = []

    def factory(spec: str, node_name: str = NODE, **options: Any) -> FakeBackend:
        options.setdefault("boot_id", BOOT)
        backend = FakeBackend.from_spec(spec, node_name, **options)
        made.append(backend)
        return backend

    yield factory
    for backend in made:
        backend.close()
