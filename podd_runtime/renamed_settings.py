"""Settings renamed so that one name means one thing: a command whose setting differs from
another command's of the same name reads its own prefixed name (`PODD_ORIGIN_DATAMART`,
`PODD_RESTORE_IN_DRIVER_MAX_MIB`, ...), and for one release still reads the old name, with
a warning naming both."""

from __future__ import annotations

import os
from collections.abc import Mapping

import structlog
from pydantic import AliasChoices, BaseModel, model_validator

log = structlog.get_logger("podd_runtime")


def renamed(new: str, old: str) -> AliasChoices:
    """The environment variable `new`; `old` is still read when `new` is unset."""
    return AliasChoices(new, old)


def old_names_in_use(
    model: type[BaseModel], environ: Mapping[str, str] = os.environ
) -> list[tuple[str, str]]:
    """(old, new) for every renamed setting of `model` read by its old name."""
    found = []
    for info in model.model_fields.values():
        alias = info.validation_alias
        if isinstance(alias, AliasChoices) and len(alias.choices) == 2:
            new, old = (str(choice) for choice in alias.choices)
            if new not in environ and old in environ:
                found.append((old, new))
    return found


class WarnsOfOldNames(BaseModel):
    """A settings class that says when a renamed setting was read by its old name."""

    @model_validator(mode="after")
    def _warn_of_old_names(self) -> WarnsOfOldNames:
        for old, new in old_names_in_use(type(self)):
            log.warning(
                "a setting's old name is set: read while the new one is unset, for one release",
                old=old,
                new=new,
                command_settings=type(self).__name__,
            )
        return self
