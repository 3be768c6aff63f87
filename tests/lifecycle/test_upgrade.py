"""objstore upgrade: format-1 stores (written here byte by byte, as docs/FORMAT.md of format 1
says — no format-1 code is used) become format-2 stores with the same objects, refs and ref log."""

import json
import os
import shutil
import struct
import subprocess
import sys
import textwrap

import blake3
import pytest
import zstandard
from helpers import run_cli, snapshot_tree

from objstore import RunLog, Store
from objstore.errors import Conflict, IntegrityError, InvalidInput, Refused, StoreNeedsUpgrade, StoreNotFound
from objstore.legacy import upgrade as U
from objstore.legacy.format1 import Format1Reader
from objstore.runs import records as R
from objstore.runs.verify import verify
from objstore.storage import codec

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURES = os.path.join(os.path.dirname(os.path.dirname(HERE)), "fixtures")
GOLDEN_LOOSE_ID = "8adb81e98871de63d91dce61f753ecfe33664923476002e0e1643092bccc334c"
T0 = 1700000000.0


# -- a format-1 store, written directly ---------------------------------------------------------


class F1:
    """Writes a format-1 store's files: marker, loose objects, packs, ref files, ref logs."""

    def __init__(self, root):
        self.root = str(root)
        for d in ("objects", "packs", "refs", "logs", "tmp"):
            os.makedirs(os.path.join(self.root, d), exist_ok=True)
        with open(os.path.join(self.root, "OBJSTORE"), "wb") as f:
            f.write(json.dumps({"format": "objstore", "version": 1}).encode() + b"\n")
        self.ids = {}  # id -> canonical bytes

    def obj(self, otype, value):
        canon = codec.encode(otype, value)
        oid = blake3.blake3(canon).digest()
        self.ids[oid] = canon
        return oid, canon

    def loose(self, otype, value, zstd=False):
        oid, canon = self.obj(otype, value)
        h = oid.hex()
        os.makedirs(os.path.join(self.root, "objects", h[:2]), exist_ok=True)
        if zstd:
            data = b"OSO\x01\x01" + zstandard.ZstdCompressor(write_content_size=True).compress(canon)
        else:
            data = b"OSO\x01\x00" + canon
        with open(os.path.join(self.root, "objects", h[:2], h[2:]), "wb") as f:
            f.write(data)
        return oid

    def pack(self, objects, name="0" * 32):
        """One pack of [(type, value)]: block 0 raw, block 1 (if any) zstd; returns the ids."""
        items = [self.obj(t, v) for t, v in objects]
        blocks = [items[:1], items[1:]] if len(items) > 1 else [items]
        out, block_pos, entries = [b"OSPK\x01\x00\x00\x00"], [], []
        pos = 8
        for n, members in enumerate(blocks):
            raw = b"".join(c for _, c in members)
            comp, stored = (1, zstandard.ZstdCompressor(write_content_size=True).compress(raw)) if n else (0, raw)
            off = 0
            for oid, c in members:
                entries.append((oid, n, off, len(c)))
                off += len(c)
            block_pos.append(pos)
            chunk = struct.pack("<BII", comp, len(raw), len(stored)) + stored
            out.append(chunk)
            pos += len(chunk)
        idx_off = pos
        out.append(struct.pack("<I", len(block_pos)) + struct.pack(f"<{len(block_pos)}Q", *block_pos) + struct.pack("<I", len(entries)))
        out += [struct.pack("<32sIII", *e) for e in sorted(entries)]
        body = b"".join(out)
        with open(os.path.join(self.root, "packs", f"pack-{name}.pack"), "wb") as f:
            f.write(body + struct.pack("<Q32s4s", idx_off, blake3.blake3(body).digest(), b"OSPX"))
        return [oid for oid, _ in items]

    def ref(self, name, value):
        path = os.path.join(self.root, "refs", *name.split("/"))
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write((value.hex() if isinstance(value, bytes) else value) + "\n")

    def log(self, name, old, new, time, reason, raw=None):
        path = os.path.join(self.root, "logs", *name.split("/"))
        os.makedirs(os.path.dirname(path), exist_ok=True)
        show = lambda v: v.hex() if isinstance(v, bytes) else v  # noqa: E731
        line = raw if raw is not None else (json.dumps({"new": show(new), "old": show(old), "pid": 4242, "reason": reason, "time": time},
                                                       sort_keys=True) + "\n").encode()
        with open(path, "ab") as f:
            f.write(line)


