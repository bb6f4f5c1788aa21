"""The Qlik batch reader (`podd_cdc.qlik_batch`): it reads a message only as Python's strict
JSON reading does (`tests.origin.qlik_json_oracle`), it reads the plain messages Qlik
writes, and a message it does not read leaves nothing behind for the messages beside it."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from podd_cdc import json_rows
from podd_cdc.qlik_batch import HEADER_TEXTS, read_batch
from tests.origin.qlik_json_oracle import Pairs, expected, written
from tests.origin.test_cdc_fast_path import _messages

pytestmark = pytest.mark.slow

_HEADERS = Pairs(
    [
        ("operation", "UPDATE"),
        ("changeSequence", "20231114221320030000000000000000043"),
        ("timestamp", "2023-11-14T22:13:20.038"),
        ("streamPosition", "00f;1"),
        ("transactionId", "00A"),
        ("transactionEventCounter", 2),
        ("transactionLastEvent", False),
        ("columnMask", "03"),
        ("changeMask", "02"),
    ]
)


def _plain(data: Pairs | None = None, **envelope: Any) -> Pairs:
    row = Pairs([("ID", 7), ("NAME", 'a"b/c é'), ("GONE", None)]) if data is None else data
    message = Pairs([("data", row), ("beforeData", None), ("headers", _HEADERS)])
    top = {"magic": "atMSG", "type": "DT", "messageSchemaId": "t-v1-x", "headers": None}
    return Pairs([*(top | envelope).items(), ("message", message)])


PLAIN = written(_plain())


def _judged(messages: list[bytes], must_read: list[bool] | None = None) -> None:
    """Every message the reader reads, it reads as the oracle does; the oracle's plain ones
    (`must_read`) it reads."""
    batch = read_batch(messages)
    for m, raw in enumerate(messages):
        got = batch.message(m)
        if got is not None:
            assert got == expected(raw), raw
        if must_read is not None and must_read[m]:
            assert got is not None, raw
    kept = set(batch.fields[:, json_rows.F_MSG].tolist())
    assert kept <= {m for m in range(len(messages)) if batch.read[m]}


def test_a_plain_message_is_read_with_its_headers_and_fields() -> None:
    batch = read_batch([PLAIN, PLAIN])
    assert batch.read.tolist() == [True, True]
    got = batch.message(1)
    assert got is not None
    assert got == expected(PLAIN)
    assert got.schema_id == "t-v1-x"
    assert got.headers == dict(_HEADERS)
    assert got.data == [("ID", 7), ("NAME", 'a"b/c é'), ("GONE", None)]
    assert got.before is None
    assert set(got.headers) == {*HEADER_TEXTS, "transactionEventCounter", "transactionLastEvent"}


_ROW = '"data": {"ID": 7, '
REFUSED = {
    "a lone surrogate escape": PLAIN.replace(b'"a\\"b', b'"\\ud800'),
    "a low surrogate escape first": PLAIN.replace(b'"a\\"b', b'"\\udc00\\ud800'),
    "a high surrogate escape before another escape": PLAIN.replace(b'"a\\"b', b'"\\ud800\\n'),
    "a short escape": PLAIN.replace(b'"a\\"b', b'"\\u00e'),
    "an escape of no hex digits": PLAIN.replace(b'"a\\"b', b'"\\u00g9'),
    "not UTF-8": PLAIN.replace(b'a\\"b', b"\xffb"),
    "a cut UTF-8 sequence": PLAIN.replace(b'a\\"b', "é".encode()[:1] + b"b"),
    "overlong 3-byte": PLAIN.replace(b'a\\"b', b"\xe0\x80\xafb"),
    "overlong 4-byte": PLAIN.replace(b'a\\"b', b"\xf0\x80\x80\xafb"),
    "a surrogate": PLAIN.replace(b'a\\"b', b"\xed\xa0\x80b"),
    "past U+10FFFF": PLAIN.replace(b'a\\"b', b"\xf4\x90\x80\x80b"),
    "a lead past F4": PLAIN.replace(b'a\\"b', b"\xf5\x80\x80\x80b"),
    "a control character": PLAIN.replace(b'"a\\"b', b'"\x01a'),
    "a leading zero": PLAIN.replace(b'"ID": 7', b'"ID": 07'),
    "a fraction without digits": PLAIN.replace(b'"ID": 7', b'"ID": 7.'),
    "a fraction without a whole part": PLAIN.replace(b'"ID": 7', b'"ID": .5'),
    "an exponent without digits": PLAIN.replace(b'"ID": 7', b'"ID": 7e+'),
    "a sign alone": PLAIN.replace(b'"ID": 7', b'"ID": -'),
    "a plus sign": PLAIN.replace(b'"ID": 7', b'"ID": +7'),
    "NaN": PLAIN.replace(b'"ID": 7', b'"ID": NaN'),
    "Infinity": PLAIN.replace(b'"ID": 7', b'"ID": -Infinity'),
    "a counter with a fraction": PLAIN.replace(
        b'"transactionEventCounter": 2', b'"transactionEventCounter": 2.5'
    ),
    "a counter past int64": PLAIN.replace(
        b'"transactionEventCounter": 2', b'"transactionEventCounter": 9223372036854775808'
    ),
    "a nested object": PLAIN.replace(b'"ID": 7', b'"ID": {"deep": 1}'),
    "a list": PLAIN.replace(b'"ID": 7', b'"ID": [7]'),
    "a trailing comma": PLAIN.replace(b'"GONE": null', b'"GONE": null,'),
    "a field twice": PLAIN.replace(b'"ID": 7', b'"ID": 7, "ID": 8'),
    "a field twice in a wide row": PLAIN.replace(
        b'"ID": 7',
        b'"ID": 7, ' + b", ".join(b'"c%d": %d' % (k, k) for k in range(40)) + b', "ID": 8',
    ),
    "a header twice": PLAIN.replace(
        b'"columnMask": "03"', b'"columnMask": "03", "columnMask": "01"'
    ),
    "data twice": PLAIN.replace(b'"beforeData": null', b'"data": null'),
    "an envelope key twice": PLAIN.replace(b'"type": "DT"', b'"type": "DT", "type": "DT"'),
    "a wrong magic": written(_plain(magic="atMSX")),
    "a metadata type": written(_plain(type="MD")),
    "a numeric schema id": written(_plain(messageSchemaId=7)),
    "an unknown envelope key": written(_plain(other="field")),
    "an unknown header": PLAIN.replace(b'"columnMask"', b'"unknownHeader"'),
    "a broken literal": PLAIN.replace(
        b'"transactionLastEvent": false', b'"transactionLastEvent": fals'
    ),
    "a literal misspelt": PLAIN.replace(b'"GONE": null', b'"GONE": nul1'),
    "a counter as text": PLAIN.replace(
        b'"transactionEventCounter": 2', b'"transactionEventCounter": "2"'
    ),
    "truncated": PLAIN[:-1],
    "cut after a key": PLAIN[: PLAIN.index(b'"ID":') + 5],
    "trailing bytes": PLAIN + b" x",
    "more fields than there is room for": written(_plain(Pairs([("", 1)] * 10_000))),
}


@pytest.mark.parametrize("message", REFUSED.values(), ids=REFUSED.keys())
def test_what_the_reader_is_not_sure_of_is_not_read(message: bytes) -> None:
    batch = read_batch([PLAIN, message, PLAIN])
    assert message != PLAIN
    assert batch.read.tolist() == [True, False, True]
    assert batch.message(1) is None
    # no field of the message not read is kept, and the next message's are whole
    assert sorted(batch.fields[:, json_rows.F_MSG].tolist()) == [0, 0, 0, 2, 2, 2]
    assert batch.message(2) == expected(PLAIN)


def test_the_hostile_and_edge_messages_of_the_fast_path_are_read_only_as_json_reads_them() -> None:
    corpus = _messages()
    _judged(corpus)
    assert read_batch(corpus).read.sum() > len(corpus) // 2  # most are plain Qlik messages


def test_arrays_full_of_garbage_change_nothing() -> None:
    """The reader sets every cell it hands on: arrays that come full of a far index read the
    same as zeroed ones."""
    messages = [PLAIN, REFUSED["a field twice"], written(_plain(Pairs()))]

    def garbage(shape: Any, dtype: Any) -> Any:
        return np.full(shape, 7 if dtype == np.uint8 else 10**12, dtype)

    clean, dirty = read_batch(messages, np.zeros), read_batch(messages, garbage)
    assert [dirty.message(m) for m in range(3)] == [clean.message(m) for m in range(3)]


_PRINTABLE = st.text(st.characters(exclude_categories=("Cc", "Cs")), max_size=12)
_ANY_FLAT = st.one_of(
    st.none(), st.text(max_size=12), st.integers(), st.booleans(), st.floats(), st.just([1])
)
_ROW_VALUE = st.one_of(
    st.none(),
    _PRINTABLE,
    st.integers(min_value=-(2**64), max_value=2**64),
    st.booleans(),
    st.floats(allow_nan=False, allow_infinity=False),
)
_HEADER_VALUES = {
    **dict.fromkeys(HEADER_TEXTS, st.one_of(_PRINTABLE, st.none())),
    "transactionEventCounter": st.one_of(st.integers(-(2**63), 2**63 - 1), st.none()),
    "transactionLastEvent": st.one_of(st.booleans(), st.none()),
}


@st.composite
def _members(draw: Any, values: dict[str, Any]) -> Pairs:
    """Some of `values`' keys, in any order, each once, with a value drawn for it."""
    names = draw(st.lists(st.sampled_from(sorted(values)), unique=True, max_size=len(values)))
    return Pairs((name, draw(values[name])) for name in names)


