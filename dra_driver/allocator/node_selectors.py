"""Kubernetes NodeSelector matching, for slices and devices published for a set of nodes.

Terms are ORed; within a term, every label expression and field expression must hold. An empty
term matches nothing, as in Kubernetes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def _requirement_holds(req: Mapping[str, Any], actual: str | None) -> bool:
    operator = req.get("operator")
    values = [str(v) for v in req.get("values") or []]
    if operator == "In":
        return actual is not None and actual in values
    if operator == "NotIn":
        return actual is None or actual not in values
    if operator == "Exists":
        return actual is not None
    if operator == "DoesNotExist":
        return actual is None
    if operator in ("Gt", "Lt") and actual is not None and len(values) == 1:
        try:
            left, right = int(actual), int(values[0])
        except ValueError:
            return False
        return left > right if operator == "Gt" else left < right
    return False


def node_selector_matches(
    selector: Mapping[str, Any], node: str, labels: Mapping[str, str]
) -> bool:
    for term in selector.get("nodeSelectorTerms") or []:
        expressions = term.get("matchExpressions") or []
        fields = term.get("matchFields") or []
        if not expressions and not fields:
            continue
        if all(_requirement_holds(r, labels.get(str(r.get("key")))) for r in expressions) and all(
            _requirement_holds(r, node if r.get("key") == "metadata.name" else None) for r in fields
        ):
            return True
    return False
