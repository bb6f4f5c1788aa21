"""The benchmark of issue 6, one command: end to end beside its floors, latency, scaling,
and the peer baseline, written to BENCHMARKS.md (a table and a chart).

    python -m bench.run [--rows 1000000] [--preload 1000000] [--scale 100000,1000000,5000000]
                        [--latency-deltas 30] [--broker HOST:PORT] [--replica DSN]
                        [--spark-master local[2]] [--no-cluster] [--out DIR] [--smoke]

Everything it needs starts here (the embedded Tansu broker and PostgreSQL unless given, and
one `replica-agent run` child process per scaling point). Data is generated and encoded
before any clock starts. The headline point (`--rows`) also measures, on the same messages:
floor (a) consume + decode, floor (b) a keyed COPY into logged tables, and the peer.
A catch-up series (many small deltas sent by the reference origin) runs first, on an idle
replica, as a replica catching up after an outage would be.
Then the headline delta and the latency series run again with the loader on a standalone
Spark cluster (a master and one worker started from the installed pyspark), and a backup
topic of the same kind of rows is restored beside the same rows sent as `delta.in` deltas.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import shutil
import statistics
import tempfile
import time
import uuid
from contextlib import ExitStack
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psutil

from bench.agent_run import AgentConfig, phase_windows, phases, running_agent
from bench.catch_up import catch_up
from bench.cpu import MachineCpu
from bench.datagen import bench_schema
from bench.e2e import Sent, one_row_latency, send_and_wait
from bench.e2e_data import PreparedDelta, prepare_deltas, prepare_one_row_deltas
from bench.floors import consume_and_decode, keyed_copy_floor, settle_replica
from bench.kernels import warm_up_kernels
from bench.memory import Peaks
from bench.paced import send_paced
from bench.peer import create_peer_tables, live_rows, run_peer
from bench.report import write_report
from bench.restore_bench import restore_beside_delta_in
from bench.run_args import build_parser
from origin.client import OriginClient
from podd_kafka.broker import embedded_broker
from podd_kafka.client import ensure_topics
from podd_kafka.settings import KafkaSettings
from podd_runtime.spark_cluster import StandaloneCluster
from protocol.console import log_to_stderr
from protocol.schema import LogicalSchema
from replica_store.embedded_pg import replica_dsn

ANSWER_TIMEOUT = 1800.0


class Bench:
    def __init__(self, args: argparse.Namespace, root: Path, bootstrap: str, dsn: str) -> None:
        self.args = args
        self.root = root
        self.dsn = dsn
        self.run_id = uuid.uuid4().hex[:6]
        prefix = f"bench-{self.run_id}."
        self.kafka = KafkaSettings(
            broker=bootstrap,
            topic_delta_in=prefix + "delta.in",
            topic_delta_in_rs=prefix + "delta.in.rs",
            topic_delta_rq=prefix + "delta.rq",
            topic_delta_rs=prefix + "delta.rs",
        )
        self.clickhouse = args.store == "clickhouse"
        env = (("PODD_STORE", args.store),)
        self.agent = AgentConfig(bootstrap, dsn, args.spark_master, f"bench-{self.run_id}", env)

    def schema(self, label: str) -> LogicalSchema:
        return bench_schema(f"bench_{self.run_id}_{label}", self.args.tables)

    async def point(
        self, rows: int, headline: bool, *, latency: bool = False, cluster: str | None = None
    ) -> dict[str, Any]:
        """One scaling point: a fresh agent, a pre-load, the timed delta (and at the headline
        point, the floors, the peer and the latency series). With `cluster`, the agent's
        loader runs on that Spark master."""
        a = self.args
        latency = latency or headline
        schema = self.schema(f"{rows}" + ("_cluster" if cluster else ""))
        data = self.root / "data"
        print(f"[{rows:,} rows] generating the pre-load and the delta", flush=True)
        paced = headline and a.paced_seconds > 0
        sizes = [(0, a.preload, 0), (1, rows, a.preload)]
        if paced:  # deltas 2 and 3: the same size again, sent paced
            sizes += [(2, rows, a.preload + rows), (3, rows, a.preload + 2 * rows)]
        preload, delta, *paced_deltas = prepare_deltas(
            data, schema.datamart, a.tables, sizes, a.chunk_rows
        )
        schemas = [schema]
        latency_deltas: list[PreparedDelta] = []
        if latency:
            lat_schema = self.schema("latency" + ("_cluster" if cluster else ""))
            schemas.append(lat_schema)
            latency_deltas = prepare_one_row_deltas(data, lat_schema, 0, a.latency_deltas + 1)
        out: dict[str, Any] = {"rows": delta.rows, "preload": preload.rows}
        agent_dir = self.root / (f"agent-{rows}" + ("-cluster" if cluster else ""))
        config = self.agent if cluster is None else replace(self.agent, spark_master=cluster)
        with running_agent(config, schemas, agent_dir, self.kafka.topic_environment()) as agent:
            bootstrap = self.kafka.bootstrap_servers()
            async with OriginClient(self.kafka, bootstrap) as client:
                print(f"[{rows:,} rows] pre-loading {preload.rows:,} rows", flush=True)
                loaded = await send_and_wait(client, preload, ANSWER_TIMEOUT)
                out["preload_seconds"] = round(loaded.seconds, 3)
                if not self.clickhouse:  # (PostgreSQL's VACUUM and checkpoint)
                    out["settle_seconds"] = round(settle_replica(self.dsn), 3)
                print(f"[{rows:,} rows] timed delta of {delta.rows:,} rows", flush=True)
                pid = agent.process.pid
                with MachineCpu(pid) as cpu:
                    timed = await send_and_wait(client, delta, ANSWER_TIMEOUT)
                out["e2e_seconds"] = round(timed.seconds, 3)
                out["produce_seconds"] = round(timed.produce_seconds, 3)
                out["rows_per_second"] = round(delta.rows / timed.seconds)
                peak = cpu.agent_peak_rss  # (read by the CPU sampler's own /proc pass)
                out["memory"] = Peaks(
                    peak["agent"], peak["spark_jvm"], peak["spark_workers"]
                ).as_mib()
                for interleaved, later in zip(
                    (False, True)[: len(paced_deltas)], paced_deltas, strict=True
                ):
                    order = "interleaved" if interleaved else "in table order"
                    print(
                        f"[{rows:,} rows] paced delta over {a.paced_seconds:g} s, streams {order}",
                        flush=True,
                    )
                    run = await send_paced(
                        client, later, a.paced_seconds, interleaved, ANSWER_TIMEOUT, pid
                    )
                    out.setdefault("paced", []).append(run)
                if latency:
                    out["latency"] = await self.latency(client, latency_deltas)
        # Read once the agent has stopped: it logs "answered" after the answer is sent.
        out["agent_phases"] = phases(agent.log_path, timed.result.request_id)
        windows = phase_windows(agent.log_path, timed.result.request_id)
        out["cpu"] = {"whole": cpu.timeline.whole()} | {
            name: cpu.timeline.between(*window) for name, window in windows.items()
        }
        if headline and not self.clickhouse:  # (floors and peer are PostgreSQL's)
            out["floors"] = await self.floors(timed.sent, schema, preload, delta)
            out["peer"] = await self.peer(timed.sent, schema)
        if not a.keep:  # the agent's log and staging, for a look afterwards
            shutil.rmtree(agent_dir, ignore_errors=True)
        shutil.rmtree(preload.directory, ignore_errors=True)
        shutil.rmtree(delta.directory, ignore_errors=True)
        for later in paced_deltas:
            shutil.rmtree(later.directory, ignore_errors=True)
        return out

    async def latency(self, client: OriginClient, deltas: list[PreparedDelta]) -> dict[str, Any]:
        print(f"latency: {len(deltas) - 1} one-row deltas (after one warm-up)", flush=True)
        await one_row_latency(client, deltas[0], ANSWER_TIMEOUT)  # warm-up, not counted
        seconds = [await one_row_latency(client, d, 120) for d in deltas[1:]]
        ordered = sorted(seconds)
        p95 = ordered[min(len(ordered) - 1, max(0, round(0.95 * len(ordered)) - 1))]
        return {
            "deltas": len(seconds),
            "median_seconds": round(statistics.median(seconds), 3),
            "p95_seconds": round(p95, 3),
            "max_seconds": round(max(seconds), 3),
            "all_seconds": [round(s, 3) for s in seconds],
        }

    async def floors(
        self, sent: Sent, schema: LogicalSchema, preload: PreparedDelta, delta: PreparedDelta
    ) -> dict[str, Any]:
        print("floor (a): consume the same messages and decode every row (decode_body)")
        seconds_a, rows_a, cpu_a = await consume_and_decode(
            self.kafka, self.kafka.bootstrap_servers(), sent, schema
        )
        print("floor (b): COPY the kept rows into keyed, logged, pre-loaded tables", flush=True)
        settle_replica(self.dsn)
        seconds_b, rows_b, cpu_b = keyed_copy_floor(self.dsn, preload.transfer, delta.transfer)
        return {
            "consume_decode_seconds": round(seconds_a, 3),
            "consume_decode_rows": rows_a,
            "keyed_copy_seconds": round(seconds_b, 3),
            "keyed_copy_rows": rows_b,
            "cpu": {"consume_decode": cpu_a, "keyed_copy": cpu_b},
        }

    async def peer(self, sent: Sent, schema: LogicalSchema) -> dict[str, Any]:
        if self.args.skip_peer:
            return {}
        print("peer baseline: one consumer, batched per-row upserts", flush=True)
        peer = create_peer_tables(self.dsn, schema, as_of=0)
        seconds, rows = await run_peer(
            self.kafka, self.kafka.bootstrap_servers(), sent, self.dsn, schema, peer
        )
        names = [t.name for t in schema]
        return {
            "seconds": round(seconds, 3),
            "rows": rows,
            "live_rows": live_rows(self.dsn, peer, names, actual=False),
            "replica_live_rows": live_rows(self.dsn, schema.datamart, names, actual=True),
        }

    async def run(self) -> dict[str, Any]:
        await ensure_topics(self.kafka, self.kafka.bootstrap_servers())
        catch_up_result = None
        if self.args.catch_up_deltas:  # first: a catch-up meets an idle replica
            catch_up_result = await catch_up(
                self.kafka,
                self.agent,
                self.root,
                datamart=f"bench_{self.run_id}_catch_up",
                deltas=self.args.catch_up_deltas,
                rows=self.args.catch_up_rows,
                tables=3,
            )
        sizes = sorted(set(self.args.scale) | {self.args.rows})
        points = []
        for rows in sizes:
            result = await self.point(rows, headline=rows == self.args.rows)
            points.append(result)
        out: dict[str, Any] = {"points": points}
        headline = next((p for p in points if p.get("paced")), None)
        if headline is not None and "floors" in headline:
            floor_b = headline["floors"]["keyed_copy_seconds"]
            out["paced"] = {
                "seconds": self.args.paced_seconds,
                "floor_b_seconds": floor_b,
                "runs": [
                    run | {"ratio_to_floor_b": round(run["after_last_chunk_seconds"] / floor_b, 2)}
                    for run in headline["paced"]
                ],
            }
        if catch_up_result is not None:
            out["catch_up"] = catch_up_result
        if self.args.cluster:
            out["cluster"] = await self.on_cluster()
        if self.args.clickhouse and not self.clickhouse:
            out["clickhouse"] = await self.on_clickhouse()
        if self.args.restore_rows:
            out["restore"] = await restore_beside_delta_in(
                self.kafka,
                self.kafka.bootstrap_servers()[0],
                self.dsn,
                self.root,
                rows=self.args.restore_rows,
                deltas=self.args.restore_deltas,
                tables=self.args.tables,
                chunk_rows=self.args.chunk_rows,
                spark_master=self.args.spark_master,
            )
        return out

    async def on_clickhouse(self) -> dict[str, Any]:
        """The headline delta, the latency series and the catch-up again, every agent's
        replica in an embedded ClickHouse (the ADQM store), in its own data directory."""
        postgresql, kafka = self.agent, self.kafka
        self.agent = replace(self.agent, env=(("PODD_STORE", "clickhouse"),))
        # Topics of its own: the agent's consumer would otherwise first read past every
        # message the run has sent so far (the PostgreSQL points met a nearly empty topic).
        prefix = f"bench-{self.run_id}-clickhouse."
        self.kafka = kafka.model_copy(
            update={
                "topic_delta_in": prefix + "delta.in",
                "topic_delta_in_rs": prefix + "delta.in.rs",
                "topic_delta_rq": prefix + "delta.rq",
                "topic_delta_rs": prefix + "delta.rs",
            }
        )
        await ensure_topics(self.kafka, self.kafka.bootstrap_servers())
        self.clickhouse = True
        try:
            print("ClickHouse: the headline delta, the latency series, the catch-up", flush=True)
            point = await self.point(self.args.rows, headline=False, latency=True)
            caught_up = None
            if self.args.catch_up_deltas:
                caught_up = await catch_up(
                    self.kafka,
                    self.agent,
                    self.root,
                    datamart=f"bench_{self.run_id}_catch_up_clickhouse",
                    deltas=self.args.catch_up_deltas,
                    rows=self.args.catch_up_rows,
                    tables=3,
                )
        finally:
            self.agent, self.kafka, self.clickhouse = postgresql, kafka, False
        return {"point": point, "catch_up": caught_up}

    async def on_cluster(self) -> dict[str, Any]:
        """The headline delta and the latency series again, the loader on a standalone
        cluster (one master, one worker with as many cores as `local[N]` has)."""
        cores = self.args.cluster_cores
        print(f"standalone cluster: one worker, {cores} cores", flush=True)
        with StandaloneCluster(self.root / "spark-cluster", cores=cores, memory="6g") as master:
            point = await self.point(self.args.rows, headline=False, latency=True, cluster=master)
        point["workers"], point["cores"] = 1, cores
        return point


def _machine() -> dict[str, Any]:
    return {
        "cpus": psutil.cpu_count(),
        "memory_gib": round(psutil.virtual_memory().total / 2**30),
        "python": platform.python_version(),
        "platform": platform.platform(terse=True),
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    if args.work_dir is not None:
        args.work_dir.mkdir(parents=True, exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix="podd-e2e-", dir=args.work_dir))
    started = time.perf_counter()
    warmed = warm_up_kernels()
    try:
        with ExitStack() as stack:
            bootstrap = args.broker or stack.enter_context(
                embedded_broker(log_file=root / "tansu.log")
            )
            dsn = stack.enter_context(replica_dsn(args.replica, root / "pg"))
            results = asyncio.run(Bench(args, root, bootstrap, dsn).run())
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    results["settings"] = {
        "rows": args.rows,
        "preload": args.preload,
        "tables": args.tables,
        "chunk_rows": args.chunk_rows,
        "spark_master": args.spark_master,
        "cluster_cores": args.cluster_cores if args.cluster else None,
        "broker": "external" if args.broker else "embedded Tansu",
        "replica": "external" if args.replica else "embedded PostgreSQL",
        "store": args.store,
    }
    results["machine"] = _machine()
    results["warm_up"] = warmed
    results["date"] = datetime.now(UTC).strftime("%Y-%m-%d")
    results["bench_seconds"] = round(time.perf_counter() - started, 1)
    return results


#: Figures of bench-results.json that other runs measure (`bench.cdc_bench --record`): a
#: full `bench.run` keeps them, so each figure has one home and is never dropped.
MEASURED_ELSEWHERE = ("cdc",)


def keep_other_runs(results: dict[str, Any], previous: dict[str, Any]) -> dict[str, Any]:
    """This run's results, with the figures other runs recorded carried over."""
    kept = {key: previous[key] for key in MEASURED_ELSEWHERE if key in previous}
    return {**results, **{k: v for k, v in kept.items() if k not in results}}


