"""mkdocs hook: the reference pages, generated at build time from the code itself.

A page holds a marker such as ``<!-- generated: settings -->`` on a line of its
own; :func:`on_page_markdown` replaces it with what the generator of that name
makes from the real objects: the pydantic settings model
(:class:`subscriber.config.Settings`), the argparse parser
(:func:`subscriber.cli.root.build_parser`) and the OpenAPI document
(:func:`schemas.openapi.openapi_document`). Nothing is copied into the pages
by hand, so the reference cannot drift from the code; ``tests/unit/test_docs.py``
runs the same generators.

Only class defaults are read: the settings model is never instantiated, so no
environment variable or configuration file of the machine that builds the
docs reaches a page.
"""

from __future__ import annotations

import argparse
import inspect
import json
import re
import types
import typing
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, SecretStr
from pydantic.fields import FieldInfo

from schemas.openapi import openapi_document
from subscriber.cli.helpers import PROG
from subscriber.cli.root import build_parser
from subscriber.config import HookSettings, HttpSettings, Settings

__all__ = [
    "GENERATORS",
    "OPENAPI_JSON",
    "cli_commands",
    "cli_markdown",
    "on_files",
    "on_page_markdown",
    "openapi_json",
    "openapi_markdown",
    "settings_fields",
    "settings_markdown",
]

MARKER = re.compile(r"^<!-- generated: ([a-z-]+) -->$", re.MULTILINE)
OPENAPI_JSON = "reference/openapi.json"
ENV_PREFIX = "LCCN_"
USAGE_WIDTH = 88


# -- text helpers --------------------------------------------------------------------------


def _markdown(doc: str) -> str:
    """A docstring as Markdown: dedented, RST double backticks made single."""
    return inspect.cleandoc(doc).replace("``", "`")


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _cell(text: str) -> str:
    """One table cell: one line, pipes outside code spans escaped."""
    parts = _one_line(text).split("`")
    return "`".join(p if i % 2 else p.replace("|", r"\|") for i, p in enumerate(parts))


def _code(value: str) -> str:
    return f"`` {value} ``" if "`" in value else f"`{value}`"


def _table(header: tuple[str, ...], rows: Sequence[tuple[str, ...]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


# -- settings ------------------------------------------------------------------------------


def _is_section(annotation: Any) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


def settings_fields(
    model: type[BaseModel] = Settings, path: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], type[BaseModel], FieldInfo]]:
    """Every leaf setting as (path, the section model holding it, its field), in model order."""
    for name, field in model.model_fields.items():
        if _is_section(field.annotation):
            assert isinstance(field.annotation, type)
            yield from settings_fields(field.annotation, (*path, name))
        else:
            yield (*path, name), model, field


def _sections(
    model: type[BaseModel] = Settings, path: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], type[BaseModel]]]:
    for name, field in model.model_fields.items():
        if _is_section(field.annotation):
            assert isinstance(field.annotation, type)
            yield (*path, name), field.annotation
            yield from _sections(field.annotation, (*path, name))


def env_name(path: tuple[str, ...]) -> str:
    """``LCCN_SECTION__FIELD`` for a setting's path."""
    return ENV_PREFIX + "__".join(part.upper() for part in path)


_SCALARS = {
    str: "string",
    int: "integer",
    float: "number",
    bool: "boolean",
    SecretStr: "secret string",
    Path: "path",
}


def _type(annotation: Any) -> str:
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Literal:
        return "one of " + ", ".join(_code(str(a)) for a in args)
    if origin in (typing.Union, types.UnionType):
        kept = [a for a in args if a is not type(None)]
        text = " or ".join(_type(a) for a in kept)
        return f"{text} or unset" if len(kept) < len(args) else text
    if origin is tuple or origin is list:
        return f"list of {_type(args[0])}"
    if origin is dict:
        return f"map of {_type(args[0])} to {_type(args[1])}"
    if annotation in _SCALARS:
        return _SCALARS[annotation]
    return getattr(annotation, "__name__", str(annotation))


def _constraints(field: FieldInfo) -> list[str]:
    out: list[str] = []
    for item in field.metadata:
        for attr, sign in (("gt", ">"), ("ge", ">="), ("lt", "<"), ("le", "<=")):
            value = getattr(item, attr, None)
            if value is not None:
                out.append(f"{sign} {value}")
        if getattr(item, "min_length", None) == 1:
            out.append("not empty")
    return out


