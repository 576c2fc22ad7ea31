"""Which part of a device a selector can see, so equal parts share one verdict.

Most selectors read a few attributes by literal name (`type`, `profile`, `productName`). Two
devices that agree on the driver, `allowMultipleAllocations` and every attribute and capacity
whose id the expression names must get the same verdict — including the same error, since a
missing key is missing on both. A 500-node cluster has a few dozen such projections per selector
instead of 124,000 devices, so verdicts cost a dictionary look-up rather than a CEL evaluation.

The analysis is textual and deliberately conservative: any construct that could observe a key
the expression does not name — enumeration or size of a map, computed keys, string building,
comparison of whole maps, bindings — makes the expression "opaque", and its verdicts are then
computed per device.

Caches: `projection_of`, by expression text (least recently used beyond 4096 expressions); the
answer depends on the text alone, so it is never stale.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_STRING = re.compile(r"""(?P<q>["'])(?P<body>(?:\\.|(?!(?P=q)).)*)(?P=q)""", re.DOTALL)

# After string literals are replaced by "S": anything here could see keys the text does not name.
_OPAQUE = re.compile(
    r"\b(size|all|exists|exists_one|map|filter|bind|transformList|transformMap)\b"
    r"|[{+]|\"\"\"|'''"
)
_DOMAIN_MAP = re.compile(r"device\s*\.\s*(attributes|capacity)\b")
# A domain map may only be indexed by a literal or the device's own driver, then read by a
# literal id (field, optional field or literal index) — or be the target of a literal `in`.
_SAFE_USE = re.compile(
    r"""device\s*\.\s*(?:attributes|capacity)\s*\[\s*(?:"S"|device\s*\.\s*driver)\s*\]\s*
        (?:\.\s*\??\s*[A-Za-z_][A-Za-z0-9_]*|\[\s*"S"\s*\])""",
    re.VERBOSE,
)
_SAFE_MEMBERSHIP = re.compile(
    r"""(?:"S"\s+in\s+)device\s*\.\s*(?:attributes|capacity)\s*\[\s*(?:"S"|device\s*\.\s*driver)
        \s*\]""",
    re.VERBOSE,
)


@dataclass(frozen=True, slots=True)
class Projection:
    """The ids an expression names; None for opaque expressions."""

    names: frozenset[str] | None


def _mask_strings(expression: str) -> tuple[str, set[str]] | None:
    literals: set[str] = set()
    # Raw and byte literals could hide quotes from the simple pattern: treat as opaque.
    if re.search(r"""\b[rRbB]{1,2}["']""", expression):
        return None

    def keep(match: re.Match[str]) -> str:
        literals.add(match.group("body"))
        return '"S"'

    return _STRING.sub(keep, expression), literals


@lru_cache(maxsize=4096)
def projection_of(expression: str) -> Projection:
    masked = _mask_strings(expression)
    if masked is None:
        return Projection(None)
    text, literals = masked
    if _OPAQUE.search(text):
        return Projection(None)
    safe = {m.start() for m in _SAFE_USE.finditer(text)}
    safe |= {m.start() + m.group(0).index("device") for m in _SAFE_MEMBERSHIP.finditer(text)}
    for use in _DOMAIN_MAP.finditer(text):
        if use.start() not in safe:
            return Projection(None)
    # Escapes inside literals are rare in selectors; keep ids both raw and unescaped.
    names = set(_IDENT.findall(text)) | literals
    names |= {literal.encode().decode("unicode_escape", "ignore") for literal in literals}
    return Projection(frozenset(names))


Entry = tuple[str, str, str, str]
"""(id, section, key, value as text) of one attribute or capacity of a device."""


def device_entries(device: Mapping[str, Any]) -> tuple[Entry, ...] | None:
    """Every attribute and capacity of a device, sorted; None when they are not maps."""
    found: list[Entry] = []
    for section in ("attributes", "capacity"):
        entries = device.get(section) or {}
        if not isinstance(entries, Mapping):
            return None
        for key, value in entries.items():
            found.append((str(key).rpartition("/")[2], section, str(key), repr(value)))
    found.sort()
    return tuple(found)


def projection_key(
    projection: Projection,
    driver: str,
    allow_multiple: bool,
    entries: tuple[Entry, ...] | None,
) -> tuple[object, ...] | None:
    """The part of a device the expression can see, as a hashable key; None when opaque."""
    names = projection.names
    if names is None or entries is None:
        return None
    return (driver, allow_multiple, tuple(e for e in entries if e[0] in names))
