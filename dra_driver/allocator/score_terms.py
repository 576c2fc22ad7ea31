"""Scored mode's comparisons in words: which term of a score made one node beat another.

Scores compare lexicographically (scoring.py, `NODE_KEY_TERMS` in placement.py), so the term
that decided between two nodes is the first one on which they differ; every term before it was
equal. `explain` prints the terms of each node it compared and names that deciding term, so a
user can tell a choice made on topology from one made on fragmentation or on load.
"""

from __future__ import annotations

from collections.abc import Sequence

from dra_driver.allocator.placement import NODE_KEY_TERMS
from dra_driver.allocator.scoring import ScoringPolicy, SolutionScore


def deciding_term(winner: Sequence[object], other: Sequence[object]) -> int | None:
    """Position of the first term on which the two keys differ; None when they are equal."""
    for position, (mine, theirs) in enumerate(zip(winner, other, strict=True)):
        if mine != theirs:
            return position
    return None


def topology_words(spread: Sequence[int], policy: ScoringPolicy) -> str:
    """`nvlinkDomain 0, numaNode 1`: extra groups the devices span, per topology attribute."""
    return ", ".join(
        f"{name} {extra}" for name, extra in zip(policy.topology_attributes, spread, strict=True)
    )


def loss_words(loss: float) -> str:
    return f"{loss:.4g}"


def score_words(score: SolutionScore, policy: ScoringPolicy) -> str:
    """A solution's terms on one node, in the order they compare."""
    return (
        f"preference {list(score.preference)}, topology spread "
        f"({topology_words(score.topology, policy)}), steer {score.steer}, "
        f"loss {loss_words(score.loss)}"
    )


def node_key_words(key: Sequence[object], policy: ScoringPolicy) -> str:
    """A node's ranking key (placement.py's `Compared.key`) in the order it compares."""
    terms = dict(zip(NODE_KEY_TERMS, key, strict=True))
    spread = terms["topology"]
    loss = terms["loss"]
    load = terms["load"]
    assert isinstance(spread, tuple) and isinstance(loss, float) and isinstance(load, int)
    preference = terms["preference"]
    assert isinstance(preference, tuple)
    return (
        f"preference {list(preference)}, topology spread ({topology_words(spread, policy)}), "
        f"loss {loss_words(loss)}, load {-load}"
    )


def node_loss_words(winner: Sequence[object], other: Sequence[object]) -> str:
    """Why `other` lost to `winner`, naming the first term on which they differ."""
    position = deciding_term(winner, other)
    if position is None:
        return "equal to the chosen node"
    term = NODE_KEY_TERMS[position]
    mine, theirs = winner[position], other[position]
    if term == "prefer":
        return "loses on the preferred nodes (the chosen one is where the pod's gang went)"
    if term == "preference":
        return (
            f"loses on firstAvailable preference ({list(_tuple(theirs))} against "
            f"{list(_tuple(mine))})"
        )
    if term == "topology":
        return f"loses on topology spread ({list(_tuple(theirs))} against {list(_tuple(mine))})"
    if term == "loss":
        return (
            f"loses on fragmentation loss ({loss_words(_float(theirs))} against "
            f"{loss_words(_float(mine))})"
        )
    if term == "load":
        return (
            f"loses on load ({-_int(theirs)} results allocated there against {-_int(mine)}: "
            "the busier node wins)"
        )
    return "ties on every term, so the first name wins"


SOLUTION_TERMS = ("preference", "topology", "steer", "loss", "positions")
"""`SolutionScore`'s fields, in the order they compare."""


def solution_key(score: SolutionScore) -> tuple[object, ...]:
    return tuple(getattr(score, term) for term in SOLUTION_TERMS)


def solution_loss_words(chosen: SolutionScore, other: SolutionScore) -> str:
    """Why the devices of `other` lost to those of `chosen` on one node."""
    position = deciding_term(solution_key(chosen), solution_key(other))
    if position is None:
        return "the same solution"
    term = SOLUTION_TERMS[position]
    if term == "preference":
        return (
            f"loses on firstAvailable preference ({list(other.preference)} against "
            f"{list(chosen.preference)})"
        )
    if term == "topology":
        return f"loses on topology spread ({list(other.topology)} against {list(chosen.topology)})"
    if term == "steer":
        return (
            f"loses on steer ({other.steer} devices outside those the fragmentation score "
            f"picked, against {chosen.steer})"
        )
    if term == "loss":
        return (
            f"loses on fragmentation loss ({loss_words(other.loss)} against "
            f"{loss_words(chosen.loss)})"
        )
    return "ties on every term, so device order decides"


def _tuple(value: object) -> tuple[object, ...]:
    assert isinstance(value, tuple)
    return value


def _float(value: object) -> float:
    assert isinstance(value, float | int)
    return float(value)


def _int(value: object) -> int:
    assert isinstance(value, int)
    return value
