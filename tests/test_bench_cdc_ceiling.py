"""The CDC run's CPU account in its timed window and the ceiling it leaves
(`bench.cdc_ceiling`; pure: a timeline made here, no run needed)."""

from __future__ import annotations

import time

import pytest

from bench import cdc_ceiling
from bench.cdc_bench import with_ratios
from bench.cdc_ceiling import serial_account
from bench.cpu import GROUPS, CpuTimeline, Sample
from bench.report_cdc import cdc_section
from podd_cdc.options import CdcStats
from tests.test_bench_report import cdc_results


def _timeline(start: float) -> CpuTimeline:
    """Samples a second apart for ten seconds from `start` (the epoch's clock), the machine
    busy 1.5 CPU s a second, each group 0.1."""
    return CpuTimeline(
        [Sample(start + t, 1.5 * t, {g: round(0.1 * t, 3) for g in GROUPS}) for t in range(11)]
    )


def test_the_ceiling_takes_the_fill_and_the_last_load_as_they_ran_and_packs_the_rest(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(cdc_ceiling, "CORES", 2)
    read = time.monotonic() - 100.0
    timeline = _timeline(read + time.time() - time.monotonic())
    # Marks half-way between samples: the windows widen to the samples around them.
    stats = CdcStats(
        first_read=read + 0.2, first_sent=read + 2.5, last_sent=read + 8.5, last_answer=read + 9.8
    )
    account = serial_account(timeline, stats, 100_000)
    assert account["cpu"]["machine"] == 15.0  # samples 0 to 10
    assert account["cpu"]["origin"] == 1.0
    assert account["fill_cpu"] == 4.5  # samples 0 to 3
    assert account["last_load_cpu"] == 3.0  # samples 8 to 10
    assert (account["fill_seconds"], account["last_load_seconds"]) == (2.3, 1.3)
    # 2.3 + 1.3 s as they ran, and (15 - 4.5 - 3.0) / 2 cores = 3.75 s packed: 7.35 s.
    assert account["ceiling_changes_per_second"] == round(100_000 / 7.35)


def test_a_run_that_sent_nothing_has_no_ceiling() -> None:
    read = time.monotonic()
    stats = CdcStats(first_read=read)
    assert serial_account(_timeline(time.time()), stats, 10) == {}


def test_the_cdc_section_states_the_ceiling_and_its_ratios() -> None:
    results = cdc_results(20_000, 10_000)
    cpu = {"origin": 3.0, "broker": 2.0, "agent": 1.5, "postgres": 1.9, "machine": 9.6}
    results["qlik"]["in_run"] = {
        "cpu": cpu,
        "fill_seconds": 1.0,
        "fill_cpu": 1.3,
        "last_load_seconds": 0.9,
        "last_load_cpu": 1.4,
        "cores": 2,
        "ceiling_changes_per_second": 90_000,
    }
    results = with_ratios(results)
    assert results["qlik"]["ceiling_ratio_to_delta_in"] == round(90_000 / 166_000, 3)
    assert results["qlik"]["ceiling_ratio_to_peer"] == 9.0
    assert "ceiling_ratio_to_peer" not in results["dataworks"]  # recorded without one
    section = "\n".join(cdc_section(results))
    # 0.12 of delta.in, under the ceiling's 0.54: missed; 2.0 of the peer, 9.0 at the ceiling.
    assert "0.12x the `delta.in` rows/s (target 0.5: missed);" in section
    assert "2.0x the peer (target 10: missed, and above this run's ceiling)" in section
    assert (
        "at most 90,000 changes/s on 2 cores (0.54x the `delta.in` rows/s, 9.0x the peer): "
        "the fill (1.0 s, before the agent has a delta) and the last load (0.9 s, the origin "
        "done) as they ran, and the rest of the timed window's 9.6 CPU s (origin 3.0, broker "
        "2.0, agent 1.5, postgres 1.9) packed onto every core"
    ) in section
