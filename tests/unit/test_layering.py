"""The import rules of docs/architecture.md hold for the code.

The rules are read from the page's two tables ("may not import" per package, and third-party
libraries confined to one place), so the picture a reader sees is the one that is enforced. A
minimum set of rules is also written here, so that weakening the page fails too. Every import
counts: at module level, inside functions, under `TYPE_CHECKING`, and
`importlib.import_module("name")` with a literal name.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("api", "dra_driver", "kubeletplugin", "controller", "localcluster")
DOC = ROOT / "docs" / "architecture.md"

REQUIRED_FORBIDDEN = {
    ("api", "dra_driver"),
    ("dra_driver", "kubeletplugin"),
    ("dra_driver", "controller"),
    ("dra_driver", "localcluster"),
    ("dra_driver.checker", "dra_driver.allocator"),
    ("kubeletplugin", "controller"),
    ("kubeletplugin", "localcluster"),
    ("controller", "kubeletplugin"),
    ("controller", "localcluster"),
}
REQUIRED_CONFINED = {
    ("pynvml", "dra_driver.backends.nvml"),
    ("cel_expr_python", "dra_driver.cel.runtime"),
    ("numpy", "dra_driver.simulation"),
}


@dataclass(frozen=True)
class Import:
    module: str  # the importing module, dotted
    target: str  # the imported module, dotted
    line: int


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _resolve(module: str, is_package: bool, level: int, name: str | None) -> str:
    base = module.split(".") if is_package else module.split(".")[:-1]
    if level > 1:
        base = base[: len(base) - (level - 1)]
    return ".".join([*base, name] if name else base)


def imports_of(path: Path, root: Path) -> Iterator[Import]:
    module = _module_name(path, root)
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    is_package = path.name == "__init__.py"
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield Import(module, alias.name, node.lineno)
        elif isinstance(node, ast.ImportFrom):
            target = (
                _resolve(module, is_package, node.level, node.module)
                if node.level
                else node.module or ""
            )
            yield Import(module, target, node.lineno)
            for alias in node.names:  # `from pkg import submodule`
                yield Import(module, f"{target}.{alias.name}", node.lineno)
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "import_module"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            yield Import(module, node.args[0].value, node.lineno)


def _within(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def all_imports(root: Path, packages: tuple[str, ...]) -> list[Import]:
    found: list[Import] = []
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            if "gen" in path.relative_to(root).parts:  # generated protobuf code
                continue
            found.extend(imports_of(path, root))
    return found


def violations(
    imports: list[Import],
    forbidden: set[tuple[str, str]],
    confined: set[tuple[str, str]],
) -> list[str]:
    """One message per import statement and broken rule (`from x import a, b` counts once)."""
    found: dict[tuple[str, int, str, str], str] = {}
    for imp in imports:
        for package, target in forbidden:
            if _within(imp.module, package) and _within(imp.target, target):
                found.setdefault(
                    (imp.module, imp.line, package, target),
                    f"{imp.module}:{imp.line} imports {imp.target}, "
                    f"but {package} may not import {target}",
                )
        for library, home in confined:
            if _within(imp.target, library) and not _within(imp.module, home):
                found.setdefault(
                    (imp.module, imp.line, library, home),
                    f"{imp.module}:{imp.line} imports {imp.target}, which only {home} may use",
                )
    return sorted(found.values())


def import_graph(root: Path, packages: tuple[str, ...]) -> dict[str, dict[str, int]]:
    """Each module of `packages` -> the modules of `packages` it imports -> the first line.

    A target is the module it names: `from pkg import sub` reaches `pkg.sub` when that is a
    module, and `pkg` (its `__init__`) when `sub` is a name defined there. The parent packages
    Python runs on the way to a module are not counted: they would make a circle of every
    package whose `__init__` imports one of its modules.
    """
    files = {
        _module_name(path, root): path
        for package in packages
        for path in sorted((root / package).rglob("*.py"))
        if "gen" not in path.relative_to(root).parts
    }

    def owner(name: str) -> str | None:
        while name and name not in files:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, dict[str, int]] = {module: {} for module in files}
    for module, path in files.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = (
                    _resolve(module, path.name == "__init__.py", node.level, node.module)
                    if node.level
                    else node.module or ""
                )
                targets = [f"{base}.{alias.name}" for alias in node.names]
            else:
                continue
            for target in targets:
                found = owner(target)
                if found is not None and found != module:
                    graph[module].setdefault(found, node.lineno)
    return graph


def import_cycles(graph: dict[str, dict[str, int]]) -> list[str]:
    """One line per circle (a strongly connected set of modules), naming the imports inside it."""
    order: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[str] = []

    def visit(module: str) -> None:  # Tarjan's strongly connected components
        order[module] = low[module] = len(order)
        stack.append(module)
        for target in graph[module]:
            if target not in order:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in stack:
                low[module] = min(low[module], order[target])
        if low[module] == order[module]:
            members = {stack.pop()}
            while module not in members:
                members.add(stack.pop())
            if len(members) > 1:
                edges = sorted(
                    f"{source}:{line} -> {target}"
                    for source in members
                    for target, line in graph[source].items()
                    if target in members
                )
                found.append("; ".join(edges))

    for module in sorted(graph):
        if module not in order:
            visit(module)
    return sorted(found)


def _table_after(heading: str, text: str) -> list[list[str]]:
    start = text.index(heading)
    rows: list[list[str]] = []
    for line in text[start:].splitlines()[1:]:
        if line.startswith("|"):
            rows.append([cell.strip() for cell in line.strip().strip("|").split("|")])
        elif rows:
            break
    return rows[2:]  # header and separator


def _names(cell: str) -> list[str]:
    return re.findall(r"`([A-Za-z_][\w.]*)`", cell)


def documented_rules() -> tuple[set[tuple[str, str]], set[tuple[str, str]]]:
    text = DOC.read_text(encoding="utf-8")
    forbidden: set[tuple[str, str]] = set()
    for row in _table_after("### Packages and what they may import", text):
        (package,) = _names(row[0])
        forbidden.update((package, target) for target in _names(row[-1]))
    confined: set[tuple[str, str]] = set()
    for row in _table_after("### Libraries kept in one place", text):
        (library,) = _names(row[0])
        (home,) = _names(row[1])
        confined.add((library, home))
    return forbidden, confined


def test_the_page_states_at_least_the_required_rules() -> None:
    forbidden, confined = documented_rules()
    assert forbidden >= REQUIRED_FORBIDDEN, REQUIRED_FORBIDDEN - forbidden
    assert confined >= REQUIRED_CONFINED, REQUIRED_CONFINED - confined


def test_the_code_follows_the_documented_import_rules() -> None:
    forbidden, confined = documented_rules()
    assert violations(all_imports(ROOT, PACKAGES), forbidden, confined) == []


def test_no_production_package_imports_the_tests() -> None:
    bad = [i for i in all_imports(ROOT, PACKAGES) if _within(i.target, "tests")]
    assert bad == []


def test_the_dra_driver_command_does_not_load_the_local_cluster() -> None:
    """Registering commands must not import the harness's HTTP server or the daemons."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from dra_driver.cli.main import build_parser\n"
        "build_parser()\n"
        "loaded = [m for m in sys.modules if m.split('.')[0] in "
        "('kubeletplugin', 'controller') or m in ('localcluster.http', "
        "'localcluster.apiserver', 'localcluster.cluster')]\n"
        "print(','.join(sorted(loaded)))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == ""


