"""`explain --pod`: the state a pod meets in `simulate`, why each node takes it or not, and in
scored mode the terms that ranked the nodes.

A pod is placed by the simulation engine (simulation/replay.py), not by the claim placer: in
scored mode every node is ranked by how much the pod would increase the expected fragmentation
of the workload seen so far (fragindex.py), and the allocator then takes devices on the best
node where the claims fit, steered to the devices the ranking picked. So the answer shows each
ranked node's fragmentation before and after and the increase, which is what decided, and on
the nodes shown, the allocator's own terms for the devices it would take there.

The claims no pod uses and the pods that arrive before it are replayed first, as `simulate`
replays them without GpuQueues; with queues a pod's fate depends on waiting and reclaim, which
one pass over the arrivals cannot show, so such an input is refused.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from dra_driver.allocator import AllocationError, AllocationMode, InputError
from dra_driver.allocator.claims import ClaimPlan, check_result_limit, claim_key, plan_claim
from dra_driver.allocator.explain import explain_node
from dra_driver.allocator.placement import NodeResult, search_node
from dra_driver.allocator.score_terms import score_words
from dra_driver.cli.explain import devices_of
from dra_driver.cli.inputs import ClusterObjects
from dra_driver.cli.simulate import (
    PodReplay,
    Simulation,
    WorkloadChoice,
    claims_used_by_pods,
    learns,
    pending_claims,
    pod_arrivals,
)
from dra_driver.noderesources import pod_requests
from dra_driver.simulation.fragindex import Choice
from dra_driver.simulation.pods import key_of
from dra_driver.simulation.replay import Cluster, PodPlacement
from dra_driver.simulation.tie_order import Ties

RUNNERS_UP = 3
"""Ranked nodes shown after the chosen one."""


def explain_pod(
    objects: ClusterObjects,
    target: str,
    mode: AllocationMode,
    profile: WorkloadChoice = None,
) -> list[str]:
    """`profile`: the workload to weigh by instead of the input's pods (`--workload`; `LEARNED`:
    as the controller learns it, the pods then replayed in creation order)."""
    if "/" not in target:
        target = f"default/{target}"
    if objects.queues:
        raise InputError(
            f"--pod {target}: the input holds GpuQueues; explain replays pods as simulate does "
            "without queues (placed on arrival or never), so remove the GpuQueues to see how "
            "the pod is placed on arrival"
        )
    arrivals = pod_arrivals(objects.pods, by_creation=learns(profile))
    if all(key_of(pod) != target for _, _, pod in arrivals):
        raise InputError(f"--pod {target}: no such Pod in the input")
    run = Simulation(objects, mode, profile)
    by_key = {claim_key(c): c for c in objects.claims}
    used = claims_used_by_pods(objects, by_key)
    for claim in pending_claims(objects):
        if claim_key(claim) not in used:
            run.allocate(claim)
    replay = PodReplay(run, objects, mode, by_key, keep_candidates=True)
    for arrival, departure, pod in arrivals:
        replay.release_until(arrival)
        if key_of(pod) == target:
            break
        try:
            replay.place(pod, replay.claims_of(pod), departure)
        except AllocationError:
            continue
    own = replay.claims_of(pod)
    lines = [
        f"pod {target}, arriving at {arrival:g}s, after the {mode.value} placement of the "
        "claims and pods before it:"
    ]
    try:
        plans = [plan_claim(run.snapshot, claim) for claim in own]
        check_result_limit(plans)
    except AllocationError as err:
        return [*lines, f"  cannot be placed anywhere: {err.message}"]
    cluster = replay.cluster
    if not cluster.nodes:
        return [*lines, "  there are no nodes: no Node objects and no node-local ResourceSlices"]
    lines += _per_node(cluster, pod, plans, mode)
    try:
        placement = cluster.place_pod(pod, own)
    except AllocationError as err:
        return [*lines, f"  not placed: {err}"]
    if placement.node is None:
        return [*lines, f"  not placed: {placement.reason}"]
    if mode is AllocationMode.FIRST_FIT:
        return [
            *lines,
            f"  chosen: {placement.node}, the first node in node order where the pod's "
            "requests and claims fit",
        ]
    return lines + _scored(cluster, placement, plans)


def _per_node(
    cluster: Cluster, pod: Mapping[str, Any], plans: Sequence[ClaimPlan], mode: AllocationMode
) -> list[str]:
    """Why each node takes the pod or not: its free CPU, memory and pods, then its devices;
    by name (the scored placer's own order, for ties, is shown with its ranking)."""
    lines: list[str] = []
    requests = pod_requests(pod)
    for node in sorted(cluster.nodes):
        shortfalls = cluster.ledger.shortfalls(node, requests)
        if shortfalls:
            lines.append(f"  {node}: does not fit: {'; '.join(shortfalls)}")
            continue
        if not plans:
            lines.append(f"  {node}: fits")
            continue
        try:
            result = search_node(
                cluster.snapshot,
                cluster.usage,
                plans,
                node,
                AllocationMode.FIRST_FIT,
                cluster.scoring,
            )
        except AllocationError as err:
            lines.append(f"  {node}: fatal error, the pod cannot be placed: {err.message}")
            continue
        if result.allocations is not None:
            # In scored mode the devices are the ranking's business, shown below.
            detail = f" ({devices_of(result)})" if mode is AllocationMode.FIRST_FIT else ""
            lines.append(f"  {node}: fits{detail}")
            continue
        lines.append(f"  {node}: does not fit")
        explanation = explain_node(cluster.snapshot, cluster.usage, plans, node)
        lines.extend(f"    - {line}" for line in explanation.lines())
    return lines


def _scored(cluster: Cluster, placement: PodPlacement, plans: Sequence[ClaimPlan]) -> list[str]:
    ties = {
        Ties.SPREAD: "then the placer's fixed pseudo-random node order (tie_order.py)",
        Ties.FULLER: "then the least free device room after the pod, then node order",
        Ties.NAME: "then node order",
    }[cluster.ties]
    order = "the placer's node order" if cluster.ties is Ties.SPREAD else "node order"
    lines = [
        "  scored choice: each node is ranked by how much the pod increases the expected "
        "fragmentation of the workload (before -> after), scored as FGD scores it "
        "(100 x sigmoid(-increase in GPUs), truncated to whole points); the most points win, "
        f"{ties}; nodes in equal states share one evaluation, the first in {order} standing "
        "for them; the allocator then takes devices on the best node where the claims fit, "
        "steered to the devices the ranking picked:"
    ]
    ranked = placement.candidates
    chosen = next((i for i, c in enumerate(ranked) if c is placement.choice), None)
    if chosen is None:
        return [
            *lines,
            f"    no ranked node took the pod; first fit placed it on {placement.node}",
        ]
    # Look at the nodes as the ranking saw them, before this pod took its room.
    cluster.release_pod(placement)
    winner = ranked[chosen]
    names = {d.id: d.name for d in cluster.snapshot.devices}
    for i, choice in enumerate(ranked[: chosen + 1 + RUNNERS_UP]):
        terms = _choice_words(choice, names)
        if i < chosen:
            lines.append(
                f"    {choice.node}: ranked before the chosen node ({terms}), but its claims "
                "do not fit there"
            )
            continue
        result = _allocator(cluster, plans, choice)
        if i == chosen:
            lines.append(f"    chosen {choice.node}: {terms}; {result}")
        else:
            lost = _lost(winner, choice, cluster.fuller_first)
            lines.append(f"    {choice.node}: {lost}; {terms}; {result}")
    more = len(ranked) - (chosen + 1 + RUNNERS_UP)
    if more > 0:
        lines.append(f"    and {more} more ranked node(s)")
    return lines


def _choice_words(choice: Choice, names: Mapping[int, str]) -> str:
    picked = ", ".join(names[d] for d in choice.devices) or "no device"
    return (
        f"fragmentation {choice.before:.4g} -> {choice.after:.4g} (increase "
        f"{choice.value:+.4g}, {choice.points} points), free device room after "
        f"{choice.room:.4g}, the ranking picked {picked}"
    )


def _lost(winner: Choice, other: Choice, fuller_first: bool) -> str:
    if other.points < winner.points:
        return (
            f"loses on points ({other.points} against {winner.points}: increase "
            f"{other.value:+.4g} against {winner.value:+.4g})"
        )
    if fuller_first and other.room > winner.room:
        return (
            f"ties on points ({other.points}), loses on free device room after the pod "
            f"({other.room:.4g} against {winner.room:.4g}: the fuller node wins)"
        )
    if fuller_first:
        return "ties on points and free device room; the chosen node comes first"
    return "ties on points; the chosen node comes first in the placer's node order"


def _allocator(cluster: Cluster, plans: Sequence[ClaimPlan], choice: Choice) -> str:
    """What the allocator would take on the node, steered as the ranking asks."""
    if not plans:
        return "no claims to allocate"
    result: NodeResult = search_node(
        cluster.snapshot,
        cluster.usage,
        plans,
        choice.node,
        AllocationMode.SCORED,
        cluster.scoring,
        prefer=frozenset(choice.devices),
    )
    if result.allocations is None or result.score is None:
        return "the allocator finds no solution there"
    return (
        f"the allocator takes {devices_of(result)} ({score_words(result.score, cluster.scoring)})"
    )
