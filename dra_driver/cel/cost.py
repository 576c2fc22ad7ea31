"""A static worst-case cost bound, checked before a selector is ever evaluated.

Why static: the CEL runtime we use (cel-expr-python 0.1.3) exposes no cost
tracking and no way to interrupt an evaluation; its only guard is a fixed
budget of 10,000 comprehension iterations per evaluation, which does not stop
string or list growth (``cel.bind(a, s + s, cel.bind(b, a + a, ...))`` doubles
with every level and never loops). So, like the Kubernetes API server, we
estimate the worst case from the expression and the declared limits of its
input, and refuse at compile time anything whose bound exceeds the cost limit.

The model, in Kubernetes-like units:

* every call, selection or variable reference costs 1, and a call that may
  run one of our Python-implemented functions (quantities, versions, lists)
  costs ``PYTHON_CALL_COST`` more;
* handling a value costs ``work(size)``: one unit per list or map entry it
  holds plus 0.1 per byte of string or bytes content, whenever a function
  creates, copies, compares or scans it;
* a comprehension (the ``all``/``exists``/``map``/``filter`` macros,
  ``cel.bind``) costs its range and initial value, plus, for each possible
  iteration, its condition and step evaluated against the largest accumulator
  it can reach; nesting therefore multiplies.

Sizes are upper bounds tracked through the tree: a string's length, a list's
element count with a bound for its elements, a map's entry count with bounds
for keys and values. Input sizes come from the ResourceSlice limits that
``device_variable`` enforces (at most 32 attributes and capacities, domains of
at most 63 characters, ids of at most 32, values of at most 64). Every
function has a rule for the size of its result; a function without one is
accepted only if its checked result type is a scalar (so it cannot produce a
large value) and is charged for scanning its arguments.

Because creating a value is charged in proportion to its size, the bound also
caps memory: with the default limit of 1,000,000 no evaluation can build more
than about 10 MB of strings or a million list entries. The runtime's iteration
budget stays in place as a second line of defence.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any, Final

from dra_driver.cel import checked_ast
from dra_driver.cel.checked_ast import PRIMITIVE_BYTES, PRIMITIVE_STRING, WELL_KNOWN_ANY
from dra_driver.cel.device_value import (
    ATTRIBUTES_VAR,
    CAPACITY_VAR,
    DRIVER_VAR,
    MAX_ATTRIBUTES_AND_CAPACITIES,
    MAX_DOMAIN_LENGTH,
    MAX_DRIVER_NAME_LENGTH,
    MAX_ID_LENGTH,
    MAX_VALUE_LENGTH,
)

# Numbers past this are all "too much"; saturating keeps arithmetic cheap.
_SATURATED: Final = 1 << 80
# Longest text the runtime prints for one number (a double with the largest
# precision its format() accepts, 1000 digits) or for a scalar in string().
_PRINTED_NUMBER: Final = 1400
_PRINTED_SCALAR: Final = 64
# A call into one of our Python-implemented functions takes tens of microseconds,
# hundreds of times a native operation; charging this keeps 1,000,000 units to
# well under a second of evaluation even for selectors made only of such calls.
PYTHON_CALL_COST: Final = 150
# Added to an accumulator's size to detect steps that grow it faster than linearly.
_GROWTH_PROBE: Final = 1 << 20


@dataclass(frozen=True)
class Size:
    """Upper bounds: ``length`` is bytes of a string, entries of a list or map, 1 for scalars."""

    length: int
    item: Size | None = None
    key: Size | None = None


SCALAR: Final = Size(1)


class CostError(Exception):
    """The expression cannot be bounded, or its bound is over the limit."""


def _sat(value: int) -> int:
    return min(value, _SATURATED)


def join(a: Size | None, b: Size | None) -> Size | None:
    """The smallest bound covering both."""
    if a is None:
        return b
    if b is None:
        return a
    return Size(max(a.length, b.length), join(a.item, b.item), join(a.key, b.key))


def footprint(size: Size | None) -> int:
    """Entries plus bytes, recursively."""
    if size is None:
        return 0
    if size.item is None and size.key is None:
        return size.length
    return _sat(size.length * (1 + footprint(size.item) + footprint(size.key)))


def entries(size: Size | None) -> int:
    if size is None or (size.item is None and size.key is None):
        return 0
    return _sat(size.length * (1 + entries(size.item) + entries(size.key)))


def work(size: Size | None) -> int:
    """Cost of touching every part of a value once."""
    return _sat(1 + footprint(size) // 10 + entries(size))


def _concat(a: Size, b: Size) -> Size:
    return Size(_sat(a.length + b.length), join(a.item, b.item), join(a.key, b.key))


def _element(container: Size) -> Size:
    """What indexing, selecting or unwrapping yields; a value of unknown shape stays as big."""
    return container.item if container.item is not None else container


def _string_of(length: int) -> Size:
    return Size(_sat(length))


def device_sizes() -> dict[str, Size]:
    """Bounds of the ``device`` variables under the ResourceSlice validation limits."""
    n = MAX_ATTRIBUTES_AND_CAPACITIES
    domain, identifier = Size(MAX_DOMAIN_LENGTH), Size(MAX_ID_LENGTH)
    values = Size(n, item=Size(MAX_VALUE_LENGTH), key=identifier)
    quantities = Size(n, item=SCALAR, key=identifier)
    return {
        DRIVER_VAR: Size(MAX_DRIVER_NAME_LENGTH),
        ATTRIBUTES_VAR: Size(n, item=values, key=domain),
        CAPACITY_VAR: Size(n, item=quantities, key=domain),
    }


# -- per-function rules: (receiver and argument sizes, literal arguments) -> (cost, size) ----

Rule = Callable[[list[Size], list[Any]], tuple[int, Size]]


def _scan(args: list[Size], _: list[Any]) -> tuple[int, Size]:
    return _sat(sum(work(a) for a in args)), SCALAR


def _search(args: list[Size], _: list[Any]) -> tuple[int, Size]:
    # Substring and RE2 searches: proportional to text size times needle/pattern size.
    return _sat(work(args[0]) * work(args[-1])), SCALAR


def _same_size(args: list[Size], _: list[Any]) -> tuple[int, Size]:
    return work(args[0]), args[0]


def _constant(_args: list[Size], _: list[Any]) -> tuple[int, Size]:
    return 1, SCALAR


def _identity(args: list[Size], _: list[Any]) -> tuple[int, Size]:
    return 1, args[0] if args else SCALAR


def _element_of(args: list[Size], _: list[Any]) -> tuple[int, Size]:
    return 1, _element(args[0])


def _compare(args: list[Size], _: list[Any]) -> tuple[int, Size]:
    return min(work(args[0]), work(args[1])), SCALAR


def _membership(args: list[Size], _: list[Any]) -> tuple[int, Size]:
    needle, haystack = args
    if haystack.key is not None:
        return work(needle), SCALAR
    return _sat(haystack.length * work(needle)), SCALAR


def _join_all(args: list[Size], _: list[Any]) -> tuple[int, Size]:
    merged = args[0]
    for other in args[1:]:
        merged = join(merged, other) or merged
    return 1, merged


def _list_scan(args: list[Size], _: list[Any]) -> tuple[int, Size]:
    items = args[0]
    cost = _sat(items.length * work(items.item)) + sum(work(a) for a in args[1:])
    return _sat(cost), _element(items)


def _index_of(args: list[Size], literals: list[Any]) -> tuple[int, Size]:
    # One name for two functions: strings extension on strings, lists library on lists.
    return max(_search(args, literals)[0], _list_scan(args, literals)[0]), SCALAR


def _char_at(args: list[Size], _: list[Any]) -> tuple[int, Size]:
    return work(args[0]), Size(4)


def _replace(args: list[Size], literals: list[Any]) -> tuple[int, Size]:
    text, old, new = args[0], args[1], args[2]
    length = text.length
    old_literal = literals[1]
    if isinstance(old_literal, str) and old_literal:
        replacements = length // len(old_literal.encode())
    else:
        replacements = length + 1  # an empty "old" inserts between every character
    if len(literals) > 3 and isinstance(literals[3], int) and literals[3] >= 0:
        replacements = min(replacements, literals[3])
    result = _string_of(length + replacements * new.length)
    return _sat(work(result) + work(text) * work(old)), result


def _split(args: list[Size], _: list[Any]) -> tuple[int, Size]:
    text = args[0]
    result = Size(_sat(text.length + 1), item=Size(text.length))
    return _sat(work(text) + work(result)), result


def _join_strings(args: list[Size], _: list[Any]) -> tuple[int, Size]:
    items = args[0]
    separator = args[1].length if len(args) > 1 else 0
    item_length = items.item.length if items.item is not None else 0
    result = _string_of(items.length * (item_length + separator))
    return work(result), result


def _format(args: list[Size], _: list[Any]) -> tuple[int, Size]:
    template, values = args[0], args[1]
    per_value = 4 * footprint(values.item) + _PRINTED_NUMBER if values.item is not None else 0
    result = _string_of(template.length + values.length * per_value)
    return _sat(work(result) + work(values)), result


def _quote(args: list[Size], _: list[Any]) -> tuple[int, Size]:
    result = _string_of(10 * args[0].length + 2)
    return work(result), result


def _to_string(args: list[Size], _: list[Any]) -> tuple[int, Size]:
    result = _string_of(max(args[0].length, _PRINTED_SCALAR))
    return work(result), result


def _find(args: list[Size], literals: list[Any]) -> tuple[int, Size]:
    return _search(args, literals)[0], Size(args[0].length)


def _find_all(args: list[Size], literals: list[Any]) -> tuple[int, Size]:
    result = Size(_sat(args[0].length + 1), item=Size(args[0].length))
    return _sat(_search(args, literals)[0] + work(result)), result


_RULES: Final[dict[str, Rule]] = {
    # Operators on numbers, bools, timestamps and durations; their results are scalars.
    **dict.fromkeys(("_-_", "_*_", "_/_", "_%_", "-_", "!_", "_&&_", "_||_"), _constant),
    "optional.none": _constant,
    # Constant-time regardless of argument size.
    **dict.fromkeys(
        (
            "size",
            "hasValue",
            "sign",
            "isInteger",
            "asInteger",
            "asApproximateFloat",
            "add",
            "sub",
            "compareTo",
            "isGreaterThan",
            "isLessThan",
            "major",
            "minor",
            "patch",
        ),
        _constant,
    ),
    "_==_": _compare,
    "_!=_": _compare,
    "_<_": _compare,
    "_<=_": _compare,
    "_>_": _compare,
    "_>=_": _compare,
    "@in": _membership,
    "_[_]": _element_of,
    "_[?_]": _element_of,
    "_?._": _element_of,
    "matches": _search,
    "contains": _search,
    "startsWith": _search,
    "endsWith": _search,
    "charAt": _char_at,
    "indexOf": _index_of,
    "lastIndexOf": _index_of,
    "lowerAscii": _same_size,
    "upperAscii": _same_size,
    "trim": _same_size,
    "substring": _same_size,
    "replace": _replace,
    "split": _split,
    "join": _join_strings,
    "format": _format,
    "strings.quote": _quote,
    "string": _to_string,
    "bytes": _same_size,
    "dyn": _identity,
    "optional.of": _identity,
    "optional.ofNonZeroValue": _identity,
    "value": _identity,
    "orValue": _join_all,
    "or": _join_all,
    "isSorted": _list_scan,
    "sum": _list_scan,
    "min": _list_scan,
    "max": _list_scan,
    "find": _find,
    "findAll": _find_all,
}


def _is_scalar_type(type_proto: Any) -> bool:
    """Whether values of a checked type are small and fixed-size (numbers, bools, messages...)."""
    kind = type_proto.WhichOneof("type_kind")
    if kind in ("primitive", "wrapper"):
        return getattr(type_proto, kind) not in (PRIMITIVE_STRING, PRIMITIVE_BYTES)
    if kind == "well_known":
        return bool(type_proto.well_known != WELL_KNOWN_ANY)
    return kind in ("null", "message_type", "type")


_Scope = Mapping[str, Size]


class _Estimator:
    def __init__(
        self, checked: Any, variables: Mapping[str, Size], python_overloads: Collection[str]
    ) -> None:
        self._references = checked.reference_map
        self._python_overloads = python_overloads
        self._types = checked.type_map
        self._variables = variables
        self._memo: dict[tuple[int, tuple[tuple[str, Size], ...], str], tuple[int, Size]] = {}
        self._free: dict[int, frozenset[str]] = {}

    def free_names(self, node: Any) -> frozenset[str]:
        """Identifiers a node reads from enclosing scopes (for memoising its estimate)."""
        known = self._free.get(node.id)
        if known is not None:
            return known
        kind = node.WhichOneof("expr_kind")
        if kind == "ident_expr":
            names = frozenset({node.ident_expr.name})
        elif kind == "comprehension_expr":
            loop = node.comprehension_expr
            bound = {loop.iter_var, loop.iter_var2, loop.accu_var}
            inner: frozenset[str] = frozenset().union(
                *(self.free_names(p) for p in (loop.loop_condition, loop.loop_step, loop.result))
            )
            names = (
                self.free_names(loop.iter_range) | self.free_names(loop.accu_init) | (inner - bound)
            )
        else:
            names = frozenset().union(*(self.free_names(c) for c in checked_ast.children(node)))
        self._free[node.id] = names
        return names

    def visit(self, node: Any, scope: _Scope, accumulator: str) -> tuple[int, Size]:
        relevant = tuple(sorted((n, scope[n]) for n in self.free_names(node) if n in scope))
        key = (node.id, relevant, accumulator if accumulator in self.free_names(node) else "")
        known = self._memo.get(key)
        if known is None:
            known = self._visit(node, scope, accumulator)
            type_proto = self._types.get(node.id)
            if type_proto is not None and _is_scalar_type(type_proto):
                known = (known[0], SCALAR)
            self._memo[key] = known
        return known

    def _visit(self, node: Any, scope: _Scope, accumulator: str) -> tuple[int, Size]:
        kind = node.WhichOneof("expr_kind")
        if kind == "const_expr":
            constant = node.const_expr
            which = constant.WhichOneof("constant_kind")
            if which == "string_value":
                return 0, Size(len(constant.string_value.encode()))
            if which == "bytes_value":
                return 0, Size(len(constant.bytes_value))
            return 0, SCALAR
        if kind == "ident_expr":
            return 1, self._ident(node, scope)
        if kind == "select_expr":
            cost, operand = self.visit(node.select_expr.operand, scope, accumulator)
            if node.select_expr.test_only:
                return cost + 1, SCALAR
            return cost + 1, _element(operand)
        if kind == "list_expr":
            parts = [self.visit(e, scope, accumulator) for e in node.list_expr.elements]
            items: Size | None = None
            for _, size in parts:
                items = join(items, size)
            count = len(parts)
            return _sat(1 + count + sum(c for c, _ in parts)), Size(count, item=items)
        if kind == "struct_expr":
            return self._struct(node, scope, accumulator)
        if kind == "call_expr":
            return self._call(node, scope, accumulator)
        if kind == "comprehension_expr":
            return self._comprehension(node, scope)
        raise CostError(f"cannot estimate the cost of a {kind} node")

    def _ident(self, node: Any, scope: _Scope) -> Size:
        name = node.ident_expr.name
        if name in scope:
            return scope[name]
        reference = self._references.get(node.id)
        resolved = reference.name if reference is not None and reference.name else name
        return self._variables.get(resolved, SCALAR)

    def _struct(self, node: Any, scope: _Scope, accumulator: str) -> tuple[int, Size]:
        cost = 1
        keys: Size | None = None
        values: Size | None = None
        for entry in node.struct_expr.entries:
            if entry.HasField("map_key"):
                key_cost, key_size = self.visit(entry.map_key, scope, accumulator)
                cost += key_cost
                keys = join(keys, key_size)
            value_cost, value_size = self.visit(entry.value, scope, accumulator)
            cost += value_cost + 1
            values = join(values, value_size)
        if node.struct_expr.message_name:
            return _sat(cost), SCALAR
        return _sat(cost), Size(len(node.struct_expr.entries), item=values, key=keys)

    def _call(self, node: Any, scope: _Scope, accumulator: str) -> tuple[int, Size]:
        call = node.call_expr
        operands = ([call.target] if call.HasField("target") else []) + list(call.args)
        estimates = [self.visit(o, scope, accumulator) for o in operands]
        costs = [c for c, _ in estimates]
        sizes = [s for _, s in estimates]
        function = call.function
        if function == "_?_:_":
            return _sat(1 + costs[0] + max(costs[1], costs[2])), join(sizes[1], sizes[2]) or SCALAR
        base = _sat(1 + sum(costs))
        reference = self._references.get(node.id)
        if reference is not None and any(
            o in self._python_overloads for o in reference.overload_id
        ):
            base += PYTHON_CALL_COST
        if function == "_+_":
            appends = (
                operands[0].WhichOneof("expr_kind") == "ident_expr"
                and operands[0].ident_expr.name == accumulator
            )
            result = _concat(sizes[0], sizes[1])
            # A macro's accumulator is appended to in place; anything else is copied.
            return _sat(base + (work(sizes[1]) if appends else work(result))), result
        rule = _RULES.get(function)
        if rule is not None:
            literals = [_literal(o) for o in operands]
            extra, result = rule(sizes, literals)
            return _sat(base + extra), result
        type_proto = self._types.get(node.id)
        if type_proto is not None and _is_scalar_type(type_proto):
            extra, result = _scan(sizes, [])
            return _sat(base + extra), result
        raise CostError(f"cannot bound the result size of function {function!r}")

    def _comprehension(self, node: Any, scope: _Scope) -> tuple[int, Size]:
        loop = node.comprehension_expr
        range_cost, range_size = self.visit(loop.iter_range, scope, "")
        init_cost, initial = self.visit(loop.accu_init, scope, "")
        iterations = range_size.length
        element = range_size.item if range_size.item is not None else range_size
        first = range_size.key if range_size.key is not None else element
        inner = dict(scope)
        inner[loop.iter_var] = first
        if loop.iter_var2:
            inner[loop.iter_var2] = element
        accu = loop.accu_var
        if iterations == 0:
            final = initial
            per_iteration = 0
        else:
            final = self._final_accumulator(loop, inner, initial, iterations)
            inner[accu] = final
            condition_cost, _ = self.visit(loop.loop_condition, inner, accu)
            step_cost, _ = self.visit(loop.loop_step, inner, accu)
            per_iteration = condition_cost + step_cost
        result_scope = dict(scope)
        result_scope[accu] = final
        result_cost, result = self.visit(loop.result, result_scope, "")
        total = 1 + range_cost + init_cost + iterations * per_iteration + result_cost
        return _sat(total), result

    def _final_accumulator(
        self, loop: Any, inner: dict[str, Size], initial: Size, iterations: int
    ) -> Size:
        """The largest accumulator after ``iterations`` steps, if each step adds a bounded size."""
        accu = loop.accu_var
        inner[accu] = initial
        _, after_one = self.visit(loop.loop_step, inner, accu)
        growth = max(0, after_one.length - initial.length)
        probe = Size(initial.length + _GROWTH_PROBE, initial.item, initial.key)
        inner[accu] = probe
        _, after_probe = self.visit(loop.loop_step, inner, accu)
        if after_probe.length - probe.length > growth:
            raise CostError("a comprehension's result grows faster than linearly")
        return Size(
            _sat(initial.length + iterations * growth),
            join(initial.item, after_one.item),
            join(initial.key, after_one.key),
        )


def _literal(node: Any) -> Any:
    text = checked_ast.string_constant(node)
    return text if text is not None else checked_ast.int_constant(node)


def estimate(
    checked: Any,
    python_overloads: Collection[str] = (),
    variables: Mapping[str, Size] | None = None,
) -> int:
    """Worst-case cost of evaluating a checked expression; raises CostError if unbounded.

    ``python_overloads`` are the overload ids implemented in Python, which cost more.
    """
    estimator = _Estimator(
        checked, device_sizes() if variables is None else variables, python_overloads
    )
    cost, _ = estimator.visit(checked.expr, {}, "")
    return cost


def describe(cost: int) -> str:
    if cost >= _SATURATED:
        return "unbounded"
    return f"{cost:,}" if cost < 10**12 else f"about 10^{math.floor(math.log10(cost))}"
