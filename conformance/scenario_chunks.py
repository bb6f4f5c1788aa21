"""What the replica scenarios send broken on purpose, and how they check a refusal."""

from __future__ import annotations

from conformance.context import Context
from protocol.apply_model import DeltaRow
from protocol.body_writer import encode_body
from protocol.errors import ErrorCode
from protocol.framing import Chunk
from protocol.schema import Column
from protocol.types import ColumnType, TypeKind


def rekey(chunk: Chunk, **changes: object) -> Chunk:
    return Chunk(chunk.key.model_copy(update=changes), chunk.body, chunk.rows)


async def rejected(ctx: Context, chunks: list[Chunk], code: ErrorCode) -> None:
    """Send, expect `code`, and check that later chunks of the transfer are dropped."""
    await ctx.send(chunks)
    request_id = chunks[0].key.request_id
    await ctx.expect_rejected(request_id, code)
    await ctx.no_more_answers(request_id, 1)


def mismatched(
    ctx: Context, chunks: list[Chunk], rows: list[tuple[object, ...]], extra: bool
) -> list[Chunk]:
    """The transfer with stream 1's first chunk replaced by a body of `rows`."""
    table = ctx.schema.tables[0]
    if extra:  # one more field than the table has
        spare = Column(name="spare", type=ColumnType(kind=TypeKind.BIGINT))
        table = table.model_copy(update={"columns": (*table.columns, spare)})
    body = encode_body(table, rows)
    head = chunks[0]
    return [Chunk(head.key, body, len(rows)), *chunks[1:]]


def first_rows(ctx: Context) -> tuple[list[Chunk], list[DeltaRow]]:
    rows = ctx.next_rows()
    first = ctx.schema.tables[0].name
    _, chunks = ctx.frame(ctx.expected, rows, chunk_rows=1000)
    return chunks, list(rows[first])