def test_no_modules_import_each_other() -> None:
    """A circle works only while the imports sit in the right order, or inside functions."""
    assert import_cycles(import_graph(ROOT, PACKAGES)) == []


@pytest.mark.parametrize(
    ("files", "expected"),
    [
        (
            {
                "localcluster/server.py": "from localcluster.cli.serve import DEFAULT\n",
                "localcluster/cli/serve.py": (
                    "DEFAULT = 1\ndef run():\n    from localcluster import server\n"
                ),
            },
            [
                "localcluster.cli.serve:3 -> localcluster.server; "
                "localcluster.server:1 -> localcluster.cli.serve"
            ],
        ),
        (
            {
                "dra_driver/a.py": "from . import b\n",
                "dra_driver/b.py": "import dra_driver.c as c\n",
                "dra_driver/c.py": "if TYPE_CHECKING:\n    from dra_driver.a import A\n",
            },
            [
                "dra_driver.a:1 -> dra_driver.b; dra_driver.b:1 -> dra_driver.c; "
                "dra_driver.c:2 -> dra_driver.a"
            ],
        ),
        (
            {
                "dra_driver/pkg/__init__.py": "from dra_driver.pkg.part import Part\n",
                "dra_driver/pkg/part.py": "from dra_driver.pkg import other\n",
                "dra_driver/pkg/other.py": "import api\n",
                "api/__init__.py": "",
            },
            [],
        ),
    ],
)
def test_an_import_circle_is_reported(
    tmp_path: Path, files: dict[str, str], expected: list[str]
) -> None:
    for name, source in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(source)
    packages = tuple(sorted({name.split("/")[0] for name in files}))
    assert import_cycles(import_graph(tmp_path, packages)) == expected


@pytest.mark.parametrize(
    ("files", "expected"),
    [
        ({"dra_driver/core.py": "import kubeletplugin.daemon\n"}, "may not import kubeletplugin"),
        (
            {"dra_driver/checker/rules.py": "from ..allocator import search\n"},
            "may not import dra_driver.allocator",
        ),
        (
            {
                "dra_driver/backends/fake/x.py": (
                    "import importlib\nimportlib.import_module('pynvml')\n"
                )
            },
            "only dra_driver.backends.nvml may use",
        ),
        (
            {"controller/x.py": "def f():\n    from localcluster import ApiServer\n"},
            "may not import localcluster",
        ),
    ],
)
def test_a_broken_rule_is_reported(tmp_path: Path, files: dict[str, str], expected: str) -> None:
    for name, source in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(source)
    packages = tuple(sorted({name.split("/")[0] for name in files}))
    found = violations(all_imports(tmp_path, packages), REQUIRED_FORBIDDEN, REQUIRED_CONFINED)
    assert len(found) == 1 and expected in found[0], found
