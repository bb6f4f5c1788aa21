"""`python -m bench.cdc_bench`: the CDC origin against `delta.in` and against a peer, in one run.

0. The origin's and the agent's kernels compiled, as an install does (`bench.kernels`).
1. The 1M-row `delta.in` delta of `bench.run` (its rows/s is the yardstick).
2. `--changes` source changes over 10 tables (transactions of 1 to 100 changes, 4
   partitions), written as a Qlik JSON topic and as a DataWorks topic (untimed), then cut and
   sent by the CDC origin to a fresh agent: first message read to last `delta.in.rs`, with
   its busy seconds per phase (parse, cut, frame, send and load).
3. The peer (`bench.cdc_peer`) following the same Qlik topic with per-row upserts.

The figures go into `bench-results.json` under `cdc`, and BENCHMARKS.md is rendered again.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import shutil
import tempfile
import time
import uuid
from concurrent.futures import ProcessPoolExecutor
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path
from typing import Any

from bench.agent_run import AgentConfig, running_agent
from bench.cdc_ceiling import serial_account
from bench.cdc_peer import create_tables, follow
from bench.cpu import MachineCpu, own_rss
from bench.kernels import warm_up_kernels
from bench.run import Bench
from bench.run_args import build_parser as bench_parser
from origin.client import OriginClient
from origin.session import SessionOptions
from podd_cdc.cutter import Bounds
from podd_cdc.options import CdcOptions
from podd_cdc.runner import CdcOrigin
from podd_cdc.schema_scan import scan
from podd_kafka.broker import embedded_broker
from podd_kafka.client import ensure_topics
from podd_kafka.settings import KafkaSettings
from replica_store.embedded_pg import replica_dsn
from tools.cdc_write.dataworks_writer import DataWorksWriter
from tools.cdc_write.produce import produce
from tools.cdc_write.qlik_writer import QlikWriter, Written
from tools.cdc_write.source import SourceDatabase, SourceTable
from tools.cdc_write.tables import dataworks_marketing, qlik_marketing

PARTITIONS = 4
FORMATS = ("qlik", "dataworks")
REPO = Path(__file__).resolve().parents[1]


def ten_tables(shapes: tuple[SourceTable, ...]) -> tuple[SourceTable, ...]:
    keyed = [t for t in shapes if t.key]
    return tuple(
        replace(keyed[i % len(keyed)], name=f"{keyed[i % len(keyed)].name}_{i}") for i in range(10)
    )


def source(fmt: str, changes: int, seed: int) -> tuple[list[Written], int]:
    """The topic's messages for about `changes` source changes; and the exact count."""
    tables = ten_tables(qlik_marketing() if fmt == "qlik" else dataworks_marketing())
    db = SourceDatabase(tables, seed=seed, null_ratio=0.1, key_change_ratio=0.01)
    transactions = []
    count = 0
    while count < changes:
        tx = db.transaction(min(db.rng.randint(1, 100), changes - count))
        transactions.append(tx)
        count += len(tx.changes)
    if fmt == "qlik":
        writer = QlikWriter(tables, partitions=PARTITIONS, seed=seed)
        return [*writer.metadata(), *writer.transactions(transactions)], count
    dataworks = DataWorksWriter(tables, partitions=PARTITIONS, heartbeat_every=2000, seed=seed)
    return list(dataworks.transactions(transactions)), count


def _write_topic(
    fmt: str, changes: int, seed: int, kafka: KafkaSettings, topic: str
) -> tuple[int, int]:
    messages, count = source(fmt, changes, seed)
    asyncio.run(produce(kafka, kafka.bootstrap_servers(), topic, PARTITIONS, messages))
    return count, len(messages)


async def written_topic(
    fmt: str, changes: int, seed: int, kafka: KafkaSettings, topic: str
) -> tuple[int, int]:
    """The source topic, written by a child process (the messages of 1M changes take
    gigabytes in Python): this process then holds only the origin, whose memory is measured.
    The source changes and messages written."""
    spawn = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(1, mp_context=spawn) as pool:
        job = pool.submit(_write_topic, fmt, changes, seed, kafka, topic)
        return await asyncio.wrap_future(job)


