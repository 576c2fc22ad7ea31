"""Adjust a checked syntax tree so the runtime evaluates it the way Kubernetes would.

The rewrites, each for a behaviour the runtime lacks:

* Unknown domains. In Kubernetes, looking up a domain that a device does not
  have in ``device.attributes``/``device.capacity`` gives an empty map, while
  ``in``, ``size()`` and iteration see only the domains present. Plain maps
  cannot default, so each *lookup* ``M[k]`` / ``M.k`` becomes
  ``M[?k].orValue({})`` (and ``M[?k]`` becomes ``optional.of(...)`` of that),
  leaving every other use of ``M`` untouched. Lookups through a ``cel.bind``
  alias of ``M`` are covered too; ``has(M.k)`` is true, as it is there.
* ``has(device.driver)`` and friends: the runtime's checker resolves the
  qualified name and forgets the presence test (the "has" takes the field's
  type), so before checking, ``patch_field_presence_tests`` overwrites such
  calls in the source text with ``true`` padded to the same length, which
  keeps every reported position valid. The fields always exist.
* Our library calls whose overload the checker pinned down are pointed at
  the evaluator's exact implementation (``@<overload id>``), so results keep
  their declared types (``[1.0].filter(x, false).sum()`` is ``0.0``).
* ``find``/``findAll`` become the runtime's RE2 extension calls.
* ``quantity("40Gi")`` and ``semver("1.2.3")`` with a valid literal become
  message literals, and comparisons whose overload the checker resolved
  (``a.isGreaterThan(b)``, ``a.compareTo(b) >= 0``) become native comparisons
  of the values' order keys (see ``value_types.py``). Each call into Python
  costs tens of microseconds; these are the comparisons selectors make most.

Problems found here (a non-literal ``find`` pattern, constructing our internal
message types) are reported as ``RewriteError`` with the node's id.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any, Final

from api.errors import ConfigError
from dra_driver.cel import checked_ast, quantity_lib, semver_lib
from dra_driver.cel.checked_ast import Expr, string_constant
from dra_driver.cel.device_value import ATTRIBUTES_VAR, CAPACITY_VAR, VARIABLE_TYPES
from dra_driver.cel.regex_lib import TAKE, without_capture_groups
from dra_driver.cel.runtime import internal_name
from dra_driver.cel.value_types import ORDER_KEY_FIELD, QUANTITY_TYPE, SEMVER_TYPE

DOMAIN_MAPS: Final = frozenset({ATTRIBUTES_VAR, CAPACITY_VAR})
_DEVICE_ROOT: Final = "device"

INDEX: Final = "_[_]"
OPTIONAL_INDEX: Final = "_[?_]"
OPTIONAL_SELECT: Final = "_?._"

# Our value types are opaque in Kubernetes; their fields are an implementation detail.
_HIDDEN_MESSAGES: Final = frozenset({QUANTITY_TYPE, SEMVER_TYPE})

# Overloads whose meaning is a comparison of order keys.
_ORDERED_TYPES: Final = ("quantity", "semver")
_GREATER_THAN: Final = frozenset(f"{t}_isGreaterThan_{t}" for t in _ORDERED_TYPES)
_LESS_THAN: Final = frozenset(f"{t}_isLessThan_{t}" for t in _ORDERED_TYPES)
_COMPARE_TO: Final = frozenset(internal_name(f"{t}_compareTo_{t}") for t in _ORDERED_TYPES)
# `compareTo(...) OP 0` and `0 OP compareTo(...)` as a comparison of the two values.
_RELATIONS: Final = {"_<_": "_>_", "_<=_": "_>=_", "_>_": "_<_", "_>=_": "_<=_"}
_SYMMETRIC: Final = ("_==_", "_!=_")


class RewriteError(Exception):
    def __init__(self, message: str, expr_id: int) -> None:
        super().__init__(message)
        self.message = message
        self.expr_id = expr_id


class _Rewriter:
    def __init__(self, checked: Any, exact: Collection[str]):
        self._references = checked.reference_map
        self._types = checked.type_map
        self._exact = exact
        self._next_id = checked_ast.max_id(checked.expr) + 1
        self.regex_patterns: list[tuple[str, int]] = []

    # -- building nodes -------------------------------------------------------------------

    def _new(self) -> Any:
        node = Expr(id=self._next_id)
        self._next_id += 1
        return node

    def _string(self, value: str) -> Any:
        node = self._new()
        node.const_expr.string_value = value
        return node

    def _call(self, function: str, *args: Any, target: Any = None) -> Any:
        node = self._new()
        node.call_expr.function = function
        if target is not None:
            node.call_expr.target.CopyFrom(target)
        for arg in args:
            node.call_expr.args.add().CopyFrom(arg)
        return node

    def _empty_map(self) -> Any:
        node = self._new()
        node.struct_expr.SetInParent()
        return node

    def _domain_lookup(self, domain_map: Any, key: Any) -> Any:
        """``M[?key].orValue({})``: the domain's map, or an empty one."""
        found = self._call(OPTIONAL_INDEX, domain_map, key)
        return self._call("orValue", self._empty_map(), target=found)

    def _replace(self, node: Any, replacement: Any) -> None:
        """Swap a node's content, keeping its id (and so its source position)."""
        expr_id = node.id
        node.CopyFrom(replacement)
        node.id = expr_id
        # The checker's resolution described the old node; leave the runtime to resolve anew.
        if expr_id in self._references:
            del self._references[expr_id]

    # -- inspecting nodes -----------------------------------------------------------------

    def _is_domain_map(self, node: Any, aliases: frozenset[str]) -> bool:
        if node.WhichOneof("expr_kind") != "ident_expr":
            return False
        name = node.ident_expr.name
        # Local names cannot contain dots, so they never shadow the qualified variables.
        return name in aliases or name in DOMAIN_MAPS

    def _overloads(self, node: Any) -> list[str]:
        reference = self._references.get(node.id)
        return list(reference.overload_id) if reference is not None else []

    # -- the walk -------------------------------------------------------------------------

    def visit(self, node: Any, aliases: frozenset[str]) -> None:
        kind = node.WhichOneof("expr_kind")
        if kind == "comprehension_expr":
            self._visit_comprehension(node, aliases)
            return
        if kind == "struct_expr" and node.struct_expr.message_name:
            raise RewriteError(
                f"creating messages ({node.struct_expr.message_name}) is not supported", node.id
            )
        for child in checked_ast.children(node):
            self.visit(child, aliases)
        if kind == "select_expr":
            self._visit_select(node, aliases)
        elif kind == "call_expr":
            self._visit_call(node, aliases)

    def _bool(self, value: bool) -> Any:
        node = self._new()
        node.const_expr.bool_value = value
        return node

    def _visit_comprehension(self, node: Any, aliases: frozenset[str]) -> None:
        loop = node.comprehension_expr
        self.visit(loop.iter_range, aliases)
        self.visit(loop.accu_init, aliases)
        inner = aliases - {loop.iter_var, loop.iter_var2, loop.accu_var}
        # cel.bind(name, init, body) expands to a loop over [] whose accumulator is `name`.
        binds_domain_map = (
            loop.iter_range.WhichOneof("expr_kind") == "list_expr"
            and not loop.iter_range.list_expr.elements
            and self._is_domain_map(loop.accu_init, aliases)
        )
        if binds_domain_map:
            inner = inner | {loop.accu_var}
        for part in (loop.loop_condition, loop.loop_step, loop.result):
            self.visit(part, inner)

    def _visit_select(self, node: Any, aliases: frozenset[str]) -> None:
        select = node.select_expr
        operand_type = self._types.get(select.operand.id)
        if operand_type is not None and operand_type.message_type in _HIDDEN_MESSAGES:
            raise RewriteError(
                f"{operand_type.message_type} has no field {select.field!r}", node.id
            )
        if not self._is_domain_map(select.operand, aliases):
            return
        if select.test_only:
            self._replace(node, self._bool(True))
        else:
            self._replace(node, self._domain_lookup(select.operand, self._string(select.field)))

    def _visit_call(self, node: Any, aliases: frozenset[str]) -> None:
        call = node.call_expr
        function = call.function
        if function in (INDEX, OPTIONAL_INDEX, OPTIONAL_SELECT) and self._is_domain_map(
            call.args[0], aliases
        ):
            lookup = self._domain_lookup(call.args[0], call.args[1])
            if function != INDEX:
                lookup = self._call("optional.of", lookup)
            self._replace(node, lookup)
            return
        if function in ("find", "findAll"):
            self._rewrite_find(node)
            return
        if function == "matches" and len(call.args) >= 1:
            pattern = string_constant(call.args[-1])
            if pattern is not None:
                self.regex_patterns.append((pattern, call.args[-1].id))
        folded = self._fold_constant(node)
        if folded is not None:
            self._replace(node, folded)
            return
        overloads = self._overloads(node)
        if len(overloads) == 1 and overloads[0] in _GREATER_THAN | _LESS_THAN:
            relation = "_>_" if overloads[0] in _GREATER_THAN else "_<_"
            self._replace(node, self._compare_keys(relation, call.target, call.args[0]))
            return
        if self._rewrite_compare_to_zero(node):
            return
        if len(overloads) == 1 and overloads[0] in self._exact:
            call.function = internal_name(overloads[0])
            del self._references[node.id]

    def _key_of(self, value: Any) -> Any:
        node = self._new()
        node.select_expr.operand.CopyFrom(value)
        node.select_expr.field = ORDER_KEY_FIELD
        return node

    def _compare_keys(self, relation: str, left: Any, right: Any) -> Any:
        return self._call(relation, self._key_of(left), self._key_of(right))

    def _rewrite_compare_to_zero(self, node: Any) -> bool:
        """``a.compareTo(b) >= 0`` as ``a.key >= b.key``, when ``compareTo`` was resolved."""
        call = node.call_expr
        relation = call.function
        if len(call.args) != 2 or (relation not in _RELATIONS and relation not in _SYMMETRIC):
            return False
        left, right = call.args
        if checked_ast.int_constant(left) == 0:
            left, right, relation = right, left, _RELATIONS.get(relation, relation)
        if checked_ast.int_constant(right) != 0 or left.WhichOneof("expr_kind") != "call_expr":
            return False
        if left.call_expr.function not in _COMPARE_TO:
            return False
        compared = left.call_expr
        self._replace(node, self._compare_keys(relation, compared.target, compared.args[0]))
        return True

    def _rewrite_find(self, node: Any) -> None:
        call = node.call_expr
        pattern_node = call.args[0]
        pattern = string_constant(pattern_node)
        if pattern is None:
            raise RewriteError(
                f"the pattern given to {call.function} must be a string literal", pattern_node.id
            )
        self.regex_patterns.append((pattern, pattern_node.id))
        target = call.target
        plain = self._string(without_capture_groups(pattern))
        if call.function == "find":
            extracted = self._call("regex.extract", target, plain)
            self._replace(node, self._call("orValue", self._string(""), target=extracted))
            return
        every = self._call("regex.extractAll", target, plain)
        if len(call.args) == 2:
            every = self._call(TAKE, every, call.args[1])
        self._replace(node, every)

    # -- constant folding -----------------------------------------------------------------

    def _message(self, type_name: str, fields: list[tuple[str, Any]]) -> Any:
        node = self._new()
        node.struct_expr.message_name = type_name
        for name, value in fields:
            entry = node.struct_expr.entries.add(id=self._next_id, field_key=name)
            self._next_id += 1
            entry.value.CopyFrom(value)
        return node

    def _uint(self, value: int) -> Any:
        node = self._new()
        node.const_expr.uint64_value = value
        return node

    def _fold_constant(self, node: Any) -> Any | None:
        call = node.call_expr
        if call.HasField("target") or not call.args:
            return None
        text = string_constant(call.args[0])
        if text is None:
            return None
        folders: dict[str, Callable[[str], Any]] = {
            "quantity": self._fold_quantity,
            "semver": self._fold_semver,
        }
        folder = folders.get(call.function)
        if folder is None or len(call.args) != 1:
            return None
        return folder(text)

    def _fold_quantity(self, text: str) -> Any | None:
        try:
            value = quantity_lib.parse_value(text)
        except ConfigError:
            return None  # left to fail at run time, as in Kubernetes
        return self._literal_of(QUANTITY_TYPE, quantity_lib.quantity_message(value))

    def _fold_semver(self, text: str) -> Any | None:
        try:
            version = semver_lib.parse_semver(text)
        except ValueError:
            return None
        return self._literal_of(SEMVER_TYPE, semver_lib.semver_message(version))

    def _literal_of(self, type_name: str, message: Any) -> Any:
        """A message literal with the same set fields as ``message``."""
        fields: list[tuple[str, Any]] = []
        for descriptor, value in message.ListFields():
            if isinstance(value, str):
                fields.append((descriptor.name, self._string(value)))
            elif isinstance(value, int):
                fields.append((descriptor.name, self._uint(value)))
            else:  # repeated strings
                items = self._new()
                for element in value:
                    items.list_expr.elements.add().CopyFrom(self._string(element))
                fields.append((descriptor.name, items))
        return self._message(type_name, fields)


