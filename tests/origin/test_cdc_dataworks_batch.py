"""A batch of DataWorks messages read on arrays (`podd_cdc.dataworks_batch`, its kernel, and
`dataworks_batch_changes`) is the exact decoder's reading: what the kernel reads, it reads as
JSON does; every change, heartbeat and marker the batch is sure of, the exact decoder makes
the same of (`DataWorksDecoder.decode`); and the messages DataWorks writes, it is sure of.
Held to it over the writer's messages and over mutations of them (hostile bytes, escapes,
keys given twice or unknown, values of every wrong kind, ids and times out of range)."""

from __future__ import annotations

import contextlib
import json
import random
from typing import Any

import numpy as np
import pytest

from podd_cdc import dataworks_batch_kernel as kernel
from podd_cdc.dataworks import DataWorksDecoder
from podd_cdc.dataworks_batch import read_batch, tables_of
from podd_cdc.dataworks_batch_changes import change, heartbeats, markers, tables_changes
from podd_cdc.errors import BadInput
from podd_cdc.records import Heartbeat, Record, Skipped
from tools.cdc_write.dataworks_writer import DataWorksWriter
from tools.cdc_write.source import SourceDatabase
from tools.cdc_write.tables import dataworks_marketing


def _written(seed: int = 0, count: int = 60) -> list[bytes]:
    """DataWorks' messages of some transactions: inserts, updates as two messages and as
    one, deletes, key changes, NULLs, markers, heartbeats, a table without a key."""
    tables = dataworks_marketing()
    db = SourceDatabase(tables, seed=seed, null_ratio=0.2, key_change_ratio=0.1)
    writer = DataWorksWriter(
        tables, partitions=1, heartbeat_every=20, one_record_ratio=0.4, marker_ratio=0.3, seed=seed
    )
    return [w.value for w in writer.transactions(db.transaction(5) for _ in range(count))]


def _decoder(messages: list[bytes]) -> DataWorksDecoder:
    """A decoder that has read each message (and so learnt their schemas)."""
    decoder = DataWorksDecoder()
    for value in messages:
        with contextlib.suppress(BadInput):
            decoder.decode("t", value)
    return decoder


def _outcome(decoder: DataWorksDecoder, value: bytes) -> Record | str:
    try:
        return decoder.decode("t", value)
    except BadInput as exc:
        return f"bad: {exc.reason}"


def _sure(messages: list[bytes], decoder: DataWorksDecoder) -> list[Record | None]:
    """What the batch is sure each message is (None: the exact decoder's to decide), each
    held to the exact decoder's record."""
    batch = read_batch(messages)
    tables, placed = tables_of(batch, decoder.known_table)
    found: list[Record | None] = [None] * len(messages)
    groups = [(table, np.nonzero(placed == k)[0]) for k, table in enumerate(tables)]
    for (table, _), made in zip(groups, tables_changes(batch, groups), strict=True):
        for r, m in enumerate(made.messages.tolist()):
            if made.sure[r]:
                found[m] = change(batch, table, made, r)
    beats, times = heartbeats(batch, placed)
    for m, ms in zip(beats.tolist(), times.tolist(), strict=True):
        found[m] = Heartbeat(ms)
    for m in markers(batch, placed).tolist():
        found[m] = Skipped(kernel.OPERATIONS[int(batch.heads[m, kernel.M_OP])])
    for m, record in enumerate(found):
        if record is not None:
            assert _outcome(decoder, messages[m]) == record, messages[m]
    return found


def _as_json_reads(batch: Any, m: int, value: bytes) -> None:
    """Message `m`, read by the kernel, says what `json.loads` reads of it."""
    read = batch.message(m)
    obj = json.loads(value)
    payload = obj["payload"]
    assert read.operation == payload["op"]
    for side, fields in (("after", read.after), ("before", read.before)):
        image = payload.get(side)
        assert (fields is None) == (image is None), side
        if fields is not None:
            assert dict(fields) == image["dataColumn"]
            assert len(fields) == len(image["dataColumn"])
    for name, got in (("sequenceId", read.sequence),):
        if got is not None:
            assert got == int(payload[name])
    if read.event_ms is not None:
        assert read.event_ms == int(payload["timestamp"]["eventTime"])
    schema = obj.get("schema")
    assert (read.schema is None) == (schema is None)
    if read.schema is not None:
        assert json.loads(read.schema) == schema


