"""Anchors and verify over a store with a log per run (format 6).

"``objstore anchor`` writes a manifest of the sorted (log, entry, checksum) heads into the store log and prints
a token naming that entry and the manifest's Merkle root; ``verify --anchor`` checks that every listed log still
extends its head and names each one rolled back, truncated, rewritten, removed or swapped. Without an anchor, a
run the catalog lists whose log is gone is named."

Every store here is made with a log per run whatever ``OBJSTORE_NEW_FORMAT`` says (the one-log anchor is
tests/runs/test_anchor.py's). The damage is done to files on disk, at the paths tests/helpers.py names.
"""

import json
import os
import re
import shutil

import pytest
from helpers import is_per_run, run_cli, run_log_root, store_log_root

from objstore import RunLog, Store
from objstore.runs import anchor_manifest as M
from objstore.runs.verify import verify_report
from objstore.storage.fileutil import FsyncPolicy
from objstore.storage.log.local import LogEngine
from objstore.storage.runlogs import catalog as C
from objstore.storage.runlogs.logs import RunLogs

TOKEN2 = re.compile(r"objstore-anchor:2:(\d+):([0-9a-f]{64}):([0-9a-f]{64})")


@pytest.fixture(autouse=True)
def per_run(monkeypatch):
    monkeypatch.setenv("OBJSTORE_NEW_FORMAT", "6")


def build(root, runs=("ra", "rb", "rc"), records=2):
    log = RunLog(Store.init(root))
    for run in runs:
        log.start_run(run)
        for i in range(records):
            log.record_attempt(run, i + 1, 0, "succeeded")
    assert is_per_run(root)
    return log


def anchor(root):
    code, out, err = run_cli("anchor", store=root, exit_code=0)
    token = out.strip()
    assert TOKEN2.fullmatch(token), out
    return token


def verify_lines(root, *args, exit_code):
    _code, out, err = run_cli("verify", *args, store=root, exit_code=exit_code)
    return out.splitlines(), err


def log_dir(root, run):
    return os.path.join(run_log_root(root, run), "log")


def head(root, run=None):
    path = store_log_root(root) if run is None else run_log_root(root, run)
    e = LogEngine(path, FsyncPolicy("off"))
    try:
        pos = e.refresh()
        return pos.entry, pos.checksum.hex()
    finally:
        e.close()


@pytest.fixture
def store(tmp_path):
    root = str(tmp_path / "s")
    return root, build(root)


# -- the tree and the token ---------------------------------------------------------------------------------

@pytest.mark.parametrize("n", range(1, 12))
def test_every_leaf_has_an_inclusion_proof_that_gives_the_root(n):
    hashes = [M.leaf_hash(f"run/r{i}", i + 1, bytes([i]) * 32) for i in range(n)]
    root = M.merkle_root(hashes)
    for i in range(n):
        proof = M.inclusion_proof(hashes, i)
        assert M.root_from_proof(hashes[i], i, n, proof) == root
        assert M.root_from_proof(hashes[(i + 1) % n], i, n, proof) in (None, root) if n == 1 else \
            M.root_from_proof(hashes[(i + 1) % n], i, n, proof) != root


def test_the_tree_is_rfc6962_over_blake3():
    import blake3

    a, b, c = (M.leaf_hash(*lf) for lf in [("run/a", 1, b"\1" * 32), ("run/b", 2, b"\2" * 32), ("store", 3, b"\3" * 32)])
    assert a == blake3.blake3(b"\x00run/a\x00" + (1).to_bytes(8, "big") + b"\1" * 32).digest()
    node = lambda left, right: blake3.blake3(b"\x01" + left + right).digest()  # noqa: E731
    assert M.merkle_root([a, b, c]) == node(node(a, b), c)
    assert M.merkle_root([]) == blake3.blake3(b"").digest()
    # docs/FORMAT.md "Anchor manifest": the golden vector
    assert M.merkle_root([a, b, c]).hex() == "a649cae67de1a431fa94c5f7325ed9247d0f87c0137d6dd0e583cccc3cce6510"