@st.composite
def _plain_message(draw: Any) -> Pairs:
    """A message of the shape the reader reads (it may hold \\u escapes once written)."""
    row = st.one_of(
        st.none(),
        st.dictionaries(_PRINTABLE, _ROW_VALUE, max_size=5).map(lambda d: Pairs(d.items())),
    )
    message = {
        "headers": _members(_HEADER_VALUES),
        "data": row,
        "beforeData": row,
    }
    envelope = {
        "magic": st.just("atMSG"),
        "type": st.just("DT"),
        "messageSchemaId": _PRINTABLE,
        "messageSchema": st.none(),
        "headers": st.none(),
        "message": _members(message),
    }
    drawn: Pairs = draw(_members(envelope))
    return drawn


def _objects(message: Pairs) -> list[Pairs]:
    """The objects of a message: the envelope, and those within it."""
    found = [message]
    for _, value in message:
        if isinstance(value, Pairs):
            found += _objects(value)
    return found


@st.composite
def _bytes(draw: Any) -> tuple[bytes, bool]:
    """A message near the shape read, and whether the reader must read it (the oracle takes
    it, and it holds no \\u escape). Each twist may make it one the reader must not read."""
    message = draw(_plain_message())
    objects = _objects(message)
    for _ in range(draw(st.integers(0, 2))):
        target = draw(st.sampled_from(objects))
        twist = draw(st.sampled_from(["value", "twice", "unknown"]))
        if twist == "value" and target:
            at = draw(st.integers(0, len(target) - 1))
            target[at] = (target[at][0], draw(_ANY_FLAT))
        elif twist == "twice" and target:
            target.append(draw(st.sampled_from(list(target))))
        elif twist == "unknown":
            target.append((draw(st.text(max_size=4)), draw(_ANY_FLAT)))
    raw = written(message, ascii_only=draw(st.sampled_from([False, False, True])))
    if draw(st.booleans()):
        spaced = json.loads(raw, object_pairs_hook=Pairs)  # whitespace as json.dumps lays it
        raw = json.dumps(spaced, indent=draw(st.sampled_from([None, 1, "\t"]))).encode()
    if draw(st.integers(0, 3)) == 0:  # a byte changed, dropped or added
        at = draw(st.integers(0, max(len(raw) - 1, 0)))
        byte = bytes([draw(st.integers(0, 255))])
        changed = raw[:at] + byte + raw[at + 1 :]
        raw = draw(st.sampled_from([changed, raw[:at] + raw[at + 1 :], raw[:at] + byte + raw[at:]]))
    return raw, expected(raw) is not None and b"\\u" not in raw


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(st.lists(_bytes(), min_size=1, max_size=6))
def test_any_message_is_read_only_as_json_reads_it_and_plain_ones_are_read(
    batch: list[tuple[bytes, bool]],
) -> None:
    _judged([raw for raw, _ in batch], [plain for _, plain in batch])


