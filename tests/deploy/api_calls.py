"""Which Kubernetes API permissions the deployed code needs, read from the code itself.

The chart's RBAC must grant exactly what the daemons call: a missing verb is a 403 in production
that no test on the embedded API server (which does not authorise) would notice, and an extra one
is privilege nobody asked for. So the list is derived, not written down:

1. The official client's own source says, for each method of each ``*Api`` class, which HTTP
   method and path it calls (``param_serialize(method=..., resource_path=...)`` in the current
   generator, ``call_api(path, method)`` in older ones). A path and method give an RBAC
   (apiGroup, resource[/subresource], verb); a list call with ``watch=True`` is ``watch``.
2. The deployed packages (``kubeletplugin``, ``controller``, and the ``dra_driver`` modules they
   import; never ``localcluster``, a test harness) are parsed with ``ast``. Every use
   of a client API method is mapped: the receiver's class is found from what it was built from
   (``client.CoreV1Api(api)``, a local variable or ``self`` attribute holding one, ``cast(...)``
   around one); ``CustomObjectsApi`` group and plural come from literal arguments or module
   constants; a method handed to ``watch.Watch().stream`` is a watch; one handed to
   ``asyncio.to_thread``/``functools.partial``/``run_in_executor`` is a call with the remaining
   arguments.
3. Anything the scanner cannot map raises :class:`UnmappedCall` naming the file and line, so new
   code cannot slip past: a dynamic client, a raw ``call_api`` with a computed path, a method
   reference used some other way, a group read from a variable.

Modules of the client that make calls on the code's behalf (``kubernetes.leaderelection``) are
scanned the same way when the code imports them.
"""

from __future__ import annotations

import ast
import functools
import inspect
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import kubernetes
import kubernetes.client

ROOT = Path(__file__).resolve().parents[2]
CLIENT_ROOT = Path(kubernetes.__file__).parent
COMPONENTS = {"kubelet-plugin": "kubeletplugin", "controller": "controller"}
"""Component name -> the package whose modules (and imports) make up its process."""
NEVER_DEPLOYED = ("localcluster",)
WORKERS = {"to_thread", "partial", "run_in_executor", "_call"}
"""Callables that call the function given to them; the arguments after it are the call's
(`_call` is the leader elector's bounded `to_thread`)."""


@dataclass(frozen=True, order=True)
class Permission:
    group: str
    resource: str
    verb: str

    def __str__(self) -> str:
        return f"{self.group or 'core'}/{self.resource}:{self.verb}"


@dataclass(frozen=True)
class ClientMethod:
    api_class: str
    name: str
    http_method: str
    path: str

    @property
    def params(self) -> tuple[str, ...]:
        """Positional parameter names of the public method, for reading its arguments."""
        if self.api_class == "ApiClient":
            return ()
        function = getattr(getattr(kubernetes.client, self.api_class), self.name)
        return tuple(list(inspect.signature(function).parameters)[1:])


class UnmappedCall(Exception):  # noqa: N818 - the name reads as what happened
    """The code talks to the API in a way the scanner cannot turn into a permission."""


# ---- 1. the client's methods --------------------------------------------------------------


_CLASS = re.compile(r"^class (\w+Api)\b")
_HELPER = re.compile(r"^    def (?:_(\w+)_serialize|(\w+)_with_http_info)\(")
_METHOD = re.compile(r"^\s+method='(\w+)',")
_PATH = re.compile(r"^\s+resource_path='([^']+)',")
_CALL_API = re.compile(r"call_api\(\s*'([^']+)',\s*'(\w+)'")


@functools.cache
def client_methods() -> dict[str, dict[str, ClientMethod]]:
    """API class name -> method name -> what it calls, read from the installed client.

    The generated modules are large and regular, so they are read line by line rather than
    parsed: `_<name>_serialize` passes `method=` and `resource_path=` to `param_serialize`
    (older generators: `<name>_with_http_info` calls `call_api(path, method)`).
    """
    classes: dict[str, dict[str, ClientMethod]] = {}
    for source in sorted((CLIENT_ROOT / "client" / "api").glob("*_api.py")):
        cls = ""
        name = http = ""
        for line in source.read_text().splitlines():
            if match := _CLASS.match(line):
                cls = match.group(1)
                classes[cls] = {}
            elif match := _HELPER.match(line):
                name, http = match.group(1) or match.group(2), ""
            elif cls and name and (match := _METHOD.match(line)):
                http = match.group(1)
            elif cls and name and http and (match := _PATH.match(line)):
                classes[cls][name] = ClientMethod(cls, name, http.upper(), match.group(1))
                name = ""
            elif cls and name and (match := _CALL_API.search(line)):
                classes[cls][name] = ClientMethod(cls, name, match.group(2).upper(), match.group(1))
                name = ""
    return classes


