"""Protobuf message types that carry quantities and semantic versions through CEL.

The CEL runtime cannot hold arbitrary Python objects, but it can hold protobuf
messages and compares them field by field. Each message therefore stores a
*canonical* form of its value (a reduced fraction; the precedence-relevant
parts of a version), so the runtime's own ``==`` compares by value:
``quantity("1Gi") == quantity("1024Mi")``, and build metadata is ignored as
semver 2.0.0 requires.

Each message also has a ``key``: a string whose byte order is the value's
order, so that ``rewrite.py`` can turn comparisons whose types the checker
knows (``isGreaterThan``, ``compareTo(...) >= 0``) into native string
comparisons instead of calls into Python, which cost far more.

The package is ``kubernetes`` so that type names in error messages read as
they do in Kubernetes (``kubernetes.Quantity``). The messages live in a private
descriptor pool and never clash with other protobuf users in the process.
"""

from __future__ import annotations

from typing import Any, Final

from google.protobuf import (  # type: ignore[import-untyped,unused-ignore]
    descriptor_pb2,
    descriptor_pool,
    message_factory,
)

_Field = descriptor_pb2.FieldDescriptorProto

QUANTITY_TYPE: Final = "kubernetes.Quantity"
SEMVER_TYPE: Final = "kubernetes.Semver"


def _build_pool() -> descriptor_pool.DescriptorPool:
    file_proto = descriptor_pb2.FileDescriptorProto(
        name="dra_driver/cel/value_types.proto", package="kubernetes", syntax="proto3"
    )
    optional = _Field.LABEL_OPTIONAL
    quantity = file_proto.message_type.add(name="Quantity")
    # Decimal strings: values such as 1e100 do not fit a 64-bit integer.
    quantity.field.add(name="numerator", number=1, type=_Field.TYPE_STRING, label=optional)
    quantity.field.add(name="denominator", number=2, type=_Field.TYPE_STRING, label=optional)
    quantity.field.add(name="key", number=3, type=_Field.TYPE_STRING, label=optional)
    semver = file_proto.message_type.add(name="Semver")
    semver.field.add(name="major", number=1, type=_Field.TYPE_UINT64, label=optional)
    semver.field.add(name="minor", number=2, type=_Field.TYPE_UINT64, label=optional)
    semver.field.add(name="patch", number=3, type=_Field.TYPE_UINT64, label=optional)
    semver.field.add(
        name="prerelease", number=4, type=_Field.TYPE_STRING, label=_Field.LABEL_REPEATED
    )
    semver.field.add(name="key", number=5, type=_Field.TYPE_STRING, label=optional)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file_proto)
    return pool


POOL: Final = _build_pool()

QuantityMessage: Any = message_factory.GetMessageClass(POOL.FindMessageTypeByName(QUANTITY_TYPE))
SemverMessage: Any = message_factory.GetMessageClass(POOL.FindMessageTypeByName(SEMVER_TYPE))

# The field holding the order-preserving key in both messages.
ORDER_KEY_FIELD: Final = "key"
