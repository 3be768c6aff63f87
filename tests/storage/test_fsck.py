"""Corruption suite for format 2, in the style of git's t/t1450-fsck.sh.

Each test builds a real store on disk whose log spans several segment files
(``SEAL_BYTES`` is made small while building, so ``log/0000000001.seg`` and
``log/0000000002.seg`` are sealed and a third segment is active),
damages real bytes, opens the store afresh and asserts the exact lines
``objstore.runs.verify`` prints: each names the object or segment, the file, and
what is wrong. The CLI runs in a subprocess for the exit code and output.

The store built by ``build``: entry 1 starts run r1; entry 2 is a compressible
blob; then eight single appends (each its own entry, raw record blocks); then a
batch of 200 records (one entry, one zstd-compressed block) that fills and seals
its segment; then a 1000-byte blob and three single appends in the active
segment. Segment 1 holds entries 1..``last1``; ``batch_n`` is the batch's entry.
Expected lines are computed from the entries' numbers and offsets, so the tests
do not depend on exact entry sizes.
"""

import json
import os
import shutil
import time
import types

import blake3
import msgspec
import pytest
import zstandard
from helpers import run_cli, snapshot_tree

from objstore import RunLog, Store
from objstore.errors import CorruptLog
from objstore.runs.facts import object_facts
from objstore.runs.verify import verify
from objstore.storage.log import local_write
from objstore.storage.log.craft import encode_entry
from objstore.storage.log.entry import build_entry
from objstore.storage.log.format import COMP_RAW, COMP_ZSTD, ENTRY_HEAD
from objstore.storage.log.tables import LogState

SEAL = 4096  # a segment is sealed once it passes this size (while building)
BATCH = 200


def build(root, t0=1_700_000_000.0):
    """The store described in the module docstring; record times are fixed (from ``t0``) so blocks
    are byte-identical from run to run."""
    mp = pytest.MonkeyPatch()
    mp.setattr(local_write, "SEAL_BYTES", SEAL)
    try:
        log = RunLog(Store.init(root))
        run = log.start_run("r1", when=t0)
        blob = log.put_blob(b"the prompt " * 60)
        singles = [log.record_attempt(run, 1, i, "failed", prompt=blob, when=t0 + 1 + i) for i in range(8)]
        with log.store.batch():
            batch = [log.record_attempt(run, 2, i, "failed", when=t0 + 100 + i) for i in range(BATCH)]
        big = log.put_blob(bytes(range(256)) * 3 + b"\xfe" * 232)
        tail = [log.record_attempt(run, 3, i, "succeeded", when=t0 + 400 + i) for i in range(3)]
    finally:
        mp.undo()
    entries = {e.n: e for e in log.store.engine.entries()}
    return types.SimpleNamespace(root=root, log=log, run=run, blob=blob, singles=singles, batch=batch, big=big, tail=tail,
                                 entries=entries)


@pytest.fixture
def built(tmp_path):
    b = build(str(tmp_path / "s"))
    e = b.entries
    b.last1 = max(n for n in e if e[n].seg == 1)
    b.batch_n = next(n for n in e if len(e[n].objs) == BATCH)
    b.active = e[max(e)].seg
    # The layout the tests rely on (see the module docstring).
    # 15 commits, plus the first entry of each later segment (format 3: it names the sealed segment's index)
    assert len(e) == 15 + b.active - 1 and 5 <= b.last1 < b.batch_n and e[b.batch_n].seg < b.active and b.active >= 3
    assert [n for n in e if e[n].idx] == [n for n in e if n > 1 and e[n].seg != e[n - 1].seg]
    assert sorted(f for f in os.listdir(os.path.join(b.root, "log")) if f.endswith(".seg")) == [f"{n:010d}.seg" for n in range(1, b.active + 1)]
    assert e[b.batch_n].blocks[0][0] == COMP_ZSTD and len(e[b.batch_n].blocks) == 1
    assert e[2].blocks[0][0] == COMP_ZSTD
    assert verify(RunLog(Store.open(b.root))) == []
    return b


