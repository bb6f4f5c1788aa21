"""One mapping from what stopped a command to its exit code, shared by every command."""

from __future__ import annotations

import tomllib

import psycopg
import pytest
from aiokafka.errors import KafkaConnectionError
from pydantic import BaseModel, ValidationError

from origin.errors import NoAnswer, ReplicaRefused
from podd_cdc.errors import BadInput
from podd_kafka.errors import BrokerError
from podd_restore.errors import RestoreStopped
from podd_runtime.exit_codes import describe, exit_code_for, run_command
from protocol.errors import ErrorCode, PoddError, ProtocolError
from protocol.exit_codes import ExitCode
from replica_store.errors import LoadFailedError, StagedTransferError
from tests.conftest import REPO


def invalid_settings() -> ValidationError:
    class Settings(BaseModel):
        port: int

    try:
        Settings.model_validate({"port": "not a port"})
    except ValidationError as exc:
        return exc
    raise AssertionError("no validation error")


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (ReplicaRefused(3, "DELTA_CONFLICT", "dates"), ExitCode.FAILED),
        (RestoreStopped("stopped before delta 4"), ExitCode.FAILED),
        (ProtocolError("refused", code=ErrorCode.OUT_OF_SEQUENCE), ExitCode.FAILED),
        (LoadFailedError("the store refused"), ExitCode.FAILED),
        (BadInput(None, "not JSON"), ExitCode.BAD_INPUT),
        (PoddError("no datamart to serve"), ExitCode.CANNOT_RUN),
        (StagedTransferError("no manifest.json"), ExitCode.CANNOT_RUN),
        (BrokerError("tansu did not start"), ExitCode.CANNOT_RUN),
        (NoAnswer("no delta.rs"), ExitCode.CANNOT_RUN),
        (invalid_settings(), ExitCode.CANNOT_RUN),
        (KafkaConnectionError("no broker"), ExitCode.CANNOT_RUN),
        (psycopg.OperationalError("connection refused"), ExitCode.CANNOT_RUN),
        (OSError("read-only file system"), ExitCode.CANNOT_RUN),
        (KeyboardInterrupt(), ExitCode.INTERRUPTED),
    ],
)
def test_each_kind_of_stop_has_one_code(error: BaseException, code: ExitCode) -> None:
    assert exit_code_for(error) is code


def test_a_command_prints_one_line_and_returns_the_code(capsys: pytest.CaptureFixture[str]) -> None:
    def refused() -> int:
        raise ReplicaRefused(1, "DELTA_CONFLICT", "dated earlier")

    assert run_command("podd-origin", refused) == 1
    assert capsys.readouterr().err == (
        "podd-origin: stopped: delta 1: the replica answered DELTA_CONFLICT: dated earlier\n"
    )
    assert describe(invalid_settings()).startswith("invalid settings: ")
    assert run_command("x", lambda: 0) == 0

    def bug() -> int:
        raise ZeroDivisionError  # not an expected stop: a traceback, not a code

    with pytest.raises(ZeroDivisionError):
        run_command("x", bug)


def test_every_command_maps_its_errors_through_the_one_mapping() -> None:
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    assert len(scripts) == 8  # podd-cdc beside podd-origin (whose cdc is its old name)
    for target in scripts.values():
        module = target.split(":")[0]
        source = (REPO / (module.replace(".", "/") + ".py")).read_text()
        assert "podd_runtime.exit_codes import" in source, module
