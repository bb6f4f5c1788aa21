"""`python -m conformance.chaos`: deltas through faults, then the replica must be exactly right.

The reference origin drives N deltas (default 100) into a real agent process while:
* the agent is killed with `kill -9` `--kills` times, each a random moment after a random
  delta is done (mid-transfer, mid-load or after a commit of the next: wherever the clock
  falls), and restarted on the same data directory;
* PostgreSQL is crash-restarted (`pg_ctl stop -m immediate`, then start) at least twice;
* malformed messages of every kind the fuzz test knows arrive on `delta.in` and `delta.rq`.
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
from collections import Counter
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

import psutil

from conformance.hostile import HostileMessages
from origin.client import OriginClient
from origin.driver import DeltaOutcome, DriverOptions, OriginDriver
from origin.errors import OriginError
from origin.sources import WorkloadSource, replica_model
from podd_kafka.broker import embedded_broker
from podd_kafka.client import ensure_topics
from podd_kafka.settings import KafkaSettings
from podd_runtime.agent_child import AgentChild, AgentSpec, start_agent
from protocol.console import log_to_stderr
from protocol.ddl import parse_schema
from protocol.errors import ErrorCode, PoddError
from protocol.messages import DeltaStatus
from protocol.workload import WorkloadSpec
from spark_loader.embedded_pg import EmbeddedPostgres
from spark_loader.replica_reader import differences
from spark_loader.store import ReplicaStore

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "marketing.sql"


@dataclass
class ChaosRun:
    """What happened, for the report."""

    deltas: int
    faults: Counter[str] = field(default_factory=Counter)
    malformed: Counter[str] = field(default_factory=Counter)
    answers: Counter[str] = field(default_factory=Counter)
    agent_exits: Counter[str] = field(default_factory=Counter)  # exits the agent chose
    peak_rss_mib: float = 0.0
    seconds: float = 0.0
    differences: list[str] = field(default_factory=list)
    registry_rows: int = 0
    lies: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.differences and not self.lies and self.registry_rows == self.deltas


class Supervisor:
    """Keeps one agent process running, as systemd or Kubernetes would."""

    def __init__(self, spec: AgentSpec, data_dir: Path, run: ChaosRun) -> None:
        self.spec, self.data_dir, self.run = spec, data_dir, run
        self.child: AgentChild | None = None
        self.starts = 0

    def start(self) -> None:
        self.starts += 1
        self.child = start_agent(self.spec, self.data_dir / f"agent-{self.starts}.log")
        self.child.wait_ready(timeout=240)

    def kill(self) -> None:
        assert self.child is not None
        self.child.kill()
        self.run.faults["agent kill -9"] += 1
        self.start()

    def watch(self) -> None:
        """Restart the agent if it ended by itself; sample its memory."""
        assert self.child is not None
        code = self.child.process.poll()
        if code is not None:
            self.run.agent_exits[f"exit code {code}"] += 1
            self.start()
            return
        try:
            rss = psutil.Process(self.child.process.pid).memory_info().rss / 2**20
        except psutil.Error:
            return
        self.run.peak_rss_mib = max(self.run.peak_rss_mib, rss)

    def stop(self) -> None:
        if self.child is not None:
            self.child.stop()


async def _chaos(
    args: argparse.Namespace,
    supervisor: Supervisor,
    pg: EmbeddedPostgres | None,
    done: list[DeltaOutcome],
    finished: asyncio.Event,
    run: ChaosRun,
) -> None:
    """Faults at random moments until the origin is done."""
    rng = random.Random(args.seed)
    restarts_at = [args.deltas * (i + 1) // (args.pg_restarts + 1) for i in range(args.pg_restarts)]
    # Kills follow the deltas done, not the clock: a fast run gets all of them too. The last
    # ones fall early enough that deltas are left to go through them.
    candidates = range(1, max(2, args.deltas - 3))
    kills_at = sorted(rng.choices(candidates, k=args.kills))
    kill_due: float | None = None
    while not finished.is_set():
        await asyncio.sleep(0.25)
        await asyncio.to_thread(supervisor.watch)
        if pg is not None and restarts_at and len(done) >= restarts_at[0]:
            restarts_at.pop(0)
            await asyncio.to_thread(pg.crash_restart, rng.uniform(0.5, 3))
            run.faults["PostgreSQL crash restart"] += 1
        if kill_due is None and kills_at and len(done) >= kills_at[0]:
            kills_at.pop(0)
            kill_due = time.monotonic() + rng.uniform(0, args.kill_within)
        if kill_due is not None and time.monotonic() >= kill_due:
            kill_due = None
            await asyncio.to_thread(supervisor.kill)


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


async def _drive(
    args: argparse.Namespace,
    settings: KafkaSettings,
    bootstrap: str,
    source: WorkloadSource,
    supervisor: Supervisor,
    pg: EmbeddedPostgres | None,
    run: ChaosRun,
) -> OriginClient:
    done: list[DeltaOutcome] = []
    finished = asyncio.Event()
    async with OriginClient(settings, [bootstrap]) as client:
        chaos = asyncio.create_task(_chaos(args, supervisor, pg, done, finished, run))
        noise = asyncio.create_task(
            _malformed(client, HostileMessages(source.schema, args.seed), run, finished)
        )
        options = DriverOptions(
            chunk_rows=args.chunk_rows, answer_timeout=30, state_timeout=15, state_attempts=20
        )
        driver = OriginDriver(client, source, options, done.append)
        try:
            while len(done) < args.deltas:
                try:
                    await driver.run(args.deltas - len(done))
                except OriginError as exc:  # gave up on one delta: ask again and go on
                    run.faults[f"origin restarted: {type(exc).__name__}"] += 1
                    print(f"  origin: {exc}; resuming", file=sys.stderr)
        finally:
            finished.set()
            await asyncio.gather(chaos, noise, return_exceptions=True)
        for answers in client.results.values():
            for answer in answers:
                run.answers[answer.error_code or answer.status.value] += 1
    return client


def _check(run: ChaosRun, dsn: str, source: WorkloadSource, client: OriginClient) -> None:
    registry = [
        (e.delta_num, e.request_id) for e in ReplicaStore(dsn).registry(source.schema.datamart)
    ]
    run.registry_rows = len(registry)
    if [n for n, _ in registry] != list(range(run.deltas)):
        run.lies.append(f"the registry holds deltas {[n for n, _ in registry]}")
    for delta_num, request_id in registry:
        for answer in client.results.get(request_id, []):
            if (
                answer.status is DeltaStatus.ERROR
                and answer.error_code != ErrorCode.INCOMPLETE_DELTA
            ):
                run.lies.append(
                    f"delta {delta_num} was applied by {request_id}, answered {answer.error_code}"
                )
    model = replica_model(source, run.deltas - 1)
    run.differences = differences(dsn, model, as_of=range(run.deltas))


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
        pg = stack.enter_context(EmbeddedPostgres(root / "pg"))
        settings = KafkaSettings(
            broker=bootstrap, topic_delta_in=f"in-{tag}", topic_delta_in_rs=f"in-rs-{tag}",
            topic_delta_rq=f"rq-{tag}", topic_delta_rs=f"rs-{tag}",
        )  # fmt: skip
        asyncio.run(ensure_topics(settings, [bootstrap]))
        agent = AgentSpec(
            [schema], bootstrap, pg.dsn, root / "agent", f"chaos-{tag}", "local[2]",
            settings.topic_environment(),
        )  # fmt: skip
        supervisor = Supervisor(agent, root, run)
        supervisor.start()
        stack.callback(supervisor.stop)
        started = time.perf_counter()
        client = asyncio.run(_drive(args, settings, bootstrap, source, supervisor, pg, run))
        run.seconds = time.perf_counter() - started
        _check(run, pg.dsn, source, client)
    return run


def report(run: ChaosRun, args: argparse.Namespace) -> str:
    def table(title: str, counts: Counter[str]) -> list[str]:
        rows = [f"| {name} | {count:,} |" for name, count in counts.most_common()]
        return [f"| {title} | count |", "|---|---|", *(rows or ["| none | 0 |"]), ""]

    verdict = "PASS" if run.passed else "FAIL"
    lines = [
        "# Reliability: deltas through faults",
        "",
        f"`python -m conformance.chaos --deltas {args.deltas} "
        f"--rows-per-delta {args.rows_per_delta} --kills {args.kills} "
        f"--pg-restarts {args.pg_restarts} --seed {args.seed}` on a 2-core "
        "VM: embedded Tansu and PostgreSQL, the agent as a process (local[2] Spark), the "
        "reference origin, malformed messages all along.",
        "",
        f"**{verdict}**: {run.deltas} deltas in {run.seconds:,.0f} s; the replica "
        + ("equals the reference model, also as of every delta" if not run.differences
           else "DIFFERS from the model: " + "; ".join(run.differences[:5]))
        + f"; the registry has {run.registry_rows} rows for {run.deltas} deltas; "
        + (f"{len(run.lies)} transfer(s) that applied a delta were answered ERROR"
           if run.lies else "no transfer that applied a delta was ever answered ERROR")
        + ".",
        "",
        *table("fault injected", run.faults),
        *table("agent exit it chose (a supervisor restarted it)", run.agent_exits),
        *table("malformed message sent", run.malformed),
        *table("answer on delta.in.rs (status or errorCode)", run.answers),
        f"Peak RSS of the agent's Python process: {run.peak_rss_mib:,.0f} MiB "
        "(sampled every 0.5 s; Spark's JVM and workers aside).",
        "",
    ]  # fmt: skip
    for lie in run.lies[:20]:
        lines.append(f"* {lie}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="conformance.chaos", description=__doc__.splitlines()[0])
    parser.add_argument("--deltas", type=int, default=100)
    parser.add_argument("--rows-per-delta", type=int, default=1000)
    parser.add_argument("--chunk-rows", type=int, default=250)
    parser.add_argument("--kills", type=int, default=None, help="default: one per 8 deltas")
    parser.add_argument(
        "--kill-within", type=float, default=3.0,
        help="each kill falls this many seconds at most after its delta is done",
    )  # fmt: skip
    parser.add_argument("--pg-restarts", type=int, default=2)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--work-dir", type=Path, default=None)
    parser.add_argument("--report", type=Path, help="write the figures here (RELIABILITY.md)")
    args = parser.parse_args(argv)
    if args.kills is None:
        args.kills = max(2, args.deltas // 8)
    log_to_stderr()
    try:
        run = run_chaos(args)
    except (PoddError, OSError) as exc:
        print(f"conformance.chaos: {exc}", file=sys.stderr)
        return 2
    text = report(run, args)
    print(text)
    if args.report:
        args.report.write_text(text)
    return 0 if run.passed else 1


if __name__ == "__main__":
    raise SystemExit(main())
