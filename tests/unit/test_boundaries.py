"""Where code may reach: SQL only in the store, the CLI's modules import downward,
``handlers`` only from the top, no import cycle anywhere, and nothing imports the tests.

Read from the source (every import statement, those inside functions too), so
a lazy import cannot slip past.
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests import REPO as ROOT

PACKAGES = ("subscriber", "handlers", "schemas")


def _type_checking_only(tree: ast.AST) -> set[int]:
    """ids of the import nodes under ``if TYPE_CHECKING:`` (never run)."""
    out: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            out.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    return out


def _imports(path: Path, *, runtime: bool = False) -> set[str]:
    """Every module ``path`` imports (``from a.b import c`` counts as ``a.b`` and ``a.b.c``).

    ``runtime``: leave out the imports under ``if TYPE_CHECKING:``.
    """
    found: set[str] = set()
    tree = ast.parse(path.read_text(), str(path))
    skip = _type_checking_only(tree) if runtime else set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def _modules(*packages: str) -> dict[str, Path]:
    out: dict[str, Path] = {}
    for package in packages:
        for path in sorted((ROOT / package).rglob("*.py")):
            rel = path.relative_to(ROOT).with_suffix("")
            out[".".join(rel.parts).removesuffix(".__init__")] = path
    return out


def _within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def test_sql_lives_only_in_the_store() -> None:
    outside = {
        name: path
        for name, path in _modules(*PACKAGES).items()
        if not _within(name, "subscriber.store") and not _within(name, "subscriber.migrations")
    }
    assert "subscriber.failed" in outside and "subscriber.replay" in outside
    offenders = {
        name: sorted(
            m
            for m in _imports(path)
            if _within(m, "sqlalchemy") or _within(m, "subscriber.store.tables")
        )
        for name, path in outside.items()
    }
    assert {k: v for k, v in offenders.items() if v} == {}


def test_the_cli_package_imports_downward() -> None:
    cli = {n: p for n, p in _modules("subscriber").items() if _within(n, "subscriber.cli")}
    groups = set(cli) - {
        "subscriber.cli",
        "subscriber.cli.__main__",
        "subscriber.cli.root",
        "subscriber.cli.helpers",
    }
    assert {"subscriber.cli.operate", "subscriber.cli.kafka", "subscriber.cli.serve"} <= groups

    def cli_imports(name: str) -> set[str]:
        return {m for m in _imports(cli[name]) if _within(m, "subscriber.cli") and m in cli} - {
            name
        }

    # The helpers import no other CLI module; a group imports only the helpers.
    assert cli_imports("subscriber.cli.helpers") == set()
    for group in sorted(groups):
        assert cli_imports(group) <= {"subscriber.cli.helpers"}, group
    # Only the root assembles the groups.
    assert groups <= cli_imports("subscriber.cli.root")
    # Nothing below the CLI imports it.
    for name, path in _modules(*PACKAGES).items():
        if not _within(name, "subscriber.cli"):
            assert not [m for m in _imports(path) if _within(m, "subscriber.cli")], name


def test_python_dash_m_and_the_console_script_share_main() -> None:
    import subscriber.cli
    import subscriber.cli.root

    assert subscriber.cli.main is subscriber.cli.root.main
    text = (ROOT / "pyproject.toml").read_text()
    assert 'lccn-subscriber = "subscriber.cli:main"' in text


def test_handlers_are_imported_only_from_the_top() -> None:
    """The store, the adapters and the schemas sit below the handlers; the kernel below them.
    Above them: the service, the CLI, and the hook endpoint, which reads its handler's typed
    results (DESIGN: ingest, dispatcher and runner stand above the handlers)."""
    top = {"subscriber.service", "subscriber.ingest.hooks"}
    for name, path in _modules("subscriber", "schemas").items():
        reaches = [m for m in _imports(path) if _within(m, "handlers")]
        if name in top or _within(name, "subscriber.cli"):
            continue
        assert reaches == [], name
    below_adapters = ("subscriber.kernel", "subscriber.store", "schemas", "subscriber.errors")
    adapters = ("subscriber.tacker", "subscriber.openstack", "subscriber.ssh", "subscriber.store")
    for name, path in _modules("subscriber", "schemas").items():
        if any(_within(name, p) for p in below_adapters if p != "subscriber.store"):
            bad = [m for m in _imports(path, runtime=True) if any(_within(m, a) for a in adapters)]
            assert bad == [], name


def test_no_import_cycle() -> None:
    """Run-time imports between our modules form no cycle (a package and its own
    submodules excepted: importing ``a.b`` runs ``a/__init__`` first, by design)."""
    modules = _modules(*PACKAGES)
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        targets = {m for m in _imports(path, runtime=True) if m in modules and m != name}
        graph[name] = {t for t in targets if not _within(name, t)}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    assert cycles == []


def test_nothing_imports_the_tests_and_the_product_no_test_bed() -> None:
    """``tests`` imports the rest, never the other way. The test bed (``tests.testbed``,
    DESIGN: it lives under tests/) is shared with the demo and the benchmarks; it imports
    no test module, and the product imports neither."""
    for name, path in _modules(*PACKAGES, "bench", "scripts").items():
        reaches = {m for m in _imports(path) if _within(m, "tests")}
        if name.partition(".")[0] not in PACKAGES:
            reaches = {m for m in reaches if not _within(m, "tests.testbed")}
        assert sorted(reaches) == [], name
    for name, path in _modules("tests/testbed").items():
        reaches = {m for m in _imports(path) if _within(m, "tests")}
        assert sorted(m for m in reaches if not _within(m, "tests.testbed")) == [], name