def _default(value: Any) -> str:
    if value is None:
        return "unset"
    if isinstance(value, SecretStr):
        return '`""`' if not value.get_secret_value() else "`***`"
    if isinstance(value, bool):
        return _code(str(value).lower())
    if isinstance(value, (tuple, list, dict)):
        return _code(json.dumps(list(value) if not isinstance(value, dict) else value))
    if isinstance(value, Path):
        return _code(str(value))
    if isinstance(value, str):
        return _code(value) if value else '`""`'
    return _code(repr(value))


def settings_markdown() -> str:
    """One table per section of :class:`Settings`: setting, type, default, variable, meaning."""
    blocks: list[str] = []
    for path, section in _sections():
        rows: list[tuple[str, ...]] = []
        for name, field in section.model_fields.items():
            if _is_section(field.annotation):
                continue
            full = (*path, name)
            kind = ", ".join([_type(field.annotation), *_constraints(field)])
            rows.append(
                (
                    _code(".".join(full)),
                    kind,
                    _default(field.default),
                    _code(env_name(full)),
                    (field.description or "").replace("``", "`"),
                )
            )
        title = f"## `{'.'.join(path)}`"
        parts = [title, _markdown(section.__doc__ or "")]
        if rows:
            header = ("setting", "type", "default", "environment variable", "what it does")
            parts.append(_table(header, rows))
        blocks.append("\n\n".join(p for p in parts if p))
    return "\n\n".join(blocks) + "\n"


# -- command line --------------------------------------------------------------------------


def _subparsers(parser: argparse.ArgumentParser) -> argparse._SubParsersAction[Any] | None:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return action
    return None


def cli_commands(
    parser: argparse.ArgumentParser | None = None, path: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser, str]]:
    """Every command and command group as (words after the program, its parser, its help)."""
    parser = parser or build_parser()
    sub = _subparsers(parser)
    if sub is None:
        return
    helps = {choice.dest: choice.help or "" for choice in sub._choices_actions}
    for name, child in sub.choices.items():
        yield (*path, name), child, helps.get(name, "")
        yield from cli_commands(child, (*path, name))


def _usage(parser: argparse.ArgumentParser) -> str:
    formatter = argparse.HelpFormatter(parser.prog, width=USAGE_WIDTH)
    formatter.add_usage(parser.usage, parser._actions, parser._mutually_exclusive_groups)
    return formatter.format_help().strip()


def _option_rows(parser: argparse.ArgumentParser) -> list[tuple[str, ...]]:
    formatter = argparse.HelpFormatter(parser.prog, width=USAGE_WIDTH)
    rows: list[tuple[str, ...]] = []
    for action in parser._actions:
        if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)):
            continue
        if action.help == argparse.SUPPRESS:  # internal (serve's worker link)
            continue
        if action.option_strings:
            metavar = (
                formatter._format_args(action, action.dest.upper()) if action.nargs != 0 else ""
            )
            names = ", ".join(action.option_strings)
            name = f"{names} {metavar}".strip()
        else:
            name = formatter._format_args(action, action.dest)
        text = formatter._expand_help(action) if action.help else ""
        default = action.default
        shown = (
            ""
            if default in (None, False, argparse.SUPPRESS) or action.nargs == 0
            else _code(str(default))
        )
        rows.append((_code(name), text.replace("``", "`"), shown))
    return rows


def cli_markdown() -> str:
    """Every command: its help, its usage and a table of its arguments."""
    parser = build_parser()
    blocks = [
        f"## `{PROG}`",
        _markdown(parser.description or ""),
        f"```text\n{_usage(parser)}\n```",
        _table(("argument", "what it does", "default"), _option_rows(parser)),
    ]
    for words, child, help_text in cli_commands(parser):
        level = "#" * min(len(words) + 2, 4)
        blocks.append(f"{level} `{PROG} {' '.join(words)}`")
        text = help_text[:1].upper() + help_text[1:]
        if child.description:
            text = f"{text}. {child.description}" if text else child.description
        if text:
            blocks.append(text if text.endswith(".") else text + ".")
        blocks.append(f"```text\n{_usage(child)}\n```")
        rows = _option_rows(child)
        if _subparsers(child) is not None:
            rows = [r for r in rows if r[0] != "`command`"]
        if rows:
            blocks.append(_table(("argument", "what it does", "default"), rows))
    return "\n\n".join(blocks) + "\n"


