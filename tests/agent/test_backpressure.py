"""Pure rules of the disk pause: each kind of work pauses and resumes on its own."""

from __future__ import annotations

import errno

from replica_agent.backpressure import Backpressure, is_disk_fault


async def no_sleep(_: float) -> None:
    pass


async def test_one_kind_resuming_does_not_hide_another_still_waiting() -> None:
    pause = Backpressure(sleep=no_sleep)
    full = OSError(errno.ENOSPC, "No space left on device")
    await pause.wait(0, "staging a chunk", full)
    await pause.wait(0, "recording an answer", full)
    pause.resumed("staging a chunk")  # intake got through; the outbox still waits
    assert pause.reason is not None
    assert pause.reason.startswith("recording an answer: OSError")
    pause.resumed("recording an answer")
    assert pause.reason is None


async def test_retry_waits_on_disk_faults_only() -> None:
    pause = Backpressure(sleep=no_sleep)
    attempts = []

    async def twice_full() -> str:
        attempts.append(1)
        if len(attempts) < 3:
            raise OSError(errno.ENOSPC, "full")
        return "written"

    assert await pause.retry("recording an answer", twice_full) == "written"
    assert len(attempts) == 3
    assert pause.reason is None
    assert not is_disk_fault(FileNotFoundError(errno.ENOENT, "gone"))
