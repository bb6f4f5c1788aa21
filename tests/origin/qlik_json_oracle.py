"""The judge of the Qlik batch reader (`podd_cdc.qlik_batch`): what Python's own strict
reading of a message (`bytes.decode`, then `json.loads`) says it holds, in the reader's
terms, and messages written pair by pair, so that a key can be given twice.

`expected` answers None where the message is not JSON, or not of the shape the reader reads
(a data message's envelope, headers of their JSON types, flat rows of null, text, boolean
and number values, no key twice in one object).
"""

from __future__ import annotations

import json
from typing import Any

from podd_cdc.qlik_batch import HEADER_TEXTS, ReadMessage

INT64 = range(-(2**63), 2**63)


class Pairs(list[tuple[str, Any]]):
    """A JSON object as written: its pairs in order, a key given twice kept twice."""


def _value(value: Any, ascii_only: bool) -> str:
    if isinstance(value, Pairs):
        inner = (
            f"{json.dumps(k, ensure_ascii=ascii_only)}: {_value(v, ascii_only)}" for k, v in value
        )
        return "{" + ", ".join(inner) + "}"
    return json.dumps(value, ensure_ascii=ascii_only)


def written(message: Pairs, *, ascii_only: bool = False) -> bytes:
    """`message` as JSON bytes, objects' pairs in their order."""
    return _value(message, ascii_only).encode()


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is no JSON number")


def _parsed(raw: bytes) -> Any:
    try:
        return json.loads(raw.decode("utf-8"), object_pairs_hook=Pairs, parse_constant=_no_constant)
    except ValueError:
        return None


def _unique(obj: Any) -> dict[str, Any] | None:
    if not isinstance(obj, Pairs):
        return None
    found = dict(obj)
    return found if len(found) == len(obj) else None


def _flat(value: Any) -> bool:
    return value is None or isinstance(value, str | int | float)  # bool is an int


def _row(obj: Any) -> list[tuple[str, Any]] | bool | None:
    """A row's pairs; None for null; False where the reader must not read it."""
    if obj is None:
        return None
    fields = _unique(obj)
    if fields is None or not all(map(_flat, fields.values())):
        return False
    return list(obj)


def _headers(obj: Any) -> dict[str, Any] | None:
    fields = _unique(obj)
    if fields is None:
        return None
    kept: dict[str, Any] = {}
    for name, value in fields.items():
        if name in HEADER_TEXTS:
            good = value is None or isinstance(value, str)
        elif name == "transactionEventCounter":
            good = value is None or (type(value) is int and value in INT64)
        elif name == "transactionLastEvent":
            good = value is None or isinstance(value, bool)
        else:
            good = False
        if not good:
            return None
        if value is not None:
            kept[name] = value
    return kept


def _message(obj: Any) -> tuple[dict[str, Any], Any, Any] | None:
    fields = _unique(obj)
    if fields is None or not set(fields) <= {"headers", "data", "beforeData"}:
        return None
    headers = _headers(fields["headers"]) if "headers" in fields else {}
    data, before = _row(fields.get("data")), _row(fields.get("beforeData"))
    if headers is None or data is False or before is False:
        return None
    return headers, data, before


def expected(raw: bytes) -> ReadMessage | None:
    """What the reader must make of `raw` if it reads it; None if it must not read it."""
    envelope = _unique(_parsed(raw))
    allowed = {"magic", "type", "messageSchemaId", "messageSchema", "headers", "message"}
    if envelope is None or not set(envelope) <= allowed:
        return None
    schema_id = envelope.get("messageSchemaId")
    if (
        envelope.get("magic", "atMSG") != "atMSG"
        or envelope.get("type", "DT") != "DT"
        or ("messageSchemaId" in envelope and not isinstance(schema_id, str))
        or envelope.get("messageSchema") is not None
        or envelope.get("headers") is not None
    ):
        return None
    message = _message(envelope["message"]) if "message" in envelope else ({}, None, None)
    if message is None:
        return None
    headers, data, before = message
    return ReadMessage(schema_id, headers, data, before, has_message="message" in envelope)
