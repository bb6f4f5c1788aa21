"""One writer per datamart on a ClickHouse server: the lease (`replica_store.adqm.lease`),
on the embedded engine, with two writers' leases side by side."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import uuid

import pytest

from replica_store.adqm.layout import meta_ddl
from replica_store.adqm.lease import WriterLease
from replica_store.adqm.store import AdqmStore
from replica_store.errors import DatamartInUseError, OwnershipLostError


def leases(store: AdqmStore) -> tuple[str, WriterLease, WriterLease]:
    for statement in meta_ddl(store.names):
        store.client.command(statement)
    datamart = f"l_{uuid.uuid4().hex[:8]}"
    first = WriterLease(store.client, store.names, [datamart], "agent one")
    second = WriterLease(store.client, store.names, [datamart], "agent two")
    return datamart, first, second


def test_a_second_writer_is_refused_while_the_first_holds_and_takes_over_after(
    adqm_store: AdqmStore,
) -> None:
    datamart, first, second = leases(adqm_store)
    first.acquire()
    with pytest.raises(DatamartInUseError, match="agent one"):
        second.acquire()
    first.renew()  # still the holder
    first.release()
    second.acquire()
    second.renew()
    late = WriterLease(adqm_store.client, adqm_store.names, [datamart], "agent three")
    with pytest.raises(DatamartInUseError, match="agent two"):
        late.acquire()


def test_two_writers_that_both_found_it_free_agree_on_the_first_claim(
    adqm_store: AdqmStore,
) -> None:
    datamart, first, second = leases(adqm_store)
    first._write(datamart, "now", 45)  # both claim before either reads the other's claim
    second._write(datamart, "now", 45)
    assert first._holder(datamart) == second._holder(datamart) == (first.token, first.holder)


def test_a_holder_that_lost_its_claim_learns_it_at_its_next_renewal(
    adqm_store: AdqmStore,
) -> None:
    datamart, first, second = leases(adqm_store)
    first.acquire()
    first._write(datamart, "claimed_at_or_now", 0)  # its claim lapsed (not renewed in time)
    second.acquire()
    with pytest.raises(OwnershipLostError, match="agent two"):
        first.renew()


def test_the_store_hold_takes_the_lease_on_a_server(adqm_store: AdqmStore) -> None:
    """(The server path, on the embedded engine's client: only the lease is under test.)"""
    datamart = f"h_{uuid.uuid4().hex[:8]}"
    adqm_store.embedded = False
    try:
        with adqm_store.hold([datamart], "test") as hold:
            hold.check()
            other = WriterLease(adqm_store.client, adqm_store.names, [datamart], "elsewhere")
            with pytest.raises(DatamartInUseError, match="test"):
                other.acquire()
        other.acquire()  # released with the hold
        other.release()
    finally:
        adqm_store.embedded = True


def test_an_embedded_store_takes_no_lease(adqm_store: AdqmStore) -> None:
    """Its directory lock keeps other processes out: an agent killed with -9 and started
    again must not wait for a lease of its own to lapse."""
    datamart = f"e_{uuid.uuid4().hex[:8]}"
    with adqm_store.hold([datamart], "test"):
        other = WriterLease(adqm_store.client, adqm_store.names, [datamart], "elsewhere")
        other.acquire()
        other.release()


def test_the_claim_of_a_process_of_this_host_that_ended_is_taken_at_once(
    adqm_store: AdqmStore,
) -> None:
    datamart, first, second = leases(adqm_store)
    ended = subprocess.Popen([sys.executable, "-c", "pass"])
    ended.wait()
    first.holder = f"replica-agent on {socket.gethostname()} pid {ended.pid}"
    first.acquire()  # (then killed with -9: never released)
    second.acquire()
    assert second._holder(datamart) == (second.token, second.holder)
    alive = WriterLease(adqm_store.client, adqm_store.names, [datamart], "third")
    alive.holder = f"replica-agent on {socket.gethostname()} pid {os.getpid()}"
    with pytest.raises(DatamartInUseError, match="agent two"):
        alive.acquire()  # the holder's process runs: no takeover
