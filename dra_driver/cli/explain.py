"""`explain`: the state a claim meets in `simulate`, and why each node takes it or not.

In scored mode a claim can fit several nodes; the answer then also says which node the placer
chose and on which term of the score each other node it compared lost (placement.py ranks the
first nodes that fit, busiest first, by `NODE_KEY_TERMS`).
"""

from __future__ import annotations

from dra_driver.allocator import AllocationError, AllocationMode, InputError
from dra_driver.allocator.claims import ClaimPlan, check_result_limit, claim_key, plan_claim
from dra_driver.allocator.explain import explain_node
from dra_driver.allocator.placement import NodeResult, search_node
from dra_driver.allocator.score_terms import (
    node_key_words,
    node_loss_words,
    score_words,
    solution_loss_words,
)
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
            lines.append(f"  {node}: fits ({devices_of(result)})")
            continue
        explanation = explain_node(run.snapshot, run.usage, plans, node)
        lines.append(f"  {node}: does not fit")
        lines.extend(f"    - {line}" for line in explanation.lines())
    if mode is AllocationMode.SCORED:
        lines += scored_choice(run, plans)
    return lines


def devices_of(result: NodeResult) -> str:
    """`gpu-0, gpu-1`: the devices of every claim the result allocates."""
    return ", ".join(
        r["device"]
        for allocation in result.allocations or []
        for r in allocation["devices"]["results"]
    )


def scored_choice(run: Simulation, plans: list[ClaimPlan]) -> list[str]:
    """The nodes the scored placer compared for the claim, the winner first, each with its
    terms and, for the others, the term on which it lost."""
    placer = run.placer
    try:
        comparison = placer.compare(plans, placer.nodes)
    except AllocationError as err:
        return [f"  scored choice: none, allocation stops on a fatal error: {err.message}"]
    lines = [
        "  scored choice: nodes are searched busiest first; the first "
        f"{placer.policy.max_fitting_nodes} that fit are compared by firstAvailable preference, "
        "topology spread, fragmentation loss, then the busier node (load: results allocated "
        "there), then the name:"
    ]
    if not comparison.fitting:
        return [*lines, "    no node fits"]
    ranked = sorted(comparison.fitting, key=lambda c: c.key)
    winner = ranked[0]
    policy = placer.policy
    lines.append(
        f"    chosen {winner.result.node}: {node_key_words(winner.key, policy)}; "
        f"devices {devices_of(winner.result)}"
    )
    lines += _against_first_fit(run, plans, winner.result)
    for other in ranked[1:]:
        lines.append(
            f"    {other.result.node}: {node_loss_words(winner.key, other.key)}; "
            f"{node_key_words(other.key, policy)}; devices {devices_of(other.result)}"
        )
    rest = comparison.order[comparison.looked_at :]
    if rest:
        lines.append(
            f"    not compared (the search stopped after {len(comparison.fitting)} nodes that "
            f"fit): {', '.join(rest)}"
        )
    return lines


def _against_first_fit(run: Simulation, plans: list[ClaimPlan], chosen: NodeResult) -> list[str]:
    """Why the scored devices on the chosen node beat first fit's devices there."""
    if chosen.score is None or chosen.first_fit is None:
        return []
    policy = run.placer.policy
    first = search_node(
        run.snapshot, run.usage, plans, chosen.node, AllocationMode.FIRST_FIT, policy
    )
    if first.allocations is None or devices_of(first) == devices_of(chosen):
        return [f"      first fit takes the same devices on {chosen.node}"]
    return [
        f"      devices: {score_words(chosen.score, policy)}; first fit would take "
        f"{devices_of(first)} ({score_words(chosen.first_fit, policy)}), which "
        f"{solution_loss_words(chosen.score, chosen.first_fit)}"
    ]
