"""verify completes: every damage kind yields a full report (issue 15, "verify completes").

A real store on disk (several sealed segments, a fork, a state cache) is damaged, often in two or
three places at once, and ``objstore verify`` must list every problem as one exact line (in the
style of git's t/t1450-fsck.sh), exit 1, and never abort (exit 6 or 4, a traceback). Several of
these aborted before: a damaged record before a fork point, or a missing sealed segment, while
the state cache was checked (the fold of the forked branch re-read the damaged parent). Where a
break in the log (a broken header chain, a damaged entry) hides what follows from the checks that
span entries, the later segments are still checked each on its own and a note says where the
checks that span entries stopped. Each report is the same whether verify checks segments in this
process or in worker processes (``jobs``).

The store built by ``build`` (segments sealed at 4 KiB): run r1 (a start, a prompt blob, 8
attempts naming it, an intent and its commit, 10 attempts, a fork of branch 0 at LSN 5, 10
attempts on branch 1), then run r2 (a start, 10 attempts), over 7 segment files; each later
segment opens with the entry that names the index of the one before it (format 3). Entry numbers
and offsets are looked up in the entries (``rec_in``, ``last_of``), never hard-coded.
"""

import os
import types

import blake3
import pytest
from helpers import run_cli, state_db_path

from objstore import RunLog, Store
from objstore.runs.verify import verify_report
from objstore.storage.log import local_write
from objstore.storage.log.craft import encode_entry
from objstore.storage.log.format import COMP_RAW, SEG_HEADER, SEG_MAGIC


