"""Read and rewrite the checked syntax tree that the CEL runtime hands back.

The runtime serialises a compiled expression as a ``google.protobuf.Any`` that
wraps a ``cel.expr.CheckedExpr``. We need that tree for three things the
runtime cannot do for us: estimating the worst-case cost before anything runs,
giving ``device.attributes``/``device.capacity`` their "unknown domain is an
empty map" behaviour, and mapping functions the runtime lacks onto ones it has.

No Python package ships the ``cel.expr`` protos, so the subset we need is
declared here, field numbers matching cel-spec's ``syntax.proto`` and
``checked.proto``. Fields we do not declare survive a parse/serialise round
trip as unknown fields, so the runtime gets back everything it wrote.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

# No type stubs for protobuf are installed with the project; everything here is dynamic anyway.
from google.protobuf import (  # type: ignore[import-untyped,unused-ignore]
    any_pb2,
    descriptor_pb2,
    descriptor_pool,
    message_factory,
)

_Field = descriptor_pb2.FieldDescriptorProto
_PACKAGE = "cel.expr"

# (field name, number, scalar type or ".message", repeated?, oneof index or None)
_FieldRow = tuple[str, int, "int | str", bool, "int | None"]

_S = _Field.TYPE_STRING
_B = _Field.TYPE_BOOL
_I64 = _Field.TYPE_INT64
_I32 = _Field.TYPE_INT32
_U64 = _Field.TYPE_UINT64
_F64 = _Field.TYPE_DOUBLE
_BYTES = _Field.TYPE_BYTES

# Message name -> (oneof names, fields). Nested messages use dotted names.
_MESSAGES: dict[str, tuple[tuple[str, ...], tuple[_FieldRow, ...]]] = {
    "Empty": ((), ()),
    "Expr": (
        ("expr_kind",),
        (
            ("id", 2, _I64, False, None),
            ("const_expr", 3, "Constant", False, 0),
            ("ident_expr", 4, "Expr.Ident", False, 0),
            ("select_expr", 5, "Expr.Select", False, 0),
            ("call_expr", 6, "Expr.Call", False, 0),
            ("list_expr", 7, "Expr.CreateList", False, 0),
            ("struct_expr", 8, "Expr.CreateStruct", False, 0),
            ("comprehension_expr", 9, "Expr.Comprehension", False, 0),
        ),
    ),
    "Expr.Ident": ((), (("name", 1, _S, False, None),)),
    "Expr.Select": (
        (),
        (
            ("operand", 1, "Expr", False, None),
            ("field", 2, _S, False, None),
            ("test_only", 3, _B, False, None),
        ),
    ),
    "Expr.Call": (
        (),
        (
            ("target", 1, "Expr", False, None),
            ("function", 2, _S, False, None),
            ("args", 3, "Expr", True, None),
        ),
    ),
    "Expr.CreateList": (
        (),
        (("elements", 1, "Expr", True, None), ("optional_indices", 2, _I32, True, None)),
    ),
    "Expr.CreateStruct": (
        (),
        (
            ("message_name", 1, _S, False, None),
            ("entries", 2, "Expr.CreateStruct.Entry", True, None),
        ),
    ),
    "Expr.CreateStruct.Entry": (
        ("key_kind",),
        (
            ("id", 1, _I64, False, None),
            ("field_key", 2, _S, False, 0),
            ("map_key", 3, "Expr", False, 0),
            ("value", 4, "Expr", False, None),
            ("optional_entry", 5, _B, False, None),
        ),
    ),
    "Expr.Comprehension": (
        (),
        (
            ("iter_var", 1, _S, False, None),
            ("iter_range", 2, "Expr", False, None),
            ("accu_var", 3, _S, False, None),
            ("accu_init", 4, "Expr", False, None),
            ("loop_condition", 5, "Expr", False, None),
            ("loop_step", 6, "Expr", False, None),
            ("result", 7, "Expr", False, None),
            ("iter_var2", 8, _S, False, None),
        ),
    ),
    "Constant": (
        ("constant_kind",),
        (
            # An enum in the original; the wire encoding is the same varint.
            ("null_value", 1, _I32, False, 0),
            ("bool_value", 2, _B, False, 0),
            ("int64_value", 3, _I64, False, 0),
            ("uint64_value", 4, _U64, False, 0),
            ("double_value", 5, _F64, False, 0),
            ("string_value", 6, _S, False, 0),
            ("bytes_value", 7, _BYTES, False, 0),
        ),
    ),
    "Type": (
        ("type_kind",),
        (
            ("dyn", 1, "Empty", False, 0),
            ("null", 2, _I32, False, 0),
            ("primitive", 3, _I32, False, 0),
            ("wrapper", 4, _I32, False, 0),
            ("well_known", 5, _I32, False, 0),
            ("list_type", 6, "Type.ListType", False, 0),
            ("map_type", 7, "Type.MapType", False, 0),
            ("message_type", 9, _S, False, 0),
            ("type_param", 10, _S, False, 0),
            ("type", 11, "Type", False, 0),
            ("error", 12, "Empty", False, 0),
            ("abstract_type", 14, "Type.AbstractType", False, 0),
        ),
    ),
    "Type.ListType": ((), (("elem_type", 1, "Type", False, None),)),
    "Type.MapType": (
        (),
        (("key_type", 1, "Type", False, None), ("value_type", 2, "Type", False, None)),
    ),
    "Type.AbstractType": (
        (),
        (("name", 1, _S, False, None), ("parameter_types", 2, "Type", True, None)),
    ),
    "Reference": (
        (),
        (("name", 1, _S, False, None), ("overload_id", 3, _S, True, None)),
    ),
    "SourceInfo": (
        (),
        (
            ("location", 2, _S, False, None),
            ("line_offsets", 3, _I32, True, None),
            ("positions", 4, "SourceInfo.PositionsEntry", True, None),
        ),
    ),
    "SourceInfo.PositionsEntry": (
        (),
        (("key", 1, _I64, False, None), ("value", 2, _I32, False, None)),
    ),
    "ParsedExpr": (
        (),
        (("expr", 2, "Expr", False, None), ("source_info", 3, "SourceInfo", False, None)),
    ),
    "CheckedExpr": (
        (),
        (
            ("reference_map", 2, "CheckedExpr.ReferenceMapEntry", True, None),
            ("type_map", 3, "CheckedExpr.TypeMapEntry", True, None),
            ("expr", 4, "Expr", False, None),
            ("source_info", 5, "SourceInfo", False, None),
        ),
    ),
    "CheckedExpr.ReferenceMapEntry": (
        (),
        (("key", 1, _I64, False, None), ("value", 2, "Reference", False, None)),
    ),
    "CheckedExpr.TypeMapEntry": (
        (),
        (("key", 1, _I64, False, None), ("value", 2, "Type", False, None)),
    ),
}


_MAP_ENTRIES = frozenset(
    {"SourceInfo.PositionsEntry", "CheckedExpr.ReferenceMapEntry", "CheckedExpr.TypeMapEntry"}
)


def _build_pool() -> descriptor_pool.DescriptorPool:
    file_proto = descriptor_pb2.FileDescriptorProto(
        name="dra_driver/cel/cel_expr_subset.proto", package=_PACKAGE, syntax="proto3"
    )
    declared: dict[str, descriptor_pb2.DescriptorProto] = {}
    # Parents sort before their nested messages because their names are prefixes.
    for name in sorted(_MESSAGES, key=lambda n: n.count(".")):
        oneofs, fields = _MESSAGES[name]
        parent, _, short = name.rpartition(".")
        holder = declared[parent].nested_type if parent else file_proto.message_type
        message = holder.add(name=short)
        declared[name] = message
        if name in _MAP_ENTRIES:
            message.options.map_entry = True
        for oneof in oneofs:
            message.oneof_decl.add(name=oneof)
        for field_name, number, kind, repeated, oneof_index in fields:
            field = message.field.add(
                name=field_name,
                number=number,
                label=_Field.LABEL_REPEATED if repeated else _Field.LABEL_OPTIONAL,
            )
            if isinstance(kind, str):
                field.type = _Field.TYPE_MESSAGE
                field.type_name = f".{_PACKAGE}.{kind}"
            else:
                field.type = kind
            if oneof_index is not None:
                field.oneof_index = oneof_index
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file_proto)
    return pool


_POOL = _build_pool()


def _message_class(name: str) -> Any:
    return message_factory.GetMessageClass(_POOL.FindMessageTypeByName(f"{_PACKAGE}.{name}"))


CheckedExpr: Any = _message_class("CheckedExpr")
ParsedExpr: Any = _message_class("ParsedExpr")
Expr: Any = _message_class("Expr")

_CHECKED_URL = f"type.googleapis.com/{_PACKAGE}.CheckedExpr"
_PARSED_URL = f"type.googleapis.com/{_PACKAGE}.ParsedExpr"

# cel.expr.Type.PrimitiveType values.
PRIMITIVE_STRING = 5
PRIMITIVE_BYTES = 6
# cel.expr.Type.WellKnownType values.
WELL_KNOWN_ANY = 1


def load_checked(serialized: bytes) -> Any:
    """The CheckedExpr inside the runtime's serialised form."""
    wrapper = any_pb2.Any()
    wrapper.ParseFromString(serialized)
    if wrapper.type_url != _CHECKED_URL:
        raise ValueError(f"expected a checked expression, got {wrapper.type_url!r}")
    checked = CheckedExpr()
    checked.ParseFromString(wrapper.value)
    return checked


