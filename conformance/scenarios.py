"""The named scenarios, one rule of PROTOCOL.md each, in the order they run.

They share one datamart and its delta sequence: the applying scenarios move it on, the
rejecting ones must leave it (and, with a DSN, the replica) exactly as it was.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import psycopg

from conformance.context import Context, ScenarioSkipped, check
from conformance.scenario import ScenarioBase
from conformance.scenario_chunks import first_rows, mismatched, rejected, rekey
from protocol.errors import ErrorCode
from protocol.framing import Chunk
from protocol.messages import DeltaStatus, ReplicaState
from protocol.schema import quote_ident
from protocol.workload import Workload, WorkloadSpec

Run = Callable[[Context], Awaitable[None]]


@dataclass(frozen=True)
class Scenario(ScenarioBase):
    """A replica scenario: `run` plays the origin's side and checks the replica."""

    run: Run


SCENARIOS: list[Scenario] = []


def scenario(name: str, rule: str) -> Callable[[Run], Run]:
    def register(run: Run) -> Run:
        SCENARIOS.append(Scenario(name, rule, run))
        return run

    return register


# --- state ------------------------------------------------------------------------------


@scenario("state-unknown-datamart", "delta.rq for a datamart not served: FAILED, UNKNOWN_DATAMART")
async def _state_unknown(ctx: Context) -> None:
    state = await ctx.state(f"{ctx.schema.datamart}_unknown_{uuid.uuid4().hex[:6]}")
    check(
        state.state is ReplicaState.FAILED and state.error_code == ErrorCode.UNKNOWN_DATAMART,
        f"answered {state.state} {state.error_code}",
    )


@scenario("state-empty-replica", "delta.rs of an empty replica: expectedDeltaNum 0, no deltaOk")
async def _state_empty(ctx: Context) -> None:
    state = await ctx.state()
    check(state.state is not ReplicaState.FAILED, f"state {state.state}: {state.error_message}")
    check(state.delta_ok_num is None, f"deltaOkNum is {state.delta_ok_num}")


# --- applying ---------------------------------------------------------------------------


@scenario("happy-path", "a delta sent in order is applied and answered OK with its counts")
async def _happy(ctx: Context) -> None:
    rows = ctx.next_rows()
    request_id, chunks = ctx.frame(ctx.expected, rows)
    await ctx.send(chunks)
    await ctx.expect_applied(request_id, ctx.expected, rows)


@scenario("duplicates", "every chunk sent twice counts once; the transfer is answered once")
async def _duplicates(ctx: Context) -> None:
    rows = ctx.next_rows()
    request_id, chunks = ctx.frame(ctx.expected, rows)
    await ctx.send(chunks + chunks)
    await ctx.expect_applied(request_id, ctx.expected, rows)
    await ctx.no_more_answers(request_id, 1)


@scenario("shuffled-interleaved", "chunks in any order, streams interleaved, on any partition")
async def _shuffled(ctx: Context) -> None:
    rows = ctx.next_rows()
    request_id, chunks = ctx.frame(ctx.expected, rows, chunk_rows=3)
    await ctx.send(chunks, shuffle=True)
    await ctx.expect_applied(request_id, ctx.expected, rows)


@scenario("empty-streams", "a table without changes sends one empty last chunk")
async def _empty_streams(ctx: Context) -> None:
    first = ctx.schema.tables[0].name
    rows = {first: ctx.next_rows()[first]}
    request_id, chunks = ctx.frame(ctx.expected, rows)
    await ctx.send(chunks)
    await ctx.expect_applied(request_id, ctx.expected, rows)


@scenario("empty-delta", "a delta without any change is applied (and recorded)")
async def _empty_delta(ctx: Context) -> None:
    request_id, chunks = ctx.frame(ctx.expected, {})
    await ctx.send(chunks)
    await ctx.expect_applied(request_id, ctx.expected, {})


