"""What a conformance run found, for both sides (replicas and origins): one outcome per
scenario run, one line as it ends, a table and a summary for people, JUnit XML for CI."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal
from xml.etree import ElementTree as ET

Verdict = Literal["PASS", "FAIL", "SKIP"]
#: A cell is cut to this many characters in the table (the JUnit XML has them whole).
CELL = 110


@dataclass(frozen=True)
class Problem:
    """One thing a scenario found wrong: the rule it broke (a short id), what, and where
    (an origin's message: topic, partition, offset), when known."""

    rule: str
    message: str
    where: str = ""

    def __str__(self) -> str:
        at = f" [{self.where}]" if self.where else ""
        return f"{self.rule}: {self.message}{at}"


@dataclass(frozen=True)
class Outcome:
    """One scenario run: its verdict, why (the problems, the first one first, or why it was
    skipped), and what the implementation under test printed, where kept."""

    name: str
    verdict: Verdict
    seconds: float
    problems: tuple[Problem, ...] = ()
    skipped_because: str = ""
    output: str = ""

    @property
    def why(self) -> str:
        return str(self.problems[0]) if self.problems else self.skipped_because

    def line(self) -> str:
        why = f": {self.why}" if self.why else ""
        return f"{self.verdict}  {self.name:<28} {self.seconds:6.1f} s{why}"


def summary(outcomes: Sequence[Outcome]) -> str:
    counts = {v: sum(o.verdict == v for o in outcomes) for v in ("PASS", "FAIL", "SKIP")}
    seconds = sum(o.seconds for o in outcomes)
    return (
        f"{counts['PASS']} passed, {counts['FAIL']} failed, {counts['SKIP']} skipped "
        f"of {len(outcomes)} scenarios in {seconds:.0f} s"
    )


def table(outcomes: Sequence[Outcome]) -> str:
    lines = [
        "| scenario | verdict | seconds | first problem | where |",
        "|---|---|---:|---|---|",
    ]
    for o in outcomes:
        first = o.problems[0] if o.problems else None
        text = f"{first.rule}: {first.message}" if first else o.skipped_because
        text = text if len(text) <= CELL else text[: CELL - 1] + "…"
        cells = [o.name, o.verdict, f"{o.seconds:.1f}", text.replace("|", "/")]
        cells.append(first.where if first else "")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def repeated(outcomes: Sequence[Outcome]) -> str:
    """Per scenario run more than once: its verdicts, and whether they disagree (flaky)."""
    runs: dict[str, list[str]] = {}
    for o in outcomes:
        runs.setdefault(o.name, []).append(o.verdict)
    lines = ["| scenario | runs | failed | flaky |", "|---|---:|---:|---|"]
    for name, verdicts in runs.items():
        failed = verdicts.count("FAIL")
        flaky = "FLAKY" if 0 < failed < len(verdicts) else ""
        lines.append(f"| {name} | {len(verdicts)} | {failed} | {flaky} |")
    flakes = sum(1 for v in runs.values() if 0 < v.count("FAIL") < len(v))
    lines.append(f"\n{flakes} flaky scenario(s) of {len(runs)}")
    return "\n".join(lines)


def junit_xml(outcomes: Sequence[Outcome], suite: str) -> bytes:
    root = ET.Element(
        "testsuite",
        name=suite,
        tests=str(len(outcomes)),
        failures=str(sum(o.verdict == "FAIL" for o in outcomes)),
        skipped=str(sum(o.verdict == "SKIP" for o in outcomes)),
        errors="0",
        time=f"{sum(o.seconds for o in outcomes):.3f}",
    )
    for o in outcomes:
        case = ET.SubElement(
            root, "testcase", classname=suite, name=o.name, time=f"{o.seconds:.3f}"
        )
        if o.verdict == "SKIP":
            ET.SubElement(case, "skipped", message=o.skipped_because[:2000])
        elif o.problems:
            first = o.problems[0]
            failure = ET.SubElement(case, "failure", message=str(first)[:2000], type=first.rule)
            failure.text = "\n".join(str(p) for p in o.problems[:200])
        if o.output:
            ET.SubElement(case, "system-out").text = o.output
    return bytes(ET.tostring(root, encoding="utf-8", xml_declaration=True))


def write_junit(outcomes: Sequence[Outcome], path: Path, suite: str) -> None:
    path.write_bytes(junit_xml(outcomes, suite))
