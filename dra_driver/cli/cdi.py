"""`dra-driver cdi`: print the CDI container edits every GPU container on this node gets.

The kubelet plugin writes the same edits into every claim's spec (see `dra_driver.driverroot`),
so this is how to check, before installing or when a container cannot find `libcuda.so.1`, what
the driver root provides. The output uses CDI's own field names: a spec-wide `containerEdits`
(`env`, `deviceNodes`, `mounts`, `hooks`) and, under `devices`, the node of each GPU found under
the dev root.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path, PurePosixPath
from typing import Any

import yaml

from dra_driver.cdi.codec import edits_to_dict
from dra_driver.cdi.errors import CdiError
from dra_driver.cdi.model import ContainerEdits
from dra_driver.cdi.nvidia import CONTROL_NODES
from dra_driver.driverroot import (
    DriverRootError,
    discover,
    discover_device_nodes,
    driver_edits,
    gpu_nodes,
)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "cdi",
        help="print the CDI container edits every GPU container on this node gets",
        description="Find the NVIDIA driver under a driver root and print the CDI container "
        "edits (driver libraries, firmware, programs, device nodes, hooks) the kubelet plugin "
        "gives every GPU container.",
    )
    parser.add_argument(
        "--driver-root",
        type=Path,
        default=Path("/"),
        help="where the driver's files are seen from here (default /)",
    )
    parser.add_argument(
        "--container-driver-root",
        type=PurePosixPath,
        help="the driver root as the container runtime sees it (default: --driver-root)",
    )
    parser.add_argument(
        "--dev-root", type=Path, default=Path("/dev"), help="where the device nodes are"
    )
    parser.add_argument(
        "--driver-version", help="the driver version, when the library names do not carry it"
    )
    parser.add_argument("--output", choices=("yaml", "json"), default="yaml")
    parser.set_defaults(run=run)


def describe(
    driver_root: Path,
    dev_root: Path,
    host_root: PurePosixPath | None = None,
    version: str | None = None,
) -> dict[str, Any]:
    driver = discover(driver_root, version)
    edits = driver_edits(
        driver,
        host_root=host_root,
        dev_root=dev_root,
        warn=lambda message: print(f"dra-driver cdi: warning: {message}", file=sys.stderr),
    )
    nodes = discover_device_nodes(dev_root, CONTROL_NODES)
    devices = [
        {
            "name": f"gpu-{minor}",
            "containerEdits": edits_to_dict(
                ContainerEdits(device_nodes=gpu_nodes(dev_root, [minor]))
            ),
        }
        for minor in nodes.gpu_minors
    ]
    data: dict[str, Any] = {"driverVersion": driver.version, "containerEdits": edits_to_dict(edits)}
    if devices:
        data["devices"] = devices
    return data


def run(args: argparse.Namespace) -> int:
    try:
        data = describe(
            args.driver_root, args.dev_root, args.container_driver_root, args.driver_version
        )
    except (DriverRootError, CdiError) as error:
        print(f"dra-driver cdi: {error}", file=sys.stderr)
        return 2
    if args.output == "json":
        sys.stdout.write(json.dumps(data, indent=2) + "\n")
    else:
        sys.stdout.write(yaml.safe_dump(data, sort_keys=False))
    sys.stdout.flush()
    return 0