_PRESENCE_ARGUMENT = re.compile(r"\(\s*device\s*\.\s*[A-Za-z_][A-Za-z0-9_]*\s*\)")


def _field_presence_tests(node: Any, shadowed: bool, found: list[int]) -> None:
    """Ids of ``has(device.<field>)`` nodes where ``device`` is not a loop variable."""
    kind = node.WhichOneof("expr_kind")
    if kind == "comprehension_expr":
        loop = node.comprehension_expr
        _field_presence_tests(loop.iter_range, shadowed, found)
        _field_presence_tests(loop.accu_init, shadowed, found)
        inner = shadowed or _DEVICE_ROOT in (loop.iter_var, loop.iter_var2, loop.accu_var)
        for part in (loop.loop_condition, loop.loop_step, loop.result):
            _field_presence_tests(part, inner, found)
        return
    if kind == "select_expr" and not shadowed:
        select = node.select_expr
        operand = select.operand
        if (
            select.test_only
            and operand.WhichOneof("expr_kind") == "ident_expr"
            and operand.ident_expr.name == _DEVICE_ROOT
            and f"{_DEVICE_ROOT}.{select.field}" in VARIABLE_TYPES
        ):
            found.append(node.id)
    for child in checked_ast.children(node):
        _field_presence_tests(child, shadowed, found)