@scenario(
    "resend-applied",
    "an applied delta sent again (new requestId, other chunking) gets "
    "the stored OK result and changes nothing",
)
async def _resend(ctx: Context) -> None:
    first = ctx.last_applied()
    request_id, chunks = ctx.frame(first.num, first.rows_by_table, chunk_rows=4)
    await ctx.send(chunks)
    result = await ctx.final_answer(request_id)
    check(result.status is DeltaStatus.OK, f"answered {result.status} {result.error_code}")
    check(
        result.tables == first.result.tables and result.applied_at == first.result.applied_at,
        "the answer is not the stored result of the first application",
    )
    await ctx.expect_state(expected=ctx.expected)
    ctx.check_replica()


# --- rejections -------------------------------------------------------------------------


@scenario("unknown-datamart", "a transfer for a datamart not served: UNKNOWN_DATAMART")
async def _unknown_datamart(ctx: Context) -> None:
    other = ctx.schema.model_copy(update={"datamart": f"{ctx.schema.datamart}_nope"})
    _, chunks = ctx.frame(0, {}, schema=other)
    await rejected(ctx, chunks, ErrorCode.UNKNOWN_DATAMART)


@scenario("out-of-sequence", "a delta after the expected one: OUT_OF_SEQUENCE")
async def _out_of_sequence(ctx: Context) -> None:
    _, chunks = ctx.frame(ctx.expected + 1, ctx.next_rows())
    await rejected(ctx, chunks, ErrorCode.OUT_OF_SEQUENCE)


@scenario("conflict-applied-date", "an applied deltaNum with another deltaDate: DELTA_CONFLICT")
async def _conflict_applied(ctx: Context) -> None:
    last = ctx.last_applied()
    _, chunks = ctx.frame(last.num, last.rows_by_table, date=last.date.replace(minute=30))
    await rejected(ctx, chunks, ErrorCode.DELTA_CONFLICT)


@scenario(
    "conflict-date-not-later", "a new delta dated no later than the previous one: DELTA_CONFLICT"
)
async def _conflict_not_later(ctx: Context) -> None:
    _, chunks = ctx.frame(ctx.expected, ctx.next_rows(), date=ctx.last_applied().date)
    await rejected(ctx, chunks, ErrorCode.DELTA_CONFLICT)


@scenario("bad-chunk-stream-number", "streamNumber outside 1..streamTotal: BAD_CHUNK")
async def _bad_stream_number(ctx: Context) -> None:
    _, chunks = ctx.frame(ctx.expected, ctx.next_rows())
    total = chunks[0].key.stream_total
    await rejected(ctx, [rekey(chunks[0], stream_number=total + 1)], ErrorCode.BAD_CHUNK)


@scenario("bad-chunk-two-last", "two last chunks in one stream: BAD_CHUNK")
async def _bad_two_last(ctx: Context) -> None:
    _, chunks = ctx.frame(ctx.expected, ctx.next_rows(), chunk_rows=1)
    stream = [c for c in chunks if c.key.stream_number == 1]
    check(len(stream) >= 2, "the workload gave stream 1 fewer than two chunks")
    twice = [rekey(stream[0], is_last_chunk=True), stream[-1]]
    await rejected(ctx, twice, ErrorCode.BAD_CHUNK)


@scenario("bad-chunk-stream-total", "streamTotal differing between chunks: BAD_CHUNK")
async def _bad_total(ctx: Context) -> None:
    _, chunks = ctx.frame(ctx.expected, ctx.next_rows())
    await rejected(
        ctx, [chunks[0], rekey(chunks[-1], stream_total=len(chunks) + 5)], ErrorCode.BAD_CHUNK
    )


@scenario("bad-chunk-two-tables", "one stream naming two tables: BAD_CHUNK")
async def _bad_two_tables(ctx: Context) -> None:
    check(len(ctx.schema.tables) >= 2, "needs a datamart of two tables or more")
    _, chunks = ctx.frame(ctx.expected, ctx.next_rows(), chunk_rows=1)
    first = next(c for c in chunks if c.key.stream_number == 1)
    second = next(c for c in chunks if c.key.stream_number == 2)
    # A chunk of stream 1 that names (and holds a body of) the second table.
    stray = rekey(second, stream_number=1, chunk_number=first.key.chunk_number + 1)
    await rejected(ctx, [first, stray], ErrorCode.BAD_CHUNK)


