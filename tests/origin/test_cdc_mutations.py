"""No message crashes a CDC decoder: the writers' messages, with values replaced at random
depths by hostile JSON (other types, non-ASCII digits, huge numbers, NUL, empty text), are
decoded or refused with a typed error, never an uncaught exception. An uncaught one stops the
origin, and, the message staying where it is, at every restart. Pure: no Kafka."""

from __future__ import annotations

import copy
import io
import json
import random
from typing import Any, Literal

import fastavro
import pytest

from podd_cdc.dataworks import DataWorksDecoder
from podd_cdc.errors import AwaitingMetadata, BadInput
from podd_cdc.qlik import QlikDecoder
from podd_cdc.qlik_avro import MAGIC, PARSED_ENVELOPE
from podd_cdc.records import TableSeen
from tools.cdc_write.dataworks_writer import DataWorksWriter
from tools.cdc_write.qlik_writer import QlikWriter
from tools.cdc_write.source import SourceDatabase
from tools.cdc_write.tables import dataworks_marketing, qlik_every_type, qlik_marketing

HOSTILE: list[Any] = [
    "²",
    "١٢",
    "\U0001d7d9\U0001d7da",  # mathematical double-struck digits one and two
    "1e400",
    "9" * 50,
    "-0",
    "+5",
    "1_000",
    "0x1F",
    "NaN",
    "",
    " ",
    "\u0000",
    "2023-13-45",
    1e308,
    1.5,
    -1,
    2**70,
    -(2**70),
    True,
    None,
    [],
    ["INSERT"],
    {},
    {"op": "INSERT"},
]
MUTATIONS = 4000


def _mutate(obj: Any, rng: random.Random) -> None:
    """Replace one value at a random depth of `obj` (an object or an array)."""
    node = obj
    for _ in range(rng.randint(0, 4)):
        children = list(node.values()) if isinstance(node, dict) else node
        nested = [c for c in children if isinstance(c, dict | list) and c]
        if not nested:
            break
        node = rng.choice(nested)
    value = copy.deepcopy(rng.choice(HOSTILE))  # never the list itself: it would be mutated
    if isinstance(node, dict) and node:
        node[rng.choice(list(node))] = value
    elif isinstance(node, list) and node:
        node[rng.randrange(len(node))] = value


def _messages(
    fmt: str, encoding: Literal["json", "avro"] = "json", seed: int = 31
) -> tuple[list[bytes], list[bytes]]:
    """The metadata (Qlik) and the data messages of a small source, each as written decoded
    once by `_decoder`."""
    if fmt == "qlik":
        tables = (*qlik_marketing(), qlik_every_type())
        db = SourceDatabase(tables, seed=seed)
        qlik = QlikWriter(tables, encoding=encoding, seed=seed)
        changes = qlik.transactions(db.transaction(db.rng.randint(1, 5)) for _ in range(300))
        return [w.value for w in qlik.metadata()], [w.value for w in changes]
    db = SourceDatabase(dataworks_marketing(), seed=seed)
    dataworks = DataWorksWriter(dataworks_marketing(), seed=seed)
    changes = dataworks.transactions(db.transaction(db.rng.randint(1, 5)) for _ in range(300))
    return [], [w.value for w in changes]


def _decoder(fmt: str, metadata: list[bytes], data: list[bytes]) -> QlikDecoder | DataWorksDecoder:
    """The format's decoder, having read the messages as written (each decodes)."""
    decoder = QlikDecoder() if fmt == "qlik" else DataWorksDecoder()
    for value in [*metadata, *data]:
        decoder.decode("t", value)
    return decoder


def _refused(decoder: QlikDecoder | DataWorksDecoder, value: bytes) -> bool:
    """Whether `value` is refused with a typed error; decoded, it is not. Anything else that
    escapes fails the test."""
    try:
        decoder.decode("t", value)
    except (BadInput, AwaitingMetadata):
        return True
    except Exception as exc:  # the point: nothing else may escape
        pytest.fail(f"{type(exc).__name__}: {exc} on {value[:300]!r}")
    return False


@pytest.mark.parametrize("fmt", ["qlik", "dataworks"])
def test_a_mutated_message_is_decoded_or_refused_with_a_typed_error(fmt: str) -> None:
    metadata, data = _messages(fmt)
    decoder = _decoder(fmt, metadata, data)
    rng = random.Random(fmt)
    refused = 0
    for n in range(MUTATIONS):
        # Qlik: one in five a table's metadata (its ordinals once made numbers of any size)
        obj = json.loads(rng.choice(metadata if metadata and n % 5 == 0 else data))
        for _ in range(rng.randint(1, 3)):
            _mutate(obj, rng)
        refused += _refused(decoder, json.dumps(obj).encode())
    assert refused > MUTATIONS // 10  # the mutations reach what is checked


def _flip(value: bytes, rng: random.Random) -> bytes:
    """A few bytes of `value` replaced, dropped or inserted."""
    out = bytearray(value)
    for _ in range(rng.randint(1, 4)):
        at, kind = rng.randrange(len(out)), rng.random()
        if kind < 0.6:
            out[at] = rng.randrange(256)
        elif kind < 0.8:
            del out[at : at + rng.randint(1, 8)]
        else:
            out[at:at] = rng.randbytes(rng.randint(1, 8))
    return bytes(out)


def test_a_mutated_qlik_avro_message_is_decoded_or_refused_with_a_typed_error() -> None:
    """Bytes flipped in Avro envelopes, metadata and data: a metadata message whose
    `dataSchema` fastavro refused raised its SchemaParseException, uncaught."""
    metadata, data = _messages("qlik", encoding="avro", seed=37)
    decoder = _decoder("qlik", metadata, data)
    rng = random.Random("avro")
    for n in range(MUTATIONS):
        _refused(decoder, _flip(rng.choice(metadata if n % 5 == 0 else data), rng))


def _nested_schema(depth: int) -> str:
    text = '"int"'
    for level in range(depth):
        field = f'{{"name": "f", "type": {text}}}'
        text = f'{{"type": "record", "name": "r{level}", "fields": [{field}]}}'
    return text


def test_a_writer_schema_nested_past_the_json_bound_is_bad_input() -> None:
    """An envelope's `messageSchema` 400 records deep: `json.loads` raised RecursionError."""
    tables = qlik_marketing()
    writer = QlikWriter(tables, encoding="avro", seed=41)
    decoder = QlikDecoder()
    for written in writer.metadata():
        decoder.decode("t", written.value)
    envelope = io.BytesIO()
    fastavro.schemaless_writer(
        envelope,
        PARSED_ENVELOPE,
        {
            "magic": MAGIC,
            "type": "DT",
            "headers": None,
            "messageSchemaId": writer.schema_id(tables[0]),
            "messageSchema": _nested_schema(400),
            "message": b"\x00",
        },
    )
    with pytest.raises(BadInput, match="messageSchema: not an Avro schema"):
        decoder.decode("t", envelope.getvalue())


def test_a_metadata_data_schema_fastavro_refuses_is_left_unused() -> None:
    """A JSON task may write any text as `dataSchema`; one fastavro refused (a record
    without a name) raised its SchemaParseException, uncaught. The table is learnt."""
    tables = qlik_marketing()
    (first, *_) = QlikWriter(tables, seed=43).metadata()
    message = json.loads(first.value)
    message["message"]["dataSchema"] = '{"type": "record", "fields": []}'
    seen = QlikDecoder().decode("t", json.dumps(message).encode())
    assert isinstance(seen, TableSeen)
