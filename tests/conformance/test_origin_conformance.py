"""`podd-conformance origin` on a real broker: the reference origin passes every scenario,
and each seeded mutant of it fails, on the scenario and rule that name its fault. (The CDC
origin's run and the correct variants' runs are files of their own, so that the test workers
share the long runs.)"""

from __future__ import annotations

import sys
from pathlib import Path
from xml.etree import ElementTree as ET

import pytest

from conformance import cli
from conformance.origins.mutants import MUTANTS
from conformance.origins.origin_runner import command_of
from conformance.origins.origin_scenarios import scenarios
from conformance.report import Outcome, repeated
from tests.conformance.origin_runs import FLAGS, LINE, REFERENCE, SCHEMA, run

pytestmark = pytest.mark.slow


def test_the_reference_origin_passes_every_scenario(
    broker: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    junit = tmp_path / "origin.xml"
    code = run(broker, REFERENCE, tmp_path, "--junit", str(junit))
    out = capsys.readouterr().out
    verdicts = {m.group(2): m.group(1) for m in LINE.finditer(out)}
    assert verdicts == {s.name: "PASS" for s in scenarios()}, out
    assert code == 0
    assert "| fresh-replica | PASS |" in out
    suite = ET.parse(junit).getroot()
    assert suite.get("tests") == str(len(scenarios()))
    assert suite.get("failures") == "0"
    assert not suite.findall("testcase/failure")
    # the logs show the situations happened: a kill, a one-chunk resend, a stop
    logs = tmp_path / "logs"
    assert "killed (-9) by the harness" in (logs / "origin-restart.log").read_text()
    assert "chunks=1" in (logs / "incomplete-resend.log").read_text()
    assert "BAD_CHUNK" in (logs / "error-bad-chunk.log").read_text()


@pytest.mark.parametrize("name", sorted(MUTANTS))
def test_each_mutant_fails_on_the_scenario_naming_its_fault(
    broker: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    mutant = MUTANTS[name]
    template = (
        f"{sys.executable} -m conformance.origins.mutants {name} run {FLAGS} "
        "--rows-per-delta 2 --chunk-rows 1"
    )
    junit = tmp_path / "mutant.xml"
    code = run(
        broker,
        template,
        tmp_path,
        "--scenario",
        mutant.scenario,
        "--deadline",
        "12",
        "--junit",
        str(junit),
    )
    out = capsys.readouterr().out
    found = [(m.group(1), m.group(2), m.group(3)) for m in LINE.finditer(out)]
    assert found == [("FAIL", mutant.scenario, mutant.rule)], out
    assert code == 1
    failure = ET.parse(junit).getroot().find("testcase/failure")
    assert failure is not None
    assert failure.get("type") == mutant.rule


def test_a_template_naming_an_unknown_field_cannot_run(
    broker: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = run(broker, "origin --host {host}", tmp_path)
    assert code == 2
    assert "names 'host'" in capsys.readouterr().err


def test_list_names_every_scenario(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["origin", "--list"]) == 0
    listed = capsys.readouterr().out.split()
    assert all(s.name in listed for s in scenarios())


def test_a_work_directory_with_a_space_stays_one_argument(
    broker: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Fields were filled before the template was split: a path with a space broke every
    origin. Here the schema file (the {schema} field) and the work directory hold one."""
    assert command_of("origin --state-dir {state_dir} -x", {"state_dir": "/a b/c"}) == [
        "origin",
        "--state-dir",
        "/a b/c",
        "-x",
    ]
    spaced = tmp_path / "with space"
    spaced.mkdir()
    schema = spaced / "marketing schema.sql"
    schema.write_text(SCHEMA.read_text())
    code = run(broker, REFERENCE, spaced, "--scenario", "fresh-replica", schema=schema)
    out = capsys.readouterr().out
    assert code == 0, out
    assert "PASS  fresh-replica" in out


def test_repeat_runs_each_scenario_and_names_flaky_verdicts(
    broker: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = run(broker, REFERENCE, tmp_path, "--scenario", "fresh-replica", "--repeat", "2")
    out = capsys.readouterr().out
    assert code == 0, out
    assert out.count("PASS  fresh-replica") == 2
    assert "| fresh-replica | 2 | 0 |  |" in out
    assert "0 flaky scenario(s) of 1" in out
    flaky = [
        Outcome("a", "PASS", 1.0),
        Outcome("a", "FAIL", 1.0),
        Outcome("b", "FAIL", 1.0),
        Outcome("b", "FAIL", 1.0),
    ]
    text = repeated(flaky)
    assert "| a | 2 | 1 | FLAKY |" in text
    assert "| b | 2 | 2 |  |" in text
    assert "1 flaky scenario(s) of 2" in text
