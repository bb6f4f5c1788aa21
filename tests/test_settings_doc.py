"""Settings that document themselves: docs/operator/settings.md is what the settings classes
generate (a test fails when a setting changes and the page does not), every setting has a
meaning, and one name means one thing: where two commands' settings differ, each reads its
own name, and an old name is still read, for one release, with a warning."""

from __future__ import annotations

import pytest

from origin.settings import OriginSettings
from podd_cdc.settings import CdcSettings
from podd_restore.settings import RestoreSettings
from podd_runtime.backoff import Backoff, retry
from podd_runtime.renamed_settings import old_names_in_use
from replica_agent.settings import AgentSettings
from tools import settings_doc


def test_the_settings_page_is_current() -> None:
    assert settings_doc.main(["--check"]) == 0, "run python -m tools.settings_doc"


def test_every_setting_has_a_meaning() -> None:
    seen: set[str] = set()
    for _, cls, _ in settings_doc.SECTIONS:
        unexplained = [s.env for s in settings_doc.settings_of(cls, seen) if not s.meaning]
        seen |= set(cls.model_fields)
        assert not unexplained, f"{cls.__name__}: add a #: comment above {unexplained}"


def test_the_check_fails_on_a_stale_page(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(settings_doc, "render", lambda: "# Settings\n\nsomething else\n")
    assert settings_doc.main(["--check"]) == 1


def test_the_cdc_origin_reads_no_workload_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    """An exported `PODD_INSERT_RATIO=0.9` (the reference origin's) used to stop `cdc run`:
    its ratios no longer added up to 1."""
    monkeypatch.setenv("PODD_INSERT_RATIO", "0.9")
    with pytest.raises(ValueError, match="add up"):
        OriginSettings()
    settings = CdcSettings(datamart="shop")
    assert not hasattr(settings, "insert_ratio")


def test_a_restore_reads_its_own_names_and_the_old_ones_for_one_release(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PODD_DATAMART", "a,b")  # the agent's list
    monkeypatch.setenv("PODD_IN_DRIVER_MAX_MIB", "2")  # the agent's bound
    assert AgentSettings().datamart == ["a", "b"]
    assert RestoreSettings().in_driver_max_mib == 2  # the old name, still read
    assert ("PODD_IN_DRIVER_MAX_MIB", "PODD_RESTORE_IN_DRIVER_MAX_MIB") in old_names_in_use(
        RestoreSettings
    )
    monkeypatch.setenv("PODD_RESTORE_DATAMART", "sales")
    monkeypatch.setenv("PODD_RESTORE_IN_DRIVER_MAX_MIB", "8")
    restore = RestoreSettings()
    assert (restore.datamart, restore.in_driver_max_mib) == ("sales", 8)
    assert AgentSettings().in_driver_max_mib == 2  # each command its own name
    monkeypatch.setenv("PODD_ORIGIN_DATAMART", "one")
    assert OriginSettings().datamart == "one"


def test_retry_waits_double_and_stop_at_the_attempts_or_the_deadline() -> None:
    waits: list[float] = []
    calls = iter([ValueError("1"), ValueError("2"), None])

    def action() -> str:
        error = next(calls)
        if error is not None:
            raise error
        return "done"

    assert retry(action, retry_on=ValueError, backoff=Backoff(0.5), sleep=waits.append) == "done"
    assert waits == [0.5, 1.0]
    waits.clear()

    def failing() -> None:
        raise ValueError("always")

    with pytest.raises(ValueError, match="always"):
        retry(
            failing, retry_on=ValueError, backoff=Backoff(1, cap=3), attempts=4, sleep=waits.append
        )
    assert waits == [1, 2, 3]
    with pytest.raises(KeyError):  # not retried
        retry(lambda: {"y": 1}["x"], retry_on=ValueError, backoff=Backoff(1), sleep=waits.append)
