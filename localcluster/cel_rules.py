"""`x-kubernetes-validations`: a CRD schema's CEL rules, evaluated on custom objects.

The project's CEL runtime (`dra_driver.cel`) is built for device selectors, but its runtime
wrapper takes any variables, so rules get `self` (and `oldSelf` in transition rules) as `dyn`
with the same libraries the driver uses (quantities, semantic versions, lists, regexes, the
strings extension, optionals), which covers what Kubernetes offers CRD rules apart from URLs,
IPs/CIDRs, sets and `format.*`.

How this differs from kube-apiserver, and why it is good enough for a test harness:
* `self` is `dyn`, not typed from the schema: a rule with a type error compiles here and fails
  when evaluated (upstream refuses the CRD);
* no cost estimate or cost budget (the runtime bounds comprehensions itself): upstream refuses
  a CRD whose rule or messageExpression it cannot bound, such as one joining `string(self.x)`
  (an integer's text has no known size) into a message;
* `oldSelf` follows objects' properties and maps' keys only (upstream also follows the items
  of `x-kubernetes-list-type: map` lists); a transition rule is skipped where no old value is
  found, as upstream skips it on create;
* root-level rules see `metadata` reduced to `name` and `generateName`, as upstream.

What a failed rule says is upstream's: the field (`fieldPath` resolved against the schema, a
map's key as `[key]`, the root as `<nil>`), and the message for the rule's `reason` (a
scalar's value is shown, an object's or list's is not; a duplicate names the value only).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final

from dra_driver.cel import checked_ast
from dra_driver.cel.environment import LIBRARIES
from dra_driver.cel.rewrite import RewriteError, rewrite
from dra_driver.cel.runtime import Program, Runtime, RuntimeCompileError
from dra_driver.cel.value_types import POOL
from localcluster.errors import StatusCause
from localcluster.openapi_schema import Schema, child, index, shown

RULES: Final = "x-kubernetes-validations"
_OLD_SELF = re.compile(r"\boldSelf\b")
_OVERLOADS: Final = frozenset(
    o.id for library in LIBRARIES for function in library.functions for o in function.overloads
)


class RuleCompileError(Exception):
    """A rule or messageExpression that does not compile."""


@functools.cache
def _runtime() -> Runtime:
    return Runtime(
        variables={"self": "dyn", "oldSelf": "dyn"}, libraries=LIBRARIES, descriptor_pool=POOL
    )


@functools.lru_cache(maxsize=1024)
def compile_rule(expression: str) -> Program:
    """The loaded program for one rule (cached by text); RuleCompileError if unusable."""
    runtime = _runtime()
    try:
        serialized, _ = runtime.check(expression)
        rewritten = rewrite(checked_ast.load_checked(serialized), _OVERLOADS)
        return runtime.load(checked_ast.dump_checked(rewritten.checked))
    except (RuntimeCompileError, RewriteError) as failure:
        raise RuleCompileError(str(failure)) from None


def evaluate(expression: str, variables: Mapping[str, Any]) -> Any:
    """The rule's value for these variables; raises RuntimeError when evaluation fails."""
    program = compile_rule(expression)
    return program.value(_runtime().activation(variables))


@dataclass(frozen=True)
class _Node:
    schema: Schema
    value: Any
    old: Any
    has_old: bool
    path: str


def _walk(node: _Node) -> Iterator[_Node]:
    yield node
    value, schema = node.value, node.schema
    if isinstance(value, dict):
        properties = schema.get("properties") or {}
        additional = schema.get("additionalProperties")
        old = node.old if isinstance(node.old, dict) else {}
        for key, item in value.items():
            if not node.path and key in ("apiVersion", "kind", "metadata"):
                continue
            # A property is named as a field (`spec.limit`), a map's entry as a key
            # (`spec.limit[gpu]`), as kube-apiserver's CEL validator names them.
            if key in properties:
                sub, path = properties[key], child(node.path, key)
            else:
                sub, path = additional, index(node.path, key)
            if isinstance(sub, Mapping):
                yield from _walk(_Node(sub, item, old.get(key), node.has_old and key in old, path))
    elif isinstance(value, list) and isinstance(schema.get("items"), Mapping):
        for position, item in enumerate(value):
            yield from _walk(_Node(schema["items"], item, None, False, index(node.path, position)))


def _root_view(obj: Mapping[str, Any]) -> dict[str, Any]:
    meta = obj.get("metadata") or {}
    view = dict(obj)
    view["metadata"] = {k: meta[k] for k in ("name", "generateName") if k in meta}
    return view


def check_rules(
    schema: Schema, obj: Mapping[str, Any], old: Mapping[str, Any] | None
) -> list[StatusCause]:
    """A cause for every rule that does not hold (or cannot be evaluated) on `obj`."""
    problems: list[StatusCause] = []
    root = _Node(schema, _root_view(obj), _root_view(old or {}), old is not None, "")
    for node in _walk(root):
        for rule in node.schema.get(RULES) or ():
            cause = _check_one(rule, node)
            if cause is not None:
                problems.append(cause)
    return problems