def seg(root, n):
    return os.path.join(root, "log", f"{n:010d}.seg")


def fresh(root):
    return RunLog(Store.open(root))


def lines(root):
    return [p.line() for p in verify(fresh(root))]


def cli_lines(root):
    """`objstore verify` of a damaged store: exit 1 (problems found), one problem per stdout line."""
    code, out, err = run_cli("verify", store=root, exit_code=1)
    return code, out.splitlines(), err


def flip(path, off, bit=0x20):
    with open(path, "r+b") as f:
        f.seek(off)
        b = f.read(1)
        f.seek(off)
        f.write(bytes([b[0] ^ bit]))


def assert_writer_refuses(root, line):
    """A writer that reads through damage must not cut or append anything: CorruptLog (exit 6) with
    exactly ``line``, the CLI prints that one line, files untouched. Opening starts from the
    checkpoint and never re-reads sealed segments (that is what keeps open O(1)); so the writer here
    has no checkpoint and replays the log from the start.
    Damage behind a checkpoint is verify's to find (the lines asserted above)."""
    ckpt = os.path.join(root, "log", "checkpoint")
    if os.path.exists(ckpt):
        os.unlink(ckpt)
    before = snapshot_tree(root)
    with pytest.raises(CorruptLog) as ei:
        fresh(root).start_run("r2")
    assert str(ei.value) == line
    code, out, err = run_cli("refs", store=root, exit_code=6)
    # a reader stops at the same damage and says so (format 3: "readable only up to it")
    assert (out, err) == ("", f"objstore: error: {line.replace('refusing to write', 'the log is readable only up to it')}\n")
    assert snapshot_tree(root) == before


# -- clean ------------------------------------------------------------------------------------


def test_clean_store_verifies_clean_cli(built):
    n_objects = sum(len(e.objs) for e in built.entries.values())
    assert n_objects == 1 + 1 + 8 + BATCH + 1 + 3
    code, out, err = run_cli("verify", store=built.root, exit_code=0)
    assert (code, out, err) == (0, "", f"verify: ok ({len(built.entries)} entries, {n_objects} objects)\n")
    code, out, err = run_cli("verify", "--json", store=built.root, exit_code=0)
    assert (code, json.loads(out), err) == (0, [], "")


def test_verify_json_lists_problems(built):
    e = built.entries[3]
    flip(seg(built.root, 1), e.data_off + 20)
    code, out, err = run_cli("verify", "--json", store=built.root, exit_code=1)
    assert code == 1 and err == ""
    assert json.loads(out) == [{"code": "corrupt-object", "subject": built.singles[0].id.hex(), "where": seg(built.root, 1),
                                "detail": "hash mismatch (content does not match id)"}]


# -- damaged bytes inside sealed entries ------------------------------------------------------


def test_flipped_byte_in_sealed_entry_meta(built):
    """The chain checksum covers the meta: a flipped byte there is a damaged entry, named with its
    number, segment file and offset. Complete entries follow it, so it is never taken for a torn tail."""
    e = built.entries[3]
    p = seg(built.root, 1)
    with open(p, "rb") as f:
        meta = f.read()[e.offset + ENTRY_HEAD.size : e.data_off]
    flip(p, e.offset + ENTRY_HEAD.size + meta.index(b"run/r1/branch/0") + 7)  # 'branch' -> 'brAnch': still decodes
    expect = [f"corrupt-entry {p}: entry 3 at offset {e.offset}: checksum mismatch"]
    assert lines(built.root) == expect
    assert cli_lines(built.root)[:2] == (1, expect)
    assert_writer_refuses(built.root, f"integrity error: log {p}: damaged entry at offset {e.offset} (checksum mismatch; complete entries follow it); "
                                      "refusing to write (run 'objstore verify')")