def test_anchor_commits_a_manifest_of_every_head(store):
    root, log = store
    heads = {f"run/{r}": head(root, r) for r in ("ra", "rb", "rc")}
    store_before = head(root)
    token = anchor(root)
    n, checksum, root_hex = TOKEN2.fullmatch(token).groups()
    s = Store.open(root)
    oid = s.read_ref(M.MANIFEST_REF)
    leaves, prev, got_root = M.read_manifest(s, oid)
    assert prev is None and got_root.hex() == root_hex
    assert [(name, e, c.hex()) for name, e, c in leaves] == sorted(
        [(k, *v) for k, v in heads.items()] + [("store", *store_before)])
    assert head(root) == (int(n), checksum)  # the token names the entry that committed it
    assert verify_lines(root, "--anchor", token, exit_code=0)[0] == []
    # a second anchor names the first
    token2 = anchor(root)
    leaves2, prev2, _ = M.read_manifest(Store.open(root), Store.open(root).read_ref(M.MANIFEST_REF))
    assert prev2 == oid and token2 != token
    assert verify_lines(root, "--anchor", token, "--anchors", "/dev/null", exit_code=0)[0] == []


def test_anchor_run_prints_its_head_and_an_inclusion_proof(store):
    root, _log = store
    token = anchor(root)
    _c, out, _e = run_cli("anchor", "--json", "rb", store=root, exit_code=0)
    p = json.loads(out)
    assert (p["run"], p["entry"], p["checksum"]) == ("rb", *head(root, "rb"))
    assert p["token"] == token
    leaf = M.leaf_hash("run/rb", p["entry"], bytes.fromhex(p["checksum"]))
    assert leaf.hex() == p["leaf"]
    assert M.root_from_proof(leaf, p["index"], p["leaves"], [bytes.fromhex(h) for h in p["proof"]]).hex() == p["root"]
    assert p["root"] == TOKEN2.fullmatch(token).group(3)
    _c, text, _e = run_cli("anchor", "rb", store=root, exit_code=0)
    assert text.splitlines()[0] == f"run rb: entry {p['entry']} checksum {p['checksum']}"
    assert text.splitlines()[-1] == token


# -- each kind of damage, one exact line ---------------------------------------------------------------------

def test_a_run_log_rolled_back_to_an_older_copy_is_named(store, tmp_path):
    root, log = store
    old = str(tmp_path / "old")
    shutil.copytree(run_log_root(root, "ra"), old)
    was = head(root, "ra")
    log.record_attempt("ra", 9, 0, "succeeded")
    now = head(root, "ra")
    token = anchor(root)
    assert verify_lines(root, exit_code=0)[0] == []
    shutil.rmtree(run_log_root(root, "ra"))
    shutil.copytree(old, run_log_root(root, "ra"))
    assert verify_lines(root, exit_code=0)[0] == []  # sound on its own: only the anchor tells
    lines, _err = verify_lines(root, "--anchor", token, exit_code=1)
    assert lines == [f"anchor-rolled-back run/ra: the log ends at entry {was[0]}, the anchor names entry {now[0]} ({now[1]}) "
                     f"[{log_dir(root, 'ra')}]"]


def test_a_truncated_run_log_is_named(store):
    root, _log = store
    token = anchor(root)
    n, checksum = head(root, "rb")
    seg = os.path.join(log_dir(root, "rb"), "0000000001.seg")
    size = os.path.getsize(seg)
    with open(seg, "r+b") as f:
        f.truncate(size - 7)  # into the last entry
    lines, err = verify_lines(root, "--anchor", token, exit_code=1)
    assert lines[0].startswith(f"corrupt-entry {seg}: entry {n} at offset ")  # the witness names it: the log's own pass sees the cut
    assert [x for x in lines if x.startswith("anchor-")] == [
        f"anchor-truncated run/rb: the log ends at entry {n - 1}, the anchor names entry {n} ({checksum}) [{log_dir(root, 'rb')}]"]


