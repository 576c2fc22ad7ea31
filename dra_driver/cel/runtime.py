"""The only module that talks to the CEL runtime (cel-expr-python).

Everything else in the package works with serialised syntax trees, plain
Python values and the declarations in ``library.py``, so swapping or upgrading
the runtime touches this file alone.

Two runtime environments are built from the same libraries:

* the *checker*: declares every overload with its precise types so that type
  errors are found at compile time. It is never used to evaluate, which matters
  because the runtime registers implementations by argument *kind* only
  (``list(int)`` and ``list(double)`` are both "list") and would refuse two
  implementations of one name with the same kinds.
* the *evaluator*: loads trees produced by the checker (after our rewrites).
  It registers each overload under an internal name ``@<overload id>`` with
  its exact types, plus one implementation per function name and kind shape
  for calls whose overload is only known at run time (a ``dyn`` receiver).
  It also enables the runtime's RE2-based ``regex`` extension, which our
  ``find``/``findAll`` are rewritten onto; the checker does not, so selector
  authors cannot call ``regex.*`` directly, matching Kubernetes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from cel_expr_python import cel
from cel_expr_python.ext import ext_bindings, ext_optional, ext_strings

from dra_driver.cel.library import (
    Function,
    Library,
    Overload,
    dispatcher,
    merge_functions,
    parse_type_expr,
)

# Kubernetes enables version 2 of the strings extension for CEL; later versions add
# functions (such as reverse) that a Kubernetes API server would reject.
_STRINGS_VERSION: Final = 2

_SCALAR_TYPES: Final[dict[str, cel.Type]] = {
    "bool": cel.Type.BOOL,
    "int": cel.Type.INT,
    "uint": cel.Type.UINT,
    "double": cel.Type.DOUBLE,
    "string": cel.Type.STRING,
    "bytes": cel.Type.BYTES,
    "dyn": cel.Type.DYN,
    "null": cel.Type.NULL,
    "timestamp": cel.Type.TIMESTAMP,
    "duration": cel.Type.DURATION,
}

# The runtime registers implementations by these, not by full types.
_KIND_OF_HEAD: Final[dict[str, str]] = {"list": "list", "map": "map"}

# A parameter type that accepts every value of a kind; message kinds keep their own type.
_LOOSE_PARAM_OF_KIND: Final[dict[str, str]] = {
    "dyn": "dyn",
    "list": "list(dyn)",
    "map": "map(dyn, dyn)",
}

RESULT_BOOL: Final = "BOOL"
RESULT_DYN: Final = "DYN"


class RuntimeCompileError(Exception):
    """The runtime rejected an expression; ``text`` is the runtime's own report."""

    def __init__(self, text: str) -> None:
        self.text = text
        super().__init__(text)


def to_cel_type(expr: str) -> cel.Type:
    head, params = parse_type_expr(expr)
    if not params:
        scalar = _SCALAR_TYPES.get(head)
        return scalar if scalar is not None else cel.Type(head)
    if head == "list" and len(params) == 1:
        return cel.Type.List(to_cel_type(params[0]))
    if head == "map" and len(params) == 2:
        return cel.Type.Map(to_cel_type(params[0]), to_cel_type(params[1]))
    raise ValueError(f"unsupported type expression {expr!r}")


def _kind(expr: str) -> str:
    head, _ = parse_type_expr(expr)
    if head in _SCALAR_TYPES:
        return head
    return _KIND_OF_HEAD.get(head, "message")


def internal_name(overload_id: str) -> str:
    """The evaluator's name for one exact overload; ``@`` keeps it out of reach of source text."""
    return "@" + overload_id


def _declare(name: str, overloads: Sequence[Overload]) -> cel.FunctionDecl:
    return cel.FunctionDecl(
        name,
        [
            cel.Overload(
                o.id,
                to_cel_type(o.result),
                [to_cel_type(p) for p in o.params],
                is_member=o.member,
                impl=o.impl,
            )
            for o in overloads
        ],
    )


def _evaluator_declarations(function: Function) -> list[cel.FunctionDecl]:
    """Exact overloads under internal names, plus one entry per kind shape under the real name."""
    declarations = [_declare(internal_name(o.id), [o]) for o in function.overloads]
    shapes: dict[tuple[bool, tuple[str, ...]], list[Overload]] = {}
    for overload in function.overloads:
        key = (overload.member, tuple(_kind(p) for p in overload.params))
        shapes.setdefault(key, []).append(overload)
    late_bound: list[Overload] = []
    for (member, kinds), group in shapes.items():
        first = group[0]
        if len(group) == 1:
            impl = first.impl
        else:
            impl = function.dynamic or dispatcher(function.name, group)
        params = tuple(
            _LOOSE_PARAM_OF_KIND.get(kind, param)
            for kind, param in zip(kinds, first.params, strict=True)
        )
        late_bound.append(
            Overload(
                id=f"{function.name}_dynamic_{len(late_bound)}",
                params=params,
                result="dyn",
                impl=impl,
                member=member,
            )
        )
    declarations.append(_declare(function.name, late_bound))
    return declarations