def test_flipped_byte_in_a_sealed_entry_meta_key(built):
    e = built.entries[3]
    p = seg(built.root, 1)
    with open(p, "rb") as f:
        meta = f.read()[e.offset + ENTRY_HEAD.size : e.data_off]
    flip(p, e.offset + ENTRY_HEAD.size + meta.index(b"blocks"))  # the key 'blocks' -> 'Blocks'
    expect = [f"corrupt-entry {p}: entry 3 at offset {e.offset}: undecodable entry meta: no field 'blocks'"]
    assert lines(built.root) == expect
    assert cli_lines(built.root)[:2] == (1, expect)


def test_rewritten_trailer_checksum_in_sealed_segment(built):
    e = built.entries[5]
    p = seg(built.root, 1)
    with open(p, "r+b") as f:
        f.seek(e.offset + e.length - 32)
        f.write(blake3.blake3(b"forged").digest())
    expect = [f"corrupt-entry {p}: entry 5 at offset {e.offset}: checksum mismatch"]
    assert lines(built.root) == expect
    assert cli_lines(built.root)[:2] == (1, expect)


def test_rewritten_entry_breaks_the_next_entrys_chain(built):
    """Entry 5 replaced by a different entry that is valid on its own (its own checksum chains to
    entry 4): entry 6 no longer chains to it."""
    e4, e5, e6 = built.entries[4], built.entries[5], built.entries[6]
    p = seg(built.root, 1)
    data = open(p, "rb").read()
    # valid on its own: its root is the root of the tables after entry 4 plus its own move, as an
    # attacker who replays entries 1..4 computes it
    t = LogState()
    for n in range(1, 5):
        e = built.entries[n]
        facts = {e.objs[r[0]][0]: r[1:] for r in e.recs}
        facts.update((e.objs[r[0]][0], [r[1]]) for r in e.prevs)
        t.commit(t.plan(n, [(o[0], o[1]) for o in e.objs], facts, e.moves, e.idx), n, e.checksum, e.time)
    forged, _ = encode_entry(e4.checksum, 5, e5.time + 1, [], [["note/forged", None, built.blob, "forged"]], None, tables=t)
    with open(p, "wb") as f:
        f.write(data[: e5.offset] + forged + data[e5.offset + e5.length :])
    expect = [f"corrupt-entry {p}: entry 6 at offset {e5.offset + len(forged)}: checksum mismatch"]
    assert lines(built.root) == expect
    assert cli_lines(built.root)[:2] == (1, expect)
    assert e6.n == 6


