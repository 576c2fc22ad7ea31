"""Compile and evaluate DRA device selectors the way Kubernetes does.

``CelEnvironment.compile`` runs the whole pipeline once per distinct
expression and caches the outcome (including failures, so a bad selector
seen by every scheduling attempt is not recompiled each time):

1. refuse expressions longer than ``max_expression_bytes`` (UTF-8);
2. parse, turn ``has(device.<field>)`` into ``true`` (see ``rewrite.py``),
   and type-check against the ``device`` variables and our libraries; the
   result must be ``bool`` or ``dyn`` (a ``dyn`` is checked at evaluation);
3. bound the worst-case cost statically (see ``cost.py``) and refuse
   expressions over ``cost_limit``;
4. rewrite the tree for Kubernetes semantics (see ``rewrite.py``) and check
   every literal regular expression with RE2;
5. load it into the evaluator.

Evaluation is bounded by step 3: the runtime cannot be interrupted or
metered, so nothing that could run long or build large values gets that far.
"""

from __future__ import annotations

import functools
import threading
from collections import OrderedDict
from typing import Any, Final

from dra_driver.cel import checked_ast, messages
from dra_driver.cel.cost import CostError, describe, estimate
from dra_driver.cel.device_value import VARIABLE_TYPES, DeviceVariable
from dra_driver.cel.errors import CelCompileError, CelRuntimeError
from dra_driver.cel.library import Library
from dra_driver.cel.lists_lib import LISTS_LIBRARY
from dra_driver.cel.quantity_lib import QUANTITY_LIBRARY
from dra_driver.cel.regex_lib import REGEX_LIBRARY
from dra_driver.cel.rewrite import RewriteError, patch_field_presence_tests, rewrite
from dra_driver.cel.runtime import RESULT_BOOL, RESULT_DYN, Program, Runtime, RuntimeCompileError
from dra_driver.cel.semver_lib import SEMVER_LIBRARY
from dra_driver.cel.value_types import POOL

LIBRARIES: Final[tuple[Library, ...]] = (
    QUANTITY_LIBRARY,
    SEMVER_LIBRARY,
    LISTS_LIBRARY,
    REGEX_LIBRARY,
)

# Kubernetes' limits for DRA selectors (resource.k8s.io CELSelectorExpressionMaxCost/-Length).
DEFAULT_COST_LIMIT: Final = 1_000_000
DEFAULT_MAX_EXPRESSION_BYTES: Final = 10 * 1024

# Distinct selectors kept compiled; far more than a cluster's DeviceClasses and claims use.
_CACHE_SIZE: Final = 4096

_EXACT_OVERLOADS: Final = frozenset(
    overload.id
    for library in LIBRARIES
    for function in library.functions
    for overload in function.overloads
)
# find/findAll are rewritten onto the runtime's native RE2 functions.
_PYTHON_OVERLOADS: Final = _EXACT_OVERLOADS - {
    overload.id for function in REGEX_LIBRARY.functions for overload in function.overloads
}


@functools.cache
def _runtime() -> Runtime:
    """One runtime for all environments: it depends only on the variables and libraries."""
    return Runtime(variables=VARIABLE_TYPES, libraries=LIBRARIES, descriptor_pool=POOL)


@functools.lru_cache(maxsize=1024)
def _regex_problem(pattern: str) -> str | None:
    """RE2's complaint about a pattern, or None when it compiles."""
    runtime = _runtime()
    try:
        probe = runtime.load(checked_ast.dump_checked(checked_ast.regex_probe(pattern)))
    except RuntimeCompileError as failure:
        return messages.runtime_failure(failure.text)
    outcome = probe.run(runtime.activation({}))
    return None if outcome.error is None else messages.runtime_failure(outcome.error)


@functools.lru_cache(maxsize=1024)
def validation_problem(expression: str) -> str | None:
    """What kube-apiserver's validation of a selector says when it does not type-check
    (`validateCELSelector`: "compilation failed: ..." with the checker's report, or a result
    that is not bool), None when it does. Only the checker runs: kube-apiserver bounds cost with
    cel-go's estimator, whose numbers ours do not reproduce, so cost is the allocator's to
    refuse (`CelEnvironment.compile`), and so are trees nested deeper than the runtime parses."""
    runtime = _runtime()
    try:
        parsed = checked_ast.load_parsed(runtime.parse(expression))
        _, result_type = runtime.check(patch_field_presence_tests(expression, parsed))
    except RuntimeCompileError as failure:
        if messages.too_deep(failure.text):
            return None  # cel-go parses deeper trees than the runtime: not refused upstream
        return f"compilation failed: {messages.compile_report(failure.text)}"
    if result_type not in (RESULT_BOOL, RESULT_DYN):
        return f"must evaluate to bool or the unknown type, not {messages.type_name(result_type)}"
    return _bad_matches_pattern(expression, parsed)


def _bad_matches_pattern(expression: str, parsed: Any) -> str | None:
    """cel-go's report for a literal `matches` pattern RE2 refuses (it compiles the pattern
    when it plans the program). A bad literal of `find`/`findAll` fails there too, as an
    internal error with Go's regexp wording; the allocator refuses those."""
    for node in checked_ast.walk(parsed.expr):
        if node.WhichOneof("expr_kind") != "call_expr":
            continue
        call = node.call_expr
        if call.function != "matches" or not call.args:
            continue
        pattern = checked_ast.string_constant(call.args[-1])
        if pattern is None or _regex_problem(pattern) is None:
            continue
        where = checked_ast.position_of(parsed.source_info, call.args[-1].id)
        if where is None:
            return "compilation failed: invalid matches argument"
        line = expression.splitlines()[where.line - 1]
        dots = "." * (where.column - 1)
        return (
            f"compilation failed: ERROR: <input>:{where.line}:{where.column}: "
            f"invalid matches argument\n | {line}\n | {dots}^"
        )
    return None


