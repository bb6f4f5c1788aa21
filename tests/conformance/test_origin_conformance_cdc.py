"""`podd-conformance origin` certifies the CDC origin: `podd-cdc run` over a Qlik topic
passes every scenario, through the harness's kill and restart."""

from __future__ import annotations

import shlex
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from conformance.origins.origin_scenarios import scenarios
from tests.conformance.origin_runs import LINE, run

pytestmark = pytest.mark.slow


def test_the_cdc_origin_passes_every_scenario(
    broker: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`podd-cdc run` over a Qlik topic that each scenario's origin writes first (once:
    `{state_dir}` remembers it across the harness's kill and restart)."""
    origin = f"{shlex.quote(sys.executable)} -m podd_cdc.cli"
    writer = f"{shlex.quote(sys.executable)} -m tools.cdc_write"
    kafka = f"kafka://{broker}"
    probe = f"cdc-schema-{uuid.uuid4().hex[:8]}"
    write = "--format qlik --transactions 20 --full-load 5 --partitions 1"
    subprocess.run(
        shlex.split(f"{writer} {write} --topic {probe} --broker {kafka}"),
        check=True,
        capture_output=True,
    )
    ddl = subprocess.run(
        shlex.split(
            f"{origin} schema --format qlik --topic {probe} --datamart cdcmart --broker {kafka}"
        ),
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    schema = tmp_path / "cdcmart.sql"
    schema.write_text(ddl)
    source = "--format qlik --topic {topic_delta_in}.qlik --broker {broker}"
    template = (
        f"sh -c 'test -e {{state_dir}}/written || ({writer} {write} "
        f"--topic {{topic_delta_in}}.qlik --broker {{broker}} && touch {{state_dir}}/written); "
        f"exec {origin} run {source} --datamart {{datamart}} --schema {{schema}} "
        "--state-dir {state_dir}/cut --max-delta-rows 30 --until-idle 1 "
        "--answer-timeout-seconds {answer_timeout} --state-timeout-seconds 5'"
    )
    # 90 s: in a fresh checkout the first scenario's origin compiles the columnar path's
    # kernels (numba caches them on disk after); under CI's load that took it past 40 s once.
    # No scenario waits for the deadline when it passes.
    code = run(
        broker, template, tmp_path, "--datamart", "cdcmart", "--deadline", "90", schema=schema
    )
    out = capsys.readouterr().out
    verdicts = {m.group(2): m.group(1) for m in LINE.finditer(out)}
    assert verdicts == {s.name: "PASS" for s in scenarios()}, out
    assert code == 0
    assert "killed (-9) by the harness" in (tmp_path / "logs" / "origin-restart.log").read_text()
