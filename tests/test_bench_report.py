"""BENCHMARKS.md's account of the big delta's missed targets (pure: no run needed)."""

from __future__ import annotations

from typing import Any

from bench.cdc_bench import with_ratios
from bench.report_remaining import remaining_section
from bench.run import keep_other_runs


def point(e2e: float) -> dict[str, Any]:
    return {
        "rows": 1_000_000,
        "e2e_seconds": e2e,
        "produce_seconds": 1.6,
        "floors": {"consume_decode_seconds": 1.6, "keyed_copy_seconds": 2.5},
        "agent_phases": {"receive_s": 3.5, "stage_s": 2.1, "apply_s": 5.5},
    }


def test_a_met_target_needs_no_account() -> None:
    assert remaining_section(point(4.9), 1000, 7.0, 2.0) == []


def test_a_missed_target_is_accounted_for_phase_by_phase() -> None:
    text = "\n".join(remaining_section(point(11.1), 1000, 7.0, 2.0))
    assert "at most 5.00 s" in text  # 2 x floor (b) is the tighter limit
    assert "**Receiving, 3.50 s** for about 1,000 chunks (3.5 ms each)" in text
    assert "2.20 times floor (b)" in text
    # Without CPU readings, no bound and no verdict.
    assert "Where the CPU went" not in text
    assert "cannot be met" not in text


def test_without_the_agents_phases_nothing_is_claimed() -> None:
    bare = point(11.1) | {"agent_phases": {}}
    assert remaining_section(bare, 1000, 7.0, 2.0) == []


def _cpu(machine: float, wall: float, **groups: float) -> dict[str, float]:
    return {"machine": machine, "wall": wall, "sampler": 0.0} | groups


def with_cpu(e2e: float, receive: float, stage: float, apply: float) -> dict[str, Any]:
    """A point whose phases used `receive`, `stage` and `apply` CPU seconds; the origin
    spent 0.5 of the apply's waiting."""
    cpu = {
        "receive": _cpu(receive, 3.5, agent=1.5),
        "stage": _cpu(stage, 2.1, spark_workers=2.0),
        "apply": _cpu(apply, 5.5, postgres=5.2, origin=0.5),
        "whole": _cpu(receive + stage + apply, e2e, sampler=0.2),
    }
    return point(e2e) | {"cpu": cpu}


def test_the_cpu_table_shows_each_phase_and_the_machine() -> None:
    text = "\n".join(remaining_section(with_cpu(11.1, 6.0, 4.0, 7.0), 1000, 7.0, 2.0))
    assert "| CPU seconds | receive | stage | apply | end to end |" in text
    assert "| **the machine, all CPUs** (/proc/stat) | **6.00** | **4.00** | **7.00** |" in text
    assert "(the apply's alone) used 5.20 CPU seconds in 5.50 s (95% of one core)" in text
    # 10 CPU seconds on 2 cores: at least 5.00 s, against 5.60 s one after the other.
    assert "in less than 5.00 s, against 5.60 s" in text
    assert "could save at most 0.60 s" in text


def test_a_target_below_the_cpu_bound_is_called_unreachable_and_only_then() -> None:
    # (17 - 0.2 sampler - 0.5 waiting) / 2 cores = 8.15 s: above both limits (5.00 s, 7 s).
    text = "\n".join(remaining_section(with_cpu(11.1, 6.0, 4.0, 7.0), 1000, 7.0, 2.0))
    assert "needs 8.15 s of all 2 cores" in text
    assert "**Target 4 (5.00 s) and target 3 (7.00 s) cannot be met on this machine" in text
    # (12 - 0.2 - 0.5) / 2 = 5.65 s: target 4 is out of reach, target 3 is not shown to be.
    text = "\n".join(remaining_section(with_cpu(11.1, 4.0, 3.0, 5.0), 1000, 7.0, 2.0))
    assert "**Target 4 (5.00 s) cannot be met" in text
    assert "Target 3 (7.00 s) lies above that bound (5.65 s)" in text
    assert "does not show that it cannot be met" in text
    assert "target 3 (7.00 s) cannot" not in text.lower()
    # (9 - 0.2 - 0.5) / 2 = 4.15 s: neither is shown out of reach.
    text = "\n".join(remaining_section(with_cpu(11.1, 3.0, 2.0, 4.0), 1000, 7.0, 2.0))
    assert "Target 4 (5.00 s) and target 3 (7.00 s) lie above that bound (4.15 s)" in text
    assert "cannot be met on this machine" not in text


def test_when_the_load_overlaps_staging_and_the_apply_the_report_says_so() -> None:
    # Staging 2.1 s and the apply 5.5 s within a load of 6.0 s: they overlapped.
    main = with_cpu(11.1, 6.0, 4.0, 7.0)
    main["agent_phases"] |= {"load_to_answer_s": 6.0}
    text = "\n".join(remaining_section(main, 1000, 7.0, 2.0))
    assert "then the load (6.00 s from its start to the answer), in which staging" in text
    assert "| CPU seconds | receive | load, to the last table staged | load, the rest |" in text
    assert "**Staging, 2.10 s** from the load's start to the last table staged" in text
    # One after the other (7.6 s of a 8.0 s load would not be): the plain wording.
    main["agent_phases"] |= {"load_to_answer_s": 7.7}
    text = "\n".join(remaining_section(main, 1000, 7.0, 2.0))
    assert "three phases that run one after the other" in text
    assert "load, the rest" not in text


