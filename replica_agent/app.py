"""The Faust app: topics, two thin agents, timers and the metrics page.

The agents only move bytes between Kafka and `ReplicaService`. A chunk's event is acked
(its offset may be committed) only after the group it came in is handled, that is after
its body and framing are on disk. Anything that leaves the agent unsure of its state ends
the process at once, without committing more offsets: a restart recovers from staging and
the registry.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn, cast

import faust
import structlog

from podd_kafka.batch_guard import PoisonBatch, guard_batches, log_poison
from podd_kafka.fetch_pace import FetchPace
from podd_runtime.files import durable_write
from podd_runtime.rate_limit import Throttle
from protocol.codec import encode_datamart_key, encode_message
from protocol.errors import PoddError
from protocol.exit_codes import ExitCode
from protocol.messages import DeltaInResult
from protocol.signing import signed_by, signed_headers
from replica_agent.kafka_client import consumer_transport, faust_credentials
from replica_agent.metrics import AgentMetrics
from replica_agent.service import ReplicaService
from replica_agent.settings import AgentSettings

log = structlog.get_logger("replica_agent")

#: Most `delta.in` messages, and their bytes, handled (and staged) as one group.
MAX_GROUP = 64
MAX_GROUP_BYTES = 64 * 1024 * 1024
#: How often the agent checks it still holds its datamarts (`replica_store.ownership`).
HOLD_CHECK_SECONDS = 10.0

#: Run before a fatal exit (stopping child processes the agent started).
before_fatal_exit: list[Callable[[], None]] = []


def fatal_exit(reason: str) -> NoReturn:
    log.critical("agent stopping: a restart recovers from staging and the registry", error=reason)
    for hook in before_fatal_exit:
        try:
            hook()
        except Exception as exc:
            log.warning("clean-up before exit failed", error=str(exc))
    os._exit(ExitCode.RESTART)  # a supervisor restarts it; it recovers


def build_app(
    settings: AgentSettings,
    bootstrap: list[str],
    metrics: AgentMetrics,
    make_service: Callable[[Callable[[DeltaInResult], Any]], ReplicaService],
    status_file: Path | None = None,
    keep_hold: Callable[[], None] | None = None,
) -> tuple[faust.App, ReplicaService]:
    """The app and its service. `keep_hold` (checked every `HOLD_CHECK_SECONDS` in a thread)
    raises when this process no longer holds its datamarts: the agent then stops."""
    app = faust.App(
        settings.group_id,
        broker=[f"kafka://{b}" for b in bootstrap],
        broker_credentials=faust_credentials(settings),
        store="memory://",
        # Faust makes this directory even with no table; the default is `<id>-data` in
        # the working directory, which is not the agent's to write to.
        datadir=str(settings.data_dir / "faust"),
        autodiscover=False,
        web_enabled=True,
        web_bind=settings.metrics_host,
        web_port=settings.metrics_port,
        web_in_thread=False,
        broker_session_timeout=settings.session_timeout_seconds,
        broker_heartbeat_interval=max(0.5, settings.session_timeout_seconds / 5),
        consumer_auto_offset_reset="earliest",
        topic_replication_factor=settings.topic_replication_factor,
        # Faust's leader-election topic (`<id>-__assignor-__leader`) serves only leader-only
        # timers, which the agent has none of; without it, the agent creates no topic and
        # needs no Create ACL (docs/operator/security.md).
        topic_disable_leader=True,
        producer_acks=-1,
        producer_compression_type=settings.compression_type,
    )

    def poison_batch(batch: PoisonBatch) -> None:  # runs in Faust's consumer thread
        metrics.poison_batches.labels(batch.topic).inc()
        log_poison(batch)

    guard_batches(settings, poison_batch)
    pace = FetchPace(settings.fetch_max_wait_ms, settings.fetch_idle_wait_ms)
    app.transport = consumer_transport(pace)(app.conf.broker_consumer, app)

    def raw_topic(name: str) -> faust.TopicT:
        return app.topic(
            name,
            key_type=bytes,
            value_type=bytes,
            key_serializer="raw",
            value_serializer="raw",
        )

    delta_in = raw_topic(settings.topic_delta_in)
    delta_in_rs = raw_topic(settings.topic_delta_in_rs)
    delta_rq = raw_topic(settings.topic_delta_rq)
    delta_rs = raw_topic(settings.topic_delta_rs)

    secret = settings.signing_secret()
    previous = settings.previous_secret()
    metrics.signing.set(0 if secret is None else 1)
    if secret is None:
        log.warning(
            "no PODD_ORIGIN_KEY: messages are neither signed nor checked, so anyone who can "
            "write delta.in can apply a delta here (docs/operator: security)"
        )
    unsigned_lines = Throttle()

    async def send_signed(topic: faust.TopicT, key: bytes, value: bytes) -> Any:
        return await topic.send(key=key, value=value, headers=signed_headers(secret, key, value))

    def authentic(event: Any) -> bool:
        """Signed with the origins' key (always, when no key is configured); if not, the
        message is counted and logged, and nothing of it is staged or answered."""
        message = event.message
        if secret is None:
            return True
        which = signed_by(secret, message.key, message.value, message.headers, previous)
        if which is not None:
            metrics.signed.labels(which).inc()
            return True
        metrics.unsigned.labels(message.topic).inc()
        if unsigned_lines.allow():  # counted always, logged at a bounded rate
            log.warning(
                "message dropped: not signed with the origins' key",
                topic=message.topic,
                partition=message.partition,
                offset=message.offset,
                not_logged_before=unsigned_lines.take_suppressed(),
            )
        return False

    async def send_result(result: DeltaInResult) -> None:
        delivery = await send_signed(
            delta_in_rs, encode_datamart_key(result.datamart), encode_message(result)
        )
        await delivery  # the broker has it: only now is the answer settled

    service = make_service(send_result)

    @app.task  # type: ignore[untyped-decorator]
    async def recover() -> None:
        try:
            await service.start()
        except Exception as exc:
            fatal_exit(f"recovery failed: {type(exc).__name__}: {exc}")
        service.ready.set()

    dead_letter = raw_topic(settings.topic_dead_letter) if settings.topic_dead_letter else None

    async def skip_poison(event: Any, exc: Exception) -> None:
        """An unexpected error while handling one message: log, count, copy, skip it."""
        message = event.message
        metrics.poison.labels(message.topic).inc()
        log.exception(
            "message skipped after an unexpected error",
            topic=message.topic,
            partition=message.partition,
            offset=message.offset,
            error=f"{type(exc).__name__}: {str(exc)[:500]}",
        )
        if dead_letter is not None:
            try:
                await dead_letter.send(key=event.key, value=event.value)
            except Exception as send_error:
                log.warning("dead-letter copy failed", error=repr(send_error)[:500])

    @app.agent(delta_in)
    async def receive_chunks(stream: faust.StreamT[bytes]) -> None:
        """Chunks in groups: every message already waiting (within bounds) is handled
        together, and acked only after the group's files are durable."""
        await service.ready.wait()
        manual = cast("faust.Stream[bytes]", stream).noack()  # acked below, once durable
        group: list[Any] = []
        size = 0
        async for event in manual.events():
            group.append(event)
            size += len(event.value or b"")
            pace.busy()
            if len(group) < MAX_GROUP and size < MAX_GROUP_BYTES and _more_waiting(manual):
                continue
            signed = [e for e in group if authentic(e)]
            try:
                pairs = [(e.key, e.value) for e in signed]
                failures = await service.receive(pairs) if pairs else []
            except Exception as exc:  # FatalAgentError, or a group whose files are unknown
                fatal_exit(f"{type(exc).__name__}: {exc}")
            failed = {id(e): f for e, f in zip(signed, failures, strict=True) if f is not None}
            for handled in group:  # acked in the order they came, dropped ones too
                if id(handled) in failed:
                    await skip_poison(handled, failed[id(handled)])
                await manual.ack(handled)
            group, size = [], 0

    @app.agent(delta_rq)
    async def answer_state(stream: faust.StreamT[bytes]) -> None:
        async for event in stream.events():
            pace.busy()
            if not authentic(event):
                continue
            try:
                state = await service.on_delta_rq(event.value)
                if state is not None:
                    await send_signed(
                        delta_rs, encode_datamart_key(state.datamart), encode_message(state)
                    )
            except Exception as exc:
                await skip_poison(event, exc)

    status_written = b""  # what the status file holds, to rewrite it only on change

    @app.timer(interval=1.0)  # type: ignore[untyped-decorator]
    async def watch() -> None:
        nonlocal status_written
        if service.fatal is not None:
            fatal_exit(str(service.fatal))
        try:  # a timer that raised would never run again: log, and try on the next tick
            await service.check_incomplete()
            await service.refresh_registries(every=HOLD_CHECK_SECONDS)
            if status_file is not None:
                status_written = _write_status(status_file, service, status_written)
        except Exception as exc:
            log.warning("periodic check failed; retrying", error=f"{type(exc).__name__}: {exc}")

    @app.timer(interval=1.0)  # type: ignore[untyped-decorator]
    async def sweep_open_applies() -> None:
        """On its own timer, so an answer or a registry read that waits never delays the
        rollback of an open apply whose transfer is no longer receiving."""
        try:
            await service.worker.prestage_queue.sweep()
        except Exception as exc:
            error = f"{type(exc).__name__}: {exc}"
            log.warning("the open applies' sweep failed; retrying", error=error)

    if keep_hold is not None:
        hold_check = keep_hold

        @app.timer(interval=HOLD_CHECK_SECONDS)  # type: ignore[untyped-decorator]
        async def check_hold() -> None:
            try:
                await asyncio.to_thread(hold_check)
            except PoddError as exc:  # another process writes our datamarts now
                fatal_exit(str(exc))
            except Exception as exc:
                log.warning(
                    "the datamarts' hold could not be checked", error=f"{type(exc).__name__}: {exc}"
                )

    @app.timer(interval=0.25)  # type: ignore[untyped-decorator]
    async def pace_fetches() -> None:
        metrics.fetch_wait.set(pace.tick())  # the long fetch wait once quiet

    @app.page("/metrics")
    async def metrics_page(web: Any, request: Any) -> Any:
        return web.bytes(metrics.render(), content_type="text/plain; version=0.0.4")

    @app.page("/health")
    async def health_page(web: Any, request: Any) -> Any:
        health = service.health()
        load = health["load_seconds"]
        health["load_stalled"] = load is not None and load > settings.load_stall_seconds
        health["signing"] = secret is not None  # False: any writer of delta.in is believed
        healthy = health["worker_alive"] and not health["paused"] and not health["load_stalled"]
        return web.json(health, status=200 if healthy else 503)

    return app, service


def _write_status(path: Path, service: ReplicaService, previous: bytes) -> bytes:
    """What `replica-agent status` adds to staging and registry: loads and last errors.

    Written only when it differs from `previous`; returns what the file now holds.
    """
    snapshot: dict[str, Any] = dict(service.datamarts())
    snapshot["_health"] = service.health()
    data = json.dumps(snapshot, indent=1).encode()
    if data != previous:
        durable_write(path, data)
    return data


def _more_waiting(stream: faust.StreamT[bytes]) -> bool:
    """True when the stream's next message is already delivered (taking it will not wait)."""
    queue = getattr(stream.channel, "queue", None)
    return queue is not None and not queue.empty()
