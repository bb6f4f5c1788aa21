"""The CPU account of a CDC run inside its timed window, and the ceiling it leaves (issue 46:
where a target is not reached on two cores with the broker beside the origin, the account
per process shows why).

A run from a backlog has two parts no scheduling can overlap, whatever the processes do:
the *fill*, from the first message read to the first delta's send (the agent has nothing to
load until a whole delta is cut; one delta is in flight at a time, and the replica applies a
delta only once it is complete), and the *last load*, from the last delta's send to its
answer (the origin has nothing left to cut). The ceiling takes those two as they ran and
packs the machine's CPU seconds between them onto every core: the changes/s the run would
reach were everything else overlapped perfectly. A target above the ceiling needs less CPU
(faster code, or the broker on another machine), not better overlap.
"""

from __future__ import annotations

import os
import time
from typing import Any

from bench.cpu import CpuTimeline
from podd_cdc.options import CdcStats

#: The cores the run's middle is packed onto.
CORES = os.cpu_count() or 1


def serial_account(timeline: CpuTimeline, stats: CdcStats, changes: int) -> dict[str, Any]:
    """The timed window's CPU per process (`cpu`), its fill and last load (seconds as they
    ran, the machine's CPU seconds in each), and the ceiling for `changes` source changes.
    CPU is sampled every 100 ms and each window widened to the samples around it: the
    serial parts' CPU is counted high, so the middle's is counted low and the ceiling, if
    anything, is too high."""
    marks = (stats.first_read, stats.first_sent, stats.last_sent, stats.last_answer)
    if any(mark is None for mark in marks):
        return {}
    to_epoch = time.time() - time.monotonic()  # the samples are on the epoch's clock
    read, sent, last, answer = (mark + to_epoch for mark in marks if mark is not None)
    cpu = timeline.between(read, answer)
    fill = timeline.between(read, sent)["machine"]
    tail = timeline.between(last, answer)["machine"]
    serial = (sent - read) + (answer - last)
    packed = max(0.0, cpu["machine"] - fill - tail) / CORES
    return {
        "cpu": cpu,
        "fill_seconds": round(sent - read, 3),
        "fill_cpu": fill,
        "last_load_seconds": round(answer - last, 3),
        "last_load_cpu": tail,
        "cores": CORES,
        "ceiling_changes_per_second": round(changes / (serial + packed)),
    }