@functools.cache
def _classes_by_method() -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for cls, methods in client_methods().items():
        for name in methods:
            found.setdefault(name, []).append(cls)
    return found


def permission(method: ClientMethod, args: dict[str, str], *, watch: bool) -> Permission | None:
    """The permission one call needs; None for discovery and version calls, which every
    authenticated client may make."""
    parts = [p for p in method.path.split("/") if p]
    if parts[:1] == ["api"]:
        group, rest = "", parts[2:]
    elif parts[:1] == ["apis"]:
        group, rest = parts[1], parts[3:]
    else:
        return None  # /version, /logs, ...
    if group == "{group}":
        group = args["group"]
    if len(rest) >= 2 and rest[0] == "namespaces" and rest[1] == "{namespace}":
        rest = rest[2:]
    if not rest:
        return None  # discovery of a group version
    resource = args["plural"] if rest[0] == "{plural}" else rest[0]
    named = len(rest) >= 2
    subresource = rest[2] if len(rest) >= 3 else None
    verb = {
        "GET": ("get" if named else ("watch" if watch else "list")),
        "POST": "create",
        "PUT": "update",
        "PATCH": "patch",
        "DELETE": "delete" if named else "deletecollection",
    }[method.http_method]
    return Permission(group, f"{resource}/{subresource}" if subresource else resource, verb)


# ---- 2. the deployed code -------------------------------------------------------------------


