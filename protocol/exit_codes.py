"""The exit codes of every command (`replica-agent`, `podd-origin`, `podd-restore`,
`podd-loader`, `podd-conformance`, `podd-broker`, `podd-demo`): one meaning per code.

An error class says which code it ends a command with (`exit_code`); errors of the libraries
underneath (Kafka, PostgreSQL, settings) are mapped by `podd_runtime.exit_codes`.
"""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    #: Done.
    OK = 0
    #: It ran and the outcome is a failure: the other side refused (a replica answered an
    #: error code, a delta cannot be applied), a restore stopped, a scenario failed.
    FAILED = 1
    #: It could not run: invalid settings or arguments, a file or state it cannot use, a
    #: service it needs (Kafka, PostgreSQL, Spark) it cannot reach. Nothing was changed.
    CANNOT_RUN = 2
    #: A source topic holds a message it cannot turn into a delta (the CDC origin); the
    #: message's place is printed, and nothing after it was sent.
    BAD_INPUT = 3
    #: The agent stopped itself, unsure of its state: restart it, it recovers from staging
    #: and the registry.
    RESTART = 70
    #: Testing only: the crash injected between a commit and its answer.
    CRASH_INJECTED = 86
    #: Interrupted (Ctrl-C).
    INTERRUPTED = 130