def test_flipped_byte_in_sealed_record_bytes(built):
    """Object bytes are outside the chain checksum (it covers ids, not compressed bytes): the damaged
    record is named by its id and file, once. The records that follow it on the chain name it as
    their parent: it is damaged, not missing, so they add no lines."""
    e = built.entries[3]
    rec = built.singles[0]
    assert e.objs[0][0] == rec.id and e.blocks[0][0] == COMP_RAW
    p = seg(built.root, 1)
    flip(p, e.data_off + e.objs[0][2] // 2)
    expect = [f"corrupt-object {rec.id.hex()}: hash mismatch (content does not match id) [{p}]"]
    assert lines(built.root) == expect
    assert cli_lines(built.root)[:2] == (1, expect)
    code, out, err = run_cli("show", rec.id.hex(), store=built.root, exit_code=6)
    assert (code, out) == (6, "")
    assert err == f"objstore: error: integrity error: object {rec.id.hex()} ({p}): hash mismatch (content does not match id)\n"


def test_flipped_byte_in_zstd_frame_header(built):
    """A zstd block that no longer decompresses: every object in it is named, with zstd's error."""
    e = built.entries[built.batch_n]
    p = seg(built.root, e.seg)
    flip(p, e.data_off)  # the frame's magic number
    why = "zstd data corrupt: error determining content size from frame header"
    expect = [f"corrupt-object {r.id.hex()}: {why} [{p}]" for r in built.batch]
    assert lines(built.root) == expect
    code, out, _ = cli_lines(built.root)
    assert (code, out) == (1, expect)


def test_flipped_byte_inside_zstd_block(built):
    """A flip in the middle of a compressed block: either zstd notices (every object of the block is
    named with its error) or the block decompresses to other bytes (frames carry no checksum of their
    own) and exactly the objects whose bytes changed are named by their hash mismatch."""
    e = built.entries[built.batch_n]
    p = seg(built.root, e.seg)
    comp, raw_len, stored_len = e.blocks[0]
    with open(p, "rb") as f:
        f.seek(e.data_off)
        good = f.read(stored_len)
    raw = zstandard.ZstdDecompressor().decompress(good)
    flip(p, e.data_off + stored_len // 2)
    with open(p, "rb") as f:
        f.seek(e.data_off)
        bad = f.read(stored_len)
    try:
        damaged_raw = zstandard.ZstdDecompressor().decompress(bad, max_output_size=raw_len)
        assert len(damaged_raw) == raw_len
    except zstandard.ZstdError as err:
        expect = [f"corrupt-object {r.id.hex()}: zstd data corrupt: {err} [{p}]" for r in built.batch]
    else:
        changed = [oid for oid, _t, length, _b, off in e.objs if damaged_raw[off : off + length] != raw[off : off + length]]
        assert changed, "the flip must change something"
        expect = [f"corrupt-object {oid.hex()}: hash mismatch (content does not match id) [{p}]" for oid in changed]
    assert lines(built.root) == expect


# -- damaged segment files ----------------------------------------------------------------------


def test_truncated_sealed_segment(built):
    e = built.entries[built.last1]
    p = seg(built.root, 1)
    assert os.path.getsize(p) == e.offset + e.length
    os.truncate(p, os.path.getsize(p) - 100)
    expect = [f"corrupt-entry {p}: entry {e.n} at offset {e.offset}: truncated ({e.length - 100} of {e.length} bytes)"]
    assert lines(built.root) == expect
    assert cli_lines(built.root)[:2] == (1, expect)
    last = max(built.entries)
    assert_writer_refuses(built.root, f"integrity error: log {p}: damaged entry at offset {e.offset} (incomplete entry ({e.length - 100} of {e.length} bytes); "
                                      f"entry {e.n} was made durable (the head witness names entry {last})); refusing to write (run 'objstore verify')")


def test_sealed_segment_truncated_at_an_entry_boundary(built):
    """A whole entry gone from the end of a sealed segment: the next segment no longer continues it."""
    n = built.last1
    os.truncate(seg(built.root, 1), built.entries[n].offset)
    expect = [f"broken-log-chain {seg(built.root, 2)}: segment 2 does not continue the log at entry {n} "
              f"(its header says segment 2, first entry {n + 1})"]
    assert lines(built.root) == expect
    assert cli_lines(built.root)[:2] == (1, expect)


def test_garbage_after_last_entry_of_sealed_segment(built):
    """Garbage in a sealed segment is damage, never a torn tail: sealed segments are complete."""
    p = seg(built.root, 1)
    with open(p, "ab") as f:
        f.write(b"garbage!" * 4)
    expect = [f"garbage-after-entry {p}: 32 bytes after the last entry of sealed segment 1"]
    assert lines(built.root) == expect
    assert cli_lines(built.root)[:2] == (1, expect)
    # A writer never reads past a sealed segment's seal entry (format 3), so it does not refuse; it
    # never touches the sealed segment either: the garbage stays for verify to name.
    before = open(p, "rb").read()
    fresh(built.root).record_attempt("r1", 9, 0, "failed")
    assert open(p, "rb").read() == before
    assert lines(built.root) == expect


def test_missing_middle_segment(built):
    os.unlink(seg(built.root, 2))
    expect = [f"missing-segment {seg(built.root, 2)}: segment 2 is missing; the log ends at entry {built.last1}"]
    assert lines(built.root) == expect
    assert cli_lines(built.root)[:2] == (1, expect)
    # The writer must not take segment 1 for the active one and append to it.
    e = built.entries[built.last1]
    assert_writer_refuses(built.root, f"integrity error: log {seg(built.root, 1)}: damaged entry at offset {e.offset + e.length} "
                                      "(segment 2 is missing (segment 3 exists)); refusing to write (run 'objstore verify')")


def test_swapped_segments(built):
    p1, p2 = seg(built.root, 1), seg(built.root, 2)
    d1, d2 = open(p1, "rb").read(), open(p2, "rb").read()
    open(p1, "wb").write(d2)
    open(p2, "wb").write(d1)
    # Both files are out of place: each is named (the second is not chained to the first, which is misplaced itself).
    expect = [f"broken-log-chain {p1}: segment 1 does not continue the log at entry 1 (its header says segment 2, first entry {built.last1 + 1})",
              f"broken-log-chain {p2}: segment 2 is out of place (its header says segment 1, first entry 1)"]
    assert lines(built.root) == expect
    assert cli_lines(built.root)[:2] == (1, expect)


def test_earlier_sealed_segment_copied_over_a_later_one(built):
    shutil.copyfile(seg(built.root, 1), seg(built.root, 2))
    expect = [f"broken-log-chain {seg(built.root, 2)}: segment 2 does not continue the log at entry {built.last1 + 1} "
              f"(its header says segment 1, first entry 1)"]
    assert lines(built.root) == expect
    assert cli_lines(built.root)[:2] == (1, expect)


def test_sealed_segment_replaced_by_one_from_an_identical_store(built, tmp_path):
    """Segment 1 from a store built the same way at other times: the same numbers and sizes, entries
    that chain among themselves, but segment 2's header chains to the checksum of the real last entry of segment 1."""
    other = build(str(tmp_path / "other"), t0=1_800_000_000.0)
    assert os.path.getsize(seg(other.root, 1)) == os.path.getsize(seg(built.root, 1))
    shutil.copyfile(seg(other.root, 1), seg(built.root, 1))
    n = built.last1
    assert max(k for k in other.entries if other.entries[k].seg == 1) == n
    # The foreign segment 1 is sound on its own, but its index file (of the real segment 1) no longer matches it.
    expect = [f"damaged-index {os.path.join(built.root, 'log', '0000000001.idx')}: index of segment 1 does not match its entries (rebuild: delete the file)",
              f"broken-log-chain {seg(built.root, 2)}: segment 2 does not continue the log at entry {n + 1} "
              f"(its header chains to checksum {built.entries[n].checksum.hex()}, entry {n} has {other.entries[n].checksum.hex()})"]
    assert lines(built.root) == expect
    assert cli_lines(built.root)[:2] == (1, expect)


# -- objects that cannot come through the API: entries written by hand --------------------------


def append_entry(root, objects, moves=(), facts=None):
    """Append a well-formed commit entry (correct chain checksum, index rows and root of the
    tables) holding ``objects`` = [(id, type, canonical bytes)] to the active segment, as a foreign
    writer could. ``facts``: index rows to claim instead of the ones the objects give."""
    store = Store.open(root)
    pos = store.engine.position()
    moves = [list(m) for m in moves]
    if facts is None:
        entry, _ = encode_entry(pos.checksum, pos.entry + 1, time.time(), list(objects), moves, None, tables=store.engine.tables)
    else:
        plan = store.engine.tables.plan(pos.entry + 1, [(o[0], o[1]) for o in objects], facts, moves, None)
        assert not isinstance(plan, str), plan
        entry, _e = build_entry(pos.checksum, pos.entry + 1, time.time(), list(objects), moves, None, True, facts=facts, root=plan.root)
    path = store.engine.seg_path(store.engine._seg)
    with open(path, "ab") as f:
        f.write(entry)
    return path


def test_unknown_object_type(built):
    canon = b"tree 3\x00abc"
    oid = blake3.blake3(canon).digest()
    p = append_entry(built.root, [(oid, "tree", canon)])
    assert p == seg(built.root, built.active)
    log = fresh(built.root)
    assert log.store.has(oid)  # the entry itself is sound: the engine takes it
    expect = [f"unknown-type {oid.hex()}: unknown object type 'tree' [{p}]"]
    assert [x.line() for x in verify(log)] == expect
    assert cli_lines(built.root)[:2] == (1, expect)
    code, out, err = run_cli("show", oid.hex(), store=built.root, exit_code=6)
    # A read names the part of the object that is bad (its header); verify, which scans files, names the file.
    assert (code, out, err) == (6, "", f"objstore: error: integrity error: object {oid.hex()} (header): unknown object type 'tree'\n")


def test_malformed_but_hashed_record(built):
    """A record whose bytes hash to its id and decode canonically, but has no body."""
    head = built.tail[-1]
    payload = msgspec.msgpack.Encoder(order="sorted").encode(
        {"run": "r1", "branch": 0, "lsn": head.lsn + 1, "parent": bytes(head.id), "kind": "attempt", "time": 1.0})
    canon = b"record %d\x00" % len(payload) + payload
    oid = blake3.blake3(canon).digest()
    # Its entry claims the index row of the same record with a body (format 3: every record has one).
    twin = msgspec.msgpack.Encoder(order="sorted").encode(
        {"run": "r1", "branch": 0, "lsn": head.lsn + 1, "parent": bytes(head.id), "kind": "attempt", "time": 1.0, "body": {}})
    row = object_facts("record", b"record %d\x00" % len(twin) + twin, None)
    p = append_entry(built.root, [(oid, "record", canon)], [("run/r1/branch/0", head.id, oid, "append")], facts={oid: row})
    expect = [f"malformed-object {oid.hex()}: missing field 'body' [{p}]",
              f"damaged-ref run/r1/branch/0: points to damaged object {oid.hex()} [{p}]"]
    assert lines(built.root) == expect
    assert cli_lines(built.root)[:2] == (1, expect)


def test_ref_moved_to_an_object_never_stored(built):
    ghost = blake3.blake3(b"never stored").digest()
    p = append_entry(built.root, [], [("note/ghost", None, ghost, "forged")])
    assert lines(built.root) == [
        f"dangling-ref note/ghost: entry {len(built.entries) + 1} points it at {ghost.hex()}, not stored in or before that entry [{p}]",
        f"dangling-ref note/ghost: points to missing object {ghost.hex()}",
    ]


# -- derived files: segment indexes and the checkpoint ------------------------------------------
#
# Everything but OBJSTORE and log/*.seg is derived from the log: log/<segment>.idx (the index of a
# sealed segment, see src/objstore/storage/log/segindex.py) and log/checkpoint (the tables at some position). A
# damaged derived file must never change what a reader sees: it is rebuilt or ignored.


_AUDIT = {"on": False, "events": []}


def _audit(event, args):
    if _AUDIT["on"] and event in ("open", "sqlite3.connect", "os.rename", "os.replace", "os.remove", "os.truncate"):
        _AUDIT["events"].append((event, args[0] if args else None))


_hook_installed = []


def _files_touched(fn):
    """(event, path) of every file opened (and renamed/removed/truncated) while ``fn`` runs."""
    if not _hook_installed:
        import sys

        sys.addaudithook(_audit)  # inert unless _AUDIT["on"]
        _hook_installed.append(True)
    _AUDIT["events"] = []
    _AUDIT["on"] = True
    try:
        fn()
    finally:
        _AUDIT["on"] = False
    return list(_AUDIT["events"])


def _derived(name):
    # (log/witness: the head witness, format 3 — the last entry made durable; a hint, never trusted over the log;
    # log/idx-verified: identities of index files already hashed to the digest the log names, a hint too)
    return name in ("log/checkpoint", "log/witness", "log/idx-verified") or (name.startswith("log/") and name.endswith(".idx"))


def test_open_and_read_touch_only_marker_segments_and_derived_indexes(built):
    """What a reader trusts is the marker and the log, plus derived files rebuilt from the log
    (segment indexes, checkpoint). No other file — no SQLite state cache — is opened by opening a
    store, reading every object and ref and walking a run; a write adds only ``lock`` and ``sync`` (the
    counters of flushes shared by writer processes: storage.log.groupsync)."""
    root = built.root
    ids = [oid for e in built.entries.values() for oid, *_ in e.objs]

    def read_everything():
        log = fresh(root)
        assert len(list(log.store.list_refs())) == 2
        for oid in ids:
            log.store.get(oid)
        assert [r.id for r in log.records("r1")][-1] == built.tail[-1].id

    def write_one():
        fresh(root).record_attempt("r1", 4, 0, "failed")

    def rel(path):
        if isinstance(path, bytes):
            path = os.fsdecode(path)
        return os.path.relpath(path, root) if isinstance(path, str) and os.path.isabs(path) else path

    segs = {f"log/{n:010d}.seg" for n in range(1, built.active + 1)}
    for fn, allowed in ((read_everything, set()), (write_one, {"lock", "sync"})):
        touched = [(ev, rel(p)) for ev, p in _files_touched(fn)]
        files = {p for ev, p in touched if ev == "open" and isinstance(p, str) and not p.startswith("..")}
        assert {f for f in files - segs - allowed if not _derived(f)} == {"OBJSTORE"}, touched
        assert not [t for t in touched if t[0] == "sqlite3.connect"], touched
        assert not [t for t in touched if t[0] in ("os.remove", "os.truncate") and not _derived(str(t[1]))], touched
    names = sorted(os.path.relpath(os.path.join(d, f), root) for d, _, fs in os.walk(root) for f in fs)
    assert [n for n in names if not _derived(n)] == sorted(["OBJSTORE", "lock", "sync", *segs])


def _reader_view(root, built):
    """Everything a reader can see: every object's bytes, the refs, the run's records and the
    chain index at every LSN."""
    log = fresh(root)
    objs = {oid: log.store.get_raw(oid) for e in built.entries.values() for oid, *_ in e.objs}
    refs = dict(log.store.list_refs())
    recs = [r.id for r in log.records("r1")]
    chain = [log.store.indexed_record("r1", 0, lsn) for lsn in range(len(recs) + 1)]
    return objs, refs, recs, chain


def _flip_idx(off_from_rows):
    """Flip a bit ``off_from_rows`` bytes into the object rows of segment 1's index."""
    from objstore.storage.log import segindex

    def damage(root):
        flip(os.path.join(root, "log", "0000000001.idx"), segindex.HEAD.size + segindex.FANOUT.size + off_from_rows, bit=0x01)
    return damage


def _flip_last(name, back):
    def damage(root):
        p = os.path.join(root, "log", name)
        flip(p, os.path.getsize(p) - back, bit=0x01)
    return damage


INDEX_DAMAGE = {
    "idx-deleted": lambda root: os.unlink(os.path.join(root, "log", "0000000001.idx")),
    "idx-truncated": lambda root: os.truncate(os.path.join(root, "log", "0000000001.idx"), 100),
    "idx-flipped-object-id": _flip_idx(31),  # last byte of the first object row's id
    "idx-flipped-block-offset": _flip_idx(40),  # the first object row's block offset
    "idx-flipped-chain-row": _flip_last("0000000001.idx", 32 + 5),  # inside the last chain row's record id
    "idx-flipped-trailer": _flip_last("0000000001.idx", 1),
    "checkpoint-garbage": lambda root: open(os.path.join(root, "log", "checkpoint"), "wb").write(b"garbage"),
    "checkpoint-flipped-ref": lambda root: _flip_checkpoint_ref(root),
}


def _flip_checkpoint_ref(root):
    """Flip a bit of a branch head recorded in the checkpoint (the map still decodes; its trailing
    BLAKE3 no longer matches, so the checkpoint is ignored and the log replayed)."""
    p = os.path.join(root, "log", "checkpoint")
    data = open(p, "rb").read()
    refs = dict(msgspec.msgpack.decode(data[:-32])["refs"])
    head = refs["run/r1/branch/0"]
    assert data.count(head) >= 1
    flip(p, data.index(head) + 31, bit=0x01)


@pytest.mark.parametrize("damage", sorted(INDEX_DAMAGE))
def test_damaged_derived_file_never_changes_what_readers_see(built, damage):
    root = built.root
    assert os.path.exists(os.path.join(root, "log", "0000000001.idx"))
    want = _reader_view(root, built)
    assert all(x is not None for x in want[3][:-1]) and want[3][-1] is None
    INDEX_DAMAGE[damage](root)
    assert _reader_view(root, built) == want
    # A reader adopts an index only if its BLAKE3 is the digest the log names (format 3); one that
    # is not is rebuilt in memory and left on disk for verify to name.
    idx = os.path.join(root, "log", "0000000001.idx")
    named = [f"damaged-index {idx}: index of segment 1 does not match its entries (rebuild: delete the file)"]
    assert lines(root) == (named if damage.startswith("idx-") and damage != "idx-deleted" else [])


@pytest.mark.parametrize("damage", ["idx-flipped-object-id", "idx-flipped-block-offset", "idx-truncated"])
def test_index_loaded_on_demand_is_checked_too(built, damage):
    """White-box: an engine that did not replay a sealed segment itself (one started from a
    checkpoint) loads the segment's index file on first lookup; a damaged one is rebuilt there too."""
    root = built.root
    want = _reader_view(root, built)
    log = fresh(root)
    log.store.engine._idx.clear()  # as if the open had started past segment 1
    INDEX_DAMAGE[damage](root)
    for oid, data in want[0].items():
        assert log.store.get_raw(oid) == data


def test_index_and_checkpoint_from_an_identical_store_are_not_trusted(built, tmp_path):
    """Derived files copied from a store built the same way at other times (same sizes, same
    layout, other ids and checksums) are recognised as not this log's."""
    other = build(str(tmp_path / "other"), t0=1_800_000_000.0)
    want = _reader_view(built.root, built)
    for name in os.listdir(os.path.join(other.root, "log")):
        if _derived(f"log/{name}") and name != "witness":
            shutil.copyfile(os.path.join(other.root, "log", name), os.path.join(built.root, "log", name))
    assert _reader_view(built.root, built) == want
    # The readers did not adopt the foreign indexes (their digests are not the ones the log names),
    # and verify names both files.
    assert lines(built.root) == [f"damaged-index {os.path.join(built.root, 'log', f'{n:010d}.idx')}: index of segment {n} "
                                 "does not match its entries (rebuild: delete the file)" for n in (1, 2)]


def test_self_consistent_but_wrong_segment_index(built):
    """An index whose own checksum is right but whose rows are not what its segment says (what a
    buggy indexer would write): its BLAKE3 is not the digest the log names (format 3), so a reader
    does not adopt it and reads the right bytes; verify names the index file."""
    from objstore.storage.log import segindex

    p = os.path.join(built.root, "log", "0000000001.idx")
    data = bytearray(open(p, "rb").read())
    row0 = segindex.HEAD.size + segindex.FANOUT.size
    oid = bytes(data[row0 : row0 + 32])
    data[row0 + 40] ^= 0x01  # the first object row's block offset
    data[-32:] = blake3.blake3(bytes(data[:-32])).digest()
    open(p, "wb").write(bytes(data))
    expect = [f"damaged-index {p}: index of segment 1 does not match its entries (rebuild: delete the file)"]
    # (each verify finds the file as it was damaged: its own look-ups, a reader's, rebuild it after)
    assert lines(built.root) == expect
    open(p, "wb").write(bytes(data))
    assert cli_lines(built.root)[:2] == (1, expect)
    open(p, "wb").write(bytes(data))
    log = fresh(built.root)
    assert blake3.blake3(log.store.get_raw(oid)).digest() == oid
    # The advice works: without the file, it is rebuilt from the segment.
    os.unlink(p)
    assert fresh(built.root).store.get_raw(oid)
    assert lines(built.root) == []
