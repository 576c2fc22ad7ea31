"""`explain`: the state a claim meets in `simulate`, and why each node takes it or not."""

from __future__ import annotations

from dra_driver.allocator import AllocationError, AllocationMode, InputError
from dra_driver.allocator.claims import check_result_limit, claim_key, plan_claim
from dra_driver.allocator.explain import explain_node
from dra_driver.allocator.placement import search_node
from dra_driver.allocator.scoring import ScoringPolicy
from dra_driver.cli.inputs import ClusterObjects
from dra_driver.cli.simulate import Simulation, pending_claims


def explain_claim(objects: ClusterObjects, target: str, mode: AllocationMode) -> list[str]:
    if "/" not in target:
        target = f"default/{target}"
    by_key = {claim_key(c): c for c in objects.claims}
    claim = by_key.get(target)
    if claim is None:
        raise InputError(f"--claim {target}: no such ResourceClaim in the input")
    run = Simulation(objects, mode)
    if (claim.get("status") or {}).get("allocation"):
        return [f"claim {target} is already allocated in the input; nothing to explain"]
    for earlier in pending_claims(objects):
        if claim_key(earlier) == target:
            break
        run.allocate(earlier)
    lines = [f"claim {target}, after the {mode.value} allocation of the claims before it:"]
    try:
        plans = [plan_claim(run.snapshot, claim)]
        check_result_limit(plans)
    except AllocationError as err:
        return [*lines, f"  cannot be allocated anywhere: {err.message}"]
    nodes = run.placer.nodes
    if not nodes:
        return [*lines, "  there are no nodes: no Node objects and no node-local ResourceSlices"]
    for node in nodes:
        try:
            result = search_node(run.snapshot, run.usage, plans, node, mode, ScoringPolicy())
        except AllocationError as err:
            lines.append(f"  {node}: fatal error, allocation stops here: {err.message}")
            continue
        if result.allocations is not None:
            devices = ", ".join(r["device"] for r in result.allocations[0]["devices"]["results"])
            lines.append(f"  {node}: fits ({devices})")
            continue
        explanation = explain_node(run.snapshot, run.usage, plans, node)
        lines.append(f"  {node}: does not fit")
        lines.extend(f"    - {line}" for line in explanation.lines())
    return lines