@scenario("bad-chunk-undecodable", "a body that is not an Avro container: BAD_CHUNK")
async def _bad_body(ctx: Context) -> None:
    _, chunks = ctx.frame(ctx.expected, ctx.next_rows())
    broken = Chunk(chunks[0].key, b"Obj\x01 this is not an Avro container", 0)
    await rejected(ctx, [broken, *chunks[1:]], ErrorCode.BAD_CHUNK)


@scenario("unknown-table", "a tableName not in the logical schema: UNKNOWN_TABLE")
async def _unknown_table(ctx: Context) -> None:
    _, chunks = ctx.frame(ctx.expected, ctx.next_rows())
    await rejected(ctx, [rekey(chunks[0], table_name="no_such_table")], ErrorCode.UNKNOWN_TABLE)


@scenario("schema-mismatch-fields", "a body with more fields than the table: SCHEMA_MISMATCH")
async def _mismatch_fields(ctx: Context) -> None:
    chunks, rows = first_rows(ctx)
    check(bool(rows), "the workload gave the first table no rows")
    body_rows = [(*r.values, None, r.sys_op) for r in rows]
    await rejected(ctx, mismatched(ctx, chunks, body_rows, extra=True), ErrorCode.SCHEMA_MISMATCH)


@scenario("schema-mismatch-sys-op", "sys_op other than 0 or 1: SCHEMA_MISMATCH")
async def _mismatch_sys_op(ctx: Context) -> None:
    chunks, rows = first_rows(ctx)
    check(bool(rows), "the workload gave the first table no rows")
    body_rows = [(*r.values, 2) for r in rows]
    await rejected(ctx, mismatched(ctx, chunks, body_rows, extra=False), ErrorCode.SCHEMA_MISMATCH)


@scenario("schema-mismatch-not-null", "null in a NOT NULL (key) column: SCHEMA_MISMATCH")
async def _mismatch_not_null(ctx: Context) -> None:
    chunks, rows = first_rows(ctx)
    check(bool(rows), "the workload gave the first table no rows")
    key = ctx.schema.tables[0].key_positions[0]
    values = list(rows[0].values)
    values[key] = None
    body_rows = [(*values, 0)]
    await rejected(ctx, mismatched(ctx, chunks, body_rows, extra=False), ErrorCode.SCHEMA_MISMATCH)


# --- incomplete transfers ---------------------------------------------------------------


