"""`python -m reliability.chaos`: deltas through faults, then the replica must be exactly right.

The reference origin drives N deltas (default 100) into a real agent process while:
* the agent is killed with `kill -9` `--kills` times, each a random moment after a random
  delta is done (mid-transfer, mid-load or after a commit of the next: wherever the clock
  falls), and restarted on the same data directory;
* PostgreSQL is crash-restarted (`pg_ctl stop -m immediate`, then start) at least twice;
* malformed messages of every kind the fuzz test knows arrive on `delta.in` and `delta.rq`,
  and deltas already applied are replayed under new requestIds (whole, or cut short);
* a second agent for the same datamart is started (it must stop at start), the staging disk
  is filled and freed (the agent must pause, then go on), and the replica's database is
  rewound by two deltas (`reliability.chaos_faults`).
The agent is supervised as a service manager would: whenever its process ends, it starts
again. At the end: the replica equals the reference model, also as of every delta; the
registry has one row per delta; and no transfer that applied a delta was ever answered ERROR
(a lie). `--report RELIABILITY.md` writes the figures of the run.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from contextlib import ExitStack
from datetime import timedelta
from pathlib import Path

from conformance.forges.hostile import HostileMessages
from origin.client import OriginClient
from origin.errors import OriginError
from origin.reference import ReferenceOrigin
from origin.session import DeltaOutcome, OriginSession, SessionOptions
from origin.sources import WorkloadSource
from podd_kafka.broker import embedded_broker
from podd_kafka.client import ensure_topics
from podd_kafka.settings import KafkaSettings
from podd_runtime.agent_child import AgentSpec
from protocol.console import log_to_stderr
from protocol.ddl import parse_schema
from protocol.errors import PoddError
from protocol.workload import WorkloadSpec
from reliability.chaos_check import check_replica
from reliability.chaos_faults import DiskFiller, ExtraFaults
from reliability.chaos_report import ChaosRun, report
from reliability.chaos_supervisor import Supervisor
from replica_store.embedded_pg import EmbeddedPostgres

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "marketing.sql"


async def _chaos(
    args: argparse.Namespace,
    supervisor: Supervisor,
    pg: EmbeddedPostgres | None,
    done: list[DeltaOutcome],
    finished: asyncio.Event,
    run: ChaosRun,
    filler: DiskFiller | None,
    injected_all: asyncio.Event,
) -> None:
    """Faults at random moments until the origin is done; `injected_all` is set once every
    fault, kills and restarts included, has been injected (or skipped) and has returned: a
    run fast enough to apply its last delta before a scheduled kill waits for it."""
    rng = random.Random(args.seed)
    restarts_at = [args.deltas * (i + 1) // (args.pg_restarts + 1) for i in range(args.pg_restarts)]
    # Kills follow the deltas done, not the clock: a fast run gets all of them too. The last
    # ones fall early enough that deltas are left to go through them.
    candidates = range(1, max(2, args.deltas - 3))
    kills_at = sorted(rng.choices(candidates, k=args.kills))
    kill_due: float | None = None
    kill_by = 0
    extra = ExtraFaults(
        args.deltas,
        supervisor.spec,
        supervisor.data_dir,
        lambda: supervisor.spec.dsn,
        filler,
        done,
        run,
        args.fill_seconds,
        clickhouse=pg is None,
        first_running=supervisor.running,
    )
    while not finished.is_set():
        await asyncio.sleep(0.25)
        await asyncio.to_thread(supervisor.watch)
        await extra.step()
        scheduled = bool(kills_at) or kill_due is not None or bool(restarts_at)
        if not scheduled and not extra.due and all(task.done() for task in extra.tasks):
            injected_all.set()
        if extra.turn.locked():  # a second agent is meeting the first: no kill, no restart now
            continue
        if pg is not None and restarts_at and len(done) >= restarts_at[0]:
            restarts_at.pop(0)
            async with extra.turn:
                await asyncio.to_thread(pg.crash_restart, rng.uniform(0.5, 3))
            run.faults["PostgreSQL crash restart"] += 1
            extra.injected("PostgreSQL crash restart")
        if kill_due is None and kills_at and len(done) >= kills_at[0]:
            kills_at.pop(0)
            kill_due = time.monotonic() + rng.uniform(0, args.kill_within)
            # A random moment, but within the next delta at the latest: a run whose deltas
            # take less than `--kill-within` would otherwise be killed after its last one,
            # and a kill with no delta after it tests no recovery.
            kill_by = len(done) + 1
        if kill_due is not None and (time.monotonic() >= kill_due or len(done) > kill_by):
            kill_due = None
            async with extra.turn:  # a kill and its restart are one step: no second agent
                await asyncio.to_thread(supervisor.kill)
            extra.injected("agent kill -9")
    await extra.finish()


async def _malformed(
    client: OriginClient, hostile: HostileMessages, run: ChaosRun, finished: asyncio.Event
) -> None:
    topics = {
        "delta.in": client.settings.topic_delta_in,
        "delta.rq": client.settings.topic_delta_rq,
    }
    for kind, topic, key, value in hostile:
        if finished.is_set():
            return
        try:
            await client.producer.send_and_wait(topics[topic], key=key, value=value)
            run.malformed[kind] += 1
        except Exception as exc:  # the broker may refuse a message; that is not the agent
            run.malformed[f"refused by the broker: {type(exc).__name__}"] += 1
        await asyncio.sleep(0.2)


async def _replays(
    client: OriginClient,
    driver: ReferenceOrigin,
    done: list[DeltaOutcome],
    run: ChaosRun,
    finished: asyncio.Event,
    seed: int,
) -> None:
    """Deltas already applied, sent again under new requestIds every few seconds, as old
    signed transfers replayed would be: half of them whole (answered with the stored
    result), half cut short of their last chunk (never complete). None may cost the real
    deltas a slot, a byte of staging or an answer."""
    rng = random.Random(seed)
    # A source of its own: the driver's reads its next delta in a thread meanwhile, and an
    # older delta asked of it regenerates its workload under that thread.
    own = driver.source
    if isinstance(own, WorkloadSource):
        own = WorkloadSource(own.schema, own.spec, start=own.start, interval=own.interval)
    while not finished.is_set():
        await asyncio.sleep(rng.uniform(1.0, 3.0))
        applied = [o.delta_num for o in done]  # each one the replica applied
        delta = await asyncio.to_thread(own.delta, rng.choice(applied)) if applied else None
        if delta is None or finished.is_set():
            continue
        _, chunks = driver.session.frame(delta)
        whole = rng.random() < 0.5
        try:
            await client.send_chunks(chunks if whole else chunks[:-1])
        except Exception as exc:  # the broker may refuse; that is not the agent
            run.malformed[f"refused by the broker: {type(exc).__name__}"] += 1
            continue
        run.replays["whole" if whole else "cut short of its last chunk"] += 1


async def _drive(
    args: argparse.Namespace,
    settings: KafkaSettings,
    bootstrap: str,
    source: WorkloadSource,
    supervisor: Supervisor,
    pg: EmbeddedPostgres | None,
    run: ChaosRun,
    filler: DiskFiller | None,
) -> OriginClient:
    done: list[DeltaOutcome] = []
    finished, injected_all = asyncio.Event(), asyncio.Event()
    async with OriginClient(settings, [bootstrap]) as client:
        chaos = asyncio.create_task(
            _chaos(args, supervisor, pg, done, finished, run, filler, injected_all)
        )
        noise = asyncio.create_task(
            _malformed(client, HostileMessages(source.schema, args.seed), run, finished)
        )
        options = SessionOptions(
            chunk_rows=args.chunk_rows, answer_timeout=30, state_timeout=15, state_attempts=20
        )
        driver = ReferenceOrigin(client, source, options, done.append)
        replays = asyncio.create_task(_replays(client, driver, done, run, finished, args.seed))
        try:
            # Until the replica itself says it holds every delta, once every fault is in: a
            # database rewound after the origin's last delta is told by `delta.rs` only, and
            # the origin then sends the lost deltas again (the outcomes outnumber the deltas).
            while True:
                try:
                    count = await _deltas_left(args.deltas, done, driver.session, injected_all, run)
                    if not count:
                        break
                    await driver.run(count)
                except OriginError as exc:  # gave up on one delta: ask again and go on
                    run.faults[f"origin restarted: {type(exc).__name__}"] += 1
                    print(f"  origin: {exc}; resuming", file=sys.stderr)
        finally:
            finished.set()
            for ended in await asyncio.gather(chaos, noise, replays, return_exceptions=True):
                if isinstance(ended, BaseException):  # the faults stopped early: say so
                    run.failures.append(f"the fault injector failed: {ended!r}"[:500])
        for answers in client.results.values():
            for answer in answers:
                run.answers[answer.error_code or answer.status.value] += 1
    return client


async def _deltas_left(
    deltas: int,
    done: list[DeltaOutcome],
    session: OriginSession,
    injected_all: asyncio.Event,
    run: ChaosRun,
    settle_timeout: float = 300,
) -> int:
    """How many deltas the origin still sends: every delta but the last, as its outcomes
    say; then, once the faults are all in, what the replica's `delta.rs` says. The last delta
    waits for the faults: a run faster than its faults would otherwise inject them after its
    last delta, where no delta is left to recover through (CI saw every kill's and restart's
    recovery missing)."""
    last = max((o.delta_num for o in done), default=-1)
    if last < deltas - 2:
        return deltas - 2 - last
    try:
        await asyncio.wait_for(injected_all.wait(), settle_timeout)
    except TimeoutError:
        run.failures.append(
            f"the faults were still being injected {settle_timeout:g} s before the last delta"
        )
        return 0
    expected = (await session.state()).expected_delta_num
    if expected < deltas:
        print(f"  origin: the replica expects delta {expected} again; resending", file=sys.stderr)
    return max(0, deltas - expected)


def run_chaos(args: argparse.Namespace) -> ChaosRun:
    run = ChaosRun(args.deltas)
    tag = uuid.uuid4().hex[:8]
    schema = parse_schema(EXAMPLE.read_text())
    schema = schema.model_copy(update={"datamart": f"chaos_{tag}"})
    root = Path(tempfile.mkdtemp(prefix="podd-chaos-", dir=args.work_dir))
    spec = WorkloadSpec(rows_per_delta=args.rows_per_delta, seed=args.seed)
    source = WorkloadSource(schema, spec, interval=timedelta(hours=1))
    with ExitStack() as stack:
        bootstrap = stack.enter_context(embedded_broker(log_file=root / "tansu.log"))
        clickhouse = args.store == "clickhouse"
        # On ClickHouse the engine is the agent's own (chdb): a kill -9 of the agent is a
        # crash of the database too, and there is no server of its own to restart.
        pg = None if clickhouse else stack.enter_context(EmbeddedPostgres(root / "pg"))
        replica = f"chdb://{root / 'clickhouse'}" if pg is None else pg.dsn
        settings = KafkaSettings(
            broker=bootstrap,
            topic_delta_in=f"in-{tag}",
            topic_delta_in_rs=f"in-rs-{tag}",
            topic_delta_rq=f"rq-{tag}",
            topic_delta_rs=f"rs-{tag}",
        )
        asyncio.run(ensure_topics(settings, [bootstrap]))
        environment = dict(settings.topic_environment())
        filler = DiskFiller(root / "staging-fs", 512) if args.disk_fills else None
        if filler is not None:
            stack.callback(filler.unmount)
            if filler.available:
                environment["PODD_STAGING_DIR"] = str(filler.mount)
        agent = AgentSpec(
            [schema],
            bootstrap,
            replica,
            root / "agent",
            f"chaos-{tag}",
            "local[2]",
            environment,
        )
        supervisor = Supervisor(agent, root, run)
        supervisor.start()
        stack.callback(supervisor.stop)
        started = time.perf_counter()
        client = asyncio.run(_drive(args, settings, bootstrap, source, supervisor, pg, run, filler))
        run.seconds = time.perf_counter() - started
        if clickhouse:
            supervisor.stop()  # (read once the agent, its engine's one process, has stopped)
        check_replica(run, replica, source, client)
    return run


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="reliability.chaos", description=__doc__.splitlines()[0])
    parser.add_argument("--deltas", type=int, default=100)
    parser.add_argument("--rows-per-delta", type=int, default=1000)
    parser.add_argument("--chunk-rows", type=int, default=250)
    parser.add_argument("--kills", type=int, default=None, help="default: one per 8 deltas")
    parser.add_argument(
        "--kill-within",
        type=float,
        default=3.0,
        help="each kill falls this many seconds at most after its delta is done",
    )
    parser.add_argument("--pg-restarts", type=int, default=2)
    parser.add_argument(
        "--store",
        choices=["postgresql", "clickhouse"],
        default="postgresql",
        help="the agent's replica (clickhouse: embedded; no database restarts, no rewind)",
    )
    parser.add_argument(
        "--disk-fills",
        type=int,
        choices=(0, 1),
        default=1,
        help="fill the agent's staging disk (a tmpfs; needs root) once, mid-run",
    )
    parser.add_argument("--fill-seconds", type=float, default=5.0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--work-dir", type=Path, default=None)
    parser.add_argument("--report", type=Path, help="write the figures here (RELIABILITY.md)")
    args = parser.parse_args(argv)
    if args.kills is None:
        args.kills = max(2, args.deltas // 8)
    if args.store == "clickhouse":
        args.pg_restarts = 0
    log_to_stderr()
    try:
        run = run_chaos(args)
    except (PoddError, OSError) as exc:
        print(f"reliability.chaos: {exc}", file=sys.stderr)
        return 2
    text = report(run, args)
    print(text)
    if args.report:
        args.report.write_text(text)
    return 0 if run.passed else 1


if __name__ == "__main__":
    raise SystemExit(main())
