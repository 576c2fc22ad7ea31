"""The two ways a device selector can fail, kept apart because callers treat them differently.

A compile error is the claim author's mistake and is reported once, when the
selector is first seen; a runtime error happens while matching one device and,
as in Kubernetes, makes the whole allocation attempt fail rather than silently
skipping the device.
"""

from __future__ import annotations

from dra_driver.cel.checked_ast import SourcePosition

_SHOWN_EXPRESSION_CHARS = 80


def _shorten(expression: str) -> str:
    flat = " ".join(expression.split())
    if len(flat) <= _SHOWN_EXPRESSION_CHARS:
        return flat
    return flat[: _SHOWN_EXPRESSION_CHARS - 3] + "..."


class CelCompileError(ValueError):
    """The selector cannot be used at all: bad syntax, wrong types, too long or too costly."""

    def __init__(
        self, expression: str, message: str, position: SourcePosition | None = None
    ) -> None:
        self.expression = expression
        self.message = message
        self.position = position
        where = f" at {position}" if position is not None else ""
        super().__init__(f"CEL selector {_shorten(expression)!r} is invalid{where}: {message}")

    def __reduce__(self) -> tuple[type[CelCompileError], tuple[str, str, SourcePosition | None]]:
        return (type(self), (self.expression, self.message, self.position))


class CelRuntimeError(RuntimeError):
    """Evaluating the selector against one device failed."""

    def __init__(self, expression: str, message: str) -> None:
        self.expression = expression
        self.message = message
        super().__init__(f"CEL selector {_shorten(expression)!r} failed: {message}")

    def __reduce__(self) -> tuple[type[CelRuntimeError], tuple[str, str]]:
        return (type(self), (self.expression, self.message))
