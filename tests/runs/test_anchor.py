"""Anchors: proving the log still holds a history taken earlier.

"With an anchor taken after the last commit, dropping that commit, restoring an
older copy of the active segment, or truncating away a revocation makes
``verify --anchor`` exit 1 with the lines ``anchor-mismatch <token>: <reason>``
/ ``anchor-missing <token>: log ends at entry N``."

Each of these leaves a log that is perfectly sound on its own — plain ``verify``
exits 0 — which is exactly why anchors exist: only a checksum kept elsewhere can
tell a rolled-back log from an honest one.

These are the anchors of a store whose one log holds every run (formats 3 to 5): every store here is made
so (``OBJSTORE_NEW_FORMAT=3``). A store with a log per run anchors a manifest of every log's head:
tests/runs/test_anchor_runlogs.py.
"""

import json
import os
import re
import shutil

import pytest
from helpers import run_cli, snapshot_tree

from objstore import RunLog, Store
from objstore import journal as J
from objstore.storage import identity
from objstore.storage.log import local_write

GENESIS = "objstore-anchor:1:0:" + "0" * 64
TOKEN = re.compile(r"objstore-anchor:1:(\d+):([0-9a-f]{64})")


@pytest.fixture(autouse=True)
def one_log(monkeypatch):
    monkeypatch.setenv("OBJSTORE_NEW_FORMAT", "3")


def anchor(root):
    code, out, err = run_cli("anchor", store=root, exit_code=0)
    assert (code, err) == (0, "")
    assert out.endswith("\n") and out.count("\n") == 1  # the token and nothing else
    token = out[:-1]
    assert TOKEN.fullmatch(token), token
    return token


def verify_anchor(root, token, *, exit_code):
    code, out, err = run_cli("verify", "--anchor", token, store=root, exit_code=exit_code)
    return code, out.splitlines(), err


def read_witness(root):
    with open(os.path.join(root, "log", "witness"), "rb") as f:
        return f.read()


def restore_witness(root, data):
    with open(os.path.join(root, "log", "witness"), "wb") as f:
        f.write(data)


def seg_path(log):
    e = log.store.engine
    return e.seg_path(e._seg)


@pytest.fixture
def built(tmp_path):
    root = str(tmp_path / "s")
    log = RunLog(Store.init(root))
    run = log.start_run("r1")
    log.record_attempt(run, 1, 0, "failed")
    log.record_attempt(run, 1, 1, "succeeded")
    return root, log, run


def test_anchor_token_and_json(built):
    root, log, run = built
    before = snapshot_tree(root)
    token = anchor(root)
    code, out, err = run_cli("anchor", "--json", store=root, exit_code=0)
    assert (code, err) == (0, "")
    info = json.loads(out)
    engine = RunLog(Store.open(root)).store.engine
    pos = engine.position()
    last = list(engine.entries())[-1]
    assert info == {"token": token, "version": 1, "entry": pos.entry, "segment": 1, "offset": os.path.getsize(seg_path(log)),
                    "checksum": pos.checksum.hex(), "time": last.time}
    assert token == f"objstore-anchor:1:{pos.entry}:{pos.checksum.hex()}"
    assert pos.entry == 3
    assert snapshot_tree(root) == before  # taking an anchor writes nothing


def test_empty_store_has_the_genesis_anchor(tmp_path):
    root = str(tmp_path / "s")
    Store.init(root)
    assert anchor(root) == GENESIS
    code, out, err = run_cli("anchor", "--json", store=root, exit_code=0)
    info = json.loads(out)
    assert {k: info[k] for k in ("token", "version", "entry", "checksum", "time")} == {
        "token": GENESIS, "version": 1, "entry": 0, "checksum": "0" * 64, "time": None}
    assert verify_anchor(root, GENESIS, exit_code=0)[:2] == (0, [])


@pytest.mark.slow
def test_clean_log_proves_its_anchor(built):
    root, log, run = built
    token = anchor(root)
    code, out, err = verify_anchor(root, token, exit_code=0)
    assert (code, out) == (0, [])
    assert err == "verify: ok (3 entries, 3 objects)\n"
    # Later commits keep it proven: the anchored history is a prefix.
    log.record_attempt(run, 2, 0, "failed")
    assert verify_anchor(root, token, exit_code=0)[:2] == (0, [])
    # And the genesis anchor is a prefix of every log.
    assert verify_anchor(root, GENESIS, exit_code=0)[:2] == (0, [])


def test_dropping_the_last_commit(built):
    root, log, run = built
    path = seg_path(log)
    before = os.path.getsize(path)
    wit = read_witness(root)  # the attacker rolls the head witness back too: only an anchor kept elsewhere tells
    log.record_attempt(run, 2, 0, "failed")
    token = anchor(root)
    os.truncate(path, before)
    restore_witness(root, wit)
    assert run_cli("verify", store=root, exit_code=0)[0] == 0  # sound on its own
    code, out, err = verify_anchor(root, token, exit_code=1)
    assert (code, out) == (1, [f"anchor-missing {token}: log ends at entry 3"])


