"""``objstore backup DEST`` (issue 17): an online, incremental copy that is itself a store.

On a store with a log per run (format 6) the byte checks read run r0's log (``L``), and every log of DEST is
checked against SRC's (``assert_is_snapshot``); the counts a backup reports are over every log.

Real stores in tmp_path, with segments sealed small (``engine.SEAL_BYTES`` lowered while building) so a
store of a few hundred commits has several sealed segments. Checked on the bytes: DEST's segment files
are SRC's (sealed ones whole, the active one up to the snapshot), its refs are SRC's refs at the
snapshot, ``objstore --store DEST verify --anchor TOKEN`` exits 0. Counted, not timed: the bytes an
incremental backup reads from SRC's segment files (every ``os.pread``/``os.read`` of them) and writes.
A forked child is killed with SIGKILL at each file operation of a backup, a fresh one and an
incremental one; 4 writer processes append while a backup runs; bad destinations and a full disk
write nothing.
"""

import errno
import fcntl
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

import pytest
from helpers import is_per_run, log_engine_of, run_cli, run_log_root, snapshot_tree, state_db_path

from objstore import RunLog, Store
from objstore.errors import IntegrityError, InvalidInput, LockTimeout, StorageOSError
from objstore.lifecycle.backup import backup
from objstore.runs.verify import verify
from objstore.storage.log import local_write
from objstore.storage.log.format import Position
from objstore.storage.log.local import LogEngine
from objstore.storage.storedir import RUNLOGS_VERSION, new_store_format

PER_RUN = new_store_format() == RUNLOGS_VERSION
SEAL = 2048 if PER_RUN else 4096  # a log per run holds about half of what one log did: its segments sealed smaller
HERE = os.path.dirname(__file__)


@pytest.fixture
def small_seal(monkeypatch):
    monkeypatch.setattr(local_write, "SEAL_BYTES", SEAL)


def build(root, runs=2, per=120, start=0):
    """A store with ``runs`` runs of ``per`` attempts (a prompt blob on every third), written with
    fsync off (only the backup's own durability is under test), reopened with the default policy."""
    log = RunLog(Store.open(root, fsync="off", create=True))
    for r in range(runs):
        run = f"r{r}"
        if start == 0:
            log.start_run(run)
        for i in range(start, start + per):
            prompt = log.put_blob(f"prompt {r} {i} ".encode() * 6) if i % 3 == 0 else None
            log.record_attempt(run, 1, i, "failed", prompt=prompt)
    log.store.engine.close()
    return RunLog(Store.open(root))


def L(root):
    """The directory of the log whose bytes a test reads: the store's one log, or run r0's log."""
    return run_log_root(root, "r0") if is_per_run(root) else str(root)


def log_dirs(root):
    """Every log's directory (holding ``log/``), relative to ``root``: the one log, or the store log and each run's."""
    if not is_per_run(root):
        return ["."]
    out = ["store"]
    base = os.path.join(root, "runs")
    for xx in sorted(os.listdir(base)):
        out += [os.path.join("runs", xx, r) for r in sorted(os.listdir(os.path.join(base, xx))) if not r.startswith(".")]
    return out


def segs(root):
    return sorted(f for f in os.listdir(os.path.join(L(root), "log")) if f.endswith(".seg"))


def all_segs(root):
    """Every segment of every log, as paths relative to ``root``."""
    out = []
    for d in log_dirs(root):
        ld = os.path.normpath(os.path.join(d, "log"))
        out += [os.path.join(ld, f) for f in sorted(os.listdir(os.path.join(root, ld))) if f.endswith(".seg")]
    return out


def read(path):
    with open(path, "rb") as f:
        return f.read()


def seg_bytes(root):
    return {f: read(os.path.join(L(root), "log", f)) for f in segs(root)}


def log_bytes(root, d):
    ld = os.path.join(root, d, "log")
    return {f: read(os.path.join(ld, f)) for f in sorted(os.listdir(ld)) if f.endswith(".seg")}


def position(token):
    _, _, entry, hexsum = token.split(":")
    return Position(int(entry), bytes.fromhex(hexsum))


