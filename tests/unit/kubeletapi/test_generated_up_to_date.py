"""The checked-in generated modules must be exactly what hack/gen-protos.sh produces now."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
GEN = REPO / "dra_driver" / "kubeletapi" / "gen"


def _files(root: Path) -> dict[str, bytes]:
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and "__pycache__" not in p.parts
    }


def test_generated_modules_match_protos(tmp_path: Path) -> None:
    out = tmp_path / "gen"
    subprocess.run(
        ["bash", str(REPO / "hack" / "gen-protos.sh"), str(out)],
        check=True,
        env={"PYTHON": sys.executable, "PATH": "/usr/bin:/bin"},
        capture_output=True,
    )
    fresh = _files(out)
    checked_in = _files(GEN)
    assert sorted(fresh) == sorted(checked_in), "run hack/gen-protos.sh"
    stale = [name for name in fresh if fresh[name] != checked_in[name]]
    assert not stale, f"out of date, run hack/gen-protos.sh: {stale}"
    assert any(name.endswith("_pb2_grpc.py") for name in fresh)


def test_generated_modules_import_by_package_path() -> None:
    text = (GEN / "dra_v1_pb2_grpc.py").read_text()
    assert "from dra_driver.kubeletapi.gen import dra_v1_pb2 as" in text
    assert "\nimport dra_v1_pb2" not in text