async def cdc_run(
    fmt: str,
    kafka: KafkaSettings,
    config: AgentConfig,
    root: Path,
    changes: int,
    seed: int,
    dsn: str,
    *,
    peer: bool,
    columnar: bool = True,
) -> dict[str, Any]:
    bootstrap = kafka.bootstrap_servers()
    topic = f"bench-cdc-{fmt}-{uuid.uuid4().hex[:6]}"
    print(f"[{fmt}] writing {changes:,} source changes", flush=True)
    count, messages = await written_topic(fmt, changes, seed, kafka, topic)
    options = CdcOptions(
        fmt=fmt,  # type: ignore[arg-type]
        topics=[topic],
        state_dir=root / f"state-{fmt}",
        bounds=Bounds(max_rows=100_000),
        settle=1.0,
        until_idle=2.0,
        columnar=columnar,
    )
    found = await scan(kafka, bootstrap, options)
    schema = found.schema(f"bench_cdc_{fmt}_{uuid.uuid4().hex[:6]}")
    out: dict[str, Any] = {"source_changes": count, "messages": messages}
    if options.on_arrays:
        out["columnar"] = True
    with running_agent(config, [schema], root / f"agent-{fmt}", kafka.topic_environment()) as agent:
        async with OriginClient(kafka, bootstrap) as client:
            print(f"[{fmt}] the CDC origin cuts and sends", flush=True)
            origin = CdcOrigin(
                client,
                schema,
                options,
                SessionOptions(answer_timeout=600),
                lambda line: print(f"  {line}", flush=True),
            )
            baseline = own_rss()
            with MachineCpu(agent.process.pid) as cpu:
                stats = await origin.run()
    assert stats.first_read is not None
    assert stats.last_answer is not None
    seconds = stats.last_answer - stats.first_read
    out |= {
        "seconds": round(seconds, 3),
        "deltas": stats.deltas,
        "changes": stats.changes,
        "rows": stats.rows,
        "changes_per_second": round(count / seconds),
        "phases": {
            "parse": round(stats.parse_seconds, 3),
            "cut": round(stats.cut_seconds, 3),
            "frame": round(stats.frame_seconds, 3),
            "send_and_load": round(stats.load_seconds, 3),
        },
        "cpu": cpu.timeline.whole(),
        "origin_rss_mib": {
            "before": round(baseline / 2**20, 1),
            "peak": round(cpu.origin_peak_rss / 2**20, 1),
        },
        "agent_rss_mib": cpu.agent_rss_mib(),
        "held_peak": stats.held_peak,
        "in_run": serial_account(cpu.timeline, stats, count),
    }
    if options.on_arrays:
        out["batched"] = stats.batched  # messages held from read batches, not one at a time
    if peer:
        print(f"[{fmt}] the peer follows the same topic row by row", flush=True)
        tables = create_tables(dsn, schema)
        peer_seconds, applied = await follow(
            bootstrap, topic, PARTITIONS, messages, dsn, schema, tables
        )
        out["peer"] = {
            "seconds": round(peer_seconds, 3),
            "changes": applied,
            "changes_per_second": round(applied / peer_seconds),
        }
    return out