def test_with_target_3_met_only_target_4_gets_a_verdict() -> None:
    # 6.5 s meets 7 s but not 2 x floor (b) = 5.00 s; (13 - 0.2 - 0.5) / 2 = 6.15 s > 5.00.
    text = "\n".join(remaining_section(with_cpu(6.5, 5.0, 3.0, 5.0), 1000, 7.0, 2.0))
    assert "### Where the rest goes (target 4)" in text
    assert "(target 3 met, target 4 not: 2.60 times the larger floor)" in text
    assert "**Target 4 (5.00 s) cannot be met on this machine" in text
    assert "target 3 (7.00 s)" not in text.lower()
    assert "the bound is 2.46 times the larger floor, where 2 is allowed" in text


def test_the_ratio_is_stated_only_when_target_4_is_out_of_reach() -> None:
    # (9 - 0.2 - 0.5) / 2 = 4.15 s: under 5.00 s.
    text = "\n".join(remaining_section(with_cpu(6.5, 3.0, 2.0, 4.0), 1000, 7.0, 2.0))
    assert "Target 4 (5.00 s) lies above that bound (4.15 s)" in text
    assert "times the larger floor, where" not in text


def cdc_results(qlik_rate: int, peer_rate: int) -> dict[str, Any]:
    run = {
        "source_changes": 1_000_000,
        "deltas": 10,
        "seconds": 1e6 / qlik_rate,
        "changes_per_second": qlik_rate,
        "cpu": {"origin": 50.0, "agent": 3.0, "spark_jvm": 1.0},
        "phases": {"parse": 20.0, "cut": 10.0, "frame": 15.0, "send_and_load": 20.0},
        "origin_rss_mib": {"before": 310.0, "peak": 1240.4},
        "held_peak": 112_345,
    }
    peer = {"changes": 1_000_000, "seconds": 1e6 / peer_rate, "changes_per_second": peer_rate}
    return {
        "date": "2026-11-24",
        "bench_seconds": 600,
        "delta_in": {"rows": 1_000_000, "seconds": 6.0, "rows_per_second": 166_000},
        "qlik": {**run, "peer": peer},
        "dataworks": run,
    }


def test_the_cdc_section_gives_each_target_its_verdict() -> None:
    from bench.report_cdc import cdc_section  # noqa: PLC0415

    slow = "\n".join(cdc_section(with_ratios(cdc_results(20_000, 10_000))))
    assert "0.12x the `delta.in` rows/s (target 0.5: missed)" in slow
    assert "2.0x the peer (target 10: missed)" in slow
    assert "50.0 µs of origin CPU a change (target 10: missed)" in slow
    row = "| Qlik JSON | 1,000,000 | 10 | 50.0 | 20,000 | 20.0 | 10.0 | 15.0 | 20.0 | 50.0 | 50.0 |"
    assert row + " 4.0 |" in slow
    assert (
        "the origin's process at 1,240 MiB at most while it ran (310 MiB before), "
        "holding 112,345 changes at most"
    ) in slow
    fast = "\n".join(cdc_section(with_ratios(cdc_results(110_000, 10_000))))
    assert "(target 0.5: met)" in fast
    assert "agent's tree" not in slow  # recorded before the bench measured it
    results = with_ratios(cdc_results(20_000, 10_000))
    tree = {"agent": 250.4, "spark_jvm": 0.0, "spark_workers": 0.0, "tree": 250.4}
    results["qlik"]["agent_rss_mib"] = tree
    assert (
        "the agent's tree at 250 MiB at most (its process 250, Spark's JVM 0, "
        "its Python workers 0)."
    ) in "\n".join(cdc_section(results))
    assert "11.0x the peer (target 10: met)" in fast


def test_the_cdc_section_says_what_the_warm_up_compiled_before_the_run() -> None:
    from bench.report_cdc import cdc_section  # noqa: PLC0415

    results = with_ratios(cdc_results(20_000, 10_000))
    assert "warm-up" not in "\n".join(cdc_section(results))  # recorded before it had one
    said = "33 kernel signature(s) compiled, 34 loaded from the cache, in 26.8 CPU s"
    results["warm_up"] = {"origin": f"{said}; cached in /x/podd_cdc/__pycache__"}
    section = "\n".join(cdc_section(results))
    assert f"(`podd-cdc warm-up`, `replica-agent warm-up`): origin: {said}." in section
    assert "/x/podd_cdc" not in section


def test_the_cdc_figures_carry_the_keys_issue_46_names() -> None:
    results = with_ratios(cdc_results(20_000, 10_000))
    for fmt in ("qlik", "dataworks"):
        assert results[fmt]["origin_us_per_change"] == 50.0
        assert results[fmt]["ratio_to_delta_in"] == round(20_000 / 166_000, 3)
        assert results[fmt]["ratio_to_peer"] == 2.0


def test_a_full_bench_run_keeps_the_cdc_figures_it_does_not_measure() -> None:
    previous = {"points": [1], "cdc": {"qlik": {"changes_per_second": 9.0}}}
    assert keep_other_runs({"points": [2]}, previous) == {
        "points": [2],
        "cdc": {"qlik": {"changes_per_second": 9.0}},
    }
    assert keep_other_runs({"points": [2]}, {}) == {"points": [2]}
