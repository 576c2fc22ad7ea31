"""Label and field selectors, as list and watch requests send them in the query string.

Both are parsed once per request into predicates over a stored object. Field selectors are
generic dotted paths (`spec.nodeName`, `spec.pool.name`, ...) rather than the per-kind allow
lists a real API server has: a harness should not reject a selector the real server accepts,
and a missing field compares as the empty string, as it does upstream.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from localcluster.errors import bad_request

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


def field_value(obj: Mapping[str, Any], path: str) -> str:
    """The string value at a dotted path; "" when missing (how upstream compares absent fields)."""
    current: Any = obj
    for part in path.split("."):
        if not isinstance(current, Mapping) or part not in current:
            return ""
        current = current[part]
    if isinstance(current, bool):
        return "true" if current else "false"
    return "" if current is None else str(current)


def _field_term(term: str) -> Predicate:
    match = _EQ_OP.match(term)
    if not match:
        raise bad_request(f"invalid field selector: {term!r}")
    path, op, value = match.groups()
    if op == "!=":
        return lambda obj: field_value(obj, path) != value
    return lambda obj: field_value(obj, path) == value


def parse_field_selector(text: str | None) -> Predicate:
    """A predicate for `fieldSelector` (`=`, `==`, `!=` on dotted paths, ANDed)."""
    terms = [_field_term(t) for t in _split_terms(text or "")]
    return lambda obj: all(term(obj) for term in terms)


def parse_selectors(labels: str | None, fields: str | None) -> Predicate:
    """Both selectors of a request as one predicate."""
    label_pred = parse_label_selector(labels)
    field_pred = parse_field_selector(fields)
    return lambda obj: label_pred(obj) and field_pred(obj)
