"""Choosing victims for a waiting gang: every member must fit at once, across nodes.

A gang runs whole or not at all, so evicting for one member alone frees devices nobody can use.
The victims are chosen member by member, as the members are placed: a member that fits on what
is free already (or what earlier victims freed) takes no victim; otherwise `choose_victims`
picks the fewest cheapest ones (idle ones first) on one node for it, next to the members
placed before it. The
set found is then checked the way the gang is decided (all members with those victims gone,
and the gang's whole ask within its queue's guarantee and every limit), and pruned: each victim
the gang fits without, costliest first, is dropped again, so every victim left is needed.

When the member-by-member search finds nothing, every borrowed unit is tried at once: if the
gang does not fit even then, nobody is evicted and the reason says which member lacked room;
if it does, that set is pruned the same way.

The caller owns the devices and plays the members through `GangTrial`; this module only
decides which units to try.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from dra_driver.queues.fairness import Ledger
from dra_driver.queues.reclaim import Fits, Running, Unit, choose_victims, costliest_first
from dra_driver.queues.spec import Amounts, format_gpu


class GangTrial(Protocol):
    """The caller's cluster, for placing a gang's members one after another on trial.

    Placements are kept (the next member sees them) until `reset`; `freed` is always every
    pod whose devices count as free for that placement."""

    def place(self, member: int, freed: Sequence[Running], node: str | None = None) -> bool:
        """Place the member on `node` (or on the node it would be decided to) with `freed`
        gone, next to the members placed so far; whether it fits."""
        ...

    def unplace(self, member: int) -> None:
        """Undo the member's trial placement."""
        ...

    def admissible(self, freed: Sequence[Running]) -> str | None:
        """Why the queue may not take what the placed members ask once `freed` are gone
        (its guarantee, a limit), or None when it may."""
        ...

    def lacking(self, member: int) -> str:
        """Why the member did not fit in its last failed `place`."""
        ...

    def reset(self) -> None:
        """Undo every trial placement."""
        ...


@dataclass(frozen=True, slots=True)
class GangVictims:
    units: list[Unit]

    @property
    def pods(self) -> list[Running]:
        return [p for u in self.units for p in u.pods]


def gang_admissible(
    ledger: Ledger,
    queue: str,
    asks: Amounts,
    freed: Sequence[Running],
    within_guarantee: bool = True,
) -> str | None:
    """Why queue `queue` may not take a gang asking `asks` once `freed` are gone (None: it may).

    Reclaim of borrowed capacity only ever gives a queue back its guarantee, so a gang that
    would pass it is refused before the queue limits are asked; pods evicted because their
    queue lends what sits idle (`idleReclaim`) owe the taker no guarantee, so that check is
    skipped for them (`within_guarantee` False). The ledger is put back as it was either way.
    The controller's trial and `simulate`'s replay both ask this, so they refuse alike."""
    spec = ledger.tree.queues[queue]
    if within_guarantee and not spec.guaranteed.covers(ledger.used(queue) + asks):
        return (
            f"the gang asks {format_gpu(asks.gpu)} GPUs, more than queue {queue}'s "
            "guarantee leaves it"
        )
    for victim in freed:
        ledger.remove(victim.queue, victim.amounts)
    try:
        return ledger.refusal(queue, asks)
    finally:
        for victim in freed:
            ledger.add(victim.queue, victim.amounts)


def _pods(units: Sequence[Unit]) -> list[Running]:
    return [p for u in units for p in u.pods]


def fits_all(members: int, trial: GangTrial, freed: Sequence[Running]) -> str | None:
    """None when every member fits at once with `freed` gone and the queue may take it all;
    else why not. Leaves no trial placement behind."""
    trial.reset()
    try:
        for member in range(members):
            if not trial.place(member, freed):
                return trial.lacking(member)
        return trial.admissible(freed)
    finally:
        trial.reset()


def _member_fits(trial: GangTrial, member: int, freed: Sequence[Running]) -> Fits:
    """Whether the member fits on a node once `more` go too, next to the members placed."""

    def fits(node: str, more: Sequence[Running]) -> bool:
        if not trial.place(member, [*freed, *more], node):
            return False
        trial.unplace(member)
        return True

    return fits


def _member_by_member(units: Sequence[Unit], members: int, trial: GangTrial) -> list[Unit] | None:
    chosen: list[Unit] = []
    trial.reset()
    try:
        for member in range(members):
            freed = _pods(chosen)
            if trial.place(member, freed):
                continue
            left = [u for u in units if u not in chosen]
            if not left:
                return None

            found = choose_victims(left, _member_fits(trial, member, freed))
            if found is None:
                return None
            node, picked = found
            chosen.extend(picked)
            if not trial.place(member, _pods(chosen), node):
                return None  # the trial said it fits: only a changing caller gets here
        return chosen
    finally:
        trial.reset()


def _pruned(chosen: list[Unit], members: int, trial: GangTrial) -> list[Unit]:
    """Drop every unit the gang fits without, costliest first (busy before idle)."""
    kept = list(chosen)
    for unit in sorted(chosen, key=costliest_first):
        rest = [u for u in kept if u is not unit]
        if fits_all(members, trial, _pods(rest)) is None:
            kept = rest
    return kept


def choose_gang_victims(units: Sequence[Unit], members: int, trial: GangTrial) -> GangVictims | str:
    """The units to evict so that every member fits at once (see the module's docstring), or
    why no choice of borrowed units makes room for the whole gang."""
    if not units:
        return "no pod runs on borrowed capacity"
    chosen = _member_by_member(units, members, trial)
    if chosen is None or fits_all(members, trial, _pods(chosen)) is not None:
        why = fits_all(members, trial, _pods(units))
        if why is not None:
            return f"even with every pod on borrowed capacity evicted: {why}"
        chosen = list(units)
    return GangVictims(_pruned(chosen, members, trial))