def record(run, branch, lsn, parent, kind, time, body):
    return {"run": run, "branch": branch, "lsn": lsn, "parent": parent, "kind": kind, "time": time, "body": R.check_body(kind, body)}


def attempt(step, state, prompt=None, output=None, error=None):
    return {"step": step, "attempt": 0, "state": state, "workflow_version": None, "context": {"path": "A"}, "prompt": prompt,
            "output": output, "tools": {"model": "stub-1"}, "usage": {"input_tokens": 12}, "error": error}


def make_format1(root):
    """A realistic format-1 store: run r1 (run_started, two attempts, a rewind fork with one
    record on branch 1), blobs, loose (raw and zstd) and packed objects, the golden fixtures,
    refs and ref logs with distinct times and reasons, a stale state.db."""
    s = F1(root)
    prompt = s.loose("blob", b"Refund order 1234 for the customer, please. " * 4, zstd=True)
    start = record("r1", 0, 0, None, "run_started", T0, {"subject": "alice", "workflow_version": "wf-1", "meta": {"task": "refund"}})
    r0, output = s.pack([("record", start), ("blob", b"refund issued\n")], name="a" * 32)
    a1 = s.loose("record", record("r1", 0, 1, r0, "attempt", T0 + 1, attempt(1, "failed", prompt=prompt, error="timeout")))
    a2, = s.pack([("record", record("r1", 0, 2, a1, "attempt", T0 + 2, attempt(1, "succeeded", prompt=prompt, output=output)))], name="b" * 32)
    fork = {"run": "r1", "branch": 1, "parent_branch": 0, "parent_lsn": 1, "parent_record": a1, "parent_head": a2, "reason": "retry",
            "compensation": [], "time": T0 + 3}
    f1 = s.loose("fork", fork)
    b1 = s.loose("record", record("r1", 1, 0, f1, "attempt", T0 + 4, attempt(2, "succeeded", prompt=prompt)))
    shutil.copy(os.path.join(FIXTURES, "golden.pack"), os.path.join(s.root, "packs", "pack-" + "c" * 32 + ".pack"))
    os.makedirs(os.path.join(s.root, "objects", GOLDEN_LOOSE_ID[:2]), exist_ok=True)
    shutil.copy(os.path.join(FIXTURES, "golden.loose"), os.path.join(s.root, "objects", GOLDEN_LOOSE_ID[:2], GOLDEN_LOOSE_ID[2:]))
    s.ref("run/r1/branch/0", a2)
    s.ref("run/r1/branch/1", b1)
    s.ref("run/r1/live", "ref: run/r1/branch/1")
    b0, b1n, live = "run/r1/branch/0", "run/r1/branch/1", "run/r1/live"
    s.log(b0, None, r0, T0 + 0.10, "start run")
    s.log(live, None, "ref: " + b0, T0 + 0.11, "start run: branch 0 live")
    s.log(b0, r0, a1, T0 + 1.01, "append")
    s.log(b0, a1, a2, T0 + 2.01, "append")
    s.log(b1n, None, f1, T0 + 3.01, "fork from 0@1: retry")
    s.log(live, "ref: " + b0, "ref: " + b1n, T0 + 3.02, "fork 1 live")
    s.log(b1n, f1, b1, T0 + 4.01, "append")
    with open(os.path.join(s.root, "state.db"), "wb") as f:
        f.write(b"SQLite format 3\x00 stale cache")
    expected = [
        (b0, None, r0.hex(), T0 + 0.10, "start run"),
        (live, None, "ref: " + b0, T0 + 0.11, "start run: branch 0 live"),
        (b0, r0.hex(), a1.hex(), T0 + 1.01, "append"),
        (b0, a1.hex(), a2.hex(), T0 + 2.01, "append"),
        (b1n, None, f1.hex(), T0 + 3.01, "fork from 0@1: retry"),
        (live, "ref: " + b0, "ref: " + b1n, T0 + 3.02, "fork 1 live"),
        (b1n, f1.hex(), b1.hex(), T0 + 4.01, "append"),
    ]
    s.expected_log = expected
    s.heads = {"r0": r0, "a1": a1, "a2": a2, "f1": f1, "b1": b1, "prompt": prompt, "output": output}
    return s


def ref_log(store):
    return [(d["name"], d["old"], d["new"], d["time"], d["reason"]) for d in store.ref_log()]


def stored_ids(store):
    return {o[0] for e in store.engine.entries() for o in e.objs}


@pytest.fixture
def f1(tmp_path):
    return make_format1(tmp_path / "store")