def test_unicode_escapes_are_read_as_json_reads_them() -> None:
    """`\\u` escapes in keys, values and headers (a surrogate pair as one character) are read
    as Python's JSON reads them, into the same UTF-8 as the characters written out."""
    escaped = [
        PLAIN.replace(b'"a\\"b', b'"\\u00e9\\u0041\\u20ac\\ud83d\\ude00\\u0000'),
        PLAIN.replace(b'"NAME"', b'"N\\u0041ME"'),
        PLAIN.replace(b'"t-v1-x"', b'"t-\\u00761-x"'),
        written(_plain(Pairs([("K\u00e9", "\u00ff\ud83d\ude00")])), ascii_only=True),
    ]
    _judged(escaped, [True] * len(escaped))
    assert read_batch(escaped).message(1) == read_batch([PLAIN]).message(0)


def test_numbers_and_booleans_in_a_row_are_read_as_json_reads_them() -> None:
    """An int64 (its edges included) is read as one; any other number as its text, which
    reads as Python's JSON reads it (a float, or a larger int)."""
    values = [-(2**63), -1, 0, 2**63 - 1, 2**63, -(2**63) - 1, 7.5, -0.0, 1e400, True, False]
    message = written(_plain(Pairs([(f"c{k}", v) for k, v in enumerate(values)])))
    message = message.replace(b"Infinity", b"1e400")  # json.dumps writes inf so
    batch = read_batch([message])
    got = batch.message(0)
    assert got is not None
    assert got == expected(message)
    assert [v for _, v in got.data or []] == values
    kinds = batch.fields[:, json_rows.F_KIND].tolist()
    assert kinds == [
        *[json_rows.V_INT] * 4,
        *[json_rows.V_NUMBER] * 5,
        json_rows.V_BOOL,
        json_rows.V_BOOL,
    ]
