"""Origins that behave as the contract allows, though not as the reference origin does, pass
`podd-conformance origin` on every scenario where their habit shows."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from conformance.origins.origin_scenarios import scenarios
from conformance.origins.variants import VARIANTS
from tests.conformance.origin_runs import FLAGS, LINE, run

pytestmark = pytest.mark.slow

#: Where a variant's habit shows: `twice` in every scenario; `re-encode` where the replica
#: names a chunk missing (INCOMPLETE_DELTA or delta.rs); `whole-again` where it answers
#: INCOMPLETE_DELTA. Elsewhere they run the reference origin's code, which passes every
#: scenario above. (Each habit broken on purpose failed each scenario listed for it.)
HABIT_SHOWN_IN = {
    "twice": tuple(s.name for s in scenarios()),
    "re-encode": ("incomplete-resend", "incomplete-last-chunk", "state-missing-resend"),
    "whole-again": ("incomplete-resend", "incomplete-last-chunk", "incomplete-removed"),
}


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_each_correct_variant_passes_every_scenario_its_habit_shows_in(
    broker: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    """Habits the contract allows (chunks produced twice, a missing chunk encoded anew, the
    whole delta again under a new requestId) failed correct origins: a certification that
    fails them is worse than none."""
    template = (
        f"{sys.executable} -m conformance.origins.variants {name} run {FLAGS} "
        "--rows-per-delta 20 --chunk-rows 4"
    )
    picked = HABIT_SHOWN_IN[name]
    code = run(broker, template, tmp_path, *(f"--scenario={s}" for s in picked))
    out = capsys.readouterr().out
    verdicts = {m.group(2): m.group(1) for m in LINE.finditer(out)}
    assert verdicts == dict.fromkeys(picked, "PASS"), out
    assert code == 0
