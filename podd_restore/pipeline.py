"""A run's data, delta by delta: delta k + 1 is read from the topic and staged while delta k
is applied.

The scan indexed the topic and kept no data body. `DeltaFetcher`, a thread with its own
event loop, reads each chosen increment's data bodies again by place (`PlaceReader`), checks
each message's key is the one indexed there, stages the bodies durably (`RestoreStaging`)
with what they decompress to, and hands the increment over. It stays one delta ahead: a
delta is fetched only once the one two before it is applied (`applied` removes its files),
so the staging disk holds at most the delta being applied and the next.

After `kill -9` nothing of this matters: a run starts from the registry and stages again.
"""

from __future__ import annotations

import asyncio
import dataclasses
import queue
import threading
from collections.abc import Sequence

from podd_kafka.settings import KafkaSettings
from podd_restore.errors import RestoreError
from podd_restore.fetch import PlaceReader
from podd_restore.plan import Increment, Place
from podd_restore.restore_staging import RestoreStaging
from protocol.backup import BackupKey, BackupMessageType
from protocol.codec import decode_message
from protocol.errors import MessageDecodeError
from protocol.ocf import ContainerError, OcfLimits, decoded_size


class DeltaFetcher:
    def __init__(
        self,
        settings: KafkaSettings,
        bootstrap: list[str],
        increments: Sequence[Increment],
        staging: RestoreStaging,
        *,
        body_limits: OcfLimits,
        max_delta_bytes: int,
        stall_timeout: float = 60.0,
    ) -> None:
        self.settings, self.bootstrap = settings, bootstrap
        self.increments = list(increments)
        self.staging = staging
        self.body_limits = body_limits
        self.max_delta_bytes = max_delta_bytes
        self.stall_timeout = stall_timeout
        #: Most bytes of data bodies staged at once (the measure of "about two deltas").
        self.peak_staged_bytes = 0
        self._staged: dict[int, int] = {}  # delta number -> its bytes staged, until applied
        self._lock = threading.Lock()
        self._ready: queue.Queue[object] = queue.Queue()
        #: A delta is fetched only with room: two deltas staged at most, the one applied
        #: (until `applied`) and the next.
        self._room = threading.Semaphore(2)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._main, name="podd-restore-fetch", daemon=True)

    # --- the applier's side ----------------------------------------------------------------
    def __enter__(self) -> DeltaFetcher:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def next(self) -> Increment:
        """The next increment, its data bodies staged (in the order given). `RestoreError`
        once the fetcher is left (`__exit__`) with none ready."""
        while True:
            try:
                item = self._ready.get(timeout=0.2)
                break
            except queue.Empty:
                if self._stop.is_set():
                    raise RestoreError("the restore stopped before its next delta") from None
        if isinstance(item, BaseException):
            raise item
        assert isinstance(item, Increment)
        return item

    def applied(self, increment: Increment) -> None:
        """The increment is in the replica: its staged files go."""
        self.staging.applied(increment)
        with self._lock:
            self._staged.pop(increment.delta_num, None)
        self._room.release()

    # --- the thread --------------------------------------------------------------------------
    def _main(self) -> None:
        try:
            asyncio.run(self._fetch_all())
        except BaseException as exc:  # handed to the applier, which stops
            self._hand_over(exc if isinstance(exc, Exception) else RestoreError(repr(exc)))

    async def _fetch_all(self) -> None:
        reader = PlaceReader(self.settings, self.bootstrap, self.stall_timeout)
        await reader.start()
        try:
            for increment in self.increments:
                while not self._room.acquire(timeout=0.2):
                    if self._stop.is_set():
                        return
                if self._stop.is_set():
                    return
                await self._fetch(reader, increment)
                if not self._hand_over(increment):
                    return
        finally:
            await reader.stop()

    def _hand_over(self, item: object) -> bool:
        self._ready.put(item)
        return not self._stop.is_set()

    async def _fetch(self, reader: PlaceReader, increment: Increment) -> None:
        data = {
            chunk.place: (where, chunk)
            for where, chunk in increment.chunks.items()
            if chunk.key.message_type is BackupMessageType.TABLE_DATA
        }
        size = 0

        def on_body(place: Place, key: bytes | None, value: bytes | None) -> None:
            nonlocal size
            where, chunk = data[place]
            try:
                same = decode_message(BackupKey, key) == chunk.key
            except MessageDecodeError:
                same = False
            if not same:
                raise RestoreError(
                    f"{place}: the message is not the one the scan indexed there "
                    "(the topic changed under the restore)"
                )
            size += len(value or b"")
            if size > self.max_delta_bytes:
                raise RestoreError(
                    f"delta {increment.delta_num}: its data takes more than "
                    f"{self.max_delta_bytes / 2**20:,.0f} MiB of staging "
                    "(PODD_RESTORE_MAX_STAGED_MIB)"
                )
            path = self.staging.stage(chunk.key, value)
            increment.chunks[where] = dataclasses.replace(
                chunk, path=path, decoded=decoded_bytes(value, self.body_limits)
            )
            with self._lock:
                self._staged[increment.delta_num] = size
                self.peak_staged_bytes = max(self.peak_staged_bytes, sum(self._staged.values()))

        await reader.read(list(data), on_body)


def decoded_bytes(body: bytes | None, limits: OcfLimits) -> int | None:
    """What a staged body decompresses to, so the loader plans its slices on the rows' real
    size, not the compressed one (None: unreadable; the load reports it)."""
    try:
        return decoded_size(body, limits) if body else 0
    except ContainerError:
        return None