# -- tests --------------------------------------------------------------------------------------


def test_reader_reads_what_was_written(f1):
    r = Format1Reader(f1.root)
    got = dict(r.iter_objects())
    assert set(got) == set(f1.ids) | {bytes.fromhex(GOLDEN_LOOSE_ID)} | set(_golden_pack_ids())
    for oid, canon in f1.ids.items():
        assert got[oid] == canon
    assert r.refs()["run/r1/live"] == "ref: run/r1/branch/1"
    assert [(m.name, m.time, m.reason) for m in r.ref_log_moves()] == [(e[0], e[3], e[4]) for e in f1.expected_log]


def _golden_pack_ids():
    with open(os.path.join(FIXTURES, "golden.pack"), "rb") as f:
        data = f.read()
    idx_off = struct.unpack_from("<Q", data, len(data) - 44)[0]
    nblocks = struct.unpack_from("<I", data, idx_off)[0]
    p = idx_off + 4 + 8 * nblocks
    count = struct.unpack_from("<I", data, p)[0]
    return [data[p + 4 + 44 * i : p + 4 + 44 * i + 32] for i in range(count)]


def test_reader_names_damage(f1):
    a1 = f1.heads["a1"].hex()
    path = os.path.join(f1.root, "objects", a1[:2], a1[2:])
    with open(path, "r+b") as f:
        f.seek(-1, 2)
        last = f.read(1)
        f.seek(-1, 2)
        f.write(bytes([last[0] ^ 1]))
    line = f"integrity error: object {a1} ({path}): hash mismatch (content does not match id)"
    with pytest.raises(IntegrityError) as ei:
        dict(Format1Reader(f1.root).iter_objects())
    assert str(ei.value) == line
    with pytest.raises(StoreNeedsUpgrade):
        Store.open(f1.root)
    with pytest.raises(IntegrityError) as ei:
        U.upgrade(f1.root)
    assert str(ei.value) == line
    assert not os.path.exists(f1.root + ".format1") and not os.path.exists(f1.root + ".upgrade-tmp")


def test_format1_store_needs_upgrade(f1):
    before = snapshot_tree(f1.root)
    with pytest.raises(StoreNeedsUpgrade) as e:
        Store.open(f1.root)
    assert e.value.exit_code == 5
    assert "upgrade" in str(e.value) and f1.root in str(e.value) and "\n" not in str(e.value)
    assert snapshot_tree(f1.root) == before


def test_upgrade(f1):
    old = snapshot_tree(f1.root)
    summary = U.upgrade(f1.root)
    assert summary["status"] == "upgraded"
    golden = 1 + len(_golden_pack_ids())
    assert summary["objects"] == len(f1.ids) + golden and summary["dropped"] == 0
    assert (summary["refs"], summary["moves"], summary["reconciled"], summary["skipped"]) == (3, 7, 0, 0)
    assert summary["backup"] == f1.root + ".format1"
    assert snapshot_tree(f1.root + ".format1") == old  # kept, byte for byte
    assert not os.path.exists(f1.root + ".upgrade-tmp")
    assert not os.path.exists(os.path.join(f1.root, "state.db"))

    store = Store.open(f1.root)
    ids = stored_ids(store)
    assert ids == {oid for oid, _ in Format1Reader(f1.root + ".format1").iter_objects()}
    for oid, canon in f1.ids.items():
        assert store.get_raw(oid) == canon
    h = f1.heads
    assert dict(store.list_refs()) == {"run/r1/branch/0": h["a2"], "run/r1/branch/1": h["b1"], "run/r1/live": "ref: run/r1/branch/1"}
    assert ref_log(store) == f1.expected_log
    # every object arrived no later than the move that made it reachable; chains in LSN order
    entry_of = {o[0]: e.n for e in store.engine.entries() for o in e.objs}
    moves_at = {d["new"]: d["entry"] for d in store.ref_log()}
    for name in ("r0", "a1", "a2", "f1", "b1"):
        assert entry_of[h[name]] == moves_at[h[name].hex()]
    assert entry_of[h["prompt"]] == entry_of[h["a1"]] and entry_of[h["output"]] == entry_of[h["a2"]]
    log = RunLog(store)
    assert log.runs() == ["r1"]
    assert log.view("r1").live == 1
    assert [r.lsn for r in log.records("r1", 0)] == [0, 1, 2]
    assert log.get_blob(h["prompt"]).startswith(b"Refund order 1234")
    assert verify(log) == []