def main(argv: list[str] | None = None) -> int:
    args = build_parser((__doc__ or "").split("\n")[0]).parse_args(argv)
    if args.smoke:
        # Deltas big enough that PostgreSQL's CPU for them reads above /proc's 10 ms tick
        # (at 1,000 and 2,000 rows the test's `postgres > 0` read 0 now and then).
        # One scaling point, the headline's: a second one only adds an agent's start and a
        # delta through the same code (the smoke test was CI's longest).
        args.rows, args.preload, args.scale, args.latency_deltas = 20_000, 2000, [], 3
        args.restore_rows, args.restore_deltas = min(args.restore_rows, 2000), 2
        args.catch_up_deltas = min(args.catch_up_deltas, 5)
        args.chunk_rows = min(args.chunk_rows, 100)
        args.paced_seconds = min(args.paced_seconds, 1.0)
    log_to_stderr()
    results = run(args)
    args.out.mkdir(parents=True, exist_ok=True)
    if args.store == "clickhouse":  # BENCHMARKS.md's ClickHouse section is written by hand
        path = args.out / "bench-results-clickhouse.json"
        path.write_text(json.dumps(results, indent=1) + "\n")
        print(f"wrote {path}")
        return 0
    path = args.out / "bench-results.json"
    previous = json.loads(path.read_text()) if path.exists() else {}
    results = keep_other_runs(results, previous)
    path.write_text(json.dumps(results, indent=1) + "\n")
    report = write_report(results, args.out)
    print(f"wrote {report} and {args.out / 'bench-results.json'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
