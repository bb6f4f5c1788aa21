"""Made-up Qlik JSON and DataWorks messages for `podd_cdc.warm_up`: one table a format with a
column of every type the batch reader takes its own way (`values.batch_form`), in
transactions that insert, update and delete, with NULLs and with JSON's other spellings of
a value (a number as text, a boolean as JSON). Their only use is to meet every compiled
step with the arguments a run gives it; the values are not a workload.
"""

from __future__ import annotations

import base64
import json
from datetime import datetime, timedelta
from typing import Any

TOPIC = "podd-cdc-warm-up"
TABLE = "warm_up"

#: (name, Qlik type, length, precision, scale): every form `values.batch_form` names.
QLIK_COLUMNS: tuple[tuple[str, str, int, int, int], ...] = (
    ("ID", "INT4", 0, 0, 0),
    ("CODE", "STRING", 20, 0, 0),
    ("I1", "INT1", 0, 0, 0),
    ("I8", "INT8", 0, 0, 0),
    ("U8", "UINT8", 0, 0, 0),
    ("R4", "REAL4", 0, 0, 0),
    ("R8", "REAL8", 0, 0, 0),
    ("N10", "NUMERIC", 0, 10, 0),
    ("N30", "NUMERIC", 0, 30, 4),
    ("B", "BOOLEAN", 0, 0, 0),
    ("D", "DATE", 0, 0, 0),
    ("T", "TIME", 0, 0, 0),
    ("TS", "DATETIME", 0, 0, 0),
    ("BY", "BYTES", 16, 0, 0),
    ("W", "WSTRING", 64, 0, 0),
    ("C", "CLOB", 0, 0, 0),
)
_QLIK_KEY = ("ID", "CODE")
#: A Qlik transaction: its changes by operation, on two keys (the second inserted, then gone).
_QLIK_STEPS = (("INSERT", 0), ("UPDATE", 0), ("INSERT", 1), ("DELETE", 1))

DATAWORKS_COLUMNS: tuple[tuple[str, str], ...] = (
    ("id", "LONG"),
    ("name", "STRING"),
    ("paid", "BOOLEAN"),
    ("amount", "DOUBLE"),
    ("at", "DATE"),
    ("logo", "BYTES"),
)


def _qlik_row(key: int, version: int) -> dict[str, Any]:
    """A row of the Qlik table; every fourth one has NULLs and JSON's other spellings."""
    when = datetime(2026, 1, 1, 12, 30, 15, 250_000) + timedelta(days=key, seconds=version)
    odd = key % 4 == 3
    return {
        "ID": key,
        "CODE": f"k{key}",
        "I1": None if odd else key % 100,
        "I8": str(key * 1_000_003) if odd else key * 1_000_003,
        "U8": str(key * 7),
        "R4": key + 0.5,
        "R8": key if odd else key * 1.25,
        "N10": str(key * 11),
        "N30": f"{key}.{version:04d}",
        "B": (key % 2 == 0) if odd else ("true" if key % 2 else "false"),
        "D": when.date().isoformat(),
        "T": when.strftime("%H:%M:%S.%f"),
        "TS": when.strftime("%Y-%m-%d %H:%M:%S.%f"),
        "BY": None if odd else f"{key:08X}{version:08X}",
        "W": f"строка {key}",
        "C": f"text {key} v{version}",
    }


def qlik_metadata() -> bytes:
    """The table's description, as Qlik's JSON envelope carries it."""
    columns = {
        name: {
            "ordinal": ordinal,
            "type": kind,
            "length": length,
            "precision": precision,
            "scale": scale,
            "primaryKeyPosition": _QLIK_KEY.index(name) + 1 if name in _QLIK_KEY else 0,
        }
        for ordinal, (name, kind, length, precision, scale) in enumerate(QLIK_COLUMNS, start=1)
    }
    message = {
        "schemaId": "warm-up-v1",
        "lineage": {
            "server": "warm-up",
            "task": "warm-up",
            "schema": "dbo",
            "table": TABLE.upper(),
            "tableVersion": 1,
            "timestamp": "2026-01-01T00:00:00.000",
        },
        "tableStructure": {"tableColumns": columns},
        "dataSchema": "",
    }
    return _qlik_envelope("MD", None, message)


def qlik_data(transactions: int) -> list[bytes]:
    """`transactions` transactions of four changes each, in sequence order."""
    mask = "F" * ((len(QLIK_COLUMNS) + 3) // 4)
    messages = []
    number = 0
    for tx in range(transactions):
        for counter, (operation, second) in enumerate(_QLIK_STEPS, start=1):
            number += 1
            key = 2 * tx + second
            before = _qlik_row(key, 0) if operation in ("UPDATE", "DELETE") else None
            after = None if operation == "DELETE" else _qlik_row(key, counter)
            headers = {
                "operation": operation,
                "changeSequence": f"2026010112000000{number:019d}",
                "timestamp": "2026-01-01T12:00:00.000",
                "streamPosition": f"{tx:08x}.{counter:04x}",
                "transactionId": f"{tx + 1:032X}",
                "transactionEventCounter": counter,
                "transactionLastEvent": counter == len(_QLIK_STEPS),
                "changeMask": mask,
                "columnMask": mask,
            }
            message = {"data": after, "beforeData": before, "headers": headers}
            messages.append(_qlik_envelope("DT", "warm-up-v1", message))
    return messages


def _qlik_envelope(kind: str, schema_id: str | None, message: dict[str, Any]) -> bytes:
    envelope = {
        "magic": "atMSG",
        "type": kind,
        "headers": None,
        "messageSchemaId": schema_id,
        "messageSchema": None,
        "message": message,
    }
    return json.dumps(envelope, ensure_ascii=False).encode()


def dataworks_messages(changes: int, first_millis: int) -> list[bytes]:
    """`changes` DataWorks row changes (inserts, updates as their two halves, deletes) from
    `first_millis` on, then a heartbeat past the last, so a watermark passes them all."""
    schema = {
        "dataColumn": [{"name": name, "type": kind} for name, kind in DATAWORKS_COLUMNS],
        "primaryKey": ["id"],
        "source": {"dbType": "MySQL", "dbName": "warm", "schemaName": "warm", "tableName": TABLE},
    }
    messages = []
    for n in range(changes):
        key, step = divmod(n, 4)
        row = {
            "id": key,
            "name": None if key % 4 == 3 else f"имя {key}",
            "paid": key % 2 == 0,
            "amount": key * 1.25,
            "at": first_millis + key * 1000,
            "logo": base64.b64encode(f"logo {key}".encode()).decode(),
        }
        changed = dict(row, amount=0.5)
        halves = {
            0: [("INSERT", None, row)],
            1: [("UPDATE_BEFOR", row, None), ("UPDATE_AFTER", None, changed)]
            if key % 2
            else [("UPDATE_AFTER", row, changed)],  # an update in one message
            2: [("INSERT", None, dict(row, id=-key - 1))],
            3: [("DELETE", dict(row, id=-key - 1), None)],
        }[step]
        for op, before, after in halves:
            payload = {
                "before": None if before is None else {"dataColumn": before},
                "after": None if after is None else {"dataColumn": after},
                "sequenceId": str(n + 1),
                "op": op,
                "timestamp": {"eventTime": first_millis + n},
            }
            messages.append(json.dumps({"schema": schema, "payload": payload}).encode())
    last = {"eventTime": first_millis + changes}
    heartbeat = {"payload": {"op": "MHEARTBEAT", "timestamp": last}}
    return [*messages, json.dumps(heartbeat).encode()]
