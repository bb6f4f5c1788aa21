"""The end-to-end benchmark stays runnable: `python -m bench.run --smoke` on the test broker
and replica (real agent process, real Spark). It asserts what was measured, never how fast."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import run

pytestmark = pytest.mark.slow


def test_the_benchmark_runs_end_to_end(broker: str, replica_dsn: str, tmp_path: Path) -> None:
    out = tmp_path / "report"
    argv = ["--smoke", "--broker", broker, "--replica", replica_dsn, "--out", str(out)]
    assert run.main(argv) == 0

    results = json.loads((out / "bench-results.json").read_text())
    # the kernels were compiled (or found cached) before anything was measured
    assert set(results["warm_up"]) == {"origin", "agent"}
    assert all("loaded from the cache" in said for said in results["warm_up"].values())
    points = {p["rows"]: p for p in results["points"]}
    assert sorted(points) == [20_000]
    for point in points.values():
        assert point["e2e_seconds"] > 0
        assert point["memory"]["python_mib"] > 0
        assert point["memory"]["jvm_mib"] > 0
        assert {"receive_s", "stage_s", "apply_s"} <= set(point["agent_phases"])
        # CPU seconds per phase (clock ticks of 10 ms: a small phase may read 0).
        assert {"receive", "stage", "apply", "whole"} <= set(point["cpu"])
        assert point["cpu"]["whole"]["machine"] > 0
        assert point["cpu"]["whole"]["postgres"] > 0
    main = points[20_000]
    assert {"consume_decode", "keyed_copy"} == set(main["floors"]["cpu"])
    # The floors and the peer saw exactly the timed delta's rows, from the broker.
    assert main["floors"]["consume_decode_rows"] == 20_000
    assert 0 < main["floors"]["keyed_copy_rows"] <= 20_000  # the last row per key
    assert main["peer"]["rows"] == 20_000
    assert main["peer"]["live_rows"] > 0
    assert main["peer"]["replica_live_rows"] > 0
    assert main["latency"]["deltas"] == 3
    assert len(main["latency"]["all_seconds"]) == 3

    # The same delta again, the loader on a standalone cluster the benchmark started.
    cluster = results["cluster"]
    assert (cluster["rows"], cluster["cores"]) == (20_000, 2)
    assert {"stage_s", "apply_s"} <= set(cluster["agent_phases"])
    assert cluster["latency"]["deltas"] == 3

    # The restore beside delta.in saw the same rows on both paths.
    restore = results["restore"]
    assert restore["rows"] == 2000
    assert restore["restore_seconds"] > 0
    assert restore["delta_in_seconds"] > 0

    # Two more deltas of the headline's size, sent over a second: streams in table order and
    # interleaved, each timed from its last chunk to its answer, against floor (b).
    paced = results["paced"]
    assert [r["order"] for r in paced["runs"]] == ["table order", "interleaved"]
    assert paced["floor_b_seconds"] == main["floors"]["keyed_copy_seconds"]
    for paced_run in paced["runs"]:
        assert paced_run["rows"] == 20_000
        assert paced_run["after_last_chunk_seconds"] > 0
        assert paced_run["send_seconds"] >= 0.9  # spread over the second asked for
        assert paced_run["ratio_to_floor_b"] > 0

    # The reference origin caught a fresh replica up, one delta at a time.
    catch_up = results["catch_up"]
    assert (catch_up["deltas"], catch_up["resends"]) == (5, 0)
    assert catch_up["deltas_per_second"] > 0

    # The headline delta, the latency series and the catch-up again on ClickHouse.
    clickhouse = results["clickhouse"]
    assert clickhouse["point"]["rows"] == 20_000
    assert clickhouse["point"]["e2e_seconds"] > 0
    assert clickhouse["point"]["cpu"]["whole"]["agent"] > 0
    assert clickhouse["point"]["latency"]["deltas"] == 3
    assert (clickhouse["catch_up"]["deltas"], clickhouse["catch_up"]["resends"]) == (5, 0)

    report = (out / "BENCHMARKS.md").read_text()
    assert "End to end, ClickHouse / PostgreSQL: **" in report
    headings = (
        "## End to end: a 20,000-row delta",
        "## Latency",
        "## Scaling",
        "## On a Spark",
        "## Restore from a backup topic",
        "## Catch-up",
        "## A delta that takes seconds",
        "## Before and after issue 16",
        "## ClickHouse (the ADQM store)",
    )
    for heading in headings:
        assert heading in report
    assert "headline ratio" in report
    assert "peer baseline" in report
    chart = (out / "benchmarks-chart.svg").read_text()
    assert chart.startswith("<svg")
    # the background, four bars for the big delta, three each for latency and catch-up
    assert chart.count("<rect") == 11
