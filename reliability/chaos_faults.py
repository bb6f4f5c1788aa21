"""The chaos run's faults beyond kills and crashes: a second agent for the same datamart, the
staging disk filled then freed, and the replica's database gone back in time.

* `rewind_replica`: the replica as it was after an earlier delta: every later delta undone
  newest first (its versions leave `t_actual`, the versions it closed come back from
  `t_history`) and its registry row deleted, in one transaction under the datamart's load
  lock: what a point-in-time restore, or a failover to a standby that was behind, gives.
* `second_agent`: another agent process for the same datamart and consumer group (a rolling
  deploy gone wrong); it must stop at start, exit code 2, and the first must go on.
* `DiskFiller`: the staging directory (a tmpfs this run mounted) filled to the last byte,
  then freed: the agent must pause and resume, losing nothing.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol

import psycopg

from podd_runtime.agent_child import AgentSpec, start_agent
from protocol.schema import LogicalSchema
from replica_store.ownership import holder_name
from replica_store.store_sql import META_SCHEMA, datamart_lock_key, physical, q


def rewind_replica(dsn: str, schema: LogicalSchema, to_delta: int) -> list[int]:
    """Undo every delta after `to_delta`; returns the deltas undone (newest first)."""
    with psycopg.connect(dsn) as conn:
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (datamart_lock_key(schema.datamart),))
        rows = conn.execute(
            f"SELECT delta_num FROM {q(META_SCHEMA)}.delta_registry "
            "WHERE datamart = %s AND delta_num > %s ORDER BY delta_num DESC",
            (schema.datamart, to_delta),
        ).fetchall()
        undone = [int(n) for (n,) in rows]
        for n in undone:
            for table in schema:
                actual = physical(schema.datamart, table.name, "actual")
                history = physical(schema.datamart, table.name, "history")
                columns = ", ".join(q(c.name) for c in table.columns)
                conn.execute(f"DELETE FROM {actual} WHERE sys_from = %s", (n,))
                conn.execute(
                    f"INSERT INTO {actual} ({columns}, sys_from, sys_to, sys_op) "
                    f"SELECT {columns}, sys_from, NULL, 0 FROM {history} WHERE sys_to = %s",
                    (n - 1,),
                )
                conn.execute(f"DELETE FROM {history} WHERE sys_to = %s", (n - 1,))
            conn.execute(
                f"DELETE FROM {q(META_SCHEMA)}.delta_registry "
                "WHERE datamart = %s AND delta_num = %s",
                (schema.datamart, n),
            )
    return undone


def second_agent(spec: AgentSpec, data_dir: Path, timeout: float = 180) -> tuple[int | None, float]:
    """Start another agent like `spec` on a data directory of its own; (its exit code, or
    None if it was still running after `timeout` and was stopped; seconds it ran)."""
    started = time.monotonic()
    # A staging directory of its own too: a shared one is refused by its lock file first,
    # and the datamart's lock (what two agents on two hosts meet) would go untested.
    env = {k: v for k, v in spec.extra_env.items() if k != "PODD_STAGING_DIR"}
    second = AgentSpec(
        spec.schemas, spec.bootstrap, spec.dsn, data_dir, spec.group_id, spec.spark_master, env
    )
    child = start_agent(second, data_dir / "second-agent.log")
    try:
        code = child.process.wait(timeout)
    except subprocess.TimeoutExpired:
        child.stop()
        return None, time.monotonic() - started
    return code, time.monotonic() - started


class DiskFiller:
    """A tmpfs mounted at `mount` (when this process may mount one), to be filled and freed."""

    def __init__(self, mount: Path, size_mib: int) -> None:
        self.mount = mount
        mount.mkdir(parents=True, exist_ok=True)
        self._mount_command = shutil.which("mount")
        self._umount_command = shutil.which("umount")
        if self._mount_command is None or self._umount_command is None:
            self.available, self.why_not = False, "no mount command"
            return
        done = subprocess.run(
            [self._mount_command, "-t", "tmpfs", "-o", f"size={size_mib}m", "tmpfs", str(mount)],
            capture_output=True,
            text=True,
            check=False,
        )
        self.available = done.returncode == 0
        self.why_not = done.stderr.strip()

    def fill(self) -> None:
        """Take every free byte."""
        with (self.mount / "filler").open("wb", buffering=0) as out:
            while True:
                try:
                    out.write(bytes(1 << 20))
                except OSError:
                    return

    def free(self) -> None:
        (self.mount / "filler").unlink(missing_ok=True)

    def unmount(self) -> None:
        if self.available and self._umount_command is not None:
            subprocess.run([self._umount_command, "-l", str(self.mount)], check=False)


class FaultRecord(Protocol):
    faults: Counter[str]
    skipped: dict[str, str]
    notes: list[str]
    failures: list[str]

    def recovered(self, fault: str, seconds: float) -> None: ...


class ExtraFaults:
    """The three faults above, each injected once at its point of the run (a quarter, half
    and three quarters of the deltas), and the time each took to recover: from its
    injection to the next delta answered OK."""

    def __init__(
        self,
        deltas: int,
        spec: AgentSpec,
        work_dir: Path,
        dsn: Callable[[], str],
        filler: DiskFiller | None,
        done: Sequence[object],
        run: FaultRecord,
        fill_seconds: float = 5.0,
        *,
        clickhouse: bool = False,
        first_running: Callable[[], bool],
    ) -> None:
        self.spec, self.work_dir, self.dsn, self.filler = spec, work_dir, dsn, filler
        self.done, self.run, self.fill_seconds = done, run, fill_seconds
        #: The replica is an embedded ClickHouse, the agent's own: no rewind (a database
        #: rewound is PostgreSQL's fault), and a second agent meets its directory's lock.
        self.clickhouse = clickhouse
        #: The first agent is up and holds its replica (not between a kill and its restart).
        self.first_running = first_running
        # Away from the database restarts (at a third and two thirds): a second agent
        # started while the first has lost its session may win the datamart (the first then
        # stops: still one writer), which is not the refusal this fault is about.
        self.due = {
            "second agent": deltas // 4,
            "staging disk filled": deltas // 2,
            "database rewound 2 deltas": 3 * deltas // 4,
        }
        self.pending: list[tuple[str, float, int]] = []
        self.tasks: list[asyncio.Task[None]] = []
        #: Held while a second agent starts, and by the run while it kills the first and
        #: starts it again or restarts the database: one of them at a time. A second agent
        #: that starts while the first is killed or has lost its session wins the datamart
        #: (correctly: still one writer), and the first's restarts are then refused.
        self.turn = asyncio.Lock()

    def injected(self, fault: str) -> None:
        self.pending.append((fault, time.monotonic(), len(self.done)))

    async def step(self) -> None:
        for fault, since, at in list(self.pending):
            if len(self.done) > at:
                self.pending.remove((fault, since, at))
                self.run.recovered(fault, time.monotonic() - since)
        for fault, at in list(self.due.items()):
            if len(self.done) >= at:
                del self.due[fault]
                self.tasks.append(asyncio.create_task(self._inject(fault)))

    async def finish(self) -> None:
        await asyncio.gather(*self.tasks, return_exceptions=True)

    async def _inject(self, fault: str) -> None:
        if fault == "second agent":
            self.injected(fault)
            self.run.faults[fault] += 1
            await self._second_agent()
        elif fault == "staging disk filled":
            if self.filler is None or not self.filler.available:
                why = "no tmpfs" if self.filler is None else self.filler.why_not
                self.run.skipped[fault] = f"cannot mount a tmpfs here: {why}"
                return
            await asyncio.to_thread(self.filler.fill)
            self.injected(fault)
            self.run.faults[fault] += 1
            await asyncio.sleep(self.fill_seconds)
            self.filler.free()
        elif self.clickhouse:
            self.run.skipped[fault] = "not built for an embedded ClickHouse replica"
        else:
            for _ in range(20):  # the database may be down (a crash restart): try again
                try:
                    last = await asyncio.to_thread(_last_applied, self.dsn(), self.spec)
                    undone = await asyncio.to_thread(
                        rewind_replica, self.dsn(), self.spec.schemas[0], last - 2
                    )
                    break
                except psycopg.Error:
                    await asyncio.sleep(1)
            else:
                self.run.skipped[fault] = "the database could not be reached"
                return
            if not undone:
                self.run.skipped[fault] = "fewer than three deltas were applied"
                return
            self.injected(fault)
            self.run.faults[fault] += 1

    async def _second_agent(self) -> None:
        """Start a second agent until it meets the first (a start that found the database
        down, during a crash restart, is tried again): it must stop, naming the first."""
        for attempt in range(1, 6):
            data_dir = self.work_dir / f"second-agent-{attempt}"
            async with self.turn:
                await self._first_holds_its_datamart()
                code, seconds = await asyncio.to_thread(second_agent, self.spec, data_dir)
            log = (data_dir / "second-agent.log").read_text(errors="replace")
            meets = (
                "is in use by another process"
                if self.clickhouse
                else ("is already written by replica-agent on")
            )
            if code == 2 and meets in log:
                self.run.notes.append(
                    f"the second agent stopped at start in {seconds:.1f} s "
                    "(exit code 2), naming the first"
                )
                return
            if code != 2 or "the replica database cannot be used" not in log:
                outcome = "was still running" if code is None else f"exited {code}"
                self.run.failures.append(f"the second agent {outcome} after {seconds:.0f} s")
                return
            # The database was down (a crash restart). The first agent takes its datamarts
            # again within its hold check (10 s) of the database's return; a second agent
            # started before that may win them (the first then stops: still one writer).
            await asyncio.sleep(15)
        self.run.failures.append("the second agent never reached the database")

    async def _first_holds_its_datamart(self, timeout: float = 120) -> None:
        """Until the first agent holds its datamart (after a kill or a database restart it
        takes it again within seconds)."""
        deadline = time.monotonic() + timeout
        while not self.first_running() and time.monotonic() < deadline:
            await asyncio.sleep(0.5)  # restarted after it ended by itself: until it is up
        if self.clickhouse:  # (its engine's directory lock is held while it runs)
            return
        while time.monotonic() < deadline:
            try:
                name = await asyncio.to_thread(_holder, self.dsn(), self.spec)
            except psycopg.Error:
                name = None  # the database is restarting
            if name is not None and name.startswith("replica-agent on "):
                return
            await asyncio.sleep(0.5)


def _holder(dsn: str, spec: AgentSpec) -> str | None:
    with psycopg.connect(dsn, connect_timeout=5) as conn:
        return holder_name(conn, spec.schemas[0].datamart)


def _last_applied(dsn: str, spec: AgentSpec) -> int:
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            f"SELECT max(delta_num) FROM {q(META_SCHEMA)}.delta_registry WHERE datamart = %s",
            (spec.schemas[0].datamart,),
        ).fetchone()
    return -1 if row is None or row[0] is None else int(row[0])