def test_a_removed_run_log_is_named(store):
    root, _log = store
    token = anchor(root)
    n, checksum = head(root, "rc")
    shutil.rmtree(run_log_root(root, "rc"))
    lines, _err = verify_lines(root, "--anchor", token, exit_code=1)
    d = run_log_root(root, "rc")
    assert lines == [f"missing-run-log rc: the catalog lists this run, its log is gone [{d}]",
                     f"anchor-removed run/rc: the log is gone; the anchor names its entry {n} ({checksum}) [{d}]"]


def test_two_swapped_run_logs_are_named(store, tmp_path):
    root, _log = store
    token = anchor(root)
    a, b = run_log_root(root, "ra"), run_log_root(root, "rb")
    ha, hb = head(root, "ra"), head(root, "rb")
    os.rename(a, str(tmp_path / "x"))
    os.rename(b, a)
    os.rename(str(tmp_path / "x"), b)
    lines, _err = verify_lines(root, "--anchor", token, exit_code=1)
    want = {
        "ra": [f"wrong-run-log ra: the log at run ra's place holds the refs of run rb [{a}/log]",
               f"anchor-swapped run/ra: the log at its place holds run rb's log, not the one anchored at entry {ha[0]} ({ha[1]}) [{a}/log]"],
        "rb": [f"wrong-run-log rb: the log at run rb's place holds the refs of run ra [{b}/log]",
               f"anchor-swapped run/rb: the log at its place holds run ra's log, not the one anchored at entry {hb[0]} ({hb[1]}) [{b}/log]"],
    }
    assert lines == [x for run in sorted(want, key=C.shard) for x in want[run]]  # runs are walked shard by shard


def test_the_store_log_rolled_back_is_named(store, tmp_path):
    root, _log = store
    old = str(tmp_path / "old")
    shutil.copytree(store_log_root(root), old)
    was = head(root)
    token = anchor(root)
    n, checksum = TOKEN2.fullmatch(token).groups()[:2]
    where = store_log_root(root)
    shutil.rmtree(where)
    shutil.copytree(old, where)
    assert verify_lines(root, exit_code=0)[0] == []
    lines, _err = verify_lines(root, "--anchor", token, exit_code=1)
    assert lines == [f"anchor-rolled-back store: the log ends at entry {was[0]}, the anchor names entry {n} ({checksum}) "
                     f"[{os.path.join(store_log_root(root), 'log')}]"]


def test_a_run_log_rewritten_with_another_history_of_the_same_length_is_named(store, tmp_path):
    root, _log = store
    token = anchor(root)
    other = str(tmp_path / "other")
    build(other, runs=("ra",), records=2)  # run ra again: the same number of entries, other records
    n, checksum = head(root, "ra")
    assert head(other, "ra")[0] == n and head(other, "ra")[1] != checksum
    shutil.rmtree(run_log_root(root, "ra"))
    shutil.copytree(run_log_root(other, "ra"), run_log_root(root, "ra"))
    lines, _err = verify_lines(root, "--anchor", token, exit_code=1)
    assert f"anchor-rewritten run/ra: entry {n} has checksum {head(other, 'ra')[1]}, the anchor names {checksum} [{log_dir(root, 'ra')}]" in lines
    assert len(lines) == 1  # a whole other history of the run, sound on its own: only the anchor tells


def test_a_manifest_token_with_another_root_is_named(store):
    root, _log = store
    token = anchor(root)
    bad = token[:-64] + "0" * 64
    lines, _err = verify_lines(root, "--anchor", bad, exit_code=1)
    got = Store.open(root)
    _leaves, _p, real = M.read_manifest(got, got.read_ref(M.MANIFEST_REF))
    n = TOKEN2.fullmatch(token).group(1)
    assert lines == [f"anchor-rewritten store: the manifest at entry {n} has root {real.hex()}, the anchor names {'0' * 64} "
                     f"[{os.path.join(store_log_root(root), 'log')}]"]


