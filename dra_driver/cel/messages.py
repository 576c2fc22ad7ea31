"""Turn the runtime's reports into messages a claim author can act on.

The runtime prefixes status codes (``INVALID_ARGUMENT: ``), appends them again
(`` [INVALID_ARGUMENT]``), draws source excerpts with carets over several lines
and speaks of its own internals. Users see our messages in events and logs,
so they are cut down to one line, with the position kept separately.
"""

from __future__ import annotations

import re
from typing import Final

from dra_driver.cel.checked_ast import SourcePosition

_STATUS_PREFIX = re.compile(
    r"^(?:INVALID_ARGUMENT|NOT_FOUND|UNKNOWN|OUT_OF_RANGE|INTERNAL|CANCELLED|ALREADY_EXISTS"
    r"|FAILED_PRECONDITION|UNIMPLEMENTED|RESOURCE_EXHAUSTED|DEADLINE_EXCEEDED|ABORTED"
    r"|PERMISSION_DENIED|UNAVAILABLE|DATA_LOSS|UNAUTHENTICATED): "
)
_STATUS_SUFFIX = re.compile(r"\s*\[[A-Z][A-Z_]+\]\s*$")
_LOCATED = re.compile(r"ERROR: [^:\n]*:(-?\d+):(-?\d+): ([^\n]*)")
_CONTAINER_NOTE = " (in container '')"

# The runtime's parser and planner refuse trees nested deeper than this.
MAX_NESTING: Final = 32

_REPHRASED: Final = (
    (re.compile(r"Exceeded max recursion depth of \d+ when parsing\.?"), "nesting"),
    (re.compile(r"Expression recursion limit exceeded.*"), "nesting"),
    (re.compile(r"Key not found in map : (.*)"), r"no such key: \1"),
    (re.compile(r"No matching overloads found : (.*)"), r"no such overload: \1"),
    (
        re.compile(r"Applying SELECT to non-message type"),
        "no such field or overload for a value of this type",
    ),
    (
        re.compile(r"Iteration budget exceeded.*"),
        "cost limit exceeded: the evaluation ran more than the runtime's 10,000 "
        "comprehension iterations",
    ),
    (
        re.compile(r"Unable to convert function return value.*", re.DOTALL),
        "must evaluate to bool, got a value of another type",
    ),
)
_NESTING_MESSAGE: Final = f"expression nests too deeply (at most {MAX_NESTING} levels)"


def _strip_status(text: str) -> str:
    text = _STATUS_SUFFIX.sub("", text.strip())
    while _STATUS_PREFIX.match(text):
        text = _STATUS_PREFIX.sub("", text, count=1)
    return text


def _rephrase(text: str) -> str:
    for pattern, replacement in _REPHRASED:
        if pattern.fullmatch(text):
            return _NESTING_MESSAGE if replacement == "nesting" else pattern.sub(replacement, text)
    return text


def compile_failure(text: str) -> tuple[str, SourcePosition | None]:
    """One-line message and the first known position from a runtime compile report."""
    body = _strip_status(text)
    located = _LOCATED.findall(body)
    if not located:
        return _rephrase(" ".join(body.split())), None
    messages: list[str] = []
    position: SourcePosition | None = None
    for line, column, reported in located:
        message = _rephrase(_strip_status(reported).replace(_CONTAINER_NOTE, ""))
        if message not in messages:
            messages.append(message)
        if position is None and int(line) > 0 and int(column) > 0:
            position = SourcePosition(int(line), int(column))
    return "; ".join(messages), position


def compile_report(text: str) -> str:
    """A runtime compile report as cel-go prints it (`ERROR: <input>:1:4: ...` with the source
    line and a caret under the position), without the runtime's status around it."""
    return _strip_status(text)


def too_deep(text: str) -> bool:
    """Whether a runtime report is about nesting beyond the runtime's limit."""
    return any(
        replacement == "nesting" and pattern.search(text) for pattern, replacement in _REPHRASED
    )


def runtime_failure(text: str) -> str:
    """One-line message for an evaluation error reported by the runtime or our functions."""
    return _rephrase(" ".join(_strip_status(text).split()))


def type_name(runtime_name: str) -> str:
    """``LIST<INT>`` as CEL users write it: ``list(int)``; message names stay as they are."""
    if "." in runtime_name and "<" not in runtime_name:
        return runtime_name
    return runtime_name.lower().replace("<", "(").replace(">", ")")
