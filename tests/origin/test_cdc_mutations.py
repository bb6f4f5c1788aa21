"""No message crashes a CDC decoder: the writers' messages, with values replaced at random
depths by hostile JSON (other types, non-ASCII digits, huge numbers, NUL, empty text), are
decoded or refused with a typed error, never an uncaught exception. An uncaught one stops the
origin, and, the message staying where it is, at every restart. Pure: no Kafka."""

from __future__ import annotations

import copy
import json
import random
from typing import Any

import pytest

from podd_cdc.dataworks import DataWorksDecoder
from podd_cdc.errors import AwaitingMetadata, BadInput
from podd_cdc.qlik import QlikDecoder
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


def _messages(fmt: str) -> tuple[list[bytes], list[bytes]]:
    """The metadata (Qlik) and the data messages of a small source."""
    if fmt == "qlik":
        tables = (*qlik_marketing(), qlik_every_type())
        db = SourceDatabase(tables, seed=31)
        qlik = QlikWriter(tables, seed=31)
        changes = qlik.transactions(db.transaction(db.rng.randint(1, 5)) for _ in range(300))
        return [w.value for w in qlik.metadata()], [w.value for w in changes]
    db = SourceDatabase(dataworks_marketing(), seed=31)
    dataworks = DataWorksWriter(dataworks_marketing(), seed=31)
    changes = dataworks.transactions(db.transaction(db.rng.randint(1, 5)) for _ in range(300))
    return [], [w.value for w in changes]


@pytest.mark.parametrize("fmt", ["qlik", "dataworks"])
def test_a_mutated_message_is_decoded_or_refused_with_a_typed_error(fmt: str) -> None:
    metadata, data = _messages(fmt)
    decoder = QlikDecoder() if fmt == "qlik" else DataWorksDecoder()
    for value in [*metadata, *data]:
        decoder.decode("t", value)  # the messages as written decode
    rng = random.Random(fmt)
    refused = 0
    for n in range(MUTATIONS):
        # Qlik: one in five a table's metadata (its ordinals once made numbers of any size)
        obj = json.loads(rng.choice(metadata if metadata and n % 5 == 0 else data))
        for _ in range(rng.randint(1, 3)):
            _mutate(obj, rng)
        value = json.dumps(obj).encode()
        try:
            decoder.decode("t", value)
        except (BadInput, AwaitingMetadata):
            refused += 1
        except Exception as exc:  # the point: nothing else may escape
            pytest.fail(f"{type(exc).__name__}: {exc} on {value[:300]!r}")
    assert refused > MUTATIONS // 10  # the mutations reach what is checked