def load_parsed(serialized: bytes) -> Any:
    """The ParsedExpr inside the runtime's serialised form of an unchecked expression."""
    wrapper = any_pb2.Any()
    wrapper.ParseFromString(serialized)
    if wrapper.type_url != _PARSED_URL:
        raise ValueError(f"expected a parsed expression, got {wrapper.type_url!r}")
    parsed = ParsedExpr()
    parsed.ParseFromString(wrapper.value)
    return parsed


def dump_checked(checked: Any) -> bytes:
    """Wrap a (possibly rewritten) CheckedExpr the way the runtime expects to read it."""
    wrapper = any_pb2.Any(type_url=_CHECKED_URL, value=checked.SerializeToString())
    return bytes(wrapper.SerializeToString())


def children(expr: Any) -> Iterator[Any]:
    """Direct sub-expressions, in source order where that is defined."""
    kind = expr.WhichOneof("expr_kind")
    if kind == "select_expr":
        yield expr.select_expr.operand
    elif kind == "call_expr":
        call = expr.call_expr
        if call.HasField("target"):
            yield call.target
        yield from call.args
    elif kind == "list_expr":
        yield from expr.list_expr.elements
    elif kind == "struct_expr":
        for entry in expr.struct_expr.entries:
            if entry.HasField("map_key"):
                yield entry.map_key
            yield entry.value
    elif kind == "comprehension_expr":
        loop = expr.comprehension_expr
        yield loop.iter_range
        yield loop.accu_init
        yield loop.loop_condition
        yield loop.loop_step
        yield loop.result


