"""`dra-driver devices`: print the ResourceSlices a node would publish.

This is the quickest way to see what the scheduler will see, for fake GPUs or the GPUs of the
machine it runs on, without a cluster.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

import yaml

from api.device_type import DeviceType
from dra_driver import DEFAULT_DRIVER_NAME
from dra_driver.backends.base import GpuBackend
from dra_driver.backends.errors import BackendError
from dra_driver.backends.fake import FakeBackend
from dra_driver.backends.nvml import NvmlBackend
from dra_driver.cli.flag_types import shapes
from dra_driver.slices import SliceLimitError, SliceSettings, build_resource_slices
from dra_driver.slices.limits import enforce_limits


def _non_negative(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 0, got {text!r}")
    return value


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "devices",
        help="print the ResourceSlices a node would publish",
        description="Print the ResourceSlices (resource.k8s.io/v1) a node would publish.",
    )
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument(
        "--fake",
        metavar="SPEC",
        help="fake GPUs: PROFILE:COUNT (e.g. H100-SXM5-80GB:8), a comma list, or a YAML file",
    )
    source.add_argument("--nvml", action="store_true", help="the real GPUs of this machine")
    parser.add_argument("--node-name", default="node-1", help="node (and pool) name")
    parser.add_argument("--output", choices=("yaml", "json"), default="yaml")
    parser.add_argument("--driver-name", default=DEFAULT_DRIVER_NAME)
    parser.add_argument(
        "--shapes",
        type=shapes,
        default=frozenset(DeviceType),
        help="comma list of shapes to publish: gpu, mig, timeslice, shared (default: all)",
    )
    parser.add_argument(
        "--timeslice-shares", type=_non_negative, default=4, help="time-slice shares per GPU"
    )
    parser.add_argument(
        "--no-partitionable",
        action="store_true",
        help="fallback layout for API servers without partitionable devices (no counters)",
    )
    parser.add_argument(
        "--fake-state-dir",
        type=Path,
        help="directory holding fake MIG state (live instances persist there between runs)",
    )
    parser.set_defaults(run=run)


def _backend(args: argparse.Namespace) -> GpuBackend:
    if args.nvml:
        return NvmlBackend(args.node_name)
    return FakeBackend.from_spec(args.fake, args.node_name, state_dir=args.fake_state_dir)


def run(args: argparse.Namespace) -> int:
    settings = SliceSettings(
        driver_name=args.driver_name,
        shapes=args.shapes,
        timeslice_shares=args.timeslice_shares,
        partitionable=not args.no_partitionable,
    )
    try:
        backend = _backend(args)
        try:
            inventory = backend.inventory()
        finally:
            backend.close()
        slices = build_resource_slices(inventory, settings)
        enforce_limits(slices)
    except (ValueError, KeyError, OSError, BackendError, SliceLimitError) as err:
        message = err.args[0] if isinstance(err, KeyError) and err.args else err
        print(f"dra-driver devices: {message}", file=sys.stderr)
        return 2
    try:
        sys.stdout.write(_render(slices, args.output))
        sys.stdout.flush()
    except BrokenPipeError:
        # The reader stopped early (`| head`): not an error worth a traceback. Point stdout at
        # /dev/null so the interpreter's final flush does not raise again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0


def _render(slices: list[dict[str, Any]], output: str) -> str:
    if output == "json":
        return json.dumps(slices, indent=2) + "\n"
    return yaml.safe_dump_all(slices, sort_keys=False)