@pytest.mark.parametrize("new_commits", [1, 2])
def test_restoring_an_older_copy_of_the_active_segment(built, new_commits):
    """The active segment is rolled back to an older copy, then different commits are made, so the
    log is as long again (or longer): the anchored entry exists but has another checksum."""
    root, log, run = built
    path = seg_path(log)
    older = open(path, "rb").read()
    wit = read_witness(root)  # the attacker rolls the head witness back too: only an anchor kept elsewhere tells
    log.record_attempt(run, 2, 0, "failed", error="the commit to be rolled back")
    token = anchor(root)
    n = int(TOKEN.fullmatch(token).group(1))
    with open(path, "wb") as f:
        f.write(older)
    restore_witness(root, wit)
    rl = RunLog(Store.open(root))
    for i in range(new_commits):
        rl.record_attempt(run, 2, i, "failed", error=f"a different commit {i}")
    pos = rl.store.engine.position()
    assert pos.entry == n + new_commits - 1
    entry_n = [e for e in rl.store.engine.entries() if e.n == n][0]
    assert run_cli("verify", store=root, exit_code=0)[0] == 0  # sound on its own
    code, out, err = verify_anchor(root, token, exit_code=1)
    assert code == 1
    assert out == [f"anchor-mismatch {token}: entry {n} has checksum {entry_n.checksum.hex()}: "
                   "the history before it was rewritten or rolled back"]


def test_truncating_away_a_revocation(built):
    """A writer's grant is revoked (the last commit); the log is truncated to before the revocation,
    which brings the revoked writer back. Only the anchor notices."""
    root, log, run = built
    owner, _ = identity.ensure_owner_key(log.store)
    w1 = identity.generate()
    J.grant(log, owner, run, w1.public, name="w1")
    path = seg_path(log)
    before = os.path.getsize(path)
    wit = read_witness(root)  # the attacker rolls the head witness back too: only an anchor kept elsewhere tells
    n_before = log.store.engine.position().entry
    J.revoke(log, owner, run, w1.public, reason="compromised")
    subject = log.subject(run)
    assert J.LocalJournalHost(log).grant_state(w1.public, run, subject)["action"] == "revoke"
    token = anchor(root)
    os.truncate(path, before)
    restore_witness(root, wit)
    rl = RunLog(Store.open(root))
    assert J.LocalJournalHost(rl).grant_state(w1.public, run, subject)["action"] == "grant"  # the revoked writer is back
    assert run_cli("verify", store=root, exit_code=0)[0] == 0
    code, out, err = verify_anchor(root, token, exit_code=1)
    assert (code, out) == (1, [f"anchor-missing {token}: log ends at entry {n_before}"])


def test_truncating_away_a_ref_deletion(built):
    root, log, run = built
    name = "tags/keep"
    head = log.view(run).heads[0]
    log.store.set_ref(name, None, head, "a ref to delete")
    path = seg_path(log)
    before = os.path.getsize(path)
    wit = read_witness(root)  # the attacker rolls the head witness back too: only an anchor kept elsewhere tells
    log.store.set_ref(name, head, None, "revoke")
    token = anchor(root)
    os.truncate(path, before)
    restore_witness(root, wit)
    assert RunLog(Store.open(root)).store.read_ref(name) == head
    code, out, err = verify_anchor(root, token, exit_code=1)
    assert (code, out) == (1, [f"anchor-missing {token}: log ends at entry {int(TOKEN.fullmatch(token).group(1)) - 1}"])


def test_anchor_of_another_store(built, tmp_path):
    """A store built the same way is as long, but its entries have other checksums."""
    root, log, run = built
    other = str(tmp_path / "other")
    o = RunLog(Store.init(other))
    orun = o.start_run("r1")
    o.record_attempt(orun, 1, 0, "failed")
    o.record_attempt(orun, 1, 1, "succeeded")
    token = anchor(other)
    engine = RunLog(Store.open(root)).store.engine
    mine = engine.position()
    assert mine.entry == 3
    code, out, err = verify_anchor(root, token, exit_code=1)
    assert (code, out) == (1, [f"anchor-mismatch {token}: entry 3 has checksum {mine.checksum.hex()}: "
                                "the history before it was rewritten or rolled back"])


