"""`dra-driver simulate` and `dra-driver explain`: the allocator run offline on a file of objects.

They live with the command line, next to the allocator they drive, because they need nothing
of either daemon: an admin can try claims and classes against a recorded cluster anywhere.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from dra_driver.allocator import AllocationMode, InputError
from dra_driver.cli.explain import explain_claim
from dra_driver.cli.inputs import InputFileError, load_objects
from dra_driver.cli.simulate import ClaimOutcome, Outcomes, PodOutcome, simulate_all


def _add_common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--input",
        required=True,
        type=Path,
        metavar="FILE",
        help=(
            "multi-document YAML: ResourceSlices, DeviceClasses, ResourceClaims, Nodes, and "
            "for simulate Pods and ResourceClaimTemplates"
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


def run_simulate(args: argparse.Namespace) -> int:
    try:
        outcomes: Outcomes = simulate_all(load_objects(args.input), AllocationMode(args.mode))
    except (InputFileError, InputError) as err:
        print(f"dra-driver simulate: {err}", file=sys.stderr)
        return 2
    if args.output == "json":
        out = {
            "claims": [o.as_json() for o in outcomes.claims],
            "pods": [p.as_json() for p in outcomes.pods],
        }
        json.dump(out, sys.stdout, indent=2)
        print()
    else:
        print(_table(outcomes.claims, outcomes.pods))
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
            "claims fit."
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
