"""gc trusts tmp/gc/pending only as far as it checks it (issue 13, item 7).

A gc killed between putting packed files in place and committing its rewrite entry left their rows in
tmp/gc/pending; the next gc commits them. Anyone who can write the store's files can write that file
too (its checksum is BLAKE3 of its bytes, which they recompute): a row naming a sealed segment's own
file digest with an index digest that is not 32 bytes made gc commit an entry every reader refuses, and
every writer after it. gc now checks each row it would commit as a reader would (the packed file in place
reads back, ends where the log's segment ends, and gives that index digest; the entry passes the rules
readers apply) and refuses an untrusted file: one line, exit 6, nothing written."""

import os
import subprocess
import sys

import pytest
from helpers import is_per_run, log_engine_of, run_cli, run_log_root, snapshot_tree
from test_gc import build

from objstore.lifecycle import gc as G
from objstore.runs.api import RunLog
from objstore.runs.verify import verify_report
from objstore.storage.log import packed
from objstore.storage.store import Store


def _lr(root):
    """The directory of the log these tests damage: the store's one run's log (a log per run), else the store's log."""
    if not is_per_run(root):
        return root
    return run_log_root(root, Store.open(root).logs.run_ids()[0])


def _craft_pending(root, rows):
    os.makedirs(os.path.join(_lr(root), "tmp", "gc"), exist_ok=True)
    with open(os.path.join(_lr(root), packed.PENDING), "wb") as f:
        f.write(packed.encode_pending(rows))  # checksummed as gc writes it: anyone can recompute that


_KILLED_GC = """
import os, signal, sys
from objstore.lifecycle import gc as G
from objstore.storage.log.local import LogEngine
from objstore.storage.store import Store
real = LogEngine._write_bare
def bare(self, seal=False, rw=None):
    if rw is not None:
        os.kill(os.getpid(), signal.SIGKILL)
    return real(self, seal, rw)
LogEngine._write_bare = bare
G.gc(Store.open(sys.argv[1]))
"""


def _gc_killed_before_its_rewrite_entry(root):
    """A real gc process, killed -9 once its packed files are in place, as it writes its rewrite entry."""
    p = subprocess.run([sys.executable, "-c", _KILLED_GC, root], capture_output=True, text=True, timeout=120)
    assert p.returncode == -9, p.stderr


def _seg(root, n):
    return os.path.join(_lr(root), "log", f"{n:010d}.seg")


def _assert_refused_and_untouched(root, runs):
    before = snapshot_tree(os.path.join(_lr(root), "log"))
    _, out, err = run_cli("gc", store=root, exit_code=6)
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"objstore: error: integrity error: {os.path.join(_lr(root), packed.PENDING)}: "), lines[0]
    assert "gc commits nothing" in lines[0]
    assert out == ""
    assert snapshot_tree(os.path.join(_lr(root), "log")) == before  # nothing written: no entry, no file replaced
    log = RunLog(Store.open(root))
    log.record_attempt(runs[0], 30, 0, "succeeded", usage={"after": 1})  # every writer still writes
    run_cli("verify", store=root, exit_code=0)
    return lines[0]


@pytest.mark.parametrize("digest", [b"\x01" * 5, bytes(32)], ids=["short-index-digest", "zero-index-digest"])
def test_a_crafted_pending_row_for_a_plain_segment_is_refused(tmp_path, digest):
    """The row names sealed segment 1's own (plain, never packed) file by its true digest."""
    root = str(tmp_path / "s")
    _log, runs = build(root, runs=1, records=30, seal_bytes=16 << 10)
    _craft_pending(root, [[1, packed.file_digest(_seg(root, 1)), digest]])
    line = _assert_refused_and_untouched(root, runs)
    assert "segment 1" in line


def test_a_crafted_pending_row_with_a_wrong_index_digest_for_a_packed_file_is_refused(tmp_path):
    """A packed file in place that the log does not name yet (a gc killed before its rewrite entry),
    its pending row edited to name another index digest (zeros): committing it would name an index
    that is not the one the file's entries give."""
    root = str(tmp_path / "s")
    _log, runs = build(root, runs=1, records=30, seal_bytes=16 << 10)
    # a gc killed after it put segment 1's packed file in place, before its rewrite entry
    _gc_killed_before_its_rewrite_entry(root)
    rows = packed.read_pending(_lr(root))
    assert rows and packed.file_digest(_seg(root, rows[0][0])) == rows[0][1]
    rows[0][2] = bytes(32)
    _craft_pending(root, rows)
    line = _assert_refused_and_untouched(root, runs)
    assert f"segment {rows[0][0]}" in line


