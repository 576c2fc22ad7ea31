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
from typing import Any

from dra_driver.allocator import AllocationMode, InputError
from dra_driver.cli.explain import explain_claim
from dra_driver.cli.inputs import InputFileError, load_objects
from dra_driver.cli.simulate import ClaimOutcome, Outcomes, PodOutcome, Progress, simulate_all


def _add_common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--input",
        required=True,
        type=Path,
        metavar="FILE",
        help=(
            "multi-document YAML: ResourceSlices, DeviceClasses, ResourceClaims, Nodes, and "
            "for simulate Pods, ResourceClaimTemplates and GpuQueues"
        ),
    )
    parser.add_argument(
        "--mode",
        choices=[m.value for m in AllocationMode],
        default=AllocationMode.FIRST_FIT.value,
        help="first-fit: the kube-scheduler's answer; scored: topology and fragmentation aware",
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


def run_simulate(args: argparse.Namespace) -> int:
    progress = _progress()
    try:
        outcomes: Outcomes = simulate_all(
            load_objects(args.input), AllocationMode(args.mode), progress
        )
    except (InputFileError, InputError) as err:
        print(f"dra-driver simulate: {err}", file=sys.stderr)
        return 2
    finally:
        if progress is not None:
            print("\r\033[K", end="", file=sys.stderr)
    if args.output == "json":
        out: dict[str, Any] = {
            "claims": [o.as_json() for o in outcomes.claims],
            "pods": [p.as_json() for p in outcomes.pods],
        }
        if outcomes.queues is not None:
            out["queues"] = outcomes.queues.as_json()
        json.dump(out, sys.stdout, indent=2)
        print()
    else:
        print(_table(outcomes.claims, outcomes.pods))
        if outcomes.queues is not None:
            for rows in outcomes.queues.tables():
                print()
                print(_columns(rows))
    return 0


def run_explain(args: argparse.Namespace) -> int:
    try:
        lines = explain_claim(load_objects(args.input), args.claim, AllocationMode(args.mode))
    except (InputFileError, InputError) as err:
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
    parser.set_defaults(run=run_simulate)


def register_explain(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "explain",
        help="say why a claim does not fit, node by node",
        description=(
            "Replay the claims before NS/NAME as simulate does, then say, for every node, why "
            "the claim fits there or not."
        ),
    )
    _add_common(parser)
    parser.add_argument("--claim", required=True, metavar="NS/NAME", help="the claim to explain")
    parser.set_defaults(run=run_explain)