# -- the catalog against the logs, without an anchor ---------------------------------------------------------

def test_a_catalogued_run_whose_log_is_gone_is_named(store):
    root, _log = store
    shutil.rmtree(run_log_root(root, "rb"))
    lines, _err = verify_lines(root, exit_code=1)
    assert lines == [f"missing-run-log rb: the catalog lists this run, its log is gone [{run_log_root(root, 'rb')}]"]


def test_a_run_log_with_entries_and_no_catalog_entry_is_named(store):
    root, _log = store
    path = C.Catalog(os.path.join(root, "catalog"), None, None).id_path("rc")
    os.unlink(path)
    lines, _err = verify_lines(root, exit_code=1)
    n = head(root, "rc")[0]
    assert lines == [f"uncatalogued-run rc: its log holds {n} entries, the catalog has no entry for it: listings and latest miss it "
                     f"[{run_log_root(root, 'rc')}]"]


def test_a_catalog_entry_that_disagrees_with_the_run_started_record_is_named(store):
    root, _log = store
    cat = C.Catalog(os.path.join(root, "catalog"), None, None)
    e = cat.entry("ra")
    os.unlink(cat.id_path("ra"))  # (the entry's other names are links: the id file alone is replaced)
    with open(cat.id_path("ra"), "wb") as f:
        f.write(C.encode_entry(C.CatalogEntry(e.fmt, e.run, e.time_us, "someone-else", [["thread_id", "t-other"]], "rc")))
    lines, _err = verify_lines(root, exit_code=1)
    assert lines == [f"catalog-mismatch ra: the catalog entry says subject 'someone-else' (record: 'default'); "
                     f"labels [['thread_id', 't-other']] (record: None); copy_of 'rc' (record: None) [{cat.id_path('ra')}]"]


def test_an_unreadable_catalog_entry_is_named(store):
    root, _log = store
    cat = C.Catalog(os.path.join(root, "catalog"), None, None)
    os.unlink(cat.id_path("rb"))
    with open(cat.id_path("rb"), "wb") as f:
        f.write(b"\xc1 not msgpack")
    lines, _err = verify_lines(root, exit_code=1)
    assert len(lines) == 1 and lines[0].startswith("bad-catalog-entry rb: not a catalog entry (") and lines[0].endswith(f"[{cat.id_path('rb')}]")


def test_a_killed_start_run_is_a_note_not_a_failure(store):
    root, _log = store
    logs = RunLogs(root, Store.open(root).logs.policy)
    logs.run_log("rk", create=True)  # the log is made, the start killed before its catalog entry…
    logs.catalog.add(C.entry_of("rk", 1, "default", None, None))
    logs.run_log("rz", create=True)  # …and one killed after it
    logs.close()
    lines, err = verify_lines(root, exit_code=0)
    assert lines == []
    notes = [x for x in err.splitlines() if "unstarted-run" in x]
    assert notes == sorted(notes, key=lambda x: (C.shard(x.split()[2].rstrip(":")), x)) and len(notes) == 2
    assert f"note: unstarted-run rk: its log holds no entry (a start_run killed before its first commit): listings skip it [{run_log_root(root, 'rk')}]" in notes
    assert (f"note: unstarted-run rz: its log holds no entry (a start_run killed before its first commit, before its catalog entry): "
            f"listings skip it [{run_log_root(root, 'rz')}]") in notes


# -- one run's log at a time ---------------------------------------------------------------------------------