def test_a_true_pending_file_is_still_finished(tmp_path):
    root = str(tmp_path / "s")
    _log, runs = build(root, runs=1, records=30, seal_bytes=16 << 10)
    _gc_killed_before_its_rewrite_entry(root)
    assert packed.read_pending(_lr(root))
    G.gc(Store.open(root))
    assert packed.read_pending(_lr(root)) == []
    report = verify_report(RunLog(Store.open(root)))
    assert report.problems == [] and report.notes == []


def test_a_writer_refuses_a_rewrite_entry_readers_would_refuse(tmp_path):
    """The rule readers apply to a rewrite row (its shape) is applied where the entry is planned, so
    no caller of commit_rewrite can write one: Refused, nothing written."""
    from objstore.errors import Refused

    root = str(tmp_path / "s")
    _log, runs = build(root, runs=1, records=30, seal_bytes=16 << 10)
    before = snapshot_tree(os.path.join(_lr(root), "log"))
    store = Store.open(root)
    eng = log_engine_of(store, runs[0] if is_per_run(root) else None)
    for row in ([1, packed.file_digest(_seg(root, 1)), b"\x01" * 5], [1, b"short", bytes(32)], [0, bytes(32), bytes(32)]):
        with pytest.raises(Refused, match="rw is not"):
            eng.commit_rewrite([row])
    eng.close()
    assert snapshot_tree(os.path.join(_lr(root), "log")) == before
    RunLog(Store.open(root)).record_attempt(runs[0], 30, 0, "succeeded")


def test_a_pending_row_naming_a_segment_by_a_float_is_refused(tmp_path):
    """msgpack keeps 1.0 apart from 1; the segment tables do not (1.0 == 1): the row's shape is checked
    before anything is looked up with it (it reached a traceback)."""
    root = str(tmp_path / "s")
    _log, runs = build(root, runs=1, records=30, seal_bytes=16 << 10)
    _craft_pending(root, [[1.0, packed.file_digest(_seg(root, 1)), bytes(32)]])
    line = _assert_refused_and_untouched(root, runs)
    assert "is not [segment, 32-byte file digest, 32-byte index digest]" in line


def test_a_pending_file_naming_a_segment_twice_is_refused_as_untrusted(tmp_path):
    """A true pending file of a killed gc with its rows repeated: gc refuses it as untrusted (exit 6,
    like every other crafted row), not by a writer's refusal of the entry it would have written."""
    root = str(tmp_path / "s")
    _log, runs = build(root, runs=1, records=30, seal_bytes=16 << 10)
    _gc_killed_before_its_rewrite_entry(root)
    rows = packed.read_pending(_lr(root))
    _craft_pending(root, rows + rows)
    line = _assert_refused_and_untouched(root, runs)
    assert f"names segment {rows[0][0]} twice" in line


def test_a_huge_pending_file_is_not_read_whole(tmp_path):
    """A gc writes one short row per segment it packs; a file far bigger than that (sparse: 1 TiB) is
    not one a gc wrote: gc and verify read it as none, they do not load it (it was a MemoryError)."""
    root = str(tmp_path / "s")
    _log, runs = build(root, runs=1, records=30, seal_bytes=16 << 10)
    os.makedirs(os.path.join(_lr(root), "tmp", "gc"), exist_ok=True)
    with open(os.path.join(_lr(root), packed.PENDING), "wb") as f:
        f.truncate(1 << 40)
    assert packed.read_pending(_lr(root)) == []
    run_cli("verify", store=root, exit_code=0)
    run_cli("gc", store=root, exit_code=0)
    run_cli("verify", store=root, exit_code=0)


@pytest.mark.parametrize("digest", ["an index", -1], ids=["str", "int"])
def test_verify_reads_a_crafted_pending_row_as_a_hint_only(tmp_path, digest):
    """verify takes the index digests of tmp/gc/pending as a hint (a killed gc's index); a row whose
    digest is not bytes is no such hint (bytes() of it was a traceback, or an allocation of that size)."""
    root = str(tmp_path / "s")
    build(root, runs=1, records=30, seal_bytes=16 << 10)
    idx = os.path.join(_lr(root), "log", "0000000001.idx")
    with open(idx, "r+b") as f:  # an index that differs from its entries: verify asks the pending rows why
        f.seek(os.path.getsize(idx) // 2)
        f.write(b"\xff" * 8)
    _craft_pending(root, [[1, packed.file_digest(_seg(root, 1)), digest]])
    _, out, err = run_cli("verify", store=root, exit_code=1)
    assert err == "" and any(x.startswith(f"damaged-index {idx}") for x in out.splitlines()), (out, err)
