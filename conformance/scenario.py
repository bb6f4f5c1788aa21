"""The scenario model both sides share: a scenario has a name (what `--scenario` picks and
the report names) and the rule of PROTOCOL.md it checks. A replica scenario adds the
coroutine that plays the origin (`conformance.scenarios`); an origin scenario the checking
replica's script and what the origin must end with (`conformance.origins.origin_scenarios`)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TypeVar


@dataclass(frozen=True)
class ScenarioBase:
    name: str
    rule: str


S = TypeVar("S", bound=ScenarioBase)


def unknown(every: Iterable[ScenarioBase], names: Sequence[str] | None) -> list[str]:
    """The names asked for that no scenario has."""
    return sorted(set(names or ()) - {s.name for s in every})


def chosen(every: Sequence[S], names: Sequence[str] | None, repeat: int = 1) -> list[S]:
    """The scenarios named (all of them when none is), in their order, each `repeat` times."""
    picked = [s for s in every if not names or s.name in names]
    return [s for s in picked for _ in range(max(1, repeat))]


def listing(every: Iterable[ScenarioBase]) -> str:
    return "\n".join(f"{s.name:<28} {s.rule}" for s in every)