def test_upgrade_twice_is_a_noop(f1):
    steps = U.upgrade_all(f1.root)  # format 1 -> 3 (kept as .format1) -> 6 (the format-3 store kept as .format3)
    assert [s["status"] for s in steps] == ["upgraded", "upgraded", "already-format-6"]
    before = snapshot_tree(f1.root)
    backup = snapshot_tree(f1.root + ".format1")
    assert U.upgrade(f1.root)["status"] == "already-format-6"
    assert snapshot_tree(f1.root) == before and snapshot_tree(f1.root + ".format1") == backup


def test_existing_backup_is_refused(f1):
    os.mkdir(f1.root + ".format1")
    with open(os.path.join(f1.root + ".format1", "mine"), "w") as fh:
        fh.write("keep")
    before, other = snapshot_tree(f1.root), snapshot_tree(f1.root + ".format1")
    with pytest.raises(InvalidInput, match=r"\.format1 already exists"):
        U.upgrade(f1.root)
    assert snapshot_tree(f1.root) == before and snapshot_tree(f1.root + ".format1") == other
    assert not os.path.exists(f1.root + ".upgrade-tmp")


class Boom(Exception):
    pass


@pytest.mark.parametrize("step", ["planned", "built", "verified", "swap", "between-renames"])
def test_interrupted_upgrade_leaves_format1_usable(f1, monkeypatch, step):
    before = snapshot_tree(f1.root)

    def fail(at):
        if at == step:
            raise Boom(at)

    monkeypatch.setattr(U, "_checkpoint", fail)
    with pytest.raises(Boom):
        U.upgrade(f1.root)
    assert snapshot_tree(f1.root) == before
    assert not os.path.exists(f1.root + ".format1") and not os.path.exists(f1.root + ".upgrade-tmp")
    with pytest.raises(StoreNeedsUpgrade):
        Store.open(f1.root)
    monkeypatch.undo()
    assert U.upgrade(f1.root)["status"] == "upgraded"
    assert ref_log(Store.open(f1.root)) == f1.expected_log


_CRASH = textwrap.dedent("""
    import os, sys
    from objstore.legacy import upgrade as U
    def crash(at):
        if at == sys.argv[2]:
            os._exit(77)
    U._checkpoint = crash
    U.upgrade(sys.argv[1])
    """)


@pytest.mark.parametrize("step", ["built", "verified"])
def test_crash_before_swap_then_upgrade_again(f1, step):
    """A killed upgrade (no cleanup ran) leaves the staging directory; the next run replaces it."""
    before = snapshot_tree(f1.root)
    p = subprocess.run([sys.executable, "-c", _CRASH, f1.root, step], capture_output=True, timeout=120)
    assert p.returncode == 77, p.stderr.decode()
    assert snapshot_tree(f1.root) == before
    assert os.path.isdir(f1.root + ".upgrade-tmp")
    assert U.upgrade(f1.root)["status"] == "upgraded"
    assert not os.path.exists(f1.root + ".upgrade-tmp")
    assert ref_log(Store.open(f1.root)) == f1.expected_log


def test_crash_between_renames_is_finished_by_upgrade(f1):
    before = snapshot_tree(f1.root)
    p = subprocess.run([sys.executable, "-c", _CRASH, f1.root, "between-renames"], capture_output=True, timeout=120)
    assert p.returncode == 77, p.stderr.decode()
    assert not os.path.exists(f1.root)
    assert snapshot_tree(f1.root + ".format1") == before  # the format-1 store, intact
    with pytest.raises(StoreNotFound):
        Store.open(f1.root)
    summary = U.upgrade(f1.root)
    assert summary["status"] == "finished" and summary["moves"] == 7
    store = Store.open(f1.root)
    assert ref_log(store) == f1.expected_log
    assert verify(RunLog(store)) == []
    store.logs.close()
    assert U.upgrade(f1.root)["status"] == "upgraded"  # the next step: format 3 -> 6
    assert U.upgrade(f1.root)["status"] == "already-format-6"


def test_missing_store_with_backup_but_no_staging(f1):
    os.rename(f1.root, f1.root + ".format1")
    with pytest.raises(InvalidInput, match="mv "):
        U.upgrade(f1.root)
    assert not os.path.exists(f1.root)


