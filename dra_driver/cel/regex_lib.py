"""Kubernetes' ``find`` and ``findAll`` on top of the runtime's RE2 ``regex`` extension.

Python's ``re`` backtracks and can take exponential time on a hostile
pattern, so it is not used. Instead the type checker knows ``find``/``findAll``
under their Kubernetes signatures, and ``rewrite.py`` turns each call into the
runtime's linear-time ``regex.extract``/``regex.extractAll``. Those return a
capture group instead of the whole match when the pattern has one, so the
rewrite passes a copy of the pattern whose groups are made non-capturing; that
needs the pattern as a literal, which is how selectors write it in practice.
"""

from __future__ import annotations

from typing import Any, Final

from dra_driver.cel.library import CelFunctionError, Function, Library, Overload

TAKE: Final = "@take"


def _never_called(*_args: object) -> Any:
    # Calls are rewritten before evaluation; reaching this is a bug in rewrite.py.
    raise CelFunctionError("find/findAll reached the evaluator without being rewritten")


def _take(items: list[Any], limit: int) -> list[Any]:
    """Go's FindAllString limit: negative means all matches."""
    return items if limit < 0 else items[:limit]


def _skip_class(pattern: str, start: int) -> int:
    """Index just past the character class opening at ``start``."""
    index = start + 1
    if index < len(pattern) and pattern[index] == "^":
        index += 1
    if index < len(pattern) and pattern[index] == "]":
        index += 1  # a leading "]" is a literal member
    while index < len(pattern) and pattern[index] != "]":
        if pattern[index] == "\\":
            index += 2
            continue
        if pattern.startswith("[:", index):
            end = pattern.find(":]", index + 2)
            if end >= 0:
                index = end + 2
                continue
        index += 1
    return index + 1


def without_capture_groups(pattern: str) -> str:
    """The same RE2 pattern with every capturing group (named or not) made non-capturing."""
    out: list[str] = []
    index = 0
    while index < len(pattern):
        char = pattern[index]
        if pattern.startswith("\\Q", index):
            end = pattern.find("\\E", index + 2)
            stop = len(pattern) if end < 0 else end + 2
            out.append(pattern[index:stop])
            index = stop
        elif char == "\\":
            out.append(pattern[index : index + 2])
            index += 2
        elif char == "[":
            stop = _skip_class(pattern, index)
            out.append(pattern[index:stop])
            index = stop
        elif pattern.startswith("(?P<", index) or pattern.startswith("(?<", index):
            close = pattern.find(">", index)
            if close < 0:
                out.append(pattern[index:])
                break
            out.append("(?:")
            index = close + 1
        elif char == "(" and not pattern.startswith("(?", index):
            out.append("(?:")
            index += 1
        else:
            out.append(char)
            index += 1
    return "".join(out)


REGEX_LIBRARY: Final = Library(
    name="regex",
    functions=(
        Function(
            "find",
            (Overload("string_find_string", ("string", "string"), "string", _never_called, True),),
        ),
        Function(
            "findAll",
            (
                Overload(
                    "string_find_all_string",
                    ("string", "string"),
                    "list(string)",
                    _never_called,
                    member=True,
                ),
                Overload(
                    "string_find_all_string_int",
                    ("string", "string", "int"),
                    "list(string)",
                    _never_called,
                    member=True,
                ),
            ),
        ),
    ),
    internal=(
        Function(TAKE, (Overload("take_list_int", ("list(dyn)", "int"), "list(dyn)", _take),)),
    ),
)
