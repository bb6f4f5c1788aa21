"""The one pass of the Qlik JSON fast path (`podd_cdc.qlik_fast`): a message read whole as its
table's, with nothing skipped unread. It answers only as the exact path does, answers for the
messages Qlik writes, and steps aside (to the two passes, then the exact path) for the rest."""

from __future__ import annotations

import random
from dataclasses import replace
from typing import Any

import pytest

from podd_cdc.errors import AwaitingMetadata
from podd_cdc.qlik import QlikDecoder
from podd_cdc.qlik_fast import MAX_ONE_PASS_TABLES, REBUILD_PER_TABLE, FastPath, OnePass
from podd_cdc.records import Change
from tests.origin.test_cdc_decode import TYPES, qlik_data, qlik_metadata
from tests.origin.test_cdc_fast_path import PLAIN, _messages, _outcome, _pair
from tools.cdc_write.qlik_writer import QlikWriter
from tools.cdc_write.source import SourceDatabase
from tools.cdc_write.tables import qlik_marketing


def _ready() -> tuple[QlikDecoder, QlikDecoder]:
    """A fast and an exact decoder of table s1, the fast one's one pass made over it."""
    fast, exact = _pair()
    fast.decode("t", qlik_data(PLAIN))  # read in two passes: the table joins the one pass
    assert fast._fast_path.one_pass.due() is not None
    return fast, exact


def _decided(decoder: QlikDecoder, value: bytes) -> Any:
    try:
        return _outcome(decoder, value)
    except AwaitingMetadata as exc:
        return ("waits", exc.key)


def _one_pass(decoder: QlikDecoder, value: bytes) -> Change | None:
    fast: FastPath = decoder._fast_path
    assert fast.one_pass.decoder is not None
    return fast._in_one_pass(fast.one_pass.decoder, value)


@pytest.mark.parametrize("value", _messages())
def test_the_one_pass_answers_only_as_the_exact_path_does(value: bytes) -> None:
    fast, exact = _ready()
    change = _one_pass(fast, value)
    if change is not None:
        assert change == _outcome(exact, value)


def test_the_one_pass_reads_the_messages_qlik_writes() -> None:
    fast, exact = _ready()
    written = [
        qlik_data(PLAIN),
        qlik_data(PLAIN, mask="7FF"),
        qlik_data(dict(PLAIN, K=8), op="UPDATE", before=PLAIN),
        qlik_data(PLAIN, op="REFRESH"),
        qlik_data({"K": 7}, op="DELETE"),
        qlik_data(PLAIN, op="DELETE", before=PLAIN),
        qlik_data(dict(PLAIN, S="é"), op="UPDATE", before=PLAIN),
        qlik_data(PLAIN).replace(b'"headers": {', b'"headers": {"streamPosition": "1.2", '),
    ]
    for value in written:
        change = _one_pass(fast, value)
        assert change is not None, value
        assert change == exact.decode("t", value)
    answered = [m for m in _messages() if _one_pass(fast, m) is not None]
    assert len(answered) > len(_messages()) // 3


@pytest.mark.parametrize(
    "value",
    [
        qlik_data(PLAIN).replace(b'"abc"', b'"a\xffc"'),  # not UTF-8 in a value
        qlik_data(PLAIN).replace(b'"headers": {', b'"headers": {"streamPosition": "\xff", '),
        qlik_data(PLAIN).replace(b'"headers": {', b'"headers": {"newHeader": "\xff", '),
        qlik_data(PLAIN).replace(b'"magic"', b'"x": "\xfe", "magic"'),
        qlik_data({"K": 7}, op="DELETE", before={}),  # an empty beforeData: read as none
        # No messageSchemaId: bad input, though one table only is in the one pass.
        qlik_data(PLAIN).replace(b'"messageSchemaId": "s1", ', b""),
        qlik_data(PLAIN).replace(b'"s1"', b'"\\u0000 no table"'),
        # The table named twice: the exact path takes the last, which names no known table.
        qlik_data(PLAIN).replace(
            b'"messageSchemaId": "s1"', b'"messageSchemaId": "s1", "messageSchemaId": "s9"'
        ),
    ],
)
def test_what_the_one_pass_leaves_is_decided_as_the_exact_path_does(value: bytes) -> None:
    fast, exact = _ready()
    assert _one_pass(fast, value) is None
    assert _decided(fast, value) == _decided(exact, value)