def assert_is_snapshot(src, dest, token, check_state=True):
    """DEST holds exactly SRC's log up to the snapshot the token names: the same refs as SRC had then,
    byte-identical sealed segments, the active one a prefix ending at the snapshot, a witness for it,
    and it verifies clean against the token."""
    pos = position(token)
    s, d = Store.open(src), Store.open(dest)
    try:
        assert d.engine.position() == pos and d.engine.torn is None and d.engine.damaged is None
        assert d.engine.refs_at("") == s.engine.refs_at("", pos)
        assert d.engine.witness() == ((pos.entry, pos.checksum) if pos.entry else None)
        assert log_dirs(dest) == log_dirs(src)
        for ld in log_dirs(dest):  # each log: SRC's, sealed segments whole, the active one a prefix
            mine, theirs = log_bytes(dest, ld), log_bytes(src, ld)
            names = sorted(mine)
            assert names == sorted(theirs)[: len(names)]
            for f in names[:-1]:
                assert mine[f] == theirs[f], f"sealed segment {ld}/{f} differs"
            last = mine[names[-1]]
            assert theirs[names[-1]][: len(last)] == last
            if ld == ".":
                assert pos.entry == 0 or last[-32:] == pos.checksum
        if is_per_run(src):  # each run's log in DEST stands at an entry of SRC's, with SRC's refs there
            assert d.logs.run_ids() == [r for r in s.logs.run_ids() if r in d.logs.run_ids()]
            for run in d.logs.run_ids():
                dl, sl = d.logs.run_log(run), s.logs.run_log(run)
                dpos = dl.position()
                assert dl.torn is None and dl.damaged is None and dl.witness() == ((dpos.entry, dpos.checksum) if dpos.entry else None)
                assert dl.refs_at("") == sl.refs_at("", dpos)
        problems = verify(RunLog(d), anchor=token, jobs=1, check_state=check_state)
        assert problems == [], problems
    finally:
        s.engine.close()
        d.engine.close()


# -- a backup is a store of its snapshot ----------------------------------------------------------------------
def test_backup_is_a_store_of_the_snapshot(tmp_path, small_seal):
    src, dest = str(tmp_path / "src"), str(tmp_path / "dest")
    build(src)
    assert len(segs(src)) >= 5, "the test wants several sealed segments"
    rc, out, err = run_cli("backup", dest, store=src, exit_code=0)
    token = out.strip()
    assert token.startswith("objstore-anchor:1:") and len(out.splitlines()) == 1
    assert "backup:" in err and "file(s) copied" in err
    if PER_RUN:  # the token is the store log's head (docs/CLI.md, backup); 'objstore anchor' there commits a manifest
        head = log_engine_of(Store.open(src)).anchor()
        assert token == f"objstore-anchor:1:{head.entry}:{head.checksum.hex()}", "the token is the store log's head"
    else:
        assert run_cli("anchor", store=src, exit_code=0)[1].strip() == token, "the token is what 'objstore anchor' prints"
    run_cli("verify", "--anchor", token, store=dest, exit_code=0)
    assert_is_snapshot(src, dest, token)
    for f in segs(src)[:-1]:  # the sealed segments' indexes came along, byte for byte
        idx = f[:-4] + ".idx"
        assert read(os.path.join(L(dest), "log", idx)) == read(os.path.join(L(src), "log", idx))
    assert not os.path.exists(os.path.join(dest, "state.db")), "the state cache is derived: not copied"
    # Nothing new: everything is kept, nothing copied, the same anchor.
    rc, out, err = run_cli("backup", dest, "--json", store=src, exit_code=0)
    got = json.loads(out)
    assert got == {"entries": position(token).entry, "anchor": token, "copied": 0, "reused": len(all_segs(src)), "removed": 0,
                   "bytes_copied": 0, "recopied": [], "logs": len(log_dirs(src))}


def test_empty_store_backs_up(tmp_path):
    src, dest = str(tmp_path / "src"), str(tmp_path / "dest")
    Store.init(src)
    os.mkdir(dest)  # an empty directory is a fine destination
    r = backup(Store.open(src), dest)
    assert r.entries == 0 and r.anchor == "objstore-anchor:1:0:" + "0" * 64
    assert_is_snapshot(src, dest, r.anchor)


# -- incremental ----------------------------------------------------------------------------------------------
class ReadSpy:
    """Every os.pread/os.preadv/os.read of a segment file of any of SRC's logs (``<log>/log/*.seg``, named by
    its path relative to SRC) and every os.write to one of DEST's or to a copy in DEST's tmp (paths from
    /proc/self/fd): the lowest layer every copy goes through."""

    def __init__(self, monkeypatch, src, dest):
        self.reads, self.written = [], 0
        srcroot, destroot = os.path.realpath(src) + os.sep, os.path.realpath(dest) + os.sep
        real_pread, real_preadv, real_read, real_write = os.pread, os.preadv, os.read, os.write

        def path_of(fd):
            try:
                return os.readlink(f"/proc/self/fd/{fd}")
            except OSError:
                return ""

        def seg_of(p):
            if p.startswith(srcroot) and p.endswith(".seg") and os.path.basename(os.path.dirname(p)) == "log":
                return p[len(srcroot):]
            return None

        def pread(fd, n, off):
            data = real_pread(fd, n, off)
            f = seg_of(path_of(fd))
            if f is not None:
                self.reads.append((f, off, len(data)))
            return data

        def preadv(fd, bufs, off):
            n = real_preadv(fd, bufs, off)
            f = seg_of(path_of(fd))
            if f is not None:
                self.reads.append((f, off, n))
            return n

        def read_(fd, n):
            f = seg_of(path_of(fd))
            data = real_read(fd, n)
            if f is not None:
                self.reads.append((f, -1, len(data)))
            return data

        def write(fd, data):
            n = real_write(fd, data)
            p = path_of(fd)
            if p.startswith(destroot) and (p.endswith(".seg") and "/log/" in p or "/backup.seg" in p):
                self.written += n
            return n

        monkeypatch.setattr(os, "pread", pread)
        monkeypatch.setattr(os, "preadv", preadv)
        monkeypatch.setattr(os, "read", read_)
        monkeypatch.setattr(os, "write", write)