@dataclass(frozen=True)
class Outcome:
    """What one evaluation produced: a bool, an error message, or some other type."""

    value: bool | None
    error: str | None = None
    other_type: str | None = None


_MATCHED: Final = Outcome(value=True)
_UNMATCHED: Final = Outcome(value=False)


class Program:
    """A loaded expression, ready to evaluate against activations of its runtime."""

    def __init__(self, expression: Any) -> None:
        self._expression = expression

    def run(self, activation: Any) -> Outcome:
        try:
            result = self._expression.eval(activation)
            # value() first: asking for the type costs as much again, and bools are the rule.
            value = result.value()
        except Exception as failure:  # the runtime raises plain RuntimeError/TypeError
            return Outcome(value=None, error=str(failure))
        if value is True:
            return _MATCHED
        if value is False:
            return _UNMATCHED
        kind = result.type()
        if kind == cel.Type.ERROR:
            return Outcome(value=None, error=str(value))
        return Outcome(value=None, other_type=kind.name())

    def value(self, activation: Any) -> Any:
        """The result as a Python value, whatever its type (CRD rules' messageExpression is a
        string); raises RuntimeError when evaluation fails."""
        try:
            result = self._expression.eval(activation)
            value = result.value()
            kind = result.type()
        except Exception as failure:  # the runtime raises plain RuntimeError/TypeError
            raise RuntimeError(str(failure)) from None
        if kind == cel.Type.ERROR:
            raise RuntimeError(str(value))
        return value


class Runtime:
    """A checker/evaluator pair for one set of variables and libraries."""

    def __init__(
        self,
        *,
        variables: Mapping[str, str],
        libraries: Sequence[Library],
        descriptor_pool: Any,
    ) -> None:
        variable_types = {name: to_cel_type(t) for name, t in variables.items()}
        public = merge_functions(f for library in libraries for f in library.functions)
        internal = merge_functions(f for library in libraries for f in library.internal)
        checker_decls = [_declare(f.name, f.overloads) for f in public]
        evaluator_decls = [
            decl for function in (*public, *internal) for decl in _evaluator_declarations(function)
        ]
        self._checker = cel.NewEnv(
            descriptor_pool=descriptor_pool,
            variables=variable_types,
            extensions=[
                *self._standard_extensions(),
                cel.CelExtension("dra_driver", checker_decls),
            ],
        )
        self._evaluator = cel.NewEnv(
            descriptor_pool=descriptor_pool,
            config=cel.NewEnvConfigFromYaml("extensions:\n  - name: regex\n"),
            variables=variable_types,
            extensions=[
                *self._standard_extensions(),
                cel.CelExtension("dra_driver_evaluator", evaluator_decls),
            ],
        )

    @staticmethod
    def _standard_extensions() -> list[cel.CelExtensionBase]:
        return [
            ext_bindings.ExtBindings(),
            ext_optional.ExtOptional(),
            ext_strings.ExtStrings(version=_STRINGS_VERSION),
        ]

    def check(self, text: str) -> tuple[bytes, str]:
        """Parse and type-check; return the serialised checked tree and the result type name."""
        try:
            compiled = self._checker.compile(text)
            return bytes(compiled.serialize()), str(compiled.return_type().name())
        except RuntimeError as failure:
            raise RuntimeCompileError(str(failure)) from None

    def parse(self, text: str) -> bytes:
        """Parse only (macros expanded, nothing resolved); the serialised parsed tree."""
        try:
            return bytes(self._checker.compile(text, disable_check=True).serialize())
        except RuntimeError as failure:
            raise RuntimeCompileError(str(failure)) from None

    def load(self, serialized: bytes) -> Program:
        """Prepare a checked (and possibly rewritten) tree for evaluation."""
        try:
            return Program(self._evaluator.deserialize(serialized))
        except RuntimeError as failure:
            raise RuntimeCompileError(str(failure)) from None

    def activation(self, data: Mapping[str, object]) -> Any:
        """Variables converted once, to be shared by every program evaluated against them."""
        return self._evaluator.Activation(data=dict(data))