def test_crash_artefacts(tmp_path):
    """Logged moves a crash never applied (one undone by a recovery line, one last in its log),
    a no-op move, a torn last line: the new ref log holds the moves that happened, the records
    of the unapplied moves (never reachable in format 1) are not copied, and verify is clean."""
    s = make_format1(tmp_path / "store")
    h = s.heads
    b0 = "run/r1/branch/0"
    orphan = s.loose("record", record("r1", 0, 3, h["a2"], "attempt", T0 + 5, attempt(3, "failed")))
    lone_blob = s.loose("blob", b"a blob stored on its own")
    s.log(b0, h["a2"], orphan, T0 + 5.01, "append")  # logged; the crash came before the ref file moved
    s.log(b0, orphan, h["a2"], T0 + 6.01, "recovery: the previous logged move was not applied (crash)")
    s.log("run/r1/live", "ref: run/r1/branch/1", "ref: run/r1/branch/1", T0 + 6.5, "set live")
    other = s.loose("record", record("r1", 0, 3, h["a2"], "attempt", T0 + 7, attempt(3, "failed", error="again")))
    s.log(b0, h["a2"], other, T0 + 7.01, "append")  # logged, not applied: the ref file keeps a2
    s.log(b0, None, None, 0, "", raw=b'{"new": "ab')  # torn last line, no newline
    summary = U.upgrade(s.root)
    assert (summary["moves"], summary["unapplied"], summary["skipped"], summary["reconciled"], summary["dropped"]) == (7, 3, 1, 0, 2)
    store = Store.open(s.root)
    assert ref_log(store) == s.expected_log
    ids = stored_ids(store)
    assert lone_blob in ids and orphan not in ids and other not in ids
    assert verify(RunLog(store)) == []


def test_refs_without_log_lines_are_reconciled(tmp_path):
    s = make_format1(tmp_path / "store")
    s.ref("tags/keep", s.heads["a1"])  # a ref file no log line explains
    os.remove(os.path.join(s.root, "logs", "run", "r1", "live"))  # and a ref whose log is gone
    summary = U.upgrade(s.root)
    assert summary["reconciled"] == 2
    store = Store.open(s.root)
    log = ref_log(store)
    assert [e for e in log if e[4] == "upgrade: reconcile"] == [
        ("run/r1/live", None, "ref: run/r1/branch/1", log[-1][3], "upgrade: reconcile"),
        ("tags/keep", None, s.heads["a1"].hex(), log[-1][3], "upgrade: reconcile"),
    ]
    assert log[-1][3] > T0 + 4.01  # the upgrade's own time
    assert dict(store.list_refs())["tags/keep"] == s.heads["a1"]
    assert verify(RunLog(store)) == []


def test_unpublished_records_are_not_copied(tmp_path):
    s = make_format1(tmp_path / "store")
    orphan = s.loose("record", record("r1", 0, 3, s.heads["a2"], "attempt", T0 + 5, attempt(3, "failed")))
    summary = U.upgrade(s.root)
    assert summary["dropped"] == 1
    store = Store.open(s.root)
    assert orphan not in stored_ids(store)
    assert orphan in Format1Reader(s.root + ".format1").index()
    assert ref_log(store) == s.expected_log
    assert verify(RunLog(store)) == []


def test_log_gap_is_reconciled_in_place(tmp_path):
    s = make_format1(tmp_path / "store")
    h = s.heads
    os.remove(os.path.join(s.root, "logs", "run", "r1", "branch", "1"))
    s.log("run/r1/branch/1", h["f1"], h["b1"], T0 + 4.01, "append")  # its first line is lost
    # The reconciled history would make branch 1 live before branch 1 exists: format 3's rules hold
    # for every entry, upgrade's included, so the upgrade is refused with the rule and the format-1
    # store is left as it was (format 2 reconciled it; a damaged format-1 ref log now needs repair first).
    before = snapshot_tree(s.root)
    with pytest.raises(Refused, match="not an existing branch"):
        U.upgrade(s.root)
    assert snapshot_tree(s.root) == before and not os.path.exists(s.root + ".upgrade-tmp")