def walk(expr: Any) -> Iterator[Any]:
    """Every node of the tree, parents before children."""
    stack = [expr]
    while stack:
        node = stack.pop()
        yield node
        stack.extend(reversed(list(children(node))))


def max_id(expr: Any) -> int:
    return max(int(node.id) for node in walk(expr))


def string_constant(expr: Any) -> str | None:
    """The value of a string literal node, else None."""
    if expr.WhichOneof("expr_kind") == "const_expr":
        constant = expr.const_expr
        if constant.WhichOneof("constant_kind") == "string_value":
            return str(constant.string_value)
    return None


def int_constant(expr: Any) -> int | None:
    """The value of an int literal node, else None."""
    if expr.WhichOneof("expr_kind") == "const_expr":
        constant = expr.const_expr
        if constant.WhichOneof("constant_kind") == "int64_value":
            return int(constant.int64_value)
    return None


@dataclass(frozen=True)
class SourcePosition:
    """1-based line and column, counted in code points as the runtime reports them."""

    line: int
    column: int

    def __str__(self) -> str:
        return f"line {self.line}, column {self.column}"


def position_of(source_info: Any, expr_id: int) -> SourcePosition | None:
    """Where a node starts in the source text, when the runtime recorded it."""
    offsets = dict(source_info.positions.items()) if source_info is not None else {}
    offset = offsets.get(expr_id)
    if offset is None or offset < 0:
        return None
    line_starts = [0, *source_info.line_offsets]
    line = 1
    for index, start in enumerate(line_starts):
        if start <= offset:
            line = index + 1
    return SourcePosition(line=line, column=offset - line_starts[line - 1] + 1)


def regex_probe(pattern: str) -> Any:
    """A tree for ``"".matches(pattern)``: evaluating it tells whether RE2 accepts the pattern."""
    checked = CheckedExpr()
    checked.expr.id = 1
    call = checked.expr.call_expr
    call.function = "matches"
    call.target.id = 2
    call.target.const_expr.string_value = ""
    argument = call.args.add(id=3)
    argument.const_expr.string_value = pattern
    return checked
