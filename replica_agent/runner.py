"""Assemble and run the agent: broker, replica, Spark, loader, spool, tracker, Faust.

Order matters: the replica store is checked (or created) and the topics exist before Faust
consumes anything; inside Faust, recovery from staging finishes before the first chunk.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from contextlib import ExitStack
from typing import Any

import faust
import structlog

from podd_kafka.broker import embedded_broker
from podd_kafka.client import ensure_topics
from podd_runtime.exit_codes import HANDLED, exit_code_for, explain
from protocol.ddl import parse_schema
from protocol.messages import DeltaInResult
from protocol.schema import LogicalSchema
from replica_agent import app as agent_app
from replica_agent.chunk_spool import ChunkSpool
from replica_agent.errors import AgentError
from replica_agent.logs import configure_logging
from replica_agent.metrics import AgentMetrics
from replica_agent.replica_parts import open_replica
from replica_agent.service import ReplicaService
from replica_agent.settings import AgentSettings
from replica_agent.tracker import TransferTracker

log = structlog.get_logger("replica_agent")

STATUS_FILE = "agent-status.json"
#: The lock file in the staging root: one agent per staging directory.
OWNER_FILE = ".owner"


def read_schemas(
    settings: AgentSettings, stored: Callable[[str], LogicalSchema | None]
) -> list[LogicalSchema]:
    """The datamarts' schemas: from --schema files, or else from the replica's catalog."""
    if not settings.datamart:
        raise AgentError("no datamart to serve: give --datamart NAME --schema FILE.sql")
    if not settings.schema_file:
        found = []
        for name in settings.datamart:
            schema = stored(name)
            if schema is None:
                raise AgentError(
                    f"datamart {name} has no store in the replica yet: give --schema FILE.sql"
                )
            found.append(schema)
        return found
    schemas = []
    for name, path in zip(settings.datamart, settings.schema_file, strict=True):
        try:
            text = path.read_text()
        except OSError as exc:
            raise AgentError(f"cannot read the schema of {name}: {exc}") from None
        schema = parse_schema(text, name)
        if schema.datamart != name:
            raise AgentError(f"{path} declares datamart {schema.datamart}, not {name}")
        schemas.append(schema)
    return schemas


def run_agent(settings: AgentSettings) -> int:
    config = configure_logging(settings.log_format, settings.log_level)
    if settings.schema_file:
        read_schemas(settings, lambda _: None)  # bad schema files fail before anything starts
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    with ExitStack() as stack:
        embedded = None
        if settings.broker is None:
            embedded = stack.enter_context(
                embedded_broker(log_file=settings.data_dir / "tansu.log")
            )
        bootstrap = settings.bootstrap_servers(embedded)
        asyncio.run(ensure_topics(settings, bootstrap))
        # Spark and the loader are imported there: `status` and tests of the app stay light.
        replica = open_replica(
            settings,
            stack,
            lambda stored: read_schemas(settings, stored),
            settings.staging_path / OWNER_FILE,
        )
        schemas, store, loader = replica.schemas, replica.store, replica.loader
        limits = settings.transfer_limits()
        registry_tail = replica.registry_tail
        applied = {
            s.datamart: registry_tail.tail(s.datamart, limits.applied_window) for s in schemas
        }
        metrics = AgentMetrics()
        spool = ChunkSpool(
            settings.staging_path,
            quarantine=settings.data_dir / "quarantine",
            body_limits=limits.body,
        )

        def make_service(send: Callable[[DeltaInResult], Any]) -> ReplicaService:
            return ReplicaService(
                tracker=TransferTracker({s.datamart: s for s in schemas}, applied, limits=limits),
                spool=spool,
                loader=loader,
                registry=store.applied,
                send_result=send,
                metrics=metrics,
                incomplete_timeout=settings.incomplete_timeout_seconds,
                crash_after_commit_of=settings.fault_crash_after_commit_of,
                registry_tail=registry_tail,
                prestager=replica.prestager,
                prestage_min_bytes=round(settings.prestage_min_kib * 1024),
                prestage_piece_bytes=round(settings.prestage_piece_kib * 1024),
                prestage_eager_bytes=round(settings.prestage_eager_kib * 1024),
                state_answers_per_second=settings.max_state_answers_per_second,
            )

        app, _ = agent_app.build_app(
            settings,
            bootstrap,
            metrics,
            make_service,
            settings.data_dir / STATUS_FILE,
            keep_hold=replica.keep_hold,
        )
        agent_app.before_fatal_exit.append(stack.close)
        log.info(
            "agent starting",
            datamarts=[s.datamart for s in schemas],
            metrics=f"http://{settings.metrics_host}:{settings.metrics_port}/metrics",
        )
        worker = faust.Worker(
            app,
            loglevel=settings.log_level,
            logging_config=config,
            quiet=True,
            redirect_stdouts=False,
        )
        try:
            worker.execute_from_commandline()
        except SystemExit as stop:
            code = stop.code if isinstance(stop.code, int) else 1
            log.info("agent stopped", exit_code=code)
            return code
    return 0


def main_run(settings: AgentSettings) -> int:
    """`run_agent`, its failure to start logged (not printed: the log is what operators
    read) and mapped to an exit code as every command maps it."""
    try:
        return run_agent(settings)
    except HANDLED as exc:
        what, words = explain(exc)
        log.error(what or "agent cannot start", error=words)
        return int(exit_code_for(exc))
