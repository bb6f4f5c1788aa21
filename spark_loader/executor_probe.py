"""The start-up probe: can the executors do what a load asks of them?

A load hands the executors absolute paths of staged chunk files and a password-less DSN
whose password they read from a passfile in the staging directory. On a cluster both need a
deployment's help (the staging directory mounted at the same path on every executor; a
network route from the executors to PostgreSQL). Without it every delta would fail after its
retries; the probe finds out before the first message is consumed, with a message that says
what is missing.

The probe writes a token file into the staging directory and runs one tiny job, a task per
default-parallelism slot: each task reads the token back and runs `SELECT 1` on the replica.
A cluster with no free executor never runs the job: the probe gives up after a timeout.
"""

from __future__ import annotations

import socket
import threading
import uuid
from dataclasses import dataclass
from pathlib import Path

import psycopg
from pyspark.sql import SparkSession

from podd_runtime.dsn import safe_dsn
from podd_runtime.files import durable_write
from spark_loader.errors import ExecutorProbeError


@dataclass(frozen=True)
class ProbeOutcome:
    """What one probe task found on its executor (None: that part works)."""

    host: str
    staging_error: str | None
    replica_error: str | None


def _probe_task(token_path: str, token: str, dsn: str | None) -> ProbeOutcome:
    """Runs in an executor: read the token, connect to the replica (None: executors do not
    reach the replica, as with a ClickHouse replica: they hand rows to the driver)."""
    staging_error = None
    try:
        with open(token_path, encoding="ascii") as handle:
            if handle.read() != token:
                staging_error = f"{token_path} holds another token (a different directory?)"
    except OSError as exc:
        staging_error = f"{type(exc).__name__}: {exc}"
    replica_error = None
    try:
        if dsn is not None:
            with psycopg.connect(dsn, connect_timeout=10) as conn:
                conn.execute("SELECT 1")
    except psycopg.Error as exc:
        replica_error = str(exc).strip().splitlines()[0] if str(exc).strip() else repr(exc)
    return ProbeOutcome(socket.gethostname(), staging_error, replica_error)


def probe_executors(
    spark: SparkSession, staging: Path, executor_dsn: str | None, *, timeout: float
) -> list[ProbeOutcome]:
    """Run the probe; `ExecutorProbeError` names what the executors cannot do."""
    staging = staging.absolute()
    probes = staging / "probe"
    probes.mkdir(parents=True, exist_ok=True)
    token = uuid.uuid4().hex
    token_path = probes / f"{token}.token"
    durable_write(token_path, token.encode())
    context = spark.sparkContext
    tasks = max(1, context.defaultParallelism)
    group = f"podd-executor-probe-{token}"
    outcome: dict[str, object] = {}
    path_text = str(token_path)

    def run() -> None:
        context.setJobGroup(group, "podd: can the executors read staging and the replica?")
        try:
            outcome["found"] = (
                context.parallelize(range(tasks), tasks)
                .map(lambda _: _probe_task(path_text, token, executor_dsn))
                .collect()
            )
        except Exception as exc:  # reported on the caller's thread
            outcome["error"] = exc

    thread = threading.Thread(target=run, name="podd-executor-probe", daemon=True)
    try:
        thread.start()
        thread.join(timeout)
        if thread.is_alive():
            context.cancelJobGroup(group)
            thread.join(10)
            raise ExecutorProbeError(
                f"no executor ran the start-up probe within {timeout:g} s: does "
                f"{context.master} have a worker with free cores and enough memory for "
                f"spark.executor.memory, and can it reach this driver?"
            )
    finally:
        token_path.unlink(missing_ok=True)
    if "error" in outcome:
        first = str(outcome["error"]).strip().splitlines()
        raise ExecutorProbeError(
            f"the start-up probe job failed on {context.master}: "
            f"{first[0][:500] if first else type(outcome['error']).__name__}"
        )
    found: list[ProbeOutcome] = outcome["found"]  # type: ignore[assignment]
    _raise_for(found, staging, executor_dsn)
    return found


def _raise_for(found: list[ProbeOutcome], staging: Path, executor_dsn: str | None) -> None:
    for probe in found:
        if probe.staging_error is not None:
            raise ExecutorProbeError(
                f"an executor on {probe.host} cannot read the staging directory {staging} "
                f"({probe.staging_error}): mount it at the same absolute path on the agent "
                "and on every Spark worker (PODD_STAGING_DIR / --staging-dir)"
            )
    for probe in found:
        if probe.replica_error is not None:
            raise ExecutorProbeError(
                f"an executor on {probe.host} cannot connect to the replica "
                f"({safe_dsn(executor_dsn or '')}): {probe.replica_error}. Executors COPY into "
                "PostgreSQL themselves: they need a network route to it and the passfile "
                "in the staging directory"
            )
