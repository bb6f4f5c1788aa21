"""`replica-agent`: run the replica agent, or print its state.

    replica-agent run --datamart NAME --schema FILE.sql [--datamart ... --schema ...]
                      [--broker kafka://HOST:PORT] [--replica postgresql://... | chdb:///DIR]
                      [--store postgresql|clickhouse]
                      [--data-dir DIR] [--metrics-port PORT] [--incomplete-timeout SECONDS]
    replica-agent status [--data-dir DIR] [--replica DSN] [--json]
    replica-agent warm-up

Every flag is also an environment variable: PODD_DATAMART, PODD_SCHEMA, PODD_BROKER,
PODD_REPLICA_DSN, PODD_DATA_DIR, ... (see `replica_agent/settings.py`). Without a broker the
agent starts the embedded Tansu broker; without a replica DSN, the embedded PostgreSQL.
`status` reads what survives the agent: the replica's registry, the staging directory and
the agent's status file, so it works whether or not the agent runs. `warm-up` compiles the
loader's kernels into numba's cache (`spark_loader.warm_up`), so a first delta does not:
run it where the agent is installed, as the user that runs it.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from podd_runtime.exit_codes import run_command
from protocol.console import log_to_stderr
from protocol.sequence import expected_next
from replica_agent.answer_records import AnswerRecords
from replica_agent.chunk_spool import ChunkSpool
from replica_agent.runner import STATUS_FILE, main_run
from replica_agent.settings import AgentSettings
from replica_store.kind import StoreKind
from spark_loader.replica_choice import open_store
from spark_loader.warm_up import warm_up_loader

#: flag → settings field, for the flags that map one to one.
_FLAGS = {
    "broker": "broker",
    "replica": "replica_dsn",
    "store": "store",
    "data_dir": "data_dir",
    "staging_dir": "staging_dir",
    "metrics_host": "metrics_host",
    "metrics_port": "metrics_port",
    "incomplete_timeout": "incomplete_timeout_seconds",
    "session_timeout": "session_timeout_seconds",
    "group_id": "group_id",
    "spark_master": "spark_master",
    "log_format": "log_format",
    "log_level": "log_level",
}


def settings_from(args: argparse.Namespace) -> AgentSettings:
    overrides: dict[str, Any] = {
        field: getattr(args, flag)
        for flag, field in _FLAGS.items()
        if getattr(args, flag, None) is not None
    }
    if args.command == "run" and args.datamart:
        overrides["datamart"] = args.datamart
    if args.command == "run" and args.schema:
        overrides["schema_file"] = args.schema
    return AgentSettings(**overrides)


def status_report(settings: AgentSettings, only: Sequence[str] = ()) -> dict[str, Any]:
    """Each datamart's applied delta, transfers in progress with what they miss, last error."""

    status_path = settings.data_dir / STATUS_FILE
    agent = json.loads(status_path.read_text()) if status_path.exists() else {}
    transfers = ChunkSpool(settings.staging_path)
    answers = AnswerRecords(transfers.outbox, transfers.quarantine, keep_finished=0)
    finished = answers.recover(cleanup=False).finished
    spool_state = transfers.recover(finished, cleanup=False)
    report: dict[str, Any] = {}
    with open_store(settings) as (store, _):
        names = list(only) or settings.datamart or store.datamarts()
        for name in names:
            last = store.last_applied(name)
            report[name] = {
                "applied": None
                if last is None
                else {"deltaNum": last.delta_num, "deltaDate": last.delta_date.isoformat()},
                "expectedDeltaNum": expected_next(None if last is None else last.delta_num),
                "inProgress": [
                    t.progress().model_dump(mode="json", by_alias=True)
                    for t in spool_state.open
                    if t.datamart == name
                ],
                "lastError": agent.get(name, {}).get("last_error"),
                "loading": agent.get(name, {}).get("loading"),
                # The agent's liveness when it last wrote its status file (None: never ran).
                "agent": agent.get("_health"),
            }
    return report


def _print_status(report: dict[str, Any]) -> None:
    if not report:
        print("no datamart has a replica here yet")
    health = next(iter(report.values()))["agent"] if report else None
    if health:
        alive = "alive" if health["worker_alive"] else "NOT RUNNING"
        since = time.time() - health["last_progress"]
        print(
            f"agent: load worker {alive}, last progress {since:,.0f} s ago, "
            f"{health['queued_loads']} queued loads, {health['open_transfers']} open transfers, "
            f"{health['staged_bytes'] / 2**20:,.1f} MiB staged (as of its last status write)"
        )
    for name, state in report.items():
        applied = state["applied"]
        where = (
            "no delta applied"
            if applied is None
            else f"delta {applied['deltaNum']} applied (date {applied['deltaDate']})"
        )
        print(f"{name}: {where}; expects delta {state['expectedDeltaNum']}")
        if state["loading"]:
            print(f"  loading transfer {state['loading']}")
        for transfer in state["inProgress"]:
            missing = ", ".join(transfer["missing"]) or "nothing (complete)"
            print(
                f"  transfer {transfer['requestId']} of delta {transfer['deltaNum']}: "
                f"{transfer['chunksReceived']} chunks, "
                f"{transfer['streamsComplete']}/{transfer['streamTotal']} streams; "
                f"missing {missing}"
            )
        error = state["lastError"]
        print(f"  last error: {error['code']}: {error['message']}" if error else "  no error")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="replica-agent", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="run the agent until SIGTERM")
    run.add_argument("--datamart", action="append", help="a datamart to serve (repeatable)")
    run.add_argument("--schema", action="append", type=Path, help="its Prostore DDL file")
    run.add_argument("--broker", help="Kafka bootstrap, kafka://HOST:PORT (default: embedded)")
    run.add_argument("--metrics-host")
    run.add_argument("--metrics-port", type=int)
    run.add_argument("--incomplete-timeout", type=float, help="seconds")
    run.add_argument("--session-timeout", type=float, help="Kafka consumer session, seconds")
    run.add_argument("--group-id")
    run.add_argument("--spark-master")
    run.add_argument("--log-format", choices=["auto", "json", "console"])
    run.add_argument("--log-level")
    status = commands.add_parser("status", help="print the replica's state")
    status.add_argument("--datamart", action="append")
    status.add_argument("--json", action="store_true")
    commands.add_parser("warm-up", help="compile the loader's kernels into numba's cache")
    for command in (run, status):
        command.add_argument(
            "--replica",
            help="PostgreSQL DSN, or a ClickHouse URL: chdb:///DIR, clickhouse://USER@HOST:8123 "
            "(default: the embedded PostgreSQL; with --store clickhouse, embedded ClickHouse)",
        )
        command.add_argument("--store", choices=[k.value for k in StoreKind])
        command.add_argument("--data-dir", type=Path)
        command.add_argument("--staging-dir", type=Path, help="default: DATA_DIR/staging")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return run_command("replica-agent", lambda: _main(args))


def _main(args: argparse.Namespace) -> int:
    if args.command == "warm-up":
        print(warm_up_loader())
        return 0
    settings = settings_from(args)
    if args.command == "run":
        return main_run(settings)
    log_to_stderr()
    report = status_report(settings, args.datamart or ())
    if args.json:
        print(json.dumps(report, indent=1))
    else:
        _print_status(report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