class CompiledSelector:
    """A selector ready to be evaluated against any number of devices."""

    __slots__ = ("_program", "_runtime", "cost", "expression")

    def __init__(self, expression: str, program: Program, runtime: Runtime, cost: int) -> None:
        self.expression = expression
        #: Static worst-case cost estimate; at most the environment's cost limit.
        self.cost = cost
        self._program = program
        self._runtime = runtime

    def evaluate(self, var: DeviceVariable) -> bool:
        """Whether the device matches; raises CelRuntimeError when evaluation fails."""
        if not isinstance(var, DeviceVariable):
            raise TypeError(f"expected a DeviceVariable, got {type(var).__name__}")
        activation = var.activation_for(self._runtime, self._runtime.activation)
        outcome = self._program.run(activation)
        if outcome.value is not None:
            return outcome.value
        if outcome.error is not None:
            raise CelRuntimeError(self.expression, messages.runtime_failure(outcome.error))
        got = messages.type_name(outcome.other_type or "unknown")
        raise CelRuntimeError(self.expression, f"must evaluate to bool, got {got}")

    def __repr__(self) -> str:
        return f"CompiledSelector({self.expression!r})"


class CelEnvironment:
    """Compiles selectors under one cost limit and length limit, caching by expression text."""

    def __init__(
        self,
        *,
        cost_limit: int = DEFAULT_COST_LIMIT,
        max_expression_bytes: int = DEFAULT_MAX_EXPRESSION_BYTES,
    ) -> None:
        if cost_limit <= 0 or max_expression_bytes <= 0:
            raise ValueError("cost_limit and max_expression_bytes must be positive")
        self.cost_limit = cost_limit
        self.max_expression_bytes = max_expression_bytes
        self._runtime = _runtime()
        self._cache: OrderedDict[str, CompiledSelector | CelCompileError] = OrderedDict()
        self._lock = threading.Lock()

    def compile(self, expression: str) -> CompiledSelector:
        """The compiled selector for ``expression``; raises CelCompileError if it is unusable."""
        if not isinstance(expression, str):
            raise TypeError(f"expression must be a string, got {type(expression).__name__}")
        with self._lock:
            cached = self._cache.get(expression)
            if cached is not None:
                self._cache.move_to_end(expression)
        if cached is None:
            try:
                cached = self._compile(expression)
            except CelCompileError as failure:
                cached = failure
            with self._lock:
                # Another thread may have won the race; keep one object per expression.
                cached = self._cache.setdefault(expression, cached)
                while len(self._cache) > _CACHE_SIZE:
                    self._cache.popitem(last=False)
        if isinstance(cached, CelCompileError):
            raise CelCompileError(cached.expression, cached.message, cached.position)
        return cached

    def _compile(self, expression: str) -> CompiledSelector:
        length = len(expression.encode("utf-8", "surrogatepass"))
        if length > self.max_expression_bytes:
            raise CelCompileError(
                expression,
                f"expression is {length:,} bytes long; the limit is "
                f"{self.max_expression_bytes:,} bytes",
            )
        try:
            parsed = checked_ast.load_parsed(self._runtime.parse(expression))
            checkable = patch_field_presence_tests(expression, parsed)
            serialized, result_type = self._runtime.check(checkable)
        except RuntimeCompileError as failure:
            message, position = messages.compile_failure(failure.text)
            raise CelCompileError(expression, message, position) from None
        if result_type not in (RESULT_BOOL, RESULT_DYN):
            raise CelCompileError(
                expression, f"must evaluate to bool, not {messages.type_name(result_type)}"
            )
        checked = checked_ast.load_checked(serialized)
        cost = self._bounded_cost(expression, checked)
        try:
            rewritten = rewrite(checked, _EXACT_OVERLOADS)
        except RewriteError as problem:
            position = checked_ast.position_of(checked.source_info, problem.expr_id)
            raise CelCompileError(expression, problem.message, position) from None
        for pattern, expr_id in rewritten.regex_patterns:
            regex_problem = _regex_problem(pattern)
            if regex_problem is not None:
                position = checked_ast.position_of(checked.source_info, expr_id)
                raise CelCompileError(expression, regex_problem, position)
        try:
            program = self._runtime.load(checked_ast.dump_checked(rewritten.checked))
        except RuntimeCompileError as failure:
            message, position = messages.compile_failure(failure.text)
            raise CelCompileError(expression, message, position) from None
        return CompiledSelector(expression, program, self._runtime, cost)

    def _bounded_cost(self, expression: str, checked: object) -> int:
        try:
            cost = estimate(checked, _PYTHON_OVERLOADS)
        except CostError as problem:
            raise CelCompileError(expression, str(problem)) from None
        if cost > self.cost_limit:
            raise CelCompileError(
                expression,
                f"too complex: the estimated worst-case cost {describe(cost)} exceeds the "
                f"limit of {self.cost_limit:,} (nested macros over large lists and growing "
                "strings or lists are what make it expensive)",
            )
        return cost


@functools.cache
def default_environment() -> CelEnvironment:
    """The environment with Kubernetes' default limits, shared by the whole process."""
    return CelEnvironment()