@dataclass
class _Module:
    name: str
    path: Path
    tree: ast.Module
    constants: dict[str, str] = field(default_factory=dict)
    imported_names: dict[str, tuple[str, str]] = field(default_factory=dict)
    """Local name -> (module, name) for `from module import name`."""


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _project_path(name: str) -> Path | None:
    """The file of a project module (api, dra_driver, the daemons), None for anything else."""
    if name.split(".", maxsplit=1)[0] not in ("api", "dra_driver", *COMPONENTS.values()):
        return None
    base = ROOT.joinpath(*name.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


@functools.cache
def _project_module(name: str) -> _Module | None:
    path = _project_path(name)
    return _parse(name, path) if path else None


def _parse(name: str, path: Path) -> _Module:
    module = _Module(name, path, ast.parse(path.read_text(), str(path)))
    for node in module.tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
            for target in node.targets:
                if isinstance(target, ast.Name) and isinstance(node.value.value, str):
                    module.constants[target.id] = node.value.value
        if (
            isinstance(node, ast.AnnAssign)
            and isinstance(node.target, ast.Name)
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
        ):
            module.constants[node.target.id] = node.value.value
    for node in ast.walk(module.tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            for alias in node.names:
                module.imported_names[alias.asname or alias.name] = (node.module, alias.name)
    return module


def _imports(module: _Module) -> Iterator[str]:
    for node in ast.walk(module.tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            yield node.module
            yield from (f"{node.module}.{alias.name}" for alias in node.names)


def deployed_modules(package: str) -> list[_Module]:
    """The package's modules and every project or client-helper module they import."""
    seen: dict[str, _Module] = {}
    queue = [_module_name(p, ROOT) for p in sorted((ROOT / package).rglob("*.py"))]
    while queue:
        name = queue.pop()
        if name in seen or name.startswith(NEVER_DEPLOYED) or ".gen" in name:
            continue
        module = _project_module(name) or _client_helper(name)
        if module is None:
            continue
        seen[name] = module
        for imported in _imports(module):
            parts = imported.split(".")
            queue.extend(".".join(parts[:i]) for i in range(1, len(parts) + 1))
    return list(seen.values())


def _client_helper(name: str) -> _Module | None:
    """Modules of the client library that call the API for the code (leader election)."""
    if not name.startswith("kubernetes.leaderelection"):
        return None
    relative = Path(*name.split(".")[1:])
    for path in (CLIENT_ROOT / f"{relative}.py", CLIENT_ROOT / relative / "__init__.py"):
        if path.is_file() and not path.name.endswith("_test.py"):
            return _parse(name, path)
    return None


class _Scanner:
    def __init__(self, module: _Module) -> None:
        self.module = module
        self.parents: dict[ast.AST, ast.AST] = {}
        for parent in ast.walk(module.tree):
            for child in ast.iter_child_nodes(parent):
                self.parents[child] = parent
        self.found: list[tuple[Permission, str]] = []

    def where(self, node: ast.AST) -> str:
        return f"{self.module.path}:{getattr(node, 'lineno', '?')}"

    def fail(self, node: ast.AST, why: str) -> UnmappedCall:
        return UnmappedCall(f"{self.where(node)}: {why}: {ast.unparse(node)[:120]}")

    # -- what class an expression holds

    def _enclosing(self, node: ast.AST, kind: type[ast.AST]) -> ast.AST | None:
        current = self.parents.get(node)
        while current is not None and not isinstance(current, kind):
            current = self.parents.get(current)
        return current

    def api_class(self, expr: ast.AST, depth: int = 0) -> str | None:
        if depth > 8:
            return None
        if isinstance(expr, ast.Call):
            func = expr.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
            if name in client_methods():
                return name
            if name == "cast" and len(expr.args) == 2:
                return self.api_class(expr.args[1], depth + 1)
            return None
        if isinstance(expr, ast.Name):
            scope = self._enclosing(expr, ast.FunctionDef) or self.module.tree
            return self._assigned(
                scope, lambda t: isinstance(t, ast.Name) and t.id == expr.id, depth
            )
        if (
            isinstance(expr, ast.Attribute)
            and isinstance(expr.value, ast.Name)
            and expr.value.id == "self"
        ):
            cls = self._enclosing(expr, ast.ClassDef)
            if cls is None:
                return None

            def is_attr(t: ast.AST) -> bool:
                return (
                    isinstance(t, ast.Attribute)
                    and isinstance(t.value, ast.Name)
                    and t.value.id == "self"
                    and t.attr == expr.attr
                )

            return self._assigned(cls, is_attr, depth)
        return None

    def _assigned(self, scope: ast.AST, matches: object, depth: int) -> str | None:
        for node in ast.walk(scope):
            targets: list[ast.AST] = []
            value: ast.AST | None = None
            if isinstance(node, ast.Assign):
                targets, value = list(node.targets), node.value
            elif isinstance(node, ast.AnnAssign) and node.value is not None:
                targets, value = [node.target], node.value
            if value is not None and any(matches(t) for t in targets):  # type: ignore[operator]
                found = self.api_class(value, depth + 1)
                if found:
                    return found
        return None

    # -- arguments

    def string(self, node: ast.AST) -> str | None:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return node.value
        if isinstance(node, ast.Name):
            if node.id in self.module.constants:
                return self.module.constants[node.id]
            origin = self.module.imported_names.get(node.id)
            source = _project_module(origin[0]) if origin else None
            if origin and source:
                return source.constants.get(origin[1])
        return None

    def arguments(
        self, method: ClientMethod, args: list[ast.expr], keywords: list[ast.keyword], node: ast.AST
    ) -> tuple[dict[str, str], bool]:
        values: dict[str, ast.AST] = dict(zip(method.params, args, strict=False))
        values.update({k.arg: k.value for k in keywords if k.arg})
        resolved: dict[str, str] = {}
        for name in ("group", "plural"):
            if name in method.params:
                text = self.string(values[name]) if name in values else None
                if text is None:
                    raise self.fail(node, f"{method.name}: cannot tell the {name} argument")
                resolved[name] = text
        watch = values.get("watch")
        if watch is not None and not isinstance(watch, ast.Constant):
            raise self.fail(node, f"{method.name}: watch= is not a literal")
        return resolved, bool(watch is not None and watch.value)  # type: ignore[attr-defined]

    # -- the walk

    def method_for(self, node: ast.Attribute) -> ClientMethod:
        candidates = _classes_by_method()[node.attr]
        cls = self.api_class(node.value)
        if cls is None and len(candidates) == 1:
            cls = candidates[0]
        if cls is None:
            raise self.fail(node, f"cannot tell which client API class {node.attr} is called on")
        if node.attr not in client_methods()[cls]:
            raise self.fail(node, f"{cls} has no method {node.attr}")
        return client_methods()[cls][node.attr]

    def add(self, method: ClientMethod, args: dict[str, str], watch: bool, node: ast.AST) -> None:
        found = permission(method, args, watch=watch)
        if found is not None:
            self.found.append((found, self.where(node)))

    def scan(self) -> list[tuple[Permission, str]]:
        for node in ast.walk(self.module.tree):
            if isinstance(node, ast.Attribute) and node.attr in _classes_by_method():
                self.visit_method(node)
            elif isinstance(node, ast.Attribute) and node.attr == "call_api":
                self.visit_call_api(node)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                names = [a.name for a in node.names]
                module = getattr(node, "module", None) or ""
                if (
                    "dynamic" in names
                    or module.startswith("kubernetes.dynamic")
                    or any(n.startswith("kubernetes.dynamic") for n in names)
                ):
                    raise self.fail(node, "the dynamic client's calls cannot be mapped")
        return self.found

    def visit_method(self, node: ast.Attribute) -> None:
        parent = self.parents.get(node)
        if isinstance(parent, ast.Call) and parent.func is node:
            method = self.method_for(node)
            args, watch = self.arguments(method, list(parent.args), parent.keywords, parent)
            self.add(method, args, watch, parent)
            return
        if isinstance(parent, ast.Call) and node in parent.args:
            worker = (
                parent.func.attr
                if isinstance(parent.func, ast.Attribute)
                else getattr(parent.func, "id", "")
            )
            method = self.method_for(node)
            rest = list(parent.args[parent.args.index(node) + 1 :])
            if worker == "stream":  # watch.Watch().stream(api.list_x, ...) watches
                args, _ = self.arguments(method, rest, parent.keywords, parent)
                self.add(method, args, True, parent)
                return
            if worker in WORKERS:
                args, watch = self.arguments(method, rest, parent.keywords, parent)
                self.add(method, args, watch, parent)
                return
        raise self.fail(node, f"client method {node.attr} used in a way the scanner cannot map")

    def visit_call_api(self, node: ast.Attribute) -> None:
        parent = self.parents.get(node)
        if self.module.name.startswith("kubernetes."):
            return
        if not (isinstance(parent, ast.Call) and len(parent.args) >= 2):
            raise self.fail(node, "call_api without a literal path and method")
        path, http = self.string(parent.args[0]), self.string(parent.args[1])
        if path is None or http is None:
            raise self.fail(parent, "call_api with a computed path or method")
        method = ClientMethod("ApiClient", "call_api", http.upper(), path)
        watch = any(k.arg == "watch" for k in parent.keywords) or "watch=true" in path
        self.add(method, {}, watch, parent)


def needed_permissions(component: str) -> dict[Permission, list[str]]:
    """Permission -> where the code needs it, for one component (see :data:`COMPONENTS`)."""
    found: dict[Permission, list[str]] = {}
    for module in deployed_modules(COMPONENTS[component]):
        for perm, where in _Scanner(module).scan():
            found.setdefault(perm, []).append(where)
    return found


def granted_permissions(
    objects: Iterable[dict[str, object]], service_account: str
) -> set[Permission]:
    """Every (group, resource, verb) the rendered Roles and ClusterRoles give one
    ServiceAccount through their bindings; wildcards are refused outright."""
    roles = {
        (o["kind"], o["metadata"]["name"]): o  # type: ignore[index]
        for o in objects
        if o["kind"] in ("Role", "ClusterRole")
    }
    granted: set[Permission] = set()
    for binding in objects:
        if binding["kind"] not in ("RoleBinding", "ClusterRoleBinding"):
            continue
        subjects = binding.get("subjects") or []
        if not any(
            s.get("kind") == "ServiceAccount" and s.get("name") == service_account for s in subjects
        ):  # type: ignore[union-attr]
            continue
        ref = binding["roleRef"]
        role = roles[(ref["kind"], ref["name"])]  # type: ignore[index]
        for rule in role.get("rules") or []:  # type: ignore[union-attr]
            for group in rule.get("apiGroups") or []:
                for resource in rule.get("resources") or []:
                    for verb in rule.get("verbs") or []:
                        if "*" in (group, resource, verb):
                            raise AssertionError(f"{ref['name']}: wildcard in {rule}")  # type: ignore[index]
                        granted.add(Permission(group, resource, verb))
    return granted