PROBE = 128  # a look at a header, a magic or a last checksum; copying reads 4 MiB chunks of new bytes only


def test_incremental_copies_only_the_new_bytes(tmp_path, small_seal, monkeypatch):
    src, dest = str(tmp_path / "src"), str(tmp_path / "dest")
    build(src, runs=2, per=150)
    backup(Store.open(src), dest)
    before = {f: os.stat(os.path.join(dest, f)) for f in all_segs(dest)}  # every log's segments (relative paths)
    log = build(src, runs=2, per=3, start=150)  # 2 % more records
    log.store.engine.close()
    src_len = {f: len(read(os.path.join(src, f))) for f in all_segs(src)}
    new_bytes = sum(src_len.values()) - sum(s.st_size for s in before.values())
    assert new_bytes > 0
    store = Store.open(src)  # opening replays the entries after SRC's checkpoint: not the backup's reading
    for run in store.logs.run_ids():  # nor opening a run's log (a store of logs opens one when asked)
        store.logs.run_log(run).refresh()
    spy = ReadSpy(monkeypatch, src, dest)
    r = backup(store, dest)
    monkeypatch.undo()
    assert r.bytes_copied == new_bytes == spy.written
    sealed_before = [f for f in sorted(before) if src_len[f] == before[f].st_size]  # each log's sealed ones (an unchanged log: all)
    assert len(sealed_before) >= len(before) - len(log_dirs(src))
    assert r.reused == len(sealed_before), "every segment sealed at the first backup is kept"
    for f in sealed_before:  # kept: the same file, not rewritten
        st = os.stat(os.path.join(dest, f))
        assert (st.st_ino, st.st_size, st.st_mtime_ns) == (before[f].st_ino, before[f].st_size, before[f].st_mtime_ns)
    big = [(f, off, n) for f, off, n in spy.reads if n > PROBE]
    for f, off, n in big:  # every real read of SRC is of bytes DEST did not have
        old = before[f].st_size if f in before else 0
        assert off >= old and off + n <= src_len[f], (f, off, n, old)
    probes = [x for x in spy.reads if x[2] <= PROBE]
    assert sum(n for _f, _o, n in big) == new_bytes
    assert sum(n for _f, _o, n in probes) <= PROBE * 3 * len(src_len)
    assert_is_snapshot(src, dest, r.anchor)


# -- a segment that differs is replaced; one SRC no longer has is removed ------------------------------------
def test_a_dest_segment_that_differs_is_copied_again(tmp_path, small_seal):
    src, dest = str(tmp_path / "src"), str(tmp_path / "dest")
    build(src)
    first = backup(Store.open(src), dest)
    names = segs(src)
    # (a) what gc does: the same entries in another layout, ending with the same checksum (here: bytes
    # added in the middle of DEST's copy change its size, not its last 32 bytes). Only it is copied.
    p2 = os.path.join(L(dest), "log", names[1])
    data = read(p2)
    with open(p2, "wb") as f:
        f.write(data[:100] + b"\0" * 7 + data[100:])
    r = backup(Store.open(src), dest)
    assert (r.copied, r.bytes_copied, r.removed) == (3, len(data), 1)  # the segment, its index, SRC's checkpoint for DEST's
    others = len(all_segs(src)) - len(names)  # the segments of the other logs (a store of logs), kept
    assert r.reused == others + len(names) - 1
    assert read(p2) == data
    assert_is_snapshot(src, dest, r.anchor)
    assert r.anchor == first.anchor
    # (b) a DEST segment that does not end with SRC's checksum (damaged, or another history after it): it
    # is replaced, and every later DEST segment is removed first, then copied again.
    p3 = os.path.join(L(dest), "log", names[2])
    with open(p3, "ab") as f:
        f.write(b"garbage")
    r = backup(Store.open(src), dest)
    later = len(names) - 3
    assert r.reused == others + 2 and r.removed == 2 * later, r  # each later segment, its index but the active one's, DEST's checkpoint
    assert_is_snapshot(src, dest, r.anchor)
    # (c) a DEST segment beyond SRC's last is removed.
    extra = os.path.join(L(dest), "log", f"{len(names) + 1:010d}.seg")
    shutil.copyfile(os.path.join(L(dest), "log", names[-1]), extra)
    r = backup(Store.open(src), dest)
    assert r.removed == 2 and not os.path.exists(extra)  # it, and DEST's checkpoint (SRC's is copied again)
    assert_is_snapshot(src, dest, r.anchor)


