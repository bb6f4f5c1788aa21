"""`durable_write_group`: many files made durable together, on a real file system."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from podd_runtime.files import durable_write_group, temporary_path


def test_every_file_is_written_whole_and_no_temporary_is_left(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    bodies = [(a / f"c{i}", bytes([i]) * (1000 + i)) for i in range(40)]
    streams = [(a / "s.json", b"{}"), (b / "s.json", b"[]")]
    (a / "s.json").write_bytes(b"old")  # replaced, not appended to
    with ThreadPoolExecutor(4) as pool:
        assert durable_write_group([bodies, streams], pool) == {}
    for path, data in [*bodies, *streams]:
        assert path.read_bytes() == data
    assert sorted(p.name for p in b.iterdir()) == ["s.json"]
    assert not any(p.name.startswith(".") for p in a.iterdir())


def test_a_failed_file_stops_its_directory_not_the_others(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    blocked = a / "c2"
    temporary_path(blocked).mkdir()  # in the way: c2 cannot be written
    bodies = [(a / "c1", b"1"), (blocked, b"2"), (b / "c1", b"3")]
    streams = [(a / "s.json", b"a"), (b / "s.json", b"b")]
    with ThreadPoolExecutor(4) as pool:
        failed = durable_write_group([bodies, streams], pool)
    # c2 failed, and a's stream file (a later phase, which may name c2) was not written.
    assert set(failed) == {blocked, a / "s.json"}
    assert isinstance(failed[blocked], IsADirectoryError)
    assert failed[a / "s.json"] is failed[blocked]
    assert not blocked.exists()
    assert not (a / "s.json").exists()
    # The rest of the phase, and the other directory, were written.
    assert (a / "c1").read_bytes() == b"1"
    assert (b / "c1").read_bytes() == b"3"
    assert (b / "s.json").read_bytes() == b"b"