def test_a_second_upgrade_at_once_is_refused(f1):
    import fcntl

    fd = os.open(f1.root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        with pytest.raises(Refused, match="another upgrade"):
            U.upgrade(f1.root)
    finally:
        os.close(fd)
    assert not os.path.exists(f1.root + ".upgrade-tmp")


def test_format1_writer_during_upgrade_is_a_conflict(f1, monkeypatch):
    before = snapshot_tree(f1.root)

    def sneak(at):
        if at == "verified":
            f1.log("tags/late", None, f1.heads["a1"], T0 + 9, "late")
            f1.ref("tags/late", f1.heads["a1"])
            before.update(snapshot_tree(f1.root))

    monkeypatch.setattr(U, "_checkpoint", sneak)
    with pytest.raises(Conflict):
        U.upgrade(f1.root)
    assert snapshot_tree(f1.root) == before and not os.path.exists(f1.root + ".upgrade-tmp")


def test_cli_upgrade(f1):
    code, out, err = run_cli("runs", store=f1.root, exit_code=5)
    assert code == 5 and "upgrade" in err and len(err.strip().splitlines()) == 1
    code, out, err = run_cli("upgrade", store=f1.root, exit_code=0)
    assert code == 0, err
    assert "status=upgraded" in out
    code, out, err = run_cli("verify", store=f1.root, exit_code=0)
    assert code == 0, (out, err)


# -- format 2 -> format 3 ------------------------------------------------------------------------

FORMAT2_STORE = os.path.join(os.path.dirname(__file__), "..", "..", "fixtures", "format2-store")


def _format2_copy(tmp_path):
    """A format-2 store written by the format-2 objstore (the demo run with a fixed id and clock, and
    a run with a committed non-idempotent intent rewound past it), copied so the test may change it."""
    root = str(tmp_path / "f2")
    shutil.copytree(FORMAT2_STORE, root)
    return root


def test_a_format2_store_is_refused_until_upgraded(tmp_path):
    root = _format2_copy(tmp_path)
    with pytest.raises(StoreNeedsUpgrade, match="format 2"):
        Store.open(root)
    code, out, err = run_cli("runs", store=root, exit_code=5)
    assert err.count("\n") == 1 and "upgrade" in err


def test_format2_upgrades_to_format3_with_the_same_objects_refs_and_moves(tmp_path):
    from objstore.legacy.format2 import Format2Reader

    root = _format2_copy(tmp_path)
    old = list(Format2Reader(root).entries())
    summary = U.upgrade(root)
    assert summary["status"] == "upgraded" and summary["from"] == 2 and summary["backup"] == root + ".format2"
    assert summary["entries"] == len(old) and summary["objects"] == sum(len(e.objects) for e in old)
    s = Store.open(root)
    assert open(os.path.join(root, "OBJSTORE"), "rb").read() == b'{"format": "objstore", "version": 3}\n'
    new = list(s.engine.entries())
    assert len(new) == len(old)  # one format-3 entry per format-2 entry (the log fits one segment)
    for a, b in zip(old, new, strict=True):
        assert [o[0] for o in a.objects] == sorted([o[0] for o in b.objs], key=[o[0] for o in a.objects].index)
        assert a.moves == b.moves and a.time == b.time
        for oid, _t, canon in a.objects:
            assert s.get_raw(oid) == canon  # exactly the same bytes: the same ids
    log = RunLog(s)
    assert verify(log) == []
    assert log.view("r-two").live == 1 and [c["intent"] for c in log.fork_object(log.view("r-two"), 1)["compensation"]] == ["refund-1"]
    # the format-2 store is kept, byte for byte
    assert open(os.path.join(root + ".format2", "log", "0000000001.seg"), "rb").read() == \
        open(os.path.join(FORMAT2_STORE, "log", "0000000001.seg"), "rb").read()
    s.logs.close()
    assert U.upgrade(root)["status"] == "upgraded" and U.upgrade(root)["status"] == "already-format-6"  # then 3 -> 6


def test_a_damaged_format2_store_is_not_upgraded(tmp_path):
    root = _format2_copy(tmp_path)
    seg = os.path.join(root, "log", "0000000001.seg")
    data = bytearray(open(seg, "rb").read())
    data[len(data) // 2] ^= 0x01
    open(seg, "wb").write(bytes(data))
    before = snapshot_tree(root)
    with pytest.raises(IntegrityError):
        U.upgrade(root)
    assert snapshot_tree(root) == before and not os.path.exists(root + ".upgrade-tmp") and not os.path.exists(root + ".format2")


def test_a_store_of_a_newer_format_is_refused_not_guessed_at(tmp_path):
    from objstore.errors import NewerFormat

    root = str(tmp_path / "s")
    Store.init(root)
    with open(os.path.join(root, "OBJSTORE"), "w") as f:
        f.write('{"format": "objstore", "version": 8}\n')  # (7 is a store on object storage: one past the newest)
    before = snapshot_tree(root)
    with pytest.raises(NewerFormat, match="version 8; this objstore reads up to version 7"):
        Store.open(root)
    code, out, err = run_cli("runs", store=root, exit_code=5)
    assert err.count("\n") == 1 and "newer format" in err
    assert snapshot_tree(root) == before
