"""`dra-driver usage`: per node and per pod, the devices of the driver held, and for each what
its claim's status says about its idleness (idle for how long, busy, or unknown); with
`--metrics URL` also its utilisation and memory from kubelet plugins' metrics endpoints.

The claims are the source: every allocated claim names its node (its allocation's node
selector), the pods it is reserved for, and, once a kubelet plugin has sampled its devices, an
`Idle` condition per device (see docs/telemetry.md).

Lending (docs/overcommit.md) is read from the same allocations: a claim allocated a GPU's lent
share (`gpu-N-lent`) borrows that GPU, and a claim allocated any other device of it (the whole
GPU, a time-slice, MPS or MIG share) owns it; an owner's GPU is lent while it has borrowers.
Device names carry the GPU's minor, so no ResourceSlice needs to be read.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from dra_driver.cli import common_flags
from dra_driver.cli.flags import add_flags
from dra_driver.slices.names import gpu_of

if TYPE_CHECKING:
    from dra_driver.cli.claim_idleness import HeldDevice
    from dra_driver.cli.usage_metrics import DeviceFigures, DeviceRef

KUBECONFIG = dataclasses.replace(
    common_flags.KUBECONFIG,
    help="kubeconfig file; ~/.kube/config when it exists, else the in-cluster config",
)
HEADER = ("NODE", "POD", "CLAIM", "DEVICE", "IDLE")
METRIC_HEADER = ("UTIL", "MEMORY")
LENDING_HEADER = ("LENDING",)

LENT = "lent"
BORROWED = "borrowed"


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "usage",
        help="list the GPUs each node and pod holds, and whether they are idle",
        description=(
            "List per node and pod the devices of the driver its claims hold, and for each "
            "device the Idle condition a kubelet plugin wrote into the claim's status: idle "
            "for how long, busy, or unknown. Where a GPU is lent, a LENDING column says LENT "
            "to N (N borrower claims) on its owners' devices and BORROWED from ns/claim on "
            "its borrowers'. With --metrics, add utilisation and memory from "
            "kubelet plugins' metrics endpoints (one --metrics per endpoint; one that cannot "
            "be read is skipped with a note on stderr)."
        ),
    )
    add_flags(parser, [KUBECONFIG, common_flags.DRIVER_NAME])
    parser.add_argument("--output", choices=("table", "json"), default="table")
    parser.add_argument(
        "--metrics",
        action="append",
        default=[],
        metavar="URL",
        help="a kubelet plugin's metrics endpoint, e.g. http://node-1:9400/metrics (repeatable)",
    )
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    # Imported here: registering the command must not load the Kubernetes client.
    from dra_driver.cli.claim_idleness import held_devices  # noqa: PLC0415
    from dra_driver.cli.queue_list import list_claims  # noqa: PLC0415
    from dra_driver.cli.usage_metrics import scrape  # noqa: PLC0415

    claims = list_claims(args.kubeconfig)
    if claims is None:
        print("dra-driver usage: cannot list the ResourceClaims", file=sys.stderr)
        return 1
    devices = held_devices(claims, args.driver_name)
    figures = None
    if args.metrics:
        scraped = scrape(args.metrics)
        for line in scraped.skipped:
            print(f"dra-driver usage: skipping {line}", file=sys.stderr)
        figures = scraped.figures
    rows = usage_rows(devices, figures, datetime.now(UTC))
    with_metrics = figures is not None
    text = render_json(rows) if args.output == "json" else render_table(rows, with_metrics)
    sys.stdout.write(text)
    sys.stdout.flush()
    return 0


def usage_rows(
    devices: Sequence[HeldDevice],
    figures: Mapping[DeviceRef, DeviceFigures] | None,
    now: datetime,
) -> list[dict[str, Any]]:
    """One row per device and pod holding it (a claim shared by pods shows under each)."""
    from dra_driver.durations import format_duration  # noqa: PLC0415

    lending = lending_by_device(devices)
    rows: list[dict[str, Any]] = []
    for device in devices:
        idle_for = None
        if device.state == "idle" and device.since is not None:
            idle_for = max(0.0, (now - device.since).total_seconds())
        found = (figures or {}).get((device.namespace, device.claim, device.device))
        for pod in device.pods or (None,):
            rows.append(
                {
                    "node": device.node,
                    "namespace": device.namespace,
                    "pod": pod,
                    "claim": device.claim,
                    "pool": device.pool,
                    "device": device.device,
                    "state": device.state,
                    "idle_seconds": None if idle_for is None else round(idle_for),
                    "idle_for": None if idle_for is None else format_duration(idle_for),
                    "utilization_percent": None if found is None else found.utilization_percent,
                    "memory_used_bytes": None if found is None else found.memory_used_bytes,
                    "lending": lending.get(
                        (device.namespace, device.claim, device.pool, device.device)
                    ),
                }
            )
    rows.sort(key=lambda r: (r["node"] or "", r["namespace"], r["pod"] or "", r["device"]))
    return rows


def lending_by_device(
    devices: Sequence[HeldDevice],
) -> dict[tuple[str, str, str, str], dict[str, Any]]:
    """What lending each held device takes part in, by (namespace, claim, pool, device).

    A GPU is (pool, minor): `devices` are one driver's, and a pool is one node's. Only GPUs
    with at least one borrower are in: an owner's device on a GPU nobody borrows is not lent.
    Each entry names the GPU, its owner and borrower claims (`namespace/name`, sorted, each
    once however many of its devices or pods there are), and the role of this device's claim:
    LENT for an owner, BORROWED for a borrower. Claims, not pods, are counted, because a claim
    is what holds a share of the GPU."""
    owners: dict[tuple[str, int], set[str]] = {}
    borrowers: dict[tuple[str, int], set[str]] = {}
    for device in devices:
        gpu = gpu_of(device.device)
        if gpu is None:
            continue
        minor, lent_share = gpu
        side = borrowers if lent_share else owners
        side.setdefault((device.pool, minor), set()).add(f"{device.namespace}/{device.claim}")
    found: dict[tuple[str, str, str, str], dict[str, Any]] = {}
    for device in devices:
        gpu = gpu_of(device.device)
        if gpu is None or (device.pool, gpu[0]) not in borrowers:
            continue
        minor, lent_share = gpu
        found[(device.namespace, device.claim, device.pool, device.device)] = {
            "role": BORROWED if lent_share else LENT,
            "gpu": f"gpu-{minor}",
            "owners": sorted(owners.get((device.pool, minor), ())),
            "borrowers": sorted(borrowers[(device.pool, minor)]),
        }
    return found


def _lending_cell(row: Mapping[str, Any]) -> str:
    """`LENT to N` (N borrower claims) on an owner's device, `BORROWED from ns/claim` on a
    borrower's (the first owner and how many more; the GPU when nobody owns it), else blank."""
    lending = row.get("lending")
    if not lending:
        return ""
    if lending["role"] == LENT:
        return f"LENT to {len(lending['borrowers'])}"
    owners = lending["owners"]
    if not owners:
        return f"BORROWED {lending['gpu']} (no owner)"
    more = f" and {len(owners) - 1} more" if len(owners) > 1 else ""
    return f"BORROWED from {owners[0]}{more}"


