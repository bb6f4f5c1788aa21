"""Read given messages of a backup topic again, by their place (partition, offset).

The scan (`podd_restore.scan`) indexes the whole topic first and keeps no data body; a run
then reads each delta's data bodies when it is that delta's turn (`podd_restore.pipeline`).
One consumer serves the whole run: for each delta it seeks every partition holding some of
the delta's messages to the first of them and reads up to the last, keeping only the
offsets asked for (a backup writer puts a delta's messages together, so little else is
read). No consumer group, no committed offsets, as for the scan.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

from aiokafka import AIOKafkaConsumer, TopicPartition

from podd_kafka.batch_guard import guard_batches
from podd_kafka.client import aiokafka_options
from podd_kafka.settings import KafkaSettings
from podd_restore.errors import RestoreError
from podd_restore.plan import Place

#: Called with each message asked for: its place, key and value.
OnBody = Callable[[Place, bytes | None, bytes | None], None]


class PlaceReader:
    def __init__(
        self, settings: KafkaSettings, bootstrap: list[str], stall_timeout: float = 60.0
    ) -> None:
        guard_batches(settings)
        self.stall_timeout = stall_timeout
        self.consumer = AIOKafkaConsumer(
            bootstrap_servers=bootstrap,
            enable_auto_commit=False,
            group_id=None,
            auto_offset_reset="earliest",
            **aiokafka_options(settings),
        )

    async def start(self) -> None:
        await self.consumer.start()

    async def stop(self) -> None:
        await self.consumer.stop()

    async def read(self, places: Iterable[Place], on_body: OnBody) -> int:
        """Every message at `places`, each once (in offset order per partition); how many."""
        wanted: dict[TopicPartition, set[int]] = {}
        for place in places:
            wanted.setdefault(TopicPartition(place.topic, place.partition), set()).add(place.offset)
        if not wanted:
            return 0
        self.consumer.assign(list(wanted))
        ends = {tp: max(offsets) for tp, offsets in wanted.items()}
        for tp, offsets in wanted.items():
            self.consumer.seek(tp, min(offsets))
        read, progressed = 0, time.monotonic()
        while wanted:
            batches = await self.consumer.getmany(*wanted, timeout_ms=500, max_records=1000)
            for tp, records in batches.items():
                left = wanted.get(tp)
                if left is None:
                    continue
                reached_end = False
                for record in records:
                    if record.offset in left:
                        left.discard(record.offset)
                        on_body(
                            Place(tp.topic, tp.partition, record.offset), record.key, record.value
                        )
                        read += 1
                        progressed = time.monotonic()
                    if record.offset >= ends[tp]:
                        reached_end = True
                        break
                if reached_end or not left:
                    del wanted[tp]
                    if left:
                        raise RestoreError(
                            f"topic {tp.topic} partition {tp.partition}: offsets "
                            f"{sorted(left)[:5]} are gone (the topic changed under the restore)"
                        )
            if wanted and time.monotonic() - progressed > self.stall_timeout:
                next_wanted = {tp.partition: min(o) for tp, o in wanted.items()}
                raise RestoreError(
                    f"no message for {self.stall_timeout:g} s while reading a delta's data "
                    f"again (partition: next offset wanted {next_wanted})"
                )
        return read