def test_the_messages_dataworks_writes_are_sure_and_the_exact_decoders() -> None:
    messages = _written()
    found = _sure(messages, _decoder(messages))
    assert all(record is not None for record in found)
    batch = read_batch(messages)
    for m, value in enumerate(messages):
        _as_json_reads(batch, m, value)


def test_a_schema_not_learnt_leaves_its_messages_to_the_exact_decoder() -> None:
    messages = _written()
    found = _sure(messages, DataWorksDecoder())  # has learnt nothing
    for record, value in zip(found, messages, strict=True):
        assert record is None or json.loads(value)["schema"] is None  # heartbeats, markers


def _mutations(value: bytes, rng: random.Random) -> list[bytes]:
    """Hostile and odd spellings of a message."""
    text = value.decode()
    obj = json.loads(value)
    payload = obj["payload"]
    made = [
        value[: len(value) // 2],
        value + b" x",
        b"  \n" + value + b"\t",
        value.replace(b'"payload"', b'"payload": {}, "payload"', 1),
        value.replace(b'"version"', b'"extra": 1, "version"', 1),
        value.replace(b'"op"', b'"op": "INSERT", "op"', 1),
        value.replace(b'"ddl": null', b'"ddl": {"text": "x"}', 1),
        value.replace(b'"1.0"', b'"\\u0031.0"', 1),
        value.replace(b'"1.0"', b'"\xff"', 1),
        value.replace(b'"1.0"', b"[1]", 1),
        value.replace(b'"dataColumn": {', b'"dataColumn": {"id": 1, ', 1),
        value.replace(b'"dataColumn": {', b'"dataColumn": {"nope": 1, ', 1),
        value.replace(b'"dataColumn": {', b'"dataColumn": {"nested": {"a": 1}, ', 1),
        value.replace(b'{"dataColumn"', b'{"other": 1, "dataColumn"', 1),
        value.replace(b'"eventTime": ', b'"eventTime": -', 1),
        value.replace(b'"eventTime": ', b'"eventTime": 1e3, "x": ', 1),
        text.replace('"eventTime": ', '"eventTime": 999999999999999999, "y": ', 1).encode(),
        value.replace(b'"sequenceId": "', b'"sequenceId": "99999999999999999999', 1),
        value.replace(b'"sequenceId": "', b'"sequenceId": " ', 1),
        value.replace(b'"sequenceId": "', b'"sequenceId": "x', 1),
    ]
    for side in ("after", "before"):
        image = payload.get(side)
        if image is None:
            continue
        for column in list(image["dataColumn"]):
            for odd in (None, "7", 7, 1.5, True, "", "\x00", [1], 2**70, -1, "QUJD", "QQ=", 1e300):
                changed = json.loads(value)
                changed["payload"][side]["dataColumn"][column] = odd
                made.append(json.dumps(changed, ensure_ascii=False).encode())
            changed = json.loads(value)
            del changed["payload"][side]["dataColumn"][column]
            made.append(json.dumps(changed).encode())
        changed = json.loads(value)
        changed["payload"][side] = {}
        made.append(json.dumps(changed).encode())
    for key in ("before", "after", "sequenceId", "timestamp", "op", "schema"):
        changed = json.loads(value)
        changed["payload" if key != "schema" else "x"] = changed.get("payload")
        changed["payload"].pop(key, None)
        made.append(json.dumps(changed).encode())
    for _ in range(10):
        at = rng.randrange(len(value))
        made.append(value[:at] + bytes([rng.randrange(256)]) + value[at + 1 :])
    return made


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_what_the_batch_is_sure_of_in_odd_and_hostile_messages_is_the_exact_decoders(
    seed: int,
) -> None:
    rng = random.Random(seed)
    written = _written(seed, 12)
    decoder = _decoder(written)
    mutated = [m for value in written for m in _mutations(value, rng)]
    found = _sure(mutated, decoder)
    batch = read_batch(mutated)
    _, placed = tables_of(batch, decoder.known_table)
    vouched = batch.read & ((batch.heads[:, kernel.M_SCHEMA] < 0) | (placed >= 0))
    for m in np.nonzero(vouched)[0].tolist():  # a schema not learnt is bytes not read
        _as_json_reads(batch, m, mutated[m])
    assert 0 < sum(r is not None for r in found) < len(mutated)  # some read, some not