def _idle_cell(row: Mapping[str, Any]) -> str:
    if row["state"] == "idle":
        return f"idle {row['idle_for']}" if row["idle_for"] else "idle"
    return str(row["state"])


def _memory(value: float | None) -> str:
    if value is None:
        return "-"
    gib = value / 2**30
    return f"{gib:.1f}Gi" if gib >= 1 else f"{value / 2**20:.0f}Mi"


def _cells(row: Mapping[str, Any], with_metrics: bool, with_lending: bool) -> tuple[str, ...]:
    pod = f"{row['namespace']}/{row['pod']}" if row["pod"] else "-"
    cells: tuple[str, ...] = (
        row["node"] or "-",
        pod,
        f"{row['namespace']}/{row['claim']}",
        f"{row['pool']}/{row['device']}",
        _idle_cell(row),
    )
    if with_metrics:
        util = row["utilization_percent"]
        cells = (*cells, "-" if util is None else f"{util:g}%", _memory(row["memory_used_bytes"]))
    return (*cells, _lending_cell(row)) if with_lending else cells


def render_table(rows: Sequence[Mapping[str, Any]], with_metrics: bool = False) -> str:
    """The rows as aligned columns. LENDING is the last column, and only there when some device
    is lent or borrowed: its cells have spaces and are mostly blank, so the other columns keep
    their place (and a cluster that lends nothing its old width)."""
    if not rows:
        return "No devices of the driver are allocated.\n"
    with_lending = any(r.get("lending") for r in rows)
    header = (
        *HEADER,
        *(METRIC_HEADER if with_metrics else ()),
        *(LENDING_HEADER if with_lending else ()),
    )
    table = [header, *(_cells(r, with_metrics, with_lending) for r in rows)]
    widths = [max(len(line[i]) for line in table) for i in range(len(header))]
    lines = [
        "  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip() for line in table
    ]
    return "\n".join(lines) + "\n"


def render_json(rows: Sequence[Mapping[str, Any]]) -> str:
    return json.dumps({"devices": list(rows)}, indent=2) + "\n"