def test_what_is_written_after_the_snapshot_is_not_copied(tmp_path, small_seal, monkeypatch):
    """A commit lands right after the backup took the log's tail (deterministically: inside tail()):
    DEST ends at the snapshot, byte for byte, and the next backup takes the commit."""
    src, dest = str(tmp_path / "src"), str(tmp_path / "dest")
    build(src, runs=1, per=30)
    writer = RunLog(Store.open(src))
    real_tail = LogEngine.tail

    def tail_then_commit(self):
        got = real_tail(self)
        if os.path.realpath(self.root) == os.path.realpath(L(src)):  # r0's log (a store of logs: not the store log's tail)
            writer.record_attempt("r0", 1, 999, "failed")  # another handle on SRC: a writer of another process
        return got

    def r0_entries(root):
        return log_engine_of(Store.open(root), "r0").refresh().entry

    monkeypatch.setattr(LogEngine, "tail", tail_then_commit)
    r = backup(Store.open(src), dest)
    monkeypatch.setattr(LogEngine, "tail", real_tail)
    assert r0_entries(src) == r0_entries(dest) + 1
    assert_is_snapshot(src, dest, r.anchor)
    r2 = backup(Store.open(src), dest)
    assert r0_entries(src) == r0_entries(dest)
    assert r2.entries == r.entries + (0 if PER_RUN else 1)  # the token: the store log's (a store of logs: r0's commit is not in it)
    assert_is_snapshot(src, dest, r2.anchor)


# -- online: 4 writer processes keep appending ---------------------------------------------------------------
@pytest.mark.slow
def test_backup_while_four_writers_append(tmp_path):
    src, dest, stop = str(tmp_path / "src"), str(tmp_path / "dest"), str(tmp_path / "stop")
    Store.init(src).engine.close()
    env = dict(os.environ, OBJSTORE_TEST_SEAL_BYTES=str(SEAL), PYTHONPATH=os.pathsep.join([HERE] + sys.path))
    procs = [subprocess.Popen([sys.executable, os.path.join(HERE, "backup_writer.py"), src, f"w{i}", stop],
                              stdout=subprocess.PIPE, text=True, env=env) for i in range(4)]
    try:
        for p in procs:
            assert p.stdout.readline().strip() == "ready"
        results = []
        for rep in range(2):  # a full backup, then an incremental one, both while the writers write
            s = Store.open(src)
            results.append(backup(s, dest))
            snap = entries_of(dest)
            while entries_of(src) < snap + 8:  # the writers went on past the snapshot
                time.sleep(0.01)
            s.engine.close()
            assert_is_snapshot(src, dest, results[-1].anchor)
            if rep == 0:  # gc packs every sealed segment (writers still writing): the next backup replaces them
                run_cli("gc", store=src, exit_code=0)
    finally:
        open(stop, "w").close()
        counts = [int(p.communicate(timeout=120)[0].split()[-1]) for p in procs]
    assert verify(RunLog(Store.open(dest)), anchor=results[0].anchor, jobs=1) == [], "the first backup's anchor still holds"
    s = Store.open(src)
    for i, n in enumerate(counts):  # every acknowledged commit is in SRC: run_started, then n attempts
        assert [lsn for lsn, _ in log_engine_of(s, f"w{i}").iter_chain(f"w{i}", 0)] == list(range(n + 1))
    assert len(all_segs(src)) > 3


def entries_of(root):
    """Entries of every log of the store at ``root`` (a store of one log: its entries)."""
    s = Store.open(root)
    try:
        return sum(engine.refresh().entry for _run, engine in s.logs.all_logs())
    finally:
        s.logs.close()


# -- kill -9 at every file operation ---------------------------------------------------------------------------
OPS = ("open", "write", "pwrite", "rename", "replace", "fsync", "fdatasync", "unlink", "ftruncate", "mkdir", "link", "rmdir")
# What a kill -9 can leave different from a kill at the operation before: the files' contents and names
# (fsync only matters to a power loss; a read-only open changes nothing).
CHANGES = {"write", "pwrite", "rename", "replace", "unlink", "ftruncate", "mkdir", "link", "rmdir", "open-create"}


def _op_kind(name, a, kw):
    flags = a[1] if len(a) > 1 else kw.get("flags", 0)
    return "open-create" if name == "open" and flags & (os.O_CREAT | os.O_TRUNC) else name


def backup_killed_at(k, src, dest, trace=None):
    """Run a backup in a forked child that SIGKILLs itself at its k-th file operation; True if it
    finished first. With ``trace`` (a path), the child writes there the kind of each of its file
    operations, in order."""
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        try:
            count = [0]
            kinds = []
            for name in OPS:
                real = getattr(os, name)

                def op(*a, _real=real, _name=name, **kw):
                    count[0] += 1
                    if count[0] == k:
                        os.kill(os.getpid(), signal.SIGKILL)
                    kinds.append(_op_kind(_name, a, kw))
                    return _real(*a, **kw)

                setattr(os, name, op)
            backup(Store.open(src), dest)
            if trace is not None:
                with open(trace, "w") as f:  # io's open: not one of the counted os calls
                    json.dump(kinds, f)
        except BaseException:
            os._exit(3)
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    if os.WIFEXITED(status):
        assert os.WEXITSTATUS(status) == 0, "the backup failed instead of finishing or being killed"
        return True
    assert os.WTERMSIG(status) == signal.SIGKILL
    return False


