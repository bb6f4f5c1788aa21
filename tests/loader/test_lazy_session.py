"""`LazySession`: the Spark session built once, when first asked for or ahead in a thread
(its threading logic; the real build runs in the restore and agent tests)."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

import pytest

from spark_loader import session as session_module
from spark_loader.session import LazySession
from spark_loader.settings import LoaderSettings


class _Built:
    def __init__(self) -> None:
        self.stopped = False

    def stop(self) -> None:
        self.stopped = True


@dataclass
class Builds:
    """The sessions the stand-in `build_session` made; each build waits for `release`."""

    made: list[Any] = field(default_factory=list)
    release: threading.Event = field(default_factory=threading.Event)


@pytest.fixture
def builds(monkeypatch: pytest.MonkeyPatch) -> Builds:
    builds = Builds()

    def build(settings: LoaderSettings) -> _Built:
        builds.release.wait(5)
        built = _Built()
        builds.made.append(built)
        return built

    monkeypatch.setattr(session_module, "build_session", build)
    return builds


def test_nothing_is_built_until_asked_and_then_once(builds: Builds) -> None:
    lazy = LazySession(LoaderSettings())
    assert not lazy.built
    assert builds.made == []
    builds.release.set()
    first = lazy.get()
    assert lazy.get() is first
    assert builds.made == [first]
    lazy.stop()
    assert builds.made[0].stopped
    assert not lazy.built


def test_a_session_started_ahead_is_waited_for(builds: Builds) -> None:
    lazy = LazySession(LoaderSettings())
    lazy.start()
    lazy.start()  # a second start starts nothing more
    got: list[Any] = []
    asker = threading.Thread(target=lambda: got.append(lazy.get()))
    asker.start()
    asker.join(0.2)
    assert asker.is_alive()
    assert got == []
    builds.release.set()
    asker.join(5)
    assert got == builds.made
    assert len(builds.made) == 1


def test_a_failed_build_is_raised_to_whoever_asks(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(settings: LoaderSettings) -> None:
        raise RuntimeError("no JVM")

    monkeypatch.setattr(session_module, "build_session", refuse)
    lazy = LazySession(LoaderSettings())
    lazy.start()
    with pytest.raises(RuntimeError, match="no JVM"):
        lazy.get()
    lazy.stop()  # nothing to stop