def test_verify_keeps_one_run_log_open_at_a_time(tmp_path, monkeypatch):
    root = str(tmp_path / "s")
    log = build(root, runs=tuple(f"r{i:02d}" for i in range(12)), records=1)
    log.fork_run("r03", run="copy")  # a copy's pass reads its source's log too
    log.store.logs.close()
    s = RunLog(Store.open(root))
    most = [0]
    real = RunLogs.run_log

    def counting(self, run, create=False):
        got = real(self, run, create)
        most[0] = max(most[0], len(self._runs))
        return got

    monkeypatch.setattr(RunLogs, "run_log", counting)
    closed = []
    real_close = LogEngine.close
    monkeypatch.setattr(LogEngine, "close", lambda self: (closed.append(self.root), real_close(self))[1])
    report = verify_report(s)
    assert report.problems == [] and report.logs == 14
    assert 1 <= most[0] <= 2
    assert len({d for d in closed if "/runs/" in d}) == 13  # every run's log closed once checked


def test_verify_run_reads_that_runs_log_and_the_store_log_only(store, monkeypatch):
    root, _log = store
    s = RunLog(Store.open(root))
    opened = []
    real = RunLogs.run_log
    monkeypatch.setattr(RunLogs, "run_log", lambda self, run, create=False: (opened.append(run), real(self, run, create))[1])
    listed = []
    real_ls = os.listdir
    monkeypatch.setattr(os, "listdir", lambda d=".": (listed.append(str(d)), real_ls(d))[1])
    report = verify_report(s, runs=["rb"])
    assert report.problems == [] and report.logs == 2
    assert set(opened) == {"rb"}
    runs_or_ids = (os.path.join(root, "runs"), os.path.join(root, "catalog"))
    assert not [d for d in listed if d.startswith(runs_or_ids) and not d.startswith(run_log_root(root, "rb"))]  # no run is listed


# -- what a run's log names in another log ------------------------------------------------------------------

def test_a_copy_verifies_against_its_source_and_names_a_source_gone_or_rewritten(store, tmp_path):
    root, log = store
    log.fork_run("ra", run="cp")
    log.record_attempt("cp", 7, 0, "succeeded")
    assert verify_lines(root, exit_code=0)[0] == []
    s = Store.open(root)
    first = s.get(s.logs.run_log("cp").record_at("cp", 0, 0))[1]["parent"]  # the copy's fork object
    other = str(tmp_path / "other")
    build(other, runs=("ra",), records=2)  # run ra again, other records at the same LSNs
    shutil.rmtree(run_log_root(root, "ra"))
    shutil.copytree(run_log_root(other, "ra"), run_log_root(root, "ra"))
    lines, _err = verify_lines(root, exit_code=1)
    bad = [x for x in lines if x.startswith("bad-fork ")]
    assert len(bad) == 1 and bad[0].startswith(f"bad-fork {first.hex()}: ") and bad[0].endswith("[run/cp/branch/0]")
    shutil.rmtree(run_log_root(root, "ra"))
    lines, _err = verify_lines(root, exit_code=1)
    assert lines[0] == f"missing-run-log ra: the catalog lists this run, its log is gone [{run_log_root(root, 'ra')}]" or \
        f"missing-run-log ra: the catalog lists this run, its log is gone [{run_log_root(root, 'ra')}]" in lines
    assert [x.split(" ")[0] for x in lines if not x.startswith("missing-run-log")] == ["bad-fork"]


def test_a_store_log_rolled_back_under_a_run_that_cites_it_is_named(store, tmp_path):
    root, log = store
    old = str(tmp_path / "old")
    where = store_log_root(root)
    shutil.copytree(where, old)
    log.register_kind("x.test.note", [["text", "str", True, False]])
    with log.batch():  # a run's batch that reads a store-log ref: its entry cites the store log's position
        log.append("rb", "x.test.note", {"text": "hi"})
        log.store.read_ref("schema/x.test.note")
    cite = Store.open(root).logs.run_log("rb").tables.refs.get("run/rb/cite")
    assert cite is not None and cite.startswith("store@1:")
    assert verify_lines(root, exit_code=0)[0] == []
    shutil.rmtree(where)
    shutil.copytree(old, where)
    lines, _err = verify_lines(root, exit_code=1)
    assert f"bad-cite run/rb/cite: cites store-log entry 1; the store log ends at entry 0 [{log_dir(root, 'rb')}]" in lines
