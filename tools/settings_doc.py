"""docs/operator/settings.md, generated from the settings classes: every `PODD_*` variable of
every command, with its type, default, bounds and meaning (the `#:` comment above the field).

    python -m tools.settings_doc          # write docs/operator/settings.md
    python -m tools.settings_doc --check  # exit 1 if it is stale (the tests run this)
"""

from __future__ import annotations

import argparse
import ast
import enum
import inspect
import sys
import textwrap
import types
import typing
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import annotated_types
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined
from pydantic_settings import BaseSettings

from origin.settings import OriginSettings
from podd_cdc.settings import CdcSettings
from podd_kafka.settings import KafkaSettings
from podd_restore.settings import RestoreSettings
from replica_agent.settings import AgentSettings
from spark_loader.settings import LoaderSettings

REPO = Path(__file__).resolve().parents[1]
TARGET = REPO / "docs" / "operator" / "settings.md"

#: (title, the class, the commands reading it, what it adds to the classes before it).
SECTIONS: list[tuple[str, type[BaseSettings], str]] = [
    (
        "Kafka (every command that reads or writes the topics)",
        KafkaSettings,
        "`replica-agent`, `podd-origin`, `podd-cdc`, `podd-restore`, `podd-conformance`",
    ),
    (
        "The replica and its loader",
        LoaderSettings,
        "`replica-agent`, `podd-loader`, `podd-restore`",
    ),
    ("The replica agent", AgentSettings, "`replica-agent run`"),
    ("The origin driver", OriginSettings, "`podd-origin run`, `record`, `state`"),
    ("The CDC origin", CdcSettings, "`podd-cdc run`, `schema`"),
    ("Restore", RestoreSettings, "`podd-restore check`, `run`"),
]


@dataclass(frozen=True)
class Setting:
    env: str
    kind: str
    default: str
    bounds: str
    meaning: str


def field_comments(cls: type) -> dict[str, str]:
    """{field: its `#:` comment} for the fields a class itself declares."""
    source = textwrap.dedent(inspect.getsource(cls))
    lines = source.splitlines()
    found = {}
    for node in ast.parse(source).body[0].body:  # type: ignore[attr-defined]
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            comment: list[str] = []
            row = node.lineno - 2
            while row >= 0 and lines[row].strip().startswith("#:"):
                comment.insert(0, lines[row].strip()[2:].strip())
                row -= 1
            found[node.target.id] = " ".join(comment)
    return found


def env_names(cls: type[BaseSettings], name: str, info: FieldInfo) -> list[str]:
    alias = info.validation_alias
    if isinstance(alias, str):
        return [alias]
    if alias is not None:  # AliasChoices: the new name, then the old ones still read
        return [str(choice) for choice in alias.choices]  # type: ignore[union-attr]
    prefix = str(cls.model_config.get("env_prefix", ""))
    return [(prefix + name).upper()]


def _kind(annotation: Any) -> str:
    """A type as an operator reads it: `int`, `path`, `one of: a, b`, `list of str`..."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Annotated:
        return _kind(args[0])
    if origin is typing.Literal:
        return "one of: " + ", ".join(str(a) for a in args)
    if origin in (types.UnionType, typing.Union):
        kinds = [_kind(a) for a in args if a is not type(None)]
        return " or ".join(kinds)
    if origin in (list, dict):
        return f"{origin.__name__} of " + ", ".join(_kind(a) for a in args)
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return "one of: " + ", ".join(str(m.value) for m in annotation)
    names = {"SecretStr": "secret", "Path": "path", "PosixPath": "path"}
    name = getattr(annotation, "__name__", str(annotation))
    return names.get(name, name)


def _default(info: FieldInfo) -> str:
    if info.default_factory is not None:
        value = info.default_factory()  # type: ignore[call-arg]
    elif info.default is PydanticUndefined:
        return "(required)"
    else:
        value = info.default
    if value in (None, "", [], {}):
        return "unset" if value is None else "empty"
    return f"`{getattr(value, 'value', value)}`"


def _bounds(info: FieldInfo) -> str:
    found = []
    for item in info.metadata:
        if isinstance(item, annotated_types.Ge):
            found.append(f"≥ {item.ge}")
        elif isinstance(item, annotated_types.Gt):
            found.append(f"> {item.gt}")
        elif isinstance(item, annotated_types.Le):
            found.append(f"≤ {item.le}")
        elif isinstance(item, annotated_types.Lt):
            found.append(f"< {item.lt}")
    return ", ".join(found)


def settings_of(cls: type[BaseSettings], before: set[str]) -> Iterator[Setting]:
    """The settings `cls` adds to (or redefines from) the classes in `before`."""
    comments: dict[str, str] = {}
    for base in reversed(cls.__mro__):
        if isinstance(base, type) and issubclass(base, BaseSettings) and base is not BaseSettings:
            comments.update({k: v for k, v in field_comments(base).items() if v})
    own = set(field_comments(cls))
    for name, info in cls.model_fields.items():
        if name in before and name not in own:
            continue
        names = env_names(cls, name, info)
        old = f" (also read: {', '.join(f'`{n}`' for n in names[1:])}, for one release)"
        yield Setting(
            env=f"`{names[0]}`" + (old if len(names) > 1 else ""),
            kind=_kind(info.annotation),
            default=_default(info),
            bounds=_bounds(info),
            meaning=comments.get(name, ""),
        )


def render() -> str:
    out = [
        "# Settings",
        "",
        "Generated by `python -m tools.settings_doc` from the settings classes; a test fails",
        "when this page is stale. Every setting is a command-line flag (`--name-with-dashes`)",
        "or an environment variable; a flag wins. Lists take comma-separated values.",
        "Passwords and keys are never logged or echoed in errors.",
        "",
    ]
    seen: set[str] = set()
    for title, cls, commands in SECTIONS:
        rows = list(settings_of(cls, seen))
        seen |= set(cls.model_fields)
        out += [f"## {title}", "", f"Read by {commands}.", ""]
        out += ["| variable | type | default | bounds | meaning |", "|---|---|---|---|---|"]
        for s in rows:
            meaning = s.meaning.replace("|", "\\|")
            out.append(f"| {s.env} | {s.kind} | {s.default} | {s.bounds} | {meaning} |")
        out.append("")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tools.settings_doc", description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the page is stale")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        current = TARGET.read_text() if TARGET.exists() else ""
        if current != text:
            print(f"{TARGET} is stale: run python -m tools.settings_doc", file=sys.stderr)
            return 1
        return 0
    TARGET.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