@pytest.fixture(scope="module", autouse=True)
def one_log():
    """Every store here has one log (formats 3 to 5): the damage is placed by the entry numbers and segments of the
    one log ``build`` makes. A run's log is the same log over its own directory (tests/runs/test_anchor_runlogs.py)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("OBJSTORE_NEW_FORMAT", "3")
        yield

SEAL = 4096
T0 = 1_700_000_000.0


def build(root):
    mp = pytest.MonkeyPatch()
    mp.setattr(local_write, "SEAL_BYTES", SEAL)
    try:
        log = RunLog(Store.init(root))
        r1 = log.start_run("r1", when=T0)
        blob = log.put_blob(b"the prompt " * 60)
        for i in range(8):
            log.record_attempt(r1, 1, i, "failed", prompt=blob, when=T0 + 1 + i)
        log.record_intent(r1, "pay", 2, "charge", False, when=T0 + 20)
        log.commit_intent(r1, "pay", when=T0 + 21)
        for i in range(10):
            log.record_attempt(r1, 3, i, "failed", when=T0 + 30 + i)
        log.fork(r1, 0, 5, reason="retry", when=T0 + 50)
        for i in range(10):
            log.record_attempt(r1, 4, i, "failed", when=T0 + 60 + i)
        r2 = log.start_run("r2", when=T0 + 70)
        for i in range(10):
            log.record_attempt(r2, 1, i, "failed", when=T0 + 80 + i)
    finally:
        mp.undo()
    run_cli("rebuild", store=root, exit_code=0)  # every branch gets a cached row: verify folds and compares
    entries = {e.n: e for e in log.store.engine.entries()}
    return types.SimpleNamespace(root=root, entries=entries)


@pytest.fixture(scope="module")
def pristine(tmp_path_factory):
    b = build(str(tmp_path_factory.mktemp("pristine") / "s"))
    e = b.entries
    b.nseg = e[max(e)].seg
    b.fork_seg = next(x.seg for x in e.values() if x.objs and x.objs[0][1] == "fork")
    assert b.nseg == 7 and 2 < b.fork_seg < b.nseg - 2
    assert os.path.exists(state_db_path(b.root, "r1"))
    return b


@pytest.fixture
def built(pristine, tmp_path):
    import shutil

    root = str(tmp_path / "s")
    shutil.copytree(pristine.root, root)
    report = verify_report(RunLog(Store.open(root)))
    assert (report.problems, report.entries) == ([], len(pristine.entries))
    return types.SimpleNamespace(root=root, entries=pristine.entries, nseg=pristine.nseg, fork_seg=pristine.fork_seg)


def rec_in(b, s):
    """The number of an entry in the middle of segment s holding one record in a raw block."""
    ns = [n for n, e in b.entries.items() if e.seg == s and len(e.objs) == 1 and e.objs[0][1] == "record" and e.blocks[0][0] == COMP_RAW]
    return ns[len(ns) // 2]


def last_of(b, s):
    return max(n for n, e in b.entries.items() if e.seg == s)


def seg(b, n):
    return os.path.join(b.root, "log", f"{n:010d}.seg")


def idx(b, n):
    return os.path.join(b.root, "log", f"{n:010d}.idx")


def flip(path, off, bit=0x20):
    with open(path, "r+b") as f:
        f.seek(off)
        c = f.read(1)
        f.seek(off)
        f.write(bytes([c[0] ^ bit]))


def flip_object(b, n):
    """Flip a byte in the middle of entry n's only object (a raw block): returns its line."""
    e = b.entries[n]
    flip(seg(b, e.seg), e.data_off + e.objs[0][2] // 2)
    return f"corrupt-object {e.objs[0][0].hex()}: hash mismatch (content does not match id) [{seg(b, e.seg)}]"


def apart_note(b, upto, first, last):
    return (f"note: checked-apart log: refs, chains and forks are checked up to entry {upto} only; "
            f"segments {first}..{last} after the break checked each on its own")


def check(b, expect, notes=()):
    """The exact lines, the same with one process and with two workers, and from the CLI: exit 1,
    every line on stdout, the notes on stderr, no traceback. Each run gets its own copy of the
    damaged store (a reader that notices a damaged index rewrites it)."""
    import shutil

    copies = [b.root + ".jobs2", b.root + ".cli"]
    for c in copies:
        shutil.copytree(b.root, c)
    one = verify_report(RunLog(Store.open(b.root)), jobs=1)
    two = verify_report(RunLog(Store.open(copies[0])), jobs=2)
    assert [p.line() for p in one.problems] == expect
    assert [p.line().replace(copies[0], b.root) for p in two.problems] == expect
    assert (two.notes, two.entries, two.objects, two.checksum) == (
        [n._replace(subject=n.subject.replace(b.root, copies[0])) for n in one.notes], one.entries, one.objects, one.checksum)
    code, out, err = run_cli("verify", store=copies[1], exit_code=1)
    assert out.replace(copies[1], b.root).splitlines() == expect
    assert [line for line in err.splitlines() if line.startswith("note: checked-apart")] == list(notes)
    assert "Traceback" not in err


def test_damaged_record_before_a_fork_point_with_the_state_cache(built):
    """Was exit 6: the fold of branch 1 re-read its parent branch up to the fork, through the
    damaged record (LSN 2 of branch 0, before the fork point)."""
    check(built, [flip_object(built, 4)])


def test_missing_sealed_segment_with_the_state_cache(built):
    """Was exit 4 (object not found) from the fold; now one line, and the later segments are
    still checked on their own."""
    gone = built.fork_seg + 1
    os.unlink(seg(built, gone))
    check(built, [f"missing-segment {seg(built, gone)}: segment {gone} is missing; the log ends at entry {last_of(built, gone - 1)}"],
          [apart_note(built, last_of(built, gone - 1), gone + 1, built.nseg)])


def test_broken_header_chain_then_damage_after_it(built):
    """A segment header that does not chain, while its entries do (only the header's copy of the
    checksum is damaged): one line for it, and every check goes on: a damaged record in a later
    segment is named too."""
    p2 = seg(built, 2)
    flip(p2, 8 + 8 + 8 + 3)  # the previous-checksum field of segment 2's header
    with open(p2, "rb") as f:
        hprev = SEG_HEADER.unpack(f.read(SEG_HEADER.size))[3]
    n = last_of(built, 1)
    expect = [f"broken-log-chain {p2}: segment 2 does not continue the log at entry {n + 1} "
              f"(its header chains to checksum {hprev.hex()}, entry {n} has {built.entries[n].checksum.hex()})",
              flip_object(built, rec_in(built, built.nseg - 1))]
    check(built, expect)


def test_foreign_segment_then_damage_after_it(built):
    """Segment 2 replaced by one whose entries chain among themselves, not to segment 1's last
    entry. The checks that span entries stop there; the later segments are checked on their own."""
    p2 = seg(built, 2)
    with open(p2, "rb") as f:
        data = bytearray(f.read())
    first = built.entries[last_of(built, 1) + 1]
    forged, _ = encode_entry(b"\x01" * 32, first.n, first.time, [], [], None)
    data[first.offset:first.offset + first.length] = forged
    data[:SEG_HEADER.size] = SEG_HEADER.pack(SEG_MAGIC, 2, first.n, b"\x01" * 32)
    with open(p2, "wb") as f:
        f.write(bytes(data))
    n = first.n - 1
    expect = [f"broken-log-chain {p2}: segment 2 does not continue the log at entry {first.n} "
              f"(its header chains to checksum {'01' * 32}, entry {n} has {built.entries[n].checksum.hex()})",
              f"corrupt-entry {p2}: entry {first.n + 1} at offset {first.offset + len(forged)}: checksum mismatch",
              flip_object(built, rec_in(built, built.nseg - 1))]
    check(built, expect, [apart_note(built, n, 2, built.nseg)])


def test_damaged_middle_entry_then_damage_later(built):
    e = built.entries[5]
    flip(seg(built, 1), e.offset + e.length - 1)  # its trailer checksum
    expect = [f"corrupt-entry {seg(built, 1)}: entry 5 at offset {e.offset}: checksum mismatch", flip_object(built, rec_in(built, 3))]
    check(built, expect, [apart_note(built, 4, 2, built.nseg)])


def test_three_damages_at_once_record_garbage_record(built):
    """Garbage after a sealed segment breaks no chain: the checks that span entries go on."""
    first = flip_object(built, 3)
    with open(seg(built, 2), "ab") as f:
        f.write(b"garbage!" * 4)
    last = flip_object(built, rec_in(built, built.nseg - 1))
    check(built, [first, f"garbage-after-entry {seg(built, 2)}: 32 bytes after the last entry of sealed segment 2", last])


def test_truncated_sealed_segment_then_damage_later(built):
    e = built.entries[last_of(built, 2)]
    os.truncate(seg(built, 2), e.offset + e.length - 50)
    expect = [f"corrupt-entry {seg(built, 2)}: entry {e.n} at offset {e.offset}: truncated ({e.length - 50} of {e.length} bytes)",
              flip_object(built, rec_in(built, built.nseg - 1))]
    check(built, expect, [apart_note(built, e.n - 1, 3, built.nseg)])


def test_bad_segment_header_then_damage_later(built):
    flip(seg(built, 3), 1)  # its magic
    expect = [f"corrupt-segment {seg(built, 3)}: bad segment header", flip_object(built, rec_in(built, built.nseg - 1))]
    check(built, expect, [apart_note(built, last_of(built, 2), 4, built.nseg)])


def test_damaged_index_and_a_damaged_record(built):
    """The index of a segment without other damage is judged; one of a damaged segment is not
    (it would differ for that reason)."""
    from objstore.storage.log import segindex

    first = flip_object(built, 3)
    s = built.nseg - 1
    flip(idx(built, s), segindex.HEAD.size + segindex.FANOUT.size + 3, bit=0x01)
    flip(idx(built, 1), segindex.HEAD.size + segindex.FANOUT.size + 3, bit=0x01)
    check(built, [first, f"damaged-index {idx(built, s)}: index of segment {s} does not match its entries (rebuild: delete the file)"])


def test_unknown_type_after_a_missing_segment(built):
    canon = b"tree 3\x00abc"
    oid = blake3.blake3(canon).digest()
    store = Store.open(built.root)
    pos = store.engine.position()
    entry, _ = encode_entry(pos.checksum, pos.entry + 1, T0 + 500, [(oid, "tree", canon)], [], None, tables=store.engine.tables)
    with open(seg(built, built.nseg), "ab") as f:
        f.write(entry)
    os.unlink(seg(built, 2))
    check(built, [f"missing-segment {seg(built, 2)}: segment 2 is missing; the log ends at entry {last_of(built, 1)}",
                  f"unknown-type {oid.hex()}: unknown object type 'tree' [{seg(built, built.nseg)}]"],
          [apart_note(built, last_of(built, 1), 3, built.nseg)])
