"""Label and field selectors, as list and watch requests send them in the query string.

Both are parsed once per request into predicates over a stored object. Field selectors accept
only the fields the kind supports upstream (`field_selectors`), and a missing field compares as
the empty string (or the kind's default, such as "false"), as it does upstream.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from localcluster.errors import bad_request
from localcluster.field_selectors import selectable_field
from localcluster.resources import ResourceType

Predicate = Callable[[Mapping[str, Any]], bool]

_SET_OP = re.compile(r"^\s*([^\s!=()]+)\s+(in|notin)\s+\((.*)\)\s*$")
_EQ_OP = re.compile(r"^\s*([^\s!=()]+)\s*(==|=|!=)\s*([^\s()]*)\s*$")
_EXISTS = re.compile(r"^\s*(!?)\s*([^\s!=()]+)\s*$")


def _split_terms(text: str) -> list[str]:
    """Split on commas that are not inside `in (...)` parentheses."""
    terms: list[str] = []
    depth = 0
    current: list[str] = []
    for char in text:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        if char == "," and depth == 0:
            terms.append("".join(current))
            current = []
        else:
            current.append(char)
    terms.append("".join(current))
    return [t for t in terms if t.strip()]


def _labels(obj: Mapping[str, Any]) -> Mapping[str, str]:
    labels = (obj.get("metadata") or {}).get("labels") or {}
    return labels if isinstance(labels, Mapping) else {}


def _label_term(term: str) -> Predicate:
    if match := _SET_OP.match(term):
        key, op, values_text = match.groups()
        values = {v.strip() for v in values_text.split(",") if v.strip()}
        if op == "in":
            return lambda obj: _labels(obj).get(key) in values
        return lambda obj: _labels(obj).get(key) not in values
    if match := _EQ_OP.match(term):
        key, op, value = match.groups()
        if op == "!=":
            return lambda obj: _labels(obj).get(key) != value
        return lambda obj: _labels(obj).get(key) == value
    if match := _EXISTS.match(term):
        negate, key = match.groups()
        if negate:
            return lambda obj: key not in _labels(obj)
        return lambda obj: key in _labels(obj)
    raise bad_request(f"unable to parse requirement: {term!r}")


def parse_label_selector(text: str | None) -> Predicate:
    """A predicate for `labelSelector`; every term must hold (terms are ANDed)."""
    terms = [_label_term(t) for t in _split_terms(text or "")]
    return lambda obj: all(term(obj) for term in terms)


def field_value(obj: Mapping[str, Any], path: str, default: str = "") -> str:
    """The string value at a dotted path; `default` when missing (as upstream compares it)."""
    current: Any = obj
    for part in path.split("."):
        if not isinstance(current, Mapping) or part not in current:
            return default
        current = current[part]
    if isinstance(current, bool):
        return "true" if current else "false"
    return default if current is None else str(current)


def _field_term(rt: ResourceType, term: str) -> Predicate:
    match = _EQ_OP.match(term)
    if not match:
        raise bad_request(f"invalid field selector: {term!r}")
    label, op, value = match.groups()
    field = selectable_field(rt, label)
    if op == "!=":
        return lambda obj: field_value(obj, field.path, field.default) != value
    return lambda obj: field_value(obj, field.path, field.default) == value


def parse_field_selector(rt: ResourceType, text: str | None) -> Predicate:
    """A predicate for `fieldSelector` (`=`, `==`, `!=` on the kind's fields, ANDed)."""
    terms = [_field_term(rt, t) for t in _split_terms(text or "")]
    return lambda obj: all(term(obj) for term in terms)


def parse_selectors(rt: ResourceType, labels: str | None, fields: str | None) -> Predicate:
    """Both selectors of a request on `rt` as one predicate."""
    label_pred = parse_label_selector(labels)
    field_pred = parse_field_selector(rt, fields)
    return lambda obj: label_pred(obj) and field_pred(obj)


def label_selector_matches(selector: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """A metav1.LabelSelector (`matchLabels`, `matchExpressions`) against labels; an empty
    selector matches everything (callers decide what a missing one means)."""
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expression in selector.get("matchExpressions") or ():
        key, operator = expression.get("key"), expression.get("operator")
        values = expression.get("values") or ()
        present = key in labels
        if operator == "In" and not (present and labels[key] in values):
            return False
        if operator == "NotIn" and present and labels[key] in values:
            return False
        if operator == "Exists" and not present:
            return False
        if operator == "DoesNotExist" and present:
            return False
        if operator not in ("In", "NotIn", "Exists", "DoesNotExist"):
            return False  # upstream refuses such a selector; it selects nothing here
    return True
