"""Defaults shared by the local cluster's classes and its commands.

They live here, in a module that imports nothing, so that the commands can show them in their
help without loading the HTTP server, and the classes can take them without importing the
command modules that register themselves with `dra-driver`.
"""

from __future__ import annotations

from pathlib import Path

DEFAULT_WATCH_HISTORY = 1000
"""Events kept for watches to resume from (`ApiServer`, `LocalCluster`, both commands)."""

DEFAULT_GPUS = "H100-SXM5-80GB:8"
"""Every node's fake GPUs (`LocalCluster` and `dra-driver local-cluster --gpus`)."""

DEMO_GPUS = str(Path(__file__).resolve().parent / "gpus" / "demo.yaml")
"""Every node's fake GPUs in the demo: eight H100, two of them with MIG mode off, where whole
GPUs report utilisation (`run_demo`, `dra-driver local-cluster --demo`)."""

DEMO_IDLE_AFTER_S = 2.0
"""The plugins' `--idle-after` in the demo when none is given: short, so that the demo's idle
pod is reported idle within seconds (`run_demo`, `dra-driver local-cluster --demo`)."""
