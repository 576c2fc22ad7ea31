"""Why claims do not fit a node, in plain words.

The search itself only says yes or no (counting rejections inside a backtracking search would
count the same device many times). Diagnosis is a separate pass, run only on failure: each
request alternative on its own against the node's current usage, device by device, recording the
first reason each device is turned away; then, if every request could be met alone, the claims
fail together — because of constraints, shared counters or capacity.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from dra_driver.allocator.capacity import large_enough, share_demand, unservable
from dra_driver.allocator.claims import ALL, Alternative, ClaimPlan
from dra_driver.allocator.search import CandidateIndex, SearchState, untolerated_taint
from dra_driver.allocator.snapshot import ClusterSnapshot
from dra_driver.allocator.usage import Usage
from dra_driver.allocator.verdicts import SelectorFailure

# Reasons, in the order the allocator applies its checks.
CLASS_SELECTOR = "rejected by the DeviceClass selectors"
REQUEST_SELECTOR = "rejected by the request's selectors"
SELECTOR_ERROR = "made a selector fail"
IN_USE = "already allocated"
TAINTED = "tainted without a matching toleration"
CAPACITY = "without enough capacity left"
COUNTERS = "blocked by shared counters (another device of the same GPU is in use)"
_NOT_MATCHING = frozenset({CLASS_SELECTOR, REQUEST_SELECTOR, SELECTOR_ERROR})
"""Reasons a device is not one the request asks for at all; every other reason blocks a
device it does ask for (an `All` request then cannot be served)."""


@dataclass(slots=True)
class AlternativeReport:
    claim: str
    request: str
    device_class: str
    needed: str
    usable: int
    rejected: Counter[str] = field(default_factory=Counter)

    def sentence(self) -> str:
        parts = [f"{n} {why}" for why, n in self.rejected.items() if n]
        detail = f" ({', '.join(parts)})" if parts else ""
        return (
            f"claim {self.claim} request {self.request} (class {self.device_class}) needs "
            f"{self.needed}, {self.usable} usable{detail}"
        )


@dataclass(slots=True)
class NodeExplanation:
    node: str
    devices: int
    skipped_pools: list[str]
    requests: list[AlternativeReport]
    together: str | None

    def lines(self) -> list[str]:
        out: list[str] = []
        if not self.devices and not self.skipped_pools:
            return ["no devices are published for this node"]
        out.extend(f"pool skipped: {problem}" for problem in self.skipped_pools)
        out.extend(report.sentence() for report in self.requests)
        if self.together:
            out.append(self.together)
        return out

    def summary(self) -> str:
        return "; ".join(self.lines())


def _report(state: SearchState, plan: ClaimPlan, alt: Alternative, claim: int) -> AlternativeReport:
    snapshot = state.snapshot
    evaluator = snapshot.evaluator
    needed = "all matching devices" if alt.mode == ALL else f"{alt.count} device(s)"
    report = AlternativeReport(plan.key, alt.result_name, alt.device_class.name, needed, 0)
    class_part = alt.selectors[: alt.class_selector_count]
    request_part = alt.selectors[alt.class_selector_count :]
    for device in state.view.devices:
        verdict = evaluator.chain(class_part, device)
        if verdict is True:
            verdict = evaluator.chain(request_part, device)
            reason = REQUEST_SELECTOR
        else:
            reason = CLASS_SELECTOR
        if isinstance(verdict, SelectorFailure):
            report.rejected[SELECTOR_ERROR] += 1
            continue
        if verdict is False:
            report.rejected[reason] += 1
            continue
        if not alt.admin_access and not device.allow_multiple and state.usage.in_use(device):
            report.rejected[IN_USE] += 1
        elif untolerated_taint(device, alt) is not None:
            report.rejected[TAINTED] += 1
        elif device.allow_multiple:
            share = share_demand(device, alt.capacity)
            if share is None:
                report.rejected[unservable(device, alt.capacity) or CAPACITY] += 1
            elif not state.share_fits(device, share):
                report.rejected[CAPACITY] += 1
            elif not state.usage.in_use(device) and not state.counters_fit(device):
                report.rejected[COUNTERS] += 1
            else:
                report.usable += 1
        elif alt.capacity and not large_enough(device, alt.capacity):
            report.rejected[CAPACITY] += 1
        elif state.counts_counters(alt, device) and not state.counters_fit(device):
            report.rejected[COUNTERS] += 1
        else:
            report.usable += 1
    return report


def explain_node(
    snapshot: ClusterSnapshot, usage: Usage, plans: Sequence[ClaimPlan], node: str
) -> NodeExplanation:
    view = snapshot.view(node)
    state = SearchState(snapshot, usage, plans, view, CandidateIndex(snapshot))
    reports: list[AlternativeReport] = []
    each_alone = True
    for claim, plan in enumerate(plans):
        for request in plan.requests:
            fits_alone = False
            for alt in request.alternatives:
                report = _report(state, plan, alt, claim)
                reports.append(report)
                if alt.mode == ALL:
                    blocked = sum(
                        n for why, n in report.rejected.items() if why not in _NOT_MATCHING
                    )
                    fits_alone |= report.usable > 0 and not blocked
                else:
                    fits_alone |= report.usable >= alt.count
            each_alone &= fits_alone
    together = None
    if each_alone and reports:
        constraints = [c for plan in plans for c in plan.constraints]
        if constraints:
            names = ", ".join(
                f"{'matchAttribute' if c.match_attribute else 'distinctAttribute'} "
                f"{c.match_attribute or c.distinct_attribute}"
                for c in constraints
            )
            together = (
                "each request can be met alone, but not all together: no combination "
                f"satisfies the constraints ({names}) within the shared counters and capacity"
            )
        else:
            together = (
                "each request can be met alone, but not all together: the devices they need "
                "share counters or capacity"
            )
    return NodeExplanation(
        node,
        len(view.devices),
        [pool.problem for pool in view.unusable if pool.problem],
        reports,
        together,
    )