def _check_one(rule: Mapping[str, Any], node: _Node) -> StatusCause | None:
    text = str(rule.get("rule", ""))
    variables: dict[str, Any] = {"self": node.value}
    if _OLD_SELF.search(text):
        if not node.has_old:
            return None  # a transition rule: nothing to compare with
        variables["oldSelf"] = node.old
    path = node.path
    if rule.get("fieldPath"):
        path = field_path(node.schema, node.path, str(rule["fieldPath"]))
    path = path or ROOT
    reason = str(rule.get("reason") or "FieldValueInvalid")
    try:
        result = evaluate(text, variables)
    except (RuntimeError, RuleCompileError) as failure:
        return StatusCause(f"Invalid value: {shown(node.value)}: {failure}", path, reason)
    if result is True:
        return None
    return _failed(reason, node.value, _message(rule, variables), path)


#: How kube-apiserver names the root of a custom object in the cause of a rule that fails there.
ROOT: Final = "<nil>"
_FIELD_PATH_TOKEN = re.compile(r"'(?:[^'\\]|\\.)*'|[.\[\]]|[^.\[\]']+")


def field_path(schema: Schema, base: str, relative: str) -> str:
    """A rule's `fieldPath` (`.limit.gpu`, `.limit['gpu']`) from the rule's own field, named as
    kube-apiserver names it (`ValidFieldPath`): a property as a field, a map's key as a key
    (`spec.limit[gpu]`)."""
    path = base
    for token in _FIELD_PATH_TOKEN.findall(relative):
        if token in ".[]":
            continue
        name = token
        if token.startswith("'"):
            name = re.sub(r"\\(.)", r"\1", token[1:-1])
        properties = schema.get("properties")
        additional = schema.get("additionalProperties")
        if isinstance(properties, Mapping):
            path = child(path, name)
            found = properties.get(name)
        else:
            path = index(path, name)
            found = additional
        schema = found if isinstance(found, Mapping) else {}
    return path


def _failed(reason: str, value: Any, message: str, path: str) -> StatusCause:
    """The cause of a rule that does not hold, worded as kube-apiserver words it for the rule's
    `reason`: a duplicate names the value (not the message), an invalid value shows scalars but
    not objects and lists."""
    if reason == "FieldValueForbidden":
        return StatusCause(f"Forbidden: {message}", path, reason)
    if reason == "FieldValueRequired":
        return StatusCause(f"Required value: {message}", path, reason)
    if reason == "FieldValueDuplicate":
        return StatusCause(f"Duplicate value: {shown(value)}", path, reason)
    if isinstance(value, (Mapping, list)):
        return StatusCause(f"Invalid value: {message}", path, reason)
    return StatusCause(f"Invalid value: {shown(value)}: {message}", path, reason)


def has_rules(schema: Schema) -> bool:
    """Whether `schema` or any schema under it has `x-kubernetes-validations`."""
    if schema.get(RULES):
        return True
    subs = [*(schema.get("properties") or {}).values()]
    subs += [schema.get("items"), schema.get("additionalProperties")]
    return any(isinstance(sub, Mapping) and has_rules(sub) for sub in subs)


def _message(rule: Mapping[str, Any], variables: Mapping[str, Any]) -> str:
    expression = rule.get("messageExpression")
    if expression:
        try:
            text = evaluate(str(expression), variables)
        except (RuntimeError, RuleCompileError):
            text = None
        if isinstance(text, str) and text.strip():
            return text
    if rule.get("message"):
        return str(rule["message"])
    return f"failed rule: {rule.get('rule', '')}"


def rule_problems(schema: Schema, path: str) -> Iterator[tuple[str, str]]:
    """(field, message) for each rule or messageExpression in `schema` that does not compile."""
    for position, rule in enumerate(schema.get(RULES) or ()):
        where = f"{path}.{RULES}[{position}]"
        for key in ("rule", "messageExpression"):
            text = rule.get(key) if isinstance(rule, Mapping) else None
            if isinstance(text, str) and text:
                try:
                    compile_rule(text)
                except RuleCompileError as failure:
                    yield (
                        f"{where}.{key}",
                        f"Invalid value: {text!r}: compilation failed: {failure}",
                    )
    for key in ("properties", "additionalProperties", "items"):
        sub = schema.get(key)
        if key == "properties" and isinstance(sub, Mapping):
            for name, prop in sub.items():
                if isinstance(prop, Mapping):
                    yield from rule_problems(prop, f"{path}.properties[{name}]")
        elif isinstance(sub, Mapping):
            yield from rule_problems(sub, f"{path}.{key}")
