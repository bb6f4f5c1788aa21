"""Benchmarks stay runnable: a smoke-size run of each (no timing is asserted)."""

from __future__ import annotations

import json

import pytest

from bench import bench_decode, cdc_parse


def test_decode_benchmark_smoke(capsys: pytest.CaptureFixture[str]) -> None:
    assert bench_decode.main(["--rows", "200", "--repeat", "1", "--json"]) == 0
    results = json.loads(capsys.readouterr().out)
    assert {(r["decoder"].split()[0], r["codec"]) for r in results} == {
        ("protocol.decode_body", "null"),
        ("protocol.decode_body", "deflate"),
        ("fastavro.reader", "null"),
        ("fastavro.reader", "deflate"),
    }
    assert all(r["rows"] == 200 and r["rows_per_second"] > 0 for r in results)


def test_cdc_parse_benchmark_smoke(capsys: pytest.CaptureFixture[str]) -> None:
    assert cdc_parse.main(["--changes", "2000", "--json"]) == 0
    results = json.loads(capsys.readouterr().out)
    assert results["messages"] >= 1900  # the data messages; metadata is not counted
    assert set(results["us_per_message"]) == {
        "msgspec_envelope",
        "origin_decode",
        "msgspec_batch_one_call",
        "arrow_json_inferred",
        "arrow_json_per_table",
        "arrow_json_schema_given",
    }
    assert all(us > 0 for us in results["us_per_message"].values())