def patch_field_presence_tests(text: str, parsed: Any) -> str:
    """``text`` with each ``has(device.<field>)`` replaced by an equally long ``true``."""
    offsets = dict(parsed.source_info.positions.items())
    found: list[int] = []
    _field_presence_tests(parsed.expr, False, found)
    patched = text
    for expr_id in found:
        # The parser places the macro's node at its opening parenthesis.
        opening = offsets.get(expr_id, -1)
        argument = _PRESENCE_ARGUMENT.match(patched, opening) if opening >= 0 else None
        before = patched[:opening].rstrip()
        if argument is None or not before.endswith("has"):
            continue
        start = len(before) - len("has")
        end = argument.end()
        patched = patched[:start] + "true".ljust(end - start) + patched[end:]
    return patched


@dataclass(frozen=True)
class Rewritten:
    checked: Any
    regex_patterns: tuple[tuple[str, int], ...]


def rewrite(checked: Any, exact_overloads: Collection[str]) -> Rewritten:
    """A rewritten copy of ``checked``; raises RewriteError for unsupported constructs."""
    result = checked_ast.CheckedExpr()
    result.CopyFrom(checked)
    rewriter = _Rewriter(result, exact_overloads)
    rewriter.visit(result.expr, frozenset())
    return Rewritten(checked=result, regex_patterns=tuple(rewriter.regex_patterns))