@scenario(
    "incomplete-then-completed",
    "delta.rs shows an open transfer's gaps; sending only the missing chunks completes it",
)
async def _incomplete(ctx: Context) -> None:
    rows = ctx.next_rows()
    num = ctx.expected
    first = ctx.schema.tables[0].name
    request_id, chunks = ctx.frame(num, rows, chunk_rows=max(1, len(rows[first]) // 4))
    held = [c for c in chunks if c.key.stream_number == 1 and c.key.chunk_number in (2, 3)]
    check(len(held) == 2, "the workload gave stream 1 fewer than four chunks")
    await ctx.send([c for c in chunks if c not in held])
    want = "stream 1 chunks 2-3"
    deadline = asyncio.get_running_loop().time() + ctx.options.answer_timeout
    while True:
        state = await ctx.state()
        ours = [p for p in state.in_progress if p.request_id == request_id]
        if ours and want in ours[0].missing:
            break
        check(
            asyncio.get_running_loop().time() < deadline,
            f"delta.rs never named {want!r} for the transfer: {state.in_progress}",
        )
        await asyncio.sleep(0.3)
    check(state.state is ReplicaState.RECEIVING, f"delta.rs state {state.state}, want RECEIVING")
    check(state.expected_delta_num == num, f"expectedDeltaNum {state.expected_delta_num}")
    await ctx.send(held)
    await ctx.expect_applied(request_id, num, rows)


@scenario(
    "incomplete-delta",
    "a transfer incomplete past the timeout is answered "
    "INCOMPLETE_DELTA naming what is missing, and stays open",
)
async def _incomplete_delta(ctx: Context) -> None:
    if ctx.options.incomplete_wait <= 0:
        raise ScenarioSkipped("give --incomplete-wait (the agent's timeout plus a margin)")
    rows = ctx.next_rows()
    num = ctx.expected
    request_id, chunks = ctx.frame(num, rows)
    last = chunks[-1]
    await ctx.send(chunks[:-1])
    result = await ctx.client.result(request_id, ctx.options.incomplete_wait)
    check(result is not None, f"no INCOMPLETE_DELTA within {ctx.options.incomplete_wait:g} s")
    assert result is not None
    check(
        result.status is DeltaStatus.ERROR and result.error_code == ErrorCode.INCOMPLETE_DELTA,
        f"answered {result.status} {result.error_code}",
    )
    gap = f"stream {last.key.stream_number} last chunk"
    check(
        gap in (result.error_message or ""), f"errorMessage {result.error_message!r} lacks {gap!r}"
    )
    ctx.check_replica()
    await ctx.send([last])
    await ctx.expect_applied(request_id, num, rows)


# --- load -------------------------------------------------------------------------------


@scenario(
    "load-failed",
    "a store that refuses the load: LOAD_FAILED, replica unchanged; "
    "a resend applies (needs --replica: renames one table for the scenario)",
)
async def _load_failed(ctx: Context) -> None:
    if ctx.dsn is None:
        raise ScenarioSkipped("give --replica DSN")
    table = ctx.schema.tables[0].name
    schema_name = quote_ident(ctx.schema.datamart)
    actual, moved = f"{table}_actual", f"{table}_conformance_moved"
    rows = ctx.next_rows()
    num = ctx.expected
    with psycopg.connect(ctx.dsn, autocommit=True) as conn:
        conn.execute(
            f"ALTER TABLE {schema_name}.{quote_ident(actual)} RENAME TO {quote_ident(moved)}"
        )
        try:
            request_id, chunks = ctx.frame(num, rows)
            await ctx.send(chunks)
            result = await ctx.final_answer(request_id)
        finally:
            conn.execute(
                f"ALTER TABLE {schema_name}.{quote_ident(moved)} RENAME TO {quote_ident(actual)}"
            )
    check(
        result.status is DeltaStatus.ERROR and result.error_code == ErrorCode.LOAD_FAILED,
        f"answered {result.status} {result.error_code}",
    )
    await ctx.expect_state(expected=num)
    ctx.check_replica()
    request_id, chunks = ctx.frame(num, rows)
    await ctx.send(chunks)
    await ctx.expect_applied(request_id, num, rows)


@scenario("state-during-load", "delta.rq during a large delta's load is answered LOADING")
async def _state_during_load(ctx: Context) -> None:
    num = ctx.expected
    spec = WorkloadSpec(rows_per_delta=ctx.options.load_rows, seed=ctx.options.seed + 1)
    rows = Workload(ctx.schema, spec).next_delta()  # keys may repeat earlier ones: upserts
    request_id, chunks = ctx.frame(num, rows, chunk_rows=1000)
    await ctx.send(chunks)
    seen: list[ReplicaState] = []
    while not ctx.client.results.get(request_id):
        state = await ctx.state()
        seen.append(state.state)
        check(
            state.expected_delta_num in (num, num + 1),
            f"expectedDeltaNum {state.expected_delta_num} during the transfer of {num}",
        )
        await asyncio.sleep(0.1)
    await ctx.expect_applied(request_id, num, rows)
    check(
        ReplicaState.LOADING in seen,
        f"{len(seen)} delta.rs during the transfer said {sorted(set(seen))}, never LOADING",
    )


@scenario(
    "as-of-reads",
    "the replica read as of every applied delta equals the model's "
    "(REPLICA.md's SQL; needs --replica)",
)
async def _as_of(ctx: Context) -> None:
    if ctx.dsn is None:
        raise ScenarioSkipped("give --replica DSN")
    ctx.last_applied()
    ctx.check_replica(as_of=True)
