"""The origin conformance report: a table for people, JUnit XML for CI systems."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from xml.etree import ElementTree as ET

from conformance.origins.origin_runner import OriginOutcome

#: A cell is cut to this many characters in the table (the JUnit XML has them whole).
CELL = 110


def table(outcomes: Sequence[OriginOutcome]) -> str:
    lines = [
        "| scenario | verdict | seconds | first violation | offending message |",
        "|---|---|---:|---|---|",
    ]
    for o in outcomes:
        first = o.violations[0] if o.violations else None
        text = first.message if first else ""
        text = text if len(text) <= CELL else text[: CELL - 1] + "…"
        head = f"{first.rule}: {text}".replace("|", "/") if first else ""
        where = str(first.where) if first and first.where else ""
        lines.append(f"| {o.name} | {o.verdict} | {o.seconds:.1f} | {head} | {where} |")
    return "\n".join(lines)


def summary(outcomes: Sequence[OriginOutcome]) -> str:
    failed = sum(o.verdict == "FAIL" for o in outcomes)
    return (
        f"{len(outcomes) - failed} passed, {failed} failed of {len(outcomes)} scenarios "
        f"in {sum(o.seconds for o in outcomes):.0f} s"
    )


def junit_xml(outcomes: Sequence[OriginOutcome], suite: str = "podd-origin-conformance") -> bytes:
    failed = sum(o.verdict == "FAIL" for o in outcomes)
    root = ET.Element(
        "testsuite",
        name=suite,
        tests=str(len(outcomes)),
        failures=str(failed),
        errors="0",
        time=f"{sum(o.seconds for o in outcomes):.3f}",
    )
    for o in outcomes:
        case = ET.SubElement(
            root, "testcase", classname=suite, name=o.name, time=f"{o.seconds:.3f}"
        )
        if o.violations:
            failure = ET.SubElement(
                case, "failure", message=str(o.violations[0])[:2000], type=o.violations[0].rule
            )
            failure.text = "\n".join(str(v) for v in o.violations[:200])
        output = ET.SubElement(case, "system-out")
        output.text = f"origin exit code {o.exit_code}; its output: {o.log}"
    return bytes(ET.tostring(root, encoding="utf-8", xml_declaration=True))


def repeated(outcomes: Sequence[OriginOutcome]) -> str:
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


def write_junit(outcomes: Sequence[OriginOutcome], path: Path) -> None:
    path.write_bytes(junit_xml(outcomes))