def test_a_table_described_again_is_not_read_by_its_old_description() -> None:
    """Table s1 described again, column D now text: until the one pass is made again, its
    messages are read in two passes, by the new description."""
    fast, exact = _ready()
    retyped = dict(TYPES, D=("STRING", 10, 0, 0, 0))
    for decoder in (fast, exact):
        decoder.decode("t", qlik_metadata(retyped))
    value = qlik_data(PLAIN)
    assert _one_pass(fast, value) is None
    change = fast.decode("t", value)
    assert change == exact.decode("t", value)
    assert isinstance(change, Change)
    assert change.rows[0].values[6] == "2023-03-21"


def test_the_one_pass_is_made_again_within_its_bound() -> None:
    """A table joining after the decoder was made joins it only after the bound's messages;
    tables beyond the cap stay in two passes."""
    one_pass = OnePass()
    reader = _ready()[0]._fast_path._reader("s1")
    one_pass.join("s1", reader)
    first = one_pass.due()
    assert first is not None
    one_pass.join("s2", reader)
    for _ in range(REBUILD_PER_TABLE - 1):
        assert one_pass.due() is first
    second = one_pass.due()
    assert second is not first
    assert len(one_pass.members) == 2
    for n in range(MAX_ONE_PASS_TABLES + 5):
        one_pass.join(f"t{n}", reader)
    assert len(one_pass._wanted) == MAX_ONE_PASS_TABLES


def test_mutated_messages_of_many_tables_are_decided_as_the_exact_path_does() -> None:
    """Messages of ten tables as the CDC writer makes them, each with one byte-level
    mutation (a token inserted, replaced or a few bytes deleted): the fast path, its one
    pass over all ten tables made, answers each as the exact path does."""
    keyed = [t for t in qlik_marketing() if t.key]
    tables = tuple(replace(keyed[i % len(keyed)], name=f"T{i}") for i in range(10))
    db = SourceDatabase(tables, seed=3, null_ratio=0.1, key_change_ratio=0.05)
    writer = QlikWriter(tables, partitions=1, seed=3)
    written = [*writer.metadata(), *writer.transactions([db.transaction(40) for _ in range(10)])]
    fast, exact = QlikDecoder(), QlikDecoder(fast=False)
    for message in written:
        assert _decided(fast, message.value) == _decided(exact, message.value)
    fast._fast_path.one_pass._until = 0  # made again now, not after the rebuild bound
    assert fast._fast_path.one_pass.due() is not None
    assert len(fast._fast_path.one_pass.members) == 10
    data = [m.value for m in written if b'"DT"' in m.value[:40]]
    tokens = [b'"', b"\\", b"{", b"}", b",", b":", b"null", b"1e999", b"9" * 25, b"\xff", b" "]
    tokens += [b'"data": null', b'"beforeData": {}', b'"messageSchemaId": "x", ']
    rng = random.Random(5)
    answered = 0
    for _ in range(3_000):
        value = bytearray(rng.choice(data))
        at = rng.randrange(len(value))
        cut = rng.random()
        if cut < 0.3:
            del value[at : at + rng.randint(1, 5)]
        else:
            value[at : at + (cut >= 0.6)] = rng.choice(tokens)
        mutated = bytes(value)
        assert _decided(fast, mutated) == _decided(exact, mutated), mutated
        answered += _one_pass(fast, mutated) is not None
    assert answered > 100  # the one pass answered some, so the comparison means something
