"""Where code may reach: SQL only in the store, the CLI's modules import downward.

Read from the source (every import statement, those inside functions too), so
a lazy import cannot slip past.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("subscriber", "handlers", "schemas")


def _imports(path: Path) -> set[str]:
    """Every module ``path`` imports (``from a.b import c`` counts as ``a.b`` and ``a.b.c``)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
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