# -- OpenAPI -------------------------------------------------------------------------------


def _document() -> dict[str, Any]:
    """The document as a listener on the default paths with the drain hook on serves it."""
    http_path = HttpSettings.model_fields["path"].default
    hook_path = HookSettings.model_fields["path"].default
    return openapi_document(http_path, hook_path)


def openapi_json() -> str:
    """The OpenAPI document as the JSON file the reference links to."""
    return json.dumps(_document(), indent=2) + "\n"


def openapi_markdown() -> str:
    """The document's paths (method, summary, answers) and its schemas, by name."""
    document = _document()
    info = document["info"]
    blocks = [
        f"OpenAPI {document['openapi']}, *{info['title']}*, version {info['version']}.",
        info["description"],
        "## Paths",
    ]
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            blocks.append(f"### `{method.upper()} {path}`")
            blocks.append(operation["summary"][:1].upper() + operation["summary"][1:] + ".")
            details: list[str] = []
            for parameter in operation.get("parameters", []):
                text = parameter.get("description", "")
                line = f"- parameter `{parameter['name']}` ({parameter['in']})"
                details.append(f"{line}: {text}" if text else line)
            if "requestBody" in operation:
                for media, content in operation["requestBody"]["content"].items():
                    ref = content["schema"]["$ref"].rsplit("/", 1)[-1]
                    details.append(f"- body: `{media}`, [`{ref}`](#{ref.lower()})")
            if operation.get("security"):
                schemes = ", ".join(name for item in operation["security"] for name in item)
                details.append(f"- security: {schemes}")
            if details:
                blocks.append("\n".join(details))
            rows: list[tuple[str, ...]] = [
                (_code(code), answer["description"].replace("``", "`"))
                for code, answer in operation["responses"].items()
            ]
            blocks.append(_table(("status", "when"), rows))
    blocks.append("## Schemas")
    for name, schema in document["components"]["schemas"].items():
        blocks.append(f"### {name}")
        required = schema.get("required", [])
        properties = schema.get("properties", {})
        if properties:
            props = [
                (_code(prop), "yes" if prop in required else "", _schema_type(spec))
                for prop, spec in properties.items()
            ]
            blocks.append(_table(("property", "required", "type"), props))
        elif "oneOf" in schema or "anyOf" in schema or "discriminator" in schema:
            choices = schema.get("oneOf") or schema.get("anyOf") or []
            names = [_schema_type(choice) for choice in choices]
            blocks.append("One of " + ", ".join(names) + ".")
        else:
            blocks.append(_schema_type(schema))
    return "\n\n".join(blocks) + "\n"


def _schema_type(spec: dict[str, Any]) -> str:
    if "$ref" in spec:
        name = spec["$ref"].rsplit("/", 1)[-1]
        return f"[{name}](#{name.lower()})"
    if "enum" in spec:
        return "one of " + ", ".join(_code(json.dumps(v)) for v in spec["enum"])
    if "const" in spec:
        return _code(json.dumps(spec["const"]))
    for key in ("anyOf", "oneOf", "allOf"):
        if key in spec:
            return " or ".join(_schema_type(s) for s in spec[key])
    kind = spec.get("type", "any")
    if isinstance(kind, list):
        return " or ".join(kind)
    if kind == "array":
        return "array of " + _schema_type(spec.get("items", {}))
    return str(kind)


# -- mkdocs --------------------------------------------------------------------------------

GENERATORS: dict[str, Callable[[], str]] = {
    "settings": settings_markdown,
    "cli": cli_markdown,
    "openapi": openapi_markdown,
}


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any, **_: Any) -> str:
    """Replace each ``<!-- generated: NAME -->`` line by the output of ``GENERATORS[NAME]``."""

    def replace(match: re.Match[str]) -> str:
        name = match[1]
        if name not in GENERATORS:
            raise ValueError(f"{page.file.src_uri}: no generator named {name!r}")
        return GENERATORS[name]().rstrip("\n")

    return MARKER.sub(replace, markdown)


def on_files(files: Any, config: Any, **_: Any) -> Any:
    """Add the OpenAPI document to the site as ``reference/openapi.json``."""
    from mkdocs.structure.files import File

    files.append(File.generated(config, OPENAPI_JSON, content=openapi_json()))
    return files