@pytest.mark.parametrize("bad", [
    "nonsense",
    "objstore-anchor:1:3:abc",  # checksum too short
    "objstore-anchor:1:x:" + "0" * 64,
    "objstore-anchor:1:3:" + "g" * 64,  # not hex
    "objstore-anchor:2:3:" + "0" * 64,  # unknown version
])
def test_malformed_token(built, bad):
    root, log, run = built
    code, out, err = verify_anchor(root, bad, exit_code=5)
    assert (code, out) == (5, [])
    assert len(err.splitlines()) == 1 and err.startswith("objstore: error: invalid input: ") and "Traceback" not in err


def test_verify_anchor_json(built):
    root, log, run = built
    path = seg_path(log)
    before = os.path.getsize(path)
    wit = read_witness(root)  # the attacker rolls the head witness back too: only an anchor kept elsewhere tells
    log.record_attempt(run, 2, 0, "failed")
    token = anchor(root)
    os.truncate(path, before)
    restore_witness(root, wit)
    code, out, err = run_cli("verify", "--json", "--anchor", token, store=root, exit_code=1)
    assert code == 1
    assert json.loads(out) == [{"code": "anchor-missing", "subject": token, "where": "", "detail": "log ends at entry 3"}]


def test_restored_backup_of_the_whole_store(built, tmp_path):
    """A copy of the whole store taken before the anchored commit (a restored backup) is a sound
    log, shorter than the anchor."""
    root, log, run = built
    backup = str(tmp_path / "backup")
    shutil.copytree(root, backup)
    log.record_attempt(run, 2, 0, "failed")
    token = anchor(root)
    shutil.rmtree(root)
    shutil.copytree(backup, root)
    assert run_cli("verify", store=root, exit_code=0)[0] == 0
    assert verify_anchor(root, token, exit_code=1)[:2] == (1, [f"anchor-missing {token}: log ends at entry 3"])


def test_anchor_in_a_segment_sealed_since(built):
    """An anchor taken in what is now a sealed segment is still proven after the log moved on."""

    root, log, run = built
    token = anchor(root)
    mp = pytest.MonkeyPatch()
    mp.setattr(local_write, "SEAL_BYTES", 2048)
    try:
        for i in range(8):
            log.record_attempt(run, 3, i, "failed")
    finally:
        mp.undo()
    assert log.store.engine._seg >= 3
    code, out, err = run_cli("anchor", "--json", store=root, exit_code=0)
    info = json.loads(out)
    assert info["segment"] == log.store.engine._seg and info["entry"] == log.store.engine.position().entry
    assert verify_anchor(root, token, exit_code=0)[:2] == (0, [])
    assert verify_anchor(root, info["token"], exit_code=0)[:2] == (0, [])


@pytest.mark.slow
def test_a_file_of_anchors_checks_every_one(built, tmp_path):
    """``anchor --append FILE`` publishes each anchor as a line; ``verify --anchors FILE`` proves them
    all, and names the ones a rollback lost — not only the newest."""
    root, log, run = built
    published = str(tmp_path / "anchors.txt")
    path = seg_path(log)
    first = run_cli("anchor", "--append", published, store=root, exit_code=0)[1].strip()
    before, wit = os.path.getsize(path), read_witness(root)
    log.record_attempt(run, 2, 0, "failed")
    second = run_cli("anchor", "--append", published, store=root, exit_code=0)[1].strip()
    log.record_attempt(run, 3, 0, "failed")
    third = run_cli("anchor", "--append", published, store=root, exit_code=0)[1].strip()
    with open(published, "rb") as f:
        assert f.read() == f"{first}\n{second}\n{third}\n".encode()
    assert run_cli("verify", "--anchors", published, store=root, exit_code=0)[0] == 0
    os.truncate(path, before)  # roll the log back past the last two anchors
    restore_witness(root, wit)
    assert run_cli("verify", store=root, exit_code=0)[0] == 0  # sound on its own
    code, out, err = run_cli("verify", "--anchors", published, store=root, exit_code=1)
    entries = int(TOKEN.fullmatch(first).group(1))
    assert out.splitlines() == [f"anchor-missing {second}: log ends at entry {entries}",
                                f"anchor-missing {third}: log ends at entry {entries}"]


def test_a_bad_line_in_the_anchors_file_is_refused_before_reading(built, tmp_path):
    root, _log, _run = built
    published = tmp_path / "anchors.txt"
    token = anchor(root)
    published.write_text(f"# published daily\n\n{token}\nnot-a-token\n")
    code, out, err = run_cli("verify", "--anchors", str(published), store=root, exit_code=5)
    assert out == "" and err == (f"objstore: error: invalid input: {published} line 4: not an anchor token (expected "
                                 "objstore-anchor:1:<entry>:<64 hex>): 'not-a-token'\n")
    published.write_text(token)  # no final newline: the next append still starts its own line
    run_cli("anchor", "--append", str(published), store=root, exit_code=0)
    assert published.read_text() == f"{token}\n{token}\n"
    assert run_cli("verify", "--anchors", str(published), store=root, exit_code=0)[0] == 0
