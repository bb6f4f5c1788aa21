"""The `.avsc` files shipped with the package, loaded and parsed once."""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from typing import Any

import fastavro

SCHEMA_NAMES = (
    "DeltaInKey",
    "DeltaInResult",
    "DeltaRequest",
    "DeltaState",
    "BackupKey",
    "ChangelogRecord",
)


@cache
def schema_json(name: str) -> dict[str, Any]:
    """The schema as written in `protocol/schemas/NAME.avsc`."""
    if name not in SCHEMA_NAMES:
        raise KeyError(f"no shipped schema {name!r}")
    text = resources.files("protocol").joinpath("schemas", f"{name}.avsc").read_text("utf-8")
    loaded: dict[str, Any] = json.loads(text)
    return loaded


@cache
def parsed_schema(name: str) -> Any:
    """The schema parsed by fastavro, ready for reading and writing."""
    return fastavro.parse_schema(schema_json(name))


def canonical_form(schema: Any) -> str:
    """Avro Parsing Canonical Form, for comparing schemas."""
    return str(fastavro.schema.to_parsing_canonical_form(schema))