def check_after_kill(src, dest, older, token, packed_tail_reader_bug=False):
    """DEST after a kill: absent (killed before it first appeared) or a store that verifies clean,
    holding the older snapshot or more of the new one; a re-run finishes and verifies.

    A kill between landing a packed segment and the next one leaves DEST's last segment packed: a
    reader opening it then writes no checkpoint (there is no offset in a packed segment to name),
    so even that DEST verifies clean (``packed_tail_reader_bug`` is kept for callers; it lets
    nothing through any more)."""
    if os.path.exists(os.path.join(dest, "OBJSTORE")):
        # a store of logs: killed before run r0's log was made in DEST, it has none yet
        packed_tail = os.path.isdir(os.path.join(L(dest), "log")) and read(os.path.join(L(dest), "log", segs(dest)[-1]))[:4] == b"OSPK"
        d = Store.open(dest)
        try:
            problems = verify(RunLog(d), anchor=older, jobs=1, check_state=False)  # the log, not the cache
            assert problems == [], (problems, "packed tail" if packed_tail else "")
            assert d.engine.position().entry <= position(token).entry
        finally:
            d.engine.close()
    else:
        assert not os.path.exists(dest) or not os.listdir(dest)
    r = backup(Store.open(src), dest)
    assert r.anchor == token
    assert_is_snapshot(src, dest, token, check_state=False)


def kill_loop(tmp_path, pack):
    src, dest, base = str(tmp_path / "src"), str(tmp_path / "dest"), str(tmp_path / "older")
    build(src, runs=2 if pack else 1, per=12)  # r1: the run deleted below
    genesis = "objstore-anchor:1:0:" + "0" * 64
    older = backup(Store.open(src), base).anchor
    build(src, runs=1, per=6, start=12)  # the older backup's active segment grows and is sealed, new ones follow
    if pack:
        from objstore.lifecycle.delete import delete_run
        from objstore.lifecycle.gc import gc

        # A deletion in a later segment than the bodies it covers, then gc: every sealed segment packed
        # (the incremental backup replaces the older copies), the deleted run's bodies left out. A
        # packed segment must never be in DEST without the deletion (and the rewrite entry) justifying
        # what it lacks (issue 13, item 8).
        log = build(src, runs=1, per=8, start=18)
        delete_run(log, "r1", reason="a deletion request")
        log.store.engine.close()
        gc(Store.open(src))
    token = Store.open(src).engine.anchor()
    token = f"objstore-anchor:1:{token.entry}:{token.checksum.hex()}"
    assert len(segs(src)) > len(segs(base)) >= 3
    trace = str(tmp_path / "ops.json")
    for fresh in (True, False):
        # One backup run to its end, its file operations listed; then one killed at each operation that
        # can leave DEST different from a kill at the one before (the first after each change to a
        # file or a name) and at the first of each kind: a kill anywhere else leaves the same files.
        shutil.rmtree(dest, ignore_errors=True)
        if not fresh:
            shutil.copytree(base, dest)
        digests = os.path.join(src, "tmp", "backup-digests")  # derived: every run below starts without them, so
        shutil.rmtree(digests, ignore_errors=True)  # each makes the same file operations as the one traced
        assert backup_killed_at(0, src, dest, trace)
        assert_is_snapshot(src, dest, token, check_state=False)
        with open(trace) as f:
            kinds = json.load(f)
        os.unlink(trace)
        points = {1} | {i + 2 for i, kind in enumerate(kinds[:-1]) if kind in CHANGES}
        points |= {kinds.index(kind) + 1 for kind in set(kinds)}
        assert set(kinds) >= {"open", "open-create", "write", "fsync", "rename"}, set(kinds)
        for k in sorted(points):
            shutil.rmtree(dest, ignore_errors=True)
            shutil.rmtree(digests, ignore_errors=True)
            if not fresh:
                shutil.copytree(base, dest)
            if backup_killed_at(k, src, dest):
                assert k > len(kinds) - 5, f"the backup finished before its operation {k} of {len(kinds)}"
            check_after_kill(src, dest, genesis if fresh else older, token, packed_tail_reader_bug=pack)
        assert len(kinds) > 20, f"only {len(kinds)} file operations: the child did not count them"
        print(f"{'fresh' if fresh else 'incremental'} backup{' of a packed store' if pack else ''}: {len(kinds)} file operations "
              f"({', '.join(sorted(set(kinds)))}), killed at the {len(points)} that can leave DEST different")
    assert sorted(os.listdir(tmp_path)) == ["dest", "older", "src"], "a killed backup's staging directory was left behind"
    log = RunLog(Store.open(src))  # the killed backups left SRC as every writer finds it
    log.record_attempt("r0", 2, 0, "failed")
    assert verify(log, jobs=1) == []


@pytest.mark.slow
def test_kill_9_at_every_file_operation(in_memory_dir, monkeypatch):
    monkeypatch.setattr(local_write, "SEAL_BYTES", 2048)
    kill_loop(in_memory_dir, pack=False)


