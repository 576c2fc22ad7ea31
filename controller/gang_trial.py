"""A waiting gang's members placed on trial in the controller's view, for choosing victims
(`dra_driver.queues.gang_reclaim`).

Members are placed in the order `decide` takes them, each on the node scored mode would choose
(nodes where earlier members went first), with the candidate victims' claims released from the
allocator's usage and their CPU and memory no longer counted on their nodes. Nothing of a trial
outlives `reset`: the usage is back as it was.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from controller.decide import no_room
from controller.informer import Key, Obj, key_of
from controller.view import ClusterView, allocation_of
from dra_driver.allocator.result import allocation_node
from dra_driver.queues import ZERO, Amounts, Ledger, Running
from dra_driver.queues.amounts import allocation_amounts
from dra_driver.queues.gang_reclaim import gang_admissible


def _name(pod: Obj) -> str:
    return f"{pod['metadata'].get('namespace')}/{pod['metadata']['name']}"


def usable_nodes(view: ClusterView, pod: Obj, claims: Sequence[Obj]) -> list[str]:
    """The nodes a pod may run on (its selectors, affinity and tolerations), narrowed to the node
    of a claim it holds already: reclaim for it frees room on these alone."""
    pinned = {n for c in claims if (a := allocation_of(c)) and (n := allocation_node(a))}
    nodes = view.eligibility(pod).nodes
    return [n for n in nodes if not pinned or n in pinned]


@dataclass(slots=True)
class _Member:
    pod: Obj
    missing: list[Obj]
    """Claims no allocation (observed or assumed) covers yet."""
    nodes: list[str]
    """Nodes it may use (where its allocated claims are, when some are)."""
    placed: tuple[str, list[Obj]] | None = None
    why: str = ""


@dataclass(slots=True)
class ViewGangTrial:
    """`GangTrial` over the controller's view for one gang of queue `queue`."""

    view: ClusterView
    ledger: Ledger
    queue: str
    driver_name: str
    pods: Sequence[Obj]
    within_guarantee: bool = True
    """False when the victims are idle pods lent under `idleReclaim` (see `gang_admissible`)."""
    _members: list[_Member] = field(default_factory=list)
    _released: dict[Key, Obj] = field(default_factory=dict)
    """Victims' claims whose allocations are out of the usage now → those allocations."""
    _claims_of: dict[Key, list[Key]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for pod in self.pods:
            claims = self.view.pod_claims(pod) or []
            missing = [
                c for c in claims if allocation_of(c) is None and key_of(c) not in self.view.assumed
            ]
            self._members.append(_Member(pod, missing, usable_nodes(self.view, pod, claims)))

    # --- GangTrial ------------------------------------------------------------------------------

    def place(self, member: int, freed: Sequence[Running], node: str | None = None) -> bool:
        state = self._members[member]
        self._free(freed)
        prefix = f"gang member {_name(state.pod)}: "
        candidates = state.nodes if node is None else [n for n in state.nodes if n == node]
        if not candidates:
            state.why = f"{prefix}it may not run on node {node}"
            return False
        victims = [r.key for r in freed]
        together: dict[str, list[Obj]] = {}
        for other in self._members:
            if other.placed is not None:
                together.setdefault(other.placed[0], []).append(other.pod)
        lacking = self.view.lacking([state.pod], candidates, freed=victims)
        for where, pods in together.items():
            if where in candidates and where not in lacking:
                found = self.view.lacking([*pods, state.pod], [where], freed=victims)
                lacking.update(found)
        candidates = [n for n in candidates if n not in lacking]
        if not candidates:
            state.why = f"{prefix}{no_room(lacking)}"
            return False
        if not state.missing:
            state.placed = (candidates[0], [])
            return True
        placer = self.view.placer()
        explain, placer.explain_failures = placer.explain_failures, False  # trials: yes or no
        try:
            placement = placer.place(state.missing, nodes=candidates, prefer=together)
        finally:
            placer.explain_failures = explain
        if placement.allocations is None or placement.node is None:
            state.why = f"{prefix}{placement.reason}"
            return False
        state.placed = (placement.node, placement.allocations)
        return True

    def unplace(self, member: int) -> None:
        state = self._members[member]
        if state.placed is None:
            return
        placer = self.view.placer()
        for allocation in state.placed[1]:
            placer.release(allocation, allocation_node(allocation) or "*")
        state.placed = None

    def admissible(self, freed: Sequence[Running]) -> str | None:
        return gang_admissible(
            self.ledger, self.queue, self.asks(), freed, within_guarantee=self.within_guarantee
        )

    def lacking(self, member: int) -> str:
        return self._members[member].why

    def reset(self) -> None:
        for member in range(len(self._members)):
            self.unplace(member)
        self._free(())

    # --- for the caller ---------------------------------------------------------------------------

    def asks(self) -> Amounts:
        total = ZERO
        for state in self._members:
            for allocation in state.placed[1] if state.placed else []:
                total = total + allocation_amounts(self.view.snapshot, self.driver_name, allocation)
        return total

    def nodes(self, freed: Sequence[Running]) -> dict[Key, str]:
        """Member → the node it goes to with `freed` gone (every member fits then)."""
        found: dict[Key, str] = {}
        self.reset()
        try:
            for member, state in enumerate(self._members):
                if self.place(member, freed) and state.placed is not None:
                    found[key_of(state.pod)] = state.placed[0]
        finally:
            self.reset()
        return found

    def _free(self, freed: Sequence[Running]) -> None:
        """Make the usage hold nothing for exactly the claims of `freed`."""
        placer = self.view.placer()
        wanted: set[Key] = set()
        for victim in freed:
            if victim.key not in self._claims_of:
                body = self.view.pods.get(victim.key)
                claims = self.view.pod_claims(body) if body is not None else None
                self._claims_of[victim.key] = [key_of(c) for c in claims or []]
            wanted.update(self._claims_of[victim.key])
        for key in [k for k in self._released if k not in wanted]:
            back = self._released.pop(key)
            placer.record(back, allocation_node(back) or "*")
        for key in wanted:
            if key in self._released:
                continue
            held = self.view.recorded(key)
            if held is not None:
                placer.release(held, allocation_node(held) or "*")
                self._released[key] = held
