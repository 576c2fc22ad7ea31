"""`dra-driver simulate` and `dra-driver explain`: the allocator run offline on a file of objects.

They live with the command line, next to the allocator they drive, because they need nothing
of either daemon: an admin can try claims and classes against a recorded cluster anywhere.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from dra_driver.allocator import AllocationMode, InputError
from dra_driver.cli.inputs import InputFileError, load_objects
from dra_driver.queues.spec import format_gpu
from dra_driver.simulation.allocation_report import ReportPoint, ReportRow, parse_points
from dra_driver.workload_profile import ProfileEntry, profile_file

if TYPE_CHECKING:
    from dra_driver.cli.simulate import ClaimOutcome, Outcomes, PodOutcome, Progress


def _add_common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--input",
        required=True,
        type=Path,
        metavar="FILE",
        help=(
            "multi-document YAML: ResourceSlices, DeviceClasses, ResourceClaims, Nodes, Pods "
            "and ResourceClaimTemplates, and for simulate GpuQueues"
        ),
    )
    parser.add_argument(
        "--mode",
        choices=[m.value for m in AllocationMode],
        default=AllocationMode.FIRST_FIT.value,
        help="first-fit: the kube-scheduler's answer; scored: topology and fragmentation aware",
    )
    parser.add_argument(
        "--workload",
        metavar="FILE|learned",
        help=(
            "scored mode: what pod placement weighs by instead of the input's pods. FILE: this "
            "workload profile, fixed (the controller's --workload-profile format, or a "
            "ConfigMap holding one), as a controller started with --workload-profile FILE "
            "weighs; learned: what a controller without --workload-profile learns, each pod "
            "weighed by the pods decided before it (from the counts of the controller's "
            "ConfigMap when the input holds it), the pods decided in creation order. A file "
            "named learned is ./learned"
        ),
    )


def _devices(outcome: ClaimOutcome) -> str:
    if outcome.allocation is None:
        return "-"
    results = outcome.allocation["devices"]["results"]
    return ",".join(f"{r['request']}={r['device']}" for r in results)


def _columns(rows: list[tuple[str, ...]]) -> str:
    """Every column but the last padded; the reason is last because it is the long one."""
    last = len(rows[0]) - 1
    widths = [max(len(r[i]) for r in rows) for i in range(last)]
    return "\n".join(
        "  ".join(
            cell.ljust(widths[i]) if i < last else cell for i, cell in enumerate(row)
        ).rstrip()
        for row in rows
    )


def _table(outcomes: list[ClaimOutcome], pods: list[PodOutcome]) -> str:
    rows: list[tuple[str, ...]] = [("CLAIM", "NODE", "DEVICES", "REASON")]
    for o in outcomes:
        rows.append((f"{o.namespace}/{o.name}", o.node or "-", _devices(o), o.reason or ""))
    text = _columns(rows)
    if pods:
        pod_rows: list[tuple[str, ...]] = [("POD", "NODE", "REASON")]
        pod_rows += [(f"{p.namespace}/{p.name}", p.node or "-", p.reason or "") for p in pods]
        text += "\n\n" + _columns(pod_rows)
    return text


def _report_table(rows: list[ReportRow]) -> str:
    capacity = format_gpu(rows[0].capacity)
    table: list[tuple[str, ...]] = [
        ("POINT", "TIME", "ARRIVED", "ALLOCATED", "RATIO", "IDLE", "UNALLOCATED", "NOTE")
    ]
    for row in rows:
        if not row.reached:
            share = f" ({100 * row.arrived / row.capacity:.1f}% of the capacity)"
            note = f"not reached: the arrived demand ended at {format_gpu(row.arrived)} GPUs"
            note += share if row.capacity else ""
            table.append((row.point.text, "-", "-", "-", "-", "-", "-", note))
            continue
        table.append(
            (
                row.point.text,
                f"{row.time:g}s",
                format_gpu(row.arrived),
                format_gpu(row.allocated),
                f"{100 * row.ratio:.2f}%",
                format_gpu(row.idle),
                format_gpu(row.unallocated),
                "",
            )
        )
    return f"GPU allocation report (capacity {capacity} GPUs; figures in GPUs):\n" + _columns(table)


def _points(text: str) -> list[ReportPoint]:
    try:
        return parse_points(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def _progress() -> Progress | None:
    """A line on stderr, rewritten at most twice a second, when stderr is a terminal."""
    if not sys.stderr.isatty():
        return None
    last = [0.0]

    def show(now: float, events_left: int) -> None:
        tick = time.monotonic()
        if tick - last[0] >= 0.5:
            last[0] = tick
            print(f"\rsimulate: t={now:g}s, {events_left} events left ", end="", file=sys.stderr)

    return show


def read_profile(value: str | None) -> list[ProfileEntry] | Literal["learned"] | None:
    """What `--workload` names: the profile of a file (ValueError naming the file and field),
    or `learned`."""
    if value is None:
        return None
    if value == "learned":
        return "learned"
    return profile_file(value, "--workload")


def run_simulate(args: argparse.Namespace) -> int:
    # Imported here: the replay loads numpy, which the other commands do not need.
    from dra_driver.cli.simulate import simulate_all  # noqa: PLC0415

    progress = _progress()
    warnings: list[str] = []
    try:
        outcomes: Outcomes = simulate_all(
            load_objects(args.input),
            AllocationMode(args.mode),
            progress,
            args.report,
            profile=read_profile(args.workload),
            warnings=warnings,
        )
    except (InputFileError, InputError, ValueError) as err:
        print(f"dra-driver simulate: {err}", file=sys.stderr)
        return 2
    finally:
        if progress is not None:
            print("\r\033[K", end="", file=sys.stderr)
    for warning in warnings:
        print(f"dra-driver simulate: {warning}", file=sys.stderr)
    if args.output == "json":
        out: dict[str, Any] = {
            "claims": [o.as_json() for o in outcomes.claims],
            "pods": [p.as_json() for p in outcomes.pods],
        }
        if outcomes.queues is not None:
            out["queues"] = outcomes.queues.as_json()
        if outcomes.report is not None:
            out["report"] = [row.as_json() for row in outcomes.report]
        json.dump(out, sys.stdout, indent=2)
        print()
    else:
        print(_table(outcomes.claims, outcomes.pods))
        if outcomes.queues is not None:
            for rows in outcomes.queues.tables():
                print()
                print(_columns(rows))
        if outcomes.report:
            print()
            print(_report_table(outcomes.report))
    return 0


def run_explain(args: argparse.Namespace) -> int:
    from dra_driver.cli.explain import explain_claim  # noqa: PLC0415 - see run_simulate
    from dra_driver.cli.explain_pod import explain_pod  # noqa: PLC0415

    try:
        objects = load_objects(args.input)
        if args.pod is not None:
            profile = read_profile(args.workload)
            lines = explain_pod(objects, args.pod, AllocationMode(args.mode), profile)
        else:
            lines = explain_claim(objects, args.claim, AllocationMode(args.mode))
    except (InputFileError, InputError, ValueError) as err:
        print(f"dra-driver explain: {err}", file=sys.stderr)
        return 2
    print("\n".join(lines))
    return 0


def register_simulate(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "simulate",
        help="allocate the claims of a file offline, as the scheduler would",
        description=(
            "Allocate every ResourceClaim without status.allocation, one at a time in file "
            "order, against the ResourceSlices and DeviceClasses of the file; then place the "
            "file's Pods in arrival order, each where its CPU and memory requests and its "
            "claims fit. With GpuQueues in the file, pods that do not fit wait in their queue "
            "and are admitted in the controller's order, with limits and reclaim, and a report "
            "per queue follows."
        ),
    )
    _add_common(parser)
    parser.add_argument("--output", choices=["json", "table"], default="table")
    parser.add_argument(
        "--report",
        type=_points,
        default=[],
        metavar="POINTS",
        help=(
            "comma-separated points at which to report the GPU allocation: N%% is read just "
            "after the arrival that brings the GPUs asked for by the pods and claims that "
            "arrived (placed or not) to N %% of the GPU capacity (with GpuQueues: after the "
            "decisions of that time), Ns is the state after every event at or before N "
            "seconds. The GPU capacity is the number of physical GPUs (devices tied by "
            "shared counters count once; a MIG device or share counts as the part of its GPU "
            "it takes). Reports arrived, allocated (held at the point), ratio "
            "(allocated/capacity), idle (capacity - allocated) and unallocated GPUs (asked for "
            "by pods and claims that arrived, have not left and hold nothing); a share point "
            "never reached says so. Example: --report 100%%,110%%,120%%,3600s"
        ),
    )
    parser.set_defaults(run=run_simulate)


def register_explain(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "explain",
        help="say why a claim or pod does not fit, node by node",
        description=(
            "Replay the claims before NS/NAME as simulate does, then say, for every node, why "
            "the claim fits there or not. With --pod, replay the claims no pod uses and the "
            "pods arriving before it, then say why each node takes the pod or not. In scored "
            "mode, also show the nodes the choice compared and the score terms on which each "
            "lost to the chosen one."
        ),
    )
    _add_common(parser)
    target = parser.add_mutually_exclusive_group(required=True)
    target.add_argument("--claim", metavar="NS/NAME", help="the claim to explain")
    target.add_argument(
        "--pod",
        metavar="NS/NAME",
        help="the pod to explain (an input without GpuQueues)",
    )
    parser.set_defaults(run=run_explain)
