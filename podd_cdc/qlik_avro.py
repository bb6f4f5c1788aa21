"""The Avro schemas of Qlik Replicate's envelope and metadata message (docs/contracts/CDC.md).

The envelope is Qlik's published `MessageEnvelope`. The metadata record is the team's reading
of Qlik's `MetadataMessage` (the fields CDC.md names); a data message is written with the
`dataSchema` its metadata carries, or the envelope's own `messageSchema`.
"""

from __future__ import annotations

from typing import Any

import fastavro
import orjson

MAGIC = b"atMSG"

ENVELOPE: dict[str, Any] = {
    "type": "record",
    "name": "MessageEnvelope",
    "fields": [
        {"name": "magic", "type": {"type": "fixed", "name": "Magic", "size": 5}},
        {"name": "type", "type": "string"},
        {"name": "headers", "type": ["null", {"type": "map", "values": "string"}]},
        {"name": "messageSchemaId", "type": ["null", "string"]},
        {"name": "messageSchema", "type": ["null", "string"]},
        {"name": "message", "type": "bytes"},
    ],
}

_COLUMN = {
    "type": "record",
    "name": "TableColumn",
    "fields": [
        {"name": "ordinal", "type": "int"},
        {"name": "type", "type": "string"},
        {"name": "length", "type": "int"},
        {"name": "precision", "type": "int"},
        {"name": "scale", "type": "int"},
        {"name": "primaryKeyPosition", "type": "int"},
    ],
}

METADATA: dict[str, Any] = {
    "type": "record",
    "name": "MetadataMessage",
    "fields": [
        {"name": "schemaId", "type": "string"},
        {
            "name": "lineage",
            "type": {
                "type": "record",
                "name": "Lineage",
                "fields": [
                    {"name": n, "type": t}
                    for n, t in (
                        ("server", "string"),
                        ("task", "string"),
                        ("schema", "string"),
                        ("table", "string"),
                        ("tableVersion", "int"),
                        ("timestamp", "string"),
                    )
                ],
            },
        },
        {
            "name": "tableStructure",
            "type": {
                "type": "record",
                "name": "TableStructure",
                "fields": [{"name": "tableColumns", "type": {"type": "map", "values": _COLUMN}}],
            },
        },
        {"name": "dataSchema", "type": "string"},
    ],
}

PARSED_ENVELOPE = fastavro.parse_schema(ENVELOPE)
PARSED_METADATA = fastavro.parse_schema(METADATA)


def writer_schema(text: str) -> Any:
    """A data message's writer schema (a metadata `dataSchema`, an envelope's
    `messageSchema`) from its JSON text; ValueError if it is none. Both may be hostile:
    orjson reads the text, refusing more than 1,024 levels (json raised RecursionError from
    about 1,000), and anything fastavro raises on a bad schema is caught, as it raises many
    types (its SchemaParseException is no ValueError)."""
    try:
        return fastavro.parse_schema(orjson.loads(text))
    except Exception as exc:  # hostile text: orjson's and fastavro's errors alike
        raise ValueError(f"not an Avro schema: {exc}"[:200]) from None