@pytest.mark.slow
def test_kill_9_at_every_file_operation_after_gc_packed_the_store(in_memory_dir, monkeypatch):
    monkeypatch.setattr(local_write, "SEAL_BYTES", 2048)
    kill_loop(in_memory_dir, pack=True)


# -- bad input writes nothing --------------------------------------------------------------------------------
@pytest.mark.slow
def test_bad_destinations_are_refused_and_nothing_is_written(tmp_path, small_seal):
    src = str(tmp_path / "src")
    build(src, runs=1, per=40)
    src_log = seg_bytes(src)
    other = str(tmp_path / "other")
    build(other, runs=1, per=5)
    bare = str(tmp_path / "bare")  # another history without a witness: only its first entry tells
    build(bare, runs=1, per=60)
    os.unlink(os.path.join(L(bare), "log", "witness"))
    afile = tmp_path / "afile"
    afile.write_bytes(b"not a store")
    full = tmp_path / "full"
    full.mkdir()
    (full / "notes.txt").write_text("mine")
    cases = [(str(afile), "exists and is not a directory"),
             (str(full), "non-empty directory that is not an objstore store"),
             (other, "store of another history"),
             (bare, "store of another history (its catalog entry" if PER_RUN else "store of another history (its first entry"),
             (str(tmp_path / "no" / "such"), "parent directory"),
             (os.path.join(src, "tmp", "inside"), "the store itself, inside it"),
             (src, "the store itself")]
    for dest, why in cases:
        before = snapshot_tree(str(tmp_path))
        with pytest.raises(InvalidInput, match=re.escape(why)):
            backup(Store.open(src), dest)
        rc, out, err = run_cli("backup", dest, store=src, exit_code=5)
        assert err.count("\n") == 1 and why in err and "Traceback" not in err
        after = snapshot_tree(str(tmp_path))
        after.pop(os.path.join("src", "gc.lock"), None)
        before.pop(os.path.join("src", "gc.lock"), None)
        assert after == before, f"{dest}: something was written"
    assert seg_bytes(src) == src_log


def test_a_backup_is_never_rolled_back(tmp_path, small_seal):
    src, dest = str(tmp_path / "src"), str(tmp_path / "dest")
    build(src, runs=1, per=30)
    older = str(tmp_path / "older")
    shutil.copytree(src, older)
    build(src, runs=1, per=10, start=30)
    backup(Store.open(src), dest)
    before = snapshot_tree(dest)
    with pytest.raises(InvalidInput, match="beyond this store's head"):
        backup(Store.open(older), dest)  # the store restored from an older copy: DEST is ahead of it
    assert snapshot_tree(dest) == before


def test_a_backup_of_a_history_that_forked_later_is_refused(tmp_path, small_seal):
    """DEST shares SRC's first entries but then holds commits SRC does not have (a copy of the store
    that went its own way): refused, nothing written, although its first entry is SRC's."""
    src, other, dest = str(tmp_path / "src"), str(tmp_path / "other"), str(tmp_path / "dest")
    build(src, runs=1, per=40)
    shutil.copytree(src, other)
    build(other, runs=1, per=20, start=40)
    build(src, runs=1, per=80, start=40)  # longer than the other: DEST's witness is not beyond SRC's head
    backup(Store.open(other), dest)
    before = snapshot_tree(dest)
    with pytest.raises(InvalidInput, match="another history"):
        backup(Store.open(src), dest)
    run_cli("backup", dest, store=src, exit_code=5)
    assert snapshot_tree(dest) == before
    from objstore.lifecycle.gc import gc

    gc(Store.open(src))  # SRC packed (a format-4 store): its entries are read from packed metas; DEST's marker stays
    with pytest.raises(InvalidInput, match="another history"):
        backup(Store.open(src), dest)
    assert snapshot_tree(dest) == before


def test_a_history_that_forked_inside_the_active_segment_is_refused(tmp_path):
    """The same, with one segment (nothing sealed): DEST's last segment is not a prefix of SRC's, and
    its witness names an entry SRC does not have."""
    src, other, dest = str(tmp_path / "src"), str(tmp_path / "other"), str(tmp_path / "dest")
    build(src, runs=1, per=10)
    shutil.copytree(src, other)
    build(other, runs=1, per=3, start=10)
    build(src, runs=1, per=6, start=10)
    assert len(segs(src)) == 1
    backup(Store.open(other), dest)
    before = snapshot_tree(dest)
    with pytest.raises(InvalidInput, match="another history"):
        backup(Store.open(src), dest)
    assert snapshot_tree(dest) == before


