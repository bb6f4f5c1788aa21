"""What a replica fed from a CDC topic must hold, computed from the writers' raw changes.

Independent of the cutter: from each message as written (its change, sequence, partition and
offset) and the bounds the cut log recorded, the documented rules (docs/contracts/CDC.md) place
every change in its delta; the reference model (`protocol.apply_model`) applies them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from podd_cdc.cutlog import Cut
from protocol.apply_model import DELETE, UPSERT, DeltaRow, ReplicaModel, apply_delta
from protocol.schema import LogicalSchema
from tools.cdc_write.produce import Landed
from tools.cdc_write.source import SourceChange, SourceTable
from tools.cdc_write.wire import dataworks_replica, qlik_replica


def _padded(sequence: str) -> str:
    return sequence.rjust(40, "0")


def qlik_deltas(
    landed: Sequence[Landed], cuts: Sequence[Cut], topic: str
) -> dict[int, list[Landed]]:
    """Each change's delta: the first whose bound reaches its sequence; a full-load row goes
    with the first CDC change after it in its partition (else the last delta). A message
    written twice counts once."""
    placed: dict[int, list[Landed]] = {c.delta: [] for c in cuts}
    seen: set[str] = set()
    cdc = [m for m in landed if m.written.sequence is not None]
    for message in landed:
        written = message.written
        if written.change is None:
            continue
        if written.sequence is None:  # REFRESH
            later = [
                _delta_of(_padded(m.written.sequence or ""), cuts)
                for m in cdc
                if m.partition == message.partition and m.offset > message.offset
            ]
            found = [n for n in later if n is not None]
            placed[min(found) if found else cuts[-1].delta].append(message)
            continue
        if written.sequence in seen:
            continue
        seen.add(written.sequence)
        delta = _delta_of(_padded(written.sequence), cuts)
        if delta is not None:
            placed[delta].append(message)
    return placed


def _delta_of(key: Any, cuts: Sequence[Cut]) -> int | None:
    return next((c.delta for c in cuts if c.bound is not None and key <= c.bound), None)


def dataworks_deltas(
    landed: Sequence[Landed], cuts: Sequence[Cut], topic: str
) -> dict[int, list[Landed]]:
    """Each change's delta: the first cut that had read past it and whose watermark reaches
    its eventTime (a late change lands in the next one)."""
    placed: dict[int, list[Landed]] = {c.delta: [] for c in cuts}
    for message in landed:
        if message.written.change is None:
            continue
        event_ms = _event_ms(message)
        for cut in cuts:
            span = cut.spans[f"{topic}:{message.partition}"]
            if message.offset < span.end and event_ms <= cut.bound:
                placed[cut.delta].append(message)
                break
    return placed


def _event_ms(message: Landed) -> int:
    import json  # noqa: PLC0415

    return int(json.loads(message.written.value)["payload"]["timestamp"]["eventTime"])


def _rows(
    table: SourceTable, op: str, change: SourceChange, convert: Callable[[Any, Any], Any]
) -> list[tuple[int, tuple[Any, ...]]]:
    def values(row: dict[str, Any]) -> tuple[Any, ...]:
        return tuple(convert(c, row[c.name]) for c in table.columns)

    identity = table.key or (table.columns[0].name,)

    def key(row: dict[str, Any]) -> tuple[Any, ...]:
        return tuple(row[k] for k in identity)

    before, after = change.before, change.after
    if op in ("INSERT", "REFRESH"):
        assert after is not None
        return [(UPSERT, values(after))]
    if op in ("DELETE", "UPDATE_BEFOR"):
        assert before is not None
        return [(DELETE, values(before))]
    assert after is not None
    if op in ("UPDATE", "UPDATE_AFTER+BEFORE") and before is not None and key(before) != key(after):
        return [(DELETE, values(before)), (UPSERT, values(after))]
    return [(UPSERT, values(after))]


def expected_replica(
    schema: LogicalSchema,
    tables: Sequence[SourceTable],
    fmt: str,
    landed: Sequence[Landed],
    cuts: Sequence[Cut],
    topic: str,
) -> ReplicaModel:
    by_name = {t.name: t for t in tables}
    convert = qlik_replica if fmt == "qlik" else dataworks_replica
    place = qlik_deltas if fmt == "qlik" else dataworks_deltas
    placed = place(landed, cuts, topic)
    model = ReplicaModel(schema)
    for cut in cuts:
        messages = sorted(placed[cut.delta], key=_source_order(fmt))
        last: dict[str, dict[tuple[Any, ...], DeltaRow]] = {t.name: {} for t in schema}
        for message in messages:
            written = message.written
            assert written.change is not None
            assert written.op is not None
            table = schema.table(written.change.table)
            for sys_op, values in _rows(by_name[table.name], written.op, written.change, convert):
                key = tuple(values[i] for i in table.key_positions)
                last[table.name].pop(key, None)
                last[table.name][key] = DeltaRow(values, sys_op)
        rows = {name: list(v.values()) for name, v in last.items()}
        model, _ = apply_delta(model, cut.delta, cut.date, rows)
    return model


def _source_order(fmt: str) -> Callable[[Landed], Any]:
    if fmt == "qlik":
        return lambda m: (_padded(m.written.sequence or ""), m.partition, m.offset)
    # DataWorks: sequenceId, the before half of an update first
    return lambda m: (int(m.written.sequence or 0), m.written.op != "UPDATE_BEFOR", m.offset)


def transactions_whole(landed: Sequence[Landed], cuts: Sequence[Cut], topic: str) -> list[str]:
    """Qlik: transactions whose changes fell into more than one delta (must be none)."""
    placed = qlik_deltas(landed, cuts, topic)
    deltas_of: dict[int, set[int]] = {}
    for delta, messages in placed.items():
        for message in messages:
            if message.written.transaction is not None:
                deltas_of.setdefault(message.written.transaction, set()).add(delta)
    return [f"transaction {t} in deltas {sorted(d)}" for t, d in deltas_of.items() if len(d) > 1]
