"""The documentation keeps up with the code: the reference pages' generators
(``docs/hooks/reference.py``, run by mkdocs at build time) cover every setting, every
command and every HTTP route, and the README stays short and keeps the two set-up
commands that CI and users copy verbatim.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import re
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest
import yaml

from schemas.openapi import openapi_document
from subscriber.cli.root import build_parser
from subscriber.config import Settings

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
README = ROOT / "README.md"
SETUP_COMMANDS = (
    "python3 -m venv .venv && .venv/bin/pip install -q . && .venv/bin/lccn-subscriber serve",
    "bash scripts/test.sh",
)


@pytest.fixture(scope="module")
def reference() -> ModuleType:
    """The mkdocs hook module, loaded from its file as mkdocs loads it."""
    spec = importlib.util.spec_from_file_location("docs_reference", DOCS / "hooks" / "reference.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _leaves(model: Any, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], Any]]:
    out: list[tuple[tuple[str, ...], Any]] = []
    for name, field in model.model_fields.items():
        annotation = field.annotation
        if isinstance(annotation, type) and hasattr(annotation, "model_fields"):
            out += _leaves(annotation, (*path, name))
        else:
            out.append(((*path, name), field))
    return out


def test_every_setting_is_in_the_settings_reference_with_its_variable(
    reference: ModuleType,
) -> None:
    page = reference.settings_markdown()
    leaves = _leaves(Settings)
    assert len(leaves) > 100
    for path, field in leaves:
        dotted = ".".join(path)
        env = "LCCN_" + "__".join(p.upper() for p in path)
        row = next((line for line in page.splitlines() if line.startswith(f"| `{dotted}` |")), "")
        assert row, f"{dotted} is not in the settings reference"
        assert f"`{env}`" in row, f"{dotted}: no {env}"
        description = " ".join((field.description or "").split()).replace("``", "`")
        assert description and description in row, (
            f"{dotted} has no description: give it an attribute docstring in subscriber/config.py"
        )


def test_the_settings_reference_shows_defaults_not_the_environment(
    reference: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LCCN_HTTP__PORT", "9999")
    monkeypatch.setenv("LCCN_TACKER__PASSWORD", "not-for-the-docs")
    page = reference.settings_markdown()
    assert "| `http.port` | integer, >= 0, <= 65535 | `8765` |" in page
    assert "9999" not in page and "not-for-the-docs" not in page


def _commands(
    parser: argparse.ArgumentParser, path: tuple[str, ...] = ()
) -> list[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    out: list[tuple[tuple[str, ...], argparse.ArgumentParser]] = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                out.append(((*path, name), child))
                out += _commands(child, (*path, name))
    return out


def test_every_command_and_option_is_in_the_cli_reference(reference: ModuleType) -> None:
    page = reference.cli_markdown()
    commands = _commands(build_parser())
    assert {words[0] for words, _ in commands} >= {"serve", "events", "replay", "handlers"}
    for words, parser in commands:
        assert f"`lccn-subscriber {' '.join(words)}`" in page, words
        for action in parser._actions:
            if action.help == argparse.SUPPRESS:
                continue
            for option in action.option_strings:
                if option not in ("-h", "--help"):
                    assert option in page, (words, option)


def test_every_route_is_in_the_openapi_reference_and_its_json(reference: ModuleType) -> None:
    page = reference.openapi_markdown()
    document = openapi_document("/lccn/notifications", "/lccn/hooks")
    assert json.loads(reference.openapi_json()) == document
    for path, operations in document["paths"].items():
        for method in operations:
            assert f"### `{method.upper()} {path}`" in page
    for name in document["components"]["schemas"]:
        assert f"### {name}\n" in page


def test_markers_are_replaced_and_an_unknown_one_is_refused(reference: ModuleType) -> None:
    page = SimpleNamespace(file=SimpleNamespace(src_uri="reference/x.md"))  # mkdocs' Page
    text = "# T\n\n<!-- generated: cli -->\n\nafter\n"
    out = reference.on_page_markdown(text, page=page, config=None, files=None)
    assert "<!-- generated" not in out and "`lccn-subscriber serve`" in out
    assert out.endswith("\n\nafter\n")
    with pytest.raises(ValueError, match="no generator named 'nope'"):
        reference.on_page_markdown("<!-- generated: nope -->\n", page=page, config=None, files=None)
    for name in ("settings", "cli", "openapi"):
        source = (DOCS / "reference" / f"{name}.md").read_text()
        assert f"<!-- generated: {name} -->" in source


def test_the_nav_lists_every_page_and_every_page_exists() -> None:
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    listed: set[str] = set()

    def walk(items: Any) -> None:
        for item in items:
            if isinstance(item, str):
                listed.add(item)
            else:
                for value in item.values():
                    walk(value) if isinstance(value, list) else listed.add(value)

    walk(config["nav"])
    pages = {str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md")}
    assert listed == pages
    assert "docs/hooks/reference.py" in config["hooks"]


def test_the_readme_is_short_and_keeps_the_set_up_commands() -> None:
    text = README.read_text()
    assert len(text.splitlines()) <= 250
    lines = text.splitlines()
    for command in SETUP_COMMANDS:
        assert command in lines, f"the README lost {command!r}"
    assert not re.search(r"\bissue \d+", text)


def test_the_readme_names_every_command_and_its_links_resolve() -> None:
    text = README.read_text()
    for words, _ in _commands(build_parser()):
        if len(words) == 1:
            assert re.search(rf"`(lccn-subscriber )?{words[0]}\b", text), words
    for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", text):
        if "://" not in target:
            assert (ROOT / target).exists(), target