def test_a_locked_dest_is_refused(tmp_path):
    src, dest = str(tmp_path / "src"), str(tmp_path / "dest")
    build(src, runs=1, per=5)
    backup(Store.open(src), dest)
    fd = os.open(os.path.join(L(dest), "lock"), os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # a writer of DEST (or another backup into it)
        before = snapshot_tree(dest)
        with pytest.raises(LockTimeout):
            backup(Store.open(src), dest)
        assert snapshot_tree(dest) == before
    finally:
        os.close(fd)


def enospc_at(monkeypatch, k):
    """The disk fills at the k-th os.write: it writes half its bytes, every later one fails with ENOSPC."""
    real = os.write
    count = [0]

    def write(fd, data):
        count[0] += 1
        if count[0] == k and len(data) > 1:
            return real(fd, bytes(data[: len(data) // 2]))
        if count[0] >= k:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(fd, data)

    monkeypatch.setattr(os, "write", write)


def test_full_disk_leaves_dest_as_it_was(tmp_path, small_seal, monkeypatch):
    src, dest = str(tmp_path / "src"), str(tmp_path / "dest")
    build(src, runs=1, per=40)
    src_log = seg_bytes(src)
    # A fresh DEST: nothing appears, not even the staging directory.
    enospc_at(monkeypatch, 1)
    with pytest.raises(StorageOSError, match="No space left on device"):
        backup(Store.open(src), dest)
    monkeypatch.undo()
    monkeypatch.setattr(local_write, "SEAL_BYTES", SEAL)
    assert sorted(os.listdir(tmp_path)) == ["keys", "src"] or sorted(os.listdir(tmp_path)) == ["src"]
    assert seg_bytes(src) == src_log
    # The disk fills in the middle of a first backup: DEST is a store of a shorter snapshot.
    enospc_at(monkeypatch, 8)
    with pytest.raises(StorageOSError):
        backup(Store.open(src), dest)
    monkeypatch.undo()
    monkeypatch.setattr(local_write, "SEAL_BYTES", SEAL)
    assert verify(RunLog(Store.open(dest)), jobs=1) == []
    assert not [f for f in os.listdir(os.path.join(dest, "tmp")) if f.startswith("backup.")]
    r = backup(Store.open(src), dest)
    assert_is_snapshot(src, dest, r.anchor)
    # An incremental backup on a full disk: DEST stays byte for byte what it was.
    build(src, runs=1, per=5, start=40)
    before = snapshot_tree(dest)
    enospc_at(monkeypatch, 1)
    with pytest.raises(StorageOSError):
        backup(Store.open(src), dest)
    monkeypatch.undo()
    assert snapshot_tree(dest) == before
    r = backup(Store.open(src), dest)
    assert_is_snapshot(src, dest, r.anchor)


def test_unwritable_dest(tmp_path, monkeypatch):
    src, dest = str(tmp_path / "src"), str(tmp_path / "dest")
    build(src, runs=1, per=5)
    backup(Store.open(src), dest)
    build(src, runs=1, per=5, start=5)
    before = snapshot_tree(dest)
    if os.geteuid() != 0:
        os.chmod(os.path.join(L(dest), "log"), 0o500)
        os.chmod(os.path.join(dest, "tmp"), 0o500)
        for f in segs(dest):
            os.chmod(os.path.join(L(dest), "log", f), 0o400)
    else:  # root writes through modes: refuse every write-open under DEST instead
        real = os.open
        destreal = os.path.realpath(dest)

        def deny(path, flags, *a, **kw):
            if os.path.realpath(str(path)).startswith(destreal + os.sep) and flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT) \
                    and not str(path).endswith(os.sep + "lock"):
                raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(path))
            return real(path, flags, *a, **kw)

        monkeypatch.setattr(os, "open", deny)
    try:
        with pytest.raises(StorageOSError, match="Permission denied"):
            backup(Store.open(src), dest)
    finally:
        monkeypatch.undo()
        os.chmod(os.path.join(L(dest), "log"), 0o755)
        os.chmod(os.path.join(dest, "tmp"), 0o755)
        for f in segs(dest):
            os.chmod(os.path.join(L(dest), "log", f), 0o644)
    assert snapshot_tree(dest) == before
    r = backup(Store.open(src), dest)
    assert_is_snapshot(src, dest, r.anchor)


def test_copied_bytes_are_read_back(tmp_path, small_seal, monkeypatch):
    """A copy whose bytes on DEST are not the bytes read from SRC is caught before it is renamed into
    place (a flipped bit on the way to the disk, simulated in os.write)."""
    src, dest = str(tmp_path / "src"), str(tmp_path / "dest")
    build(src, runs=1, per=40)
    real = os.write

    def flip(fd, data):
        if "/backup.seg" in os.readlink(f"/proc/self/fd/{fd}") and len(data) > 200:
            data = bytes(data[:150]) + bytes([data[150] ^ 1]) + bytes(data[151:])
        return real(fd, data)

    monkeypatch.setattr(os, "write", flip)
    with pytest.raises(IntegrityError, match="read back"):
        backup(Store.open(src), dest)
    monkeypatch.undo()
    monkeypatch.setattr(local_write, "SEAL_BYTES", SEAL)
    assert verify(RunLog(Store.open(dest)), jobs=1) == []


def test_segments_gc_rewrote_replace_their_copies(tmp_path, small_seal):
    """After ``objstore gc`` packed SRC's sealed segments (same entries, another layout, ending with the
    same checksums), the next backup replaces DEST's old copies by the packed files; the anchor of the
    backup before gc still verifies in DEST; a third backup (DEST's first segment now packed) keeps
    everything."""
    from objstore.lifecycle.gc import gc

    src, dest = str(tmp_path / "src"), str(tmp_path / "dest")
    build(src, runs=2, per=60)
    # with a log per run the backup's token is the store log's: an anchor manifest names every log's head too
    anchored = [run_cli("anchor", store=src, exit_code=0)[1].strip()] if PER_RUN else []
    before = backup(Store.open(src), dest)
    sealed = segs(src)[:-1]
    gc(Store.open(src))
    assert all(read(os.path.join(L(src), "log", f))[:4] == b"OSPK" for f in sealed), "gc packed every sealed segment"
    build(src, runs=2, per=2, start=60)
    r = backup(Store.open(src), dest)
    # DEST's checkpoint of each log gc packed (it pointed into a segment now packed): the one log, or r0's and r1's;
    # nothing is kept as it was (the store log's one segment is appended to: the manifest, gc's entries)
    assert r.removed == (2 if PER_RUN else 1) and r.reused == 0
    assert_is_snapshot(src, dest, r.anchor)
    assert verify(RunLog(Store.open(dest)), anchors=[before.anchor, *anchored], jobs=1) == []
    again = backup(Store.open(src), dest)
    assert (again.copied, again.bytes_copied, again.reused) == (0, 0, len(all_segs(src)))


def test_a_backup_refreshed_after_delete_and_gc_holds_no_deleted_body(tmp_path, small_seal):
    """A secret in a blob of a run that is deleted: the backup before holds it; after delete + gc, the
    refreshed backup holds it in no file (raw bytes, and every object read from its segments), while the
    other run reads back byte for byte and the anchor taken before the deletion still verifies."""
    from helpers import raw_objects

    from objstore.lifecycle.delete import delete_run
    from objstore.lifecycle.gc import gc

    src, dest = str(tmp_path / "src"), str(tmp_path / "dest")
    secret, in_record = os.urandom(32), os.urandom(32).hex()
    log = build(src, runs=2, per=30)
    log.record_attempt("r0", 1, 99, "failed", prompt=log.put_blob(b"key=" + secret), error="leaked " + in_record)
    build(src, runs=2, per=30, start=100)  # the secret's segment is sealed
    kept = {oid: data for oid, _t, data in raw_objects(Store.open(src)) if b"prompt 1 " in bytes(data)}
    assert kept
    before = backup(Store.open(src), dest)

    def everywhere(root, what):
        found = [p for p, data in snapshot_tree(root).items() if what in data]
        d = Store.open(root)
        found += [oid.hex() for oid, _t, data in raw_objects(d) if isinstance(data, bytes) and what in data]
        d.engine.close()
        return found

    assert everywhere(dest, secret) and everywhere(dest, in_record.encode()), "the test wants both secrets in the first backup"
    run_cli("rebuild", store=dest, exit_code=0)  # DEST's own state cache, as a reader of it would make
    caches = [state_db_path(dest, run) for run in ("r0", "r1")]  # the one cache, or each run's beside its log
    assert all(os.path.exists(p) for p in caches)
    log = RunLog(Store.open(src))
    delete_run(log, "r0", reason="a deletion request")
    gc(Store.open(src))
    r = backup(Store.open(src), dest)
    assert everywhere(dest, secret) == [] and everywhere(dest, in_record.encode()) == []
    assert not any(os.path.exists(p) for p in caches), "DEST's cache of the replaced segments is dropped"
    assert_is_snapshot(src, dest, r.anchor)
    assert verify(RunLog(Store.open(dest)), anchor=before.anchor, jobs=1) == []
    d = Store.open(dest)
    assert {oid: d.get_raw(oid) for oid in kept} == kept


def test_a_packed_segment_gc_wrote_again_is_copied_again_even_at_the_same_size(tmp_path, small_seal):
    """A packed segment gc packs again for a new deletion ends with the same checksum, and could by chance
    keep its size: the reuse rule (size, magic, last 32 bytes) alone would keep DEST's old copy, with the
    removed body in it. A SRC packed file newer than DEST's copy is copied again. Simulated here by giving
    SRC's packed file a newer mtime with the same bytes: it is copied, the others are reused."""
    from objstore.lifecycle.gc import gc

    src, dest = str(tmp_path / "src"), str(tmp_path / "dest")
    build(src, runs=2, per=60)
    gc(Store.open(src))
    backup(Store.open(src), dest)
    again = backup(Store.open(src), dest)
    assert again.copied == 0
    p = os.path.join(L(src), "log", segs(src)[0])
    st = os.stat(p)
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns + 10**10))
    r = backup(Store.open(src), dest)
    assert r.copied >= 1 and r.reused == len(all_segs(src)) - 1, r  # every segment of every log but that one
    assert_is_snapshot(src, dest, r.anchor)