def run(args: argparse.Namespace) -> dict[str, Any]:
    root = Path(tempfile.mkdtemp(prefix="podd-cdc-bench-"))
    started = time.perf_counter()
    warmed = warm_up_kernels()
    bench_args = bench_parser("").parse_args(["--rows", str(args.delta_in_rows), "--skip-peer"])
    try:
        with ExitStack() as stack:
            bootstrap = stack.enter_context(embedded_broker(log_file=root / "tansu.log"))
            dsn = stack.enter_context(replica_dsn(None, root / "pg"))
            results: dict[str, Any] = {}

            async def measure() -> None:
                bench = Bench(bench_args, root, bootstrap, dsn)
                await ensure_topics(bench.kafka, bench.kafka.bootstrap_servers())
                if args.delta_in_rows:
                    print(f"[delta.in] the {args.delta_in_rows:,}-row delta", flush=True)
                    point = await bench.point(args.delta_in_rows, headline=False)
                    results["delta_in"] = {
                        "rows": point["rows"],
                        "seconds": point["e2e_seconds"],
                        "rows_per_second": point["rows_per_second"],
                    }
                for fmt in args.formats:
                    # A fresh embedded broker per format: Tansu keeps every message in memory,
                    # and holding the runs before (3.4M messages, 2.6 GB) slowed its fetches
                    # until the origin's reader starved (deltas of 2,800 changes).
                    with embedded_broker(log_file=root / f"tansu-{fmt}.log") as fresh:
                        kafka = bench.kafka.model_copy(update={"broker": fresh})
                        await ensure_topics(kafka, kafka.bootstrap_servers())
                        agent = replace(bench.agent, bootstrap=fresh)
                        results[fmt] = await cdc_run(
                            fmt,
                            kafka,
                            agent,
                            root,
                            args.changes,
                            args.seed,
                            dsn,
                            peer=fmt == "qlik" and not args.no_peer,
                            columnar=not args.by_record,
                        )

            asyncio.run(measure())
    finally:
        shutil.rmtree(root, ignore_errors=True)
    results["warm_up"] = warmed
    results["date"] = time.strftime("%Y-%m-%d")
    results["bench_seconds"] = round(time.perf_counter() - started, 1)
    return with_ratios(results)


def with_ratios(results: dict[str, Any]) -> dict[str, Any]:
    """Each format's headline figures (`cdc.<format>`): the origin's own CPU µs per source
    change (its process, from /proc), changes/s end to end, and that rate against the
    `delta.in` delta's rows/s and the peer's changes/s of the same run (the peer follows
    the Qlik topic: both formats are held to it); and the same ratios of the ceiling
    (`bench.cdc_ceiling`)."""
    delta_in = results.get("delta_in")
    peer = results.get("qlik", {}).get("peer")
    for fmt in FORMATS:
        r = results.get(fmt)
        if not r:
            continue
        origin_cpu = r.get("cpu", {}).get("origin")
        if origin_cpu is not None:
            r["origin_us_per_change"] = round(origin_cpu / r["source_changes"] * 1e6, 2)
        ceiling = r.get("in_run", {}).get("ceiling_changes_per_second")
        for name, rate in (("ratio", r["changes_per_second"]), ("ceiling_ratio", ceiling)):
            if delta_in and rate:
                r[f"{name}_to_delta_in"] = round(rate / delta_in["rows_per_second"], 3)
            if peer and rate:
                r[f"{name}_to_peer"] = round(rate / peer["changes_per_second"], 2)
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.cdc_bench", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--changes", type=int, default=1_000_000)
    parser.add_argument("--delta-in-rows", type=int, default=1_000_000, help="0: skip it")
    parser.add_argument("--formats", nargs="+", default=["qlik", "dataworks"])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-peer", action="store_true", help="skip the per-row peer")
    parser.add_argument(
        "--by-record",
        action="store_true",
        help="the origin's cutter a change at a time (`podd-cdc run --no-columnar`)",
    )
    parser.add_argument("--out", type=Path, help="write the results here (JSON)")
    parser.add_argument(
        "--record",
        action="store_true",
        help="merge into bench-results.json and render BENCHMARKS.md",
    )
    args = parser.parse_args(argv)
    results = run(args)
    print(json.dumps(results, indent=1))
    if args.out:
        args.out.write_text(json.dumps(results, indent=1))
    if args.record:
        from bench.report import write_report  # noqa: PLC0415

        path = REPO / "bench-results.json"
        merged = json.loads(path.read_text())
        merged["cdc"] = results
        path.write_text(json.dumps(merged, indent=1) + "\n")
        write_report(merged, REPO)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
