"""The T-745 command line: keys, grants, journal versions, compaction, segments, sessions, tasks, and
the Backend Host (`journal-serve`) as its own process. Every command runs as the real CLI in a
subprocess; every failure is one line on stderr with its documented exit code.

conftest.py points OBJSTORE_KEYS at this test's tmp_path/keys; the subprocesses inherit it.
"""

import json
import os
import stat
import subprocess
import sys
import time

import pytest
from cryptography.hazmat.primitives import serialization
from helpers import raw_objects, run_cli

from objstore import Store
from objstore.journal.backend import BackendHost
from objstore.storage import identity


def ok(result):
    rc, out, err = result
    assert rc == 0, (rc, out, err)
    assert "Traceback" not in err
    return out


def ok_json(result):
    return json.loads(ok(result))


def fails(result, code, line):
    """Exit ``code`` and exactly one stderr line, ``objstore: error: <line>``."""
    rc, out, err = result
    assert rc == code, (rc, out, err)
    assert "Traceback" not in err and "Traceback" not in out
    assert err.splitlines() == [f"objstore: error: {line}"], err


def turns(run, n, prefix="turn"):
    return "".join(json.dumps({"v": 1, "type": "turn", "run": run, "role": "user" if i % 2 == 0 else "model",
                               "content": f"{prefix} {i}"}) + "\n" for i in range(n)).encode()


@pytest.fixture
def sess(tmp_path):
    """An initialised store with one session of subject alice holding six turns."""
    root = str(tmp_path / "s")
    ok(run_cli("init", store=root, exit_code=0))
    run = ok_json(run_cli("session", "start", "--subject", "alice", "--json", store=root, exit_code=0))["run"]
    ok(run_cli("ingest", "-", store=root, input=turns(run, 6), exit_code=0))
    return root, run, tmp_path


def new_key(tmp_path, name, root):
    path = str(tmp_path / name)
    public = ok(run_cli("key", "new", path, store=root, exit_code=0)).strip()
    assert public == identity.load_public(path + ".pub") and len(public) == 64
    return path, public


# -- init and the owner key ------------------------------------------------------------------------
def test_init_creates_owner_key_outside_the_store(tmp_path):
    root = str(tmp_path / "s")
    keyfile = str(tmp_path / "keys" / "owner.key")
    out = ok(run_cli("init", store=root, exit_code=0))
    assert os.path.isfile(keyfile) and stat.S_IMODE(os.stat(keyfile).st_mode) == 0o600
    owner = identity.load_key(keyfile)
    assert out.splitlines() == [f"initialised objstore store in {root}",
                                f"owner key {keyfile} (created); public {owner.public}"]
    # again: idempotent while the key matches
    again = ok_json(run_cli("init", "--json", store=root, exit_code=0))
    assert again == {"store": root, "owner_key": keyfile, "owner_public": owner.public, "created": False}
    assert identity.load_key(keyfile).public == owner.public
    # the store holds the public key only: neither the PEM nor the raw private bytes, in any file or object
    pem = owner.pem()
    raw = owner.private.private_bytes(serialization.Encoding.Raw, serialization.PrivateFormat.Raw,
                                      serialization.NoEncryption())
    assert subprocess.run(["grep", "-rqF", pem.decode().splitlines()[1], root]).returncode == 1
    assert subprocess.run(["grep", "-rqF", "PRIVATE KEY", root]).returncode == 1
    for dirpath, _, files in os.walk(root):
        for fn in files:
            with open(os.path.join(dirpath, fn), "rb") as f:
                data = f.read()
            assert raw not in data and raw.hex().encode() not in data
    store = Store.open(root)
    for _oid, _otype, data in raw_objects(store):
        assert raw not in data and raw.hex().encode() not in data and b"PRIVATE KEY" not in data
    assert identity.owner_public(store) == owner.public
    # another owner key against this store is refused
    other = str(tmp_path / "other-keys")
    rc, out, err = run_cli("init", store=root, env_extra={"OBJSTORE_KEYS": other}, exit_code=8)
    fails((rc, out, err), 8, f"refused: this store's owner key is {owner.public[:16]}…, and there is no key at {other}/owner.key (set OBJSTORE_KEYS or --key)")


def test_key_new_and_show(tmp_path):
    root = str(tmp_path / "s")
    ok(run_cli("init", store=root, exit_code=0))
    path = str(tmp_path / "w.key")
    made = ok_json(run_cli("key", "new", path, "--json", store=root, exit_code=0))
    assert made == {"private_key": path, "public_key_file": path + ".pub", "public": identity.load_key(path).public}
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    for f in (path, path + ".pub"):
        assert ok(run_cli("key", "show", f, store=root, exit_code=0)).strip() == made["public"]
        assert ok_json(run_cli("key", "show", f, "--json", store=root, exit_code=0)) == {"file": f, "public": made["public"]}
    fails(run_cli("key", "new", path, store=root, exit_code=5), 5, f"invalid input: {path} exists; refusing to overwrite a key")
    garbage = tmp_path / "garbage"
    garbage.write_bytes(b"not a key\n")
    fails(run_cli("key", "show", str(garbage), store=root, exit_code=5), 5,
          f"invalid input: {garbage} is not an ed25519 public key (PEM or 64 hex digits): Unable to load PEM file. "
          "See https://cryptography.io/en/latest/faq/#why-can-t-i-import-my-pem-file for more details. MalformedFraming")


# -- the full walk ---------------------------------------------------------------------------------
@pytest.mark.slow
def test_walk_grant_update_compact_segments_tasks_revoke(sess):
    root, run, tmp = sess
    wkey, wpub = new_key(tmp, "worker.key", root)
    g = ok_json(run_cli("journal", "grant", run, "--pubkey", wkey + ".pub", "--name", "w1", "--json", store=root, exit_code=0))
    assert (g["run"], g["grantee"], g["role"], g["rights"]) == (run, wpub, "worker", ["read", "write"])

    body = {"entries": [{"id": "e1", "status": "open", "text": "ship it"}], "note": "v1"}
    u = ok_json(run_cli("journal", "update", run, "-", "--reflects-through", "latest", "--checkpoint", "latest",
                        "--key", wkey, "--json", store=root, input=json.dumps(body).encode(), exit_code=0))
    assert u["version"] == 1 and u["run"] == run
    head = ok_json(run_cli("log", run, "-n", "1", "--json", store=root, exit_code=0))[0]["id"]
    shown = ok_json(run_cli("journal", "show", run, "--json", store=root, exit_code=0))
    assert (shown["id"], shown["version"], shown["enabled"], shown["writer"], shown["body"]) == (u["journal"], 1, True, wpub, body)
    assert shown["reflects_through"] == shown["checkpoint"] == head
    text = ok(run_cli("journal", "show", run, store=root, exit_code=0))
    assert text.splitlines()[:3] == [f"journal {u['journal']}  version 1  enabled",
                                     f"reflects_through {head}  checkpoint {head}", f"writer {wpub}"]
    assert '"text": "ship it"' in text
    # a record-id prefix names the record too
    u2 = ok_json(run_cli("journal", "update", run, "-", "--reflects-through", head[:10], "--key", wkey, "--json",
                         store=root, input=b'{"note": "v2"}', exit_code=0))
    assert u2["version"] == 2

    c = ok_json(run_cli("compact", run, "--keep", "2", "--key", wkey, "--json", store=root, exit_code=0))
    assert (c["seq"], c["journal_outcome"], c["journal_reason"], c["journal_host"], c["retained"]) == (1, "present", None, "local", 2)
    assert len(c["answer_sha256"]) == 64 and c["summary"].startswith("SUMMARY 1: 4 turn(s) summarized")

    ok(run_cli("task", "open", run, "t1", "--title", "write the report", store=root, exit_code=0))
    t2 = ok_json(run_cli("task", "open", run, "t2", "--json", store=root, exit_code=0))
    assert (t2["task"], t2["title"], t2["branch"]) == ("t2", "", 0)
    assert ok_json(run_cli("task", "list", run, "--json", store=root, exit_code=0)) == [
        {"task": "t1", "title": "write the report"}, {"task": "t2", "title": ""}]
    cl = ok_json(run_cli("task", "close", run, "t1", "--outcome", "shipped", "--json", store=root, exit_code=0))
    assert (cl["task"], cl["outcome"], cl["lsn"]) == ("t1", "shipped", t2["lsn"] + 1)
    assert ok(run_cli("task", "list", run, store=root, exit_code=0)) == "t2  \n"
    fails(run_cli("task", "close", run, "t1", store=root, exit_code=5), 5, f"invalid input: task 't1' is not open in run {run}")
    fails(run_cli("task", "open", run, "t2", store=root, exit_code=5), 5, f"invalid input: task 't2' is already open in run {run}")

    ok(run_cli("ingest", "-", store=root, input=turns(run, 3, prefix="later"), exit_code=0))
    c2 = ok_json(run_cli("compact", run, "--keep", "1", "--json", store=root, exit_code=0))  # the owner key, by default
    assert c2["seq"] == 2 and c2["journal_outcome"] == "present"
    segs = ok_json(run_cli("segments", run, "--json", store=root, exit_code=0))
    assert [(s["seq"], s["id"], s["branch"], s["outcome"], s["version"], s["retained"], s["open_tasks"], s["schema"])
            for s in segs] == [(1, c["segment"], 0, "present", 2, 2, 0, 2), (2, c2["segment"], 0, "present", 2, 1, 1, 2)]
    assert segs[0]["answer_sha256"] == c["answer_sha256"] and segs[0]["body_sha256"] == segs[1]["body_sha256"]
    assert ok(run_cli("segments", run, store=root, exit_code=0)).splitlines()[1].startswith(f"segment 2 {c2['segment'][:12]}  branch 0  journal present v2")

    d = ok_json(run_cli("journal", "disable", run, "--json", store=root, exit_code=0))
    assert (d["version"], d["enabled"]) == (3, False)
    assert ok_json(run_cli("compact", run, "--json", store=root, exit_code=0))["journal_outcome"] == "disabled"
    e = ok_json(run_cli("journal", "enable", run, "--key", wkey, "--json", store=root, exit_code=0))
    assert (e["version"], e["enabled"]) == (4, True)
    assert ok_json(run_cli("journal", "show", run, "--json", store=root, exit_code=0))["body"] == {"note": "v2"}

    r = ok_json(run_cli("journal", "revoke", run, "--pubkey", wkey + ".pub", "--reason", "worker retired", "--json", store=root, exit_code=0))
    assert (r["action"], r["grantee"], r["reason"]) == ("revoke", wpub, "worker retired")
    fails(run_cli("journal", "update", run, "-", "--reflects-through", "none", "--key", wkey, store=root, input=b"{}", exit_code=8),
          8, f"refused: writer 'w1' has no live grant on run {run}: worker retired")
    fails(run_cli("compact", run, "--key", wkey, store=root, exit_code=8), 8,
          f"refused: writer 'w1' has no live grant on run {run}: worker retired")
    grants = ok_json(run_cli("journal", "grants", run, "--json", store=root, exit_code=0))
    assert len(grants) == 1 and grants[0]["grantee"] == wpub and grants[0]["scope"] == "run"
    assert [(x["seq"], x["action"], x["role"], x["rights"], x["name"], x["reason"], x["signed"]) for x in grants[0]["chain"]] == [
        (1, "grant", "worker", ["read", "write"], "w1", "", True), (2, "revoke", "worker", ["read"], "w1", "worker retired", True)]
    assert ok_json(run_cli("journal", "show", run, "--json", store=root, exit_code=0))["version"] == 4  # nothing was written
    assert run_cli("verify", store=root, exit_code=0)[0] == 0


@pytest.mark.slow
def test_refusals_and_bad_input(sess):
    root, run, tmp = sess
    stranger, spub = new_key(tmp, "stranger.key", root)
    fails(run_cli("journal", "update", run, "-", "--reflects-through", "latest", "--key", stranger, store=root, input=b"{}", exit_code=8),
          8, f"refused: writer '{spub[:16]}…' has no live grant on run {run}: never granted")
    owner = identity.load_key(str(tmp / "keys" / "owner.key")).public
    fails(run_cli("journal", "grant", run, "--pubkey", stranger + ".pub", "--key", stranger, store=root, exit_code=8), 8,
          f"refused: only the store's owner key signs grants (this key is {spub[:16]}…, the owner is {owner[:16]}…)")
    garbage = tmp / "garbage.key"
    garbage.write_bytes(b"-----BEGIN PRIVATE KEY-----\nnonsense\n")
    fails(run_cli("compact", run, "--key", str(garbage), store=root, exit_code=5), 5,
          f"invalid input: {garbage} is not a PEM private key: Unable to load PEM file. See "
          "https://cryptography.io/en/latest/faq/#why-can-t-i-import-my-pem-file for more details. MalformedFraming")
    fails(run_cli("journal", "update", run, "-", "--reflects-through", "latest", "--key", stranger + ".pub", store=root, input=b"{}", exit_code=5),
          5, f"invalid input: {stranger}.pub is not a PEM private key: Valid PEM but no BEGIN/END delimiters for a private key "
          "found. Are you sure this is a private key?")
    missing = str(tmp / "nokey")
    fails(run_cli("session", "start", "--subject", "alice", "--key", missing, store=root, exit_code=8), 8,
          f"refused: unauthenticated caller: no private key at {missing} (run 'objstore init' to create the owner key, or pass --key)")
    # the key from the environment, like --key
    fails(run_cli("compact", run, store=root, env_extra={"OBJSTORE_KEY": stranger}, exit_code=8), 8,
          f"refused: writer '{spub[:16]}…' has no live grant on run {run}: never granted")
    fails(run_cli("journal", "update", run, "-", "--reflects-through", "latest", store=root, input=b"{not json", exit_code=5), 5,
          "invalid input: journal body is not JSON: Expecting property name enclosed in double quotes: line 1 column 2 (char 1)")
    fails(run_cli("journal", "update", run, "-", "--reflects-through", "latest", store=root, input=b"[1, 2]", exit_code=5), 5,
          "invalid input: a journal body is a JSON object")
    fails(run_cli("journal", "update", run, "-", "--reflects-through", "xyz", store=root, input=b"{}", exit_code=5), 5,
          "invalid input: 'xyz' is not an object id (64 hex digits, or a unique prefix of 4 or more)")
    fails(run_cli("journal", "show", run, store=root, exit_code=4), 4, f"not found: journal of run {run} (no version recorded)")
    fails(run_cli("journal", "show", "nope", store=root, exit_code=4), 4, "run not found: nope")
    fails(run_cli("segments", "nope", store=root, exit_code=4), 4, "run not found: nope")
    assert ok(run_cli("segments", run, store=root, exit_code=0)) == f"run {run} has no segments\n"
    rc, out, err = run_cli("journal", "grant", run, "--subject", "alice", "--pubkey", stranger + ".pub", store=root, exit_code=2)
    assert rc == 2 and "name exactly one of RUN or --subject SUBJECT" in err
    rc, out, err = run_cli("journal", "grant", "--pubkey", stranger + ".pub", store=root, exit_code=2)
    assert rc == 2 and "name exactly one of RUN or --subject SUBJECT" in err
    assert ok_json(run_cli("journal", "grants", run, "--json", store=root, exit_code=0)) == []


@pytest.mark.slow
def test_subject_grant_supersede_read_only_and_sessions(sess):
    root, run, tmp = sess
    w1, p1 = new_key(tmp, "w1.key", root)
    w2, p2 = new_key(tmp, "w2.key", root)
    ro, pro = new_key(tmp, "ro.key", root)
    ok(run_cli("journal", "grant", "--subject", "alice", "--pubkey", w1 + ".pub", "--name", "w1", store=root, exit_code=0))
    ok(run_cli("journal", "grant", run, "--pubkey", ro + ".pub", "--read-only", "--name", "reader", store=root, exit_code=0))
    # a subject-wide grant covers this session and a new one
    ok(run_cli("journal", "update", run, "-", "--reflects-through", "latest", "--key", w1, store=root, input=b'{"n": 1}', exit_code=0))
    s2 = ok_json(run_cli("session", "start", "--subject", "alice", "--predecessor", run, "--key", w1, "--json", store=root, exit_code=0))
    assert s2["predecessor"] == run
    assert {k: s2["startup"][k] for k in ("outcome", "session", "version", "selection", "host")} == {
        "outcome": "present", "session": run, "version": 1, "selection": "predecessor", "host": "local"}
    text = ok(run_cli("session", "start", "--subject", "alice", "--key", w1, store=root, exit_code=0)).splitlines()
    assert len(text) == 2 and text[1].startswith(f"startup journal: present from session {run} v1, answer sha256 ")
    # read-only: compaction reads, updates are refused
    assert ok_json(run_cli("compact", run, "--key", ro, "--json", store=root, exit_code=0))["journal_outcome"] == "present"
    fails(run_cli("journal", "update", run, "-", "--reflects-through", "none", "--key", ro, store=root, input=b"{}", exit_code=8), 8,
          f"refused: writer 'reader' has no live grant on run {run}: the grant does not include write")
    # w2 supersedes w1 on the subject
    sup = ok_json(run_cli("journal", "grant", "--subject", "alice", "--pubkey", w2 + ".pub", "--supersedes", w1 + ".pub",
                          "--name", "w2", "--json", store=root, exit_code=0))
    assert (sup["grantee"], sup["superseded"]) == (p2, p1)
    fails(run_cli("journal", "update", run, "-", "--reflects-through", "none", "--key", w1, store=root, input=b"{}", exit_code=8), 8,
          f"refused: writer 'w1' has no live grant on run {run}: superseded by w2")
    assert ok_json(run_cli("journal", "update", run, "-", "--reflects-through", "none", "--key", w2, "--json",
                           store=root, input=b'{"n": 2}', exit_code=0))["version"] == 2
    rc, out, err = run_cli("journal", "grant", run, "--pubkey", w2 + ".pub", "--supersedes", w1 + ".pub", "--role", "job", store=root, exit_code=2)
    assert rc == 2 and "--supersedes grants the new key as a read-write worker" in err
    grants = ok_json(run_cli("journal", "grants", run, "--json", store=root, exit_code=0))
    assert sorted((g["scope"], g["grantee"], [x["action"] for x in g["chain"]][-1]) for g in grants) == sorted(
        [("run", pro, "grant"), ("subject", p1, "revoke"), ("subject", p2, "grant")])
    rv = ok_json(run_cli("journal", "revoke", "--subject", "alice", "--pubkey", w2 + ".pub", "--json", store=root, exit_code=0))
    assert (rv["subject"], rv["run"], rv["reason"]) == ("alice", None, "revoked")
    fails(run_cli("journal", "update", run, "-", "--reflects-through", "none", "--key", w2, store=root, input=b"{}", exit_code=8), 8,
          f"refused: writer 'w2' has no live grant on run {run}: revoked")


# -- the Backend Host as its own process ------------------------------------------------------------
@pytest.fixture
def served(sess):
    root, run, tmp = sess
    sock = str(tmp / "journal.sock")
    p = subprocess.Popen([sys.executable, "-m", "objstore", "--store", root, "journal-serve", "--socket", sock],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 10
        while not os.path.exists(sock):
            assert p.poll() is None, p.communicate()
            assert time.monotonic() < deadline, "journal-serve did not create its socket"
            time.sleep(0.02)
        yield root, run, tmp, sock, p
    finally:
        if p.poll() is None:
            p.terminate()
        assert p.wait(timeout=10) == 0, "journal-serve stops cleanly on SIGTERM"


@pytest.mark.slow
def test_journal_serve_compact_and_session_start_through_the_socket(served):
    root, run, tmp, sock, proc = served
    wkey, wpub = new_key(tmp, "w.key", root)
    jkey, jpub = new_key(tmp, "job.key", root)
    ok(run_cli("journal", "grant", run, "--pubkey", wkey + ".pub", "--name", "w1", store=root, exit_code=0))
    ok(run_cli("journal", "grant", run, "--pubkey", jkey + ".pub", "--role", "job", "--name", "job1", store=root, exit_code=0))
    # a journal update through the Backend Host (it writes the version)
    u = ok_json(run_cli("journal", "update", run, "-", "--reflects-through", "latest", "--key", wkey, "--socket", sock,
                        "--json", store=root, input=b'{"entries": [{"id": "a"}]}', exit_code=0))
    assert u["version"] == 1
    assert ok_json(run_cli("journal", "show", run, "--json", store=root, exit_code=0))["writer"] == wpub
    c = ok_json(run_cli("compact", run, "--socket", sock, "--key", wkey, "--keep", "2", "--json", store=root, exit_code=0))
    assert (c["journal_outcome"], c["journal_host"], c["seq"]) == ("present", "backend", 1)
    s = ok_json(run_cli("session", "start", "--subject", "alice", "--predecessor", run, "--socket", sock, "--json", store=root, exit_code=0))
    assert (s["startup"]["outcome"], s["startup"]["host"], s["startup"]["session"]) == ("present", "backend", run)
    assert BackendHost(sock).stats()["reads"] == 2
    # a job key is refused by the Backend (its 403), and nothing is written
    fails(run_cli("compact", run, "--socket", sock, "--key", jkey, store=root, exit_code=8), 8,
          "refused: job identity 'job1' may not read or write journals")
    fails(run_cli("session", "start", "--subject", "alice", "--socket", sock, "--key", jkey, store=root, exit_code=8), 8,
          "refused: job identity 'job1' may not read or write journals")
    fails(run_cli("journal", "update", run, "-", "--reflects-through", "none", "--key", jkey, "--socket", sock,
                  store=root, input=b"{}", exit_code=8), 8, "refused: job identity 'job1' may not read or write journals")
    assert BackendHost(sock).stats()["reads"] == 4  # the two refused reads did reach the Backend
    assert len(ok_json(run_cli("segments", run, "--json", store=root, exit_code=0))) == 1
    # a second server on the same socket is refused
    fails(run_cli("journal-serve", "--socket", sock, store=root, exit_code=5), 5, f"invalid input: a journal host already listens on {sock}")
    proc.terminate()
    assert proc.wait(timeout=10) == 0 and not os.path.exists(sock)
    assert proc.communicate()[1].decode().splitlines() == [f"objstore: journal host listening on {sock}"]
    # the Host gone: a compaction records 'unavailable', an update cannot be made
    c2 = ok_json(run_cli("compact", run, "--socket", sock, "--key", wkey, "--json", store=root, exit_code=0))
    assert (c2["journal_outcome"], c2["journal_reason"]) == ("unavailable", f"read_failed: journal host at {sock}: No such file or directory")
    fails(run_cli("journal", "update", run, "-", "--reflects-through", "none", "--key", wkey, "--socket", sock, store=root, input=b"{}", exit_code=10),
          10, f"journal host unavailable: journal host at {sock}: No such file or directory")
    assert run_cli("verify", store=root, exit_code=0)[0] == 0


def test_journal_serve_needs_a_store(tmp_path):
    fails(run_cli("journal-serve", "--socket", str(tmp_path / "j.sock"), store=str(tmp_path / "none"), exit_code=3), 3,
          f"not an objstore store: {tmp_path / 'none'} (run 'objstore init' or pass --store)")


@pytest.mark.slow
def test_help_of_new_commands_has_an_example():
    for args in (["init"], ["key", "new"], ["key", "show"], ["journal"], ["journal", "show"], ["journal", "update"],
                 ["journal", "enable"], ["journal", "disable"], ["journal", "grant"], ["journal", "revoke"],
                 ["journal", "grants"], ["compact"], ["segments"], ["session", "start"], ["task", "open"],
                 ["task", "close"], ["task", "list"], ["journal-serve"]):
        out = ok(run_cli(*args, "--help", exit_code=0))
        assert "Example" in out, args
    out = ok(run_cli("compact", "--help", exit_code=0))
    assert "deterministic compactor" in out and "--key FILE" in out and "--socket PATH" in out
    assert "8 refused (not the owner key, unauthenticated, job" in ok(run_cli("--help", exit_code=0))


@pytest.mark.slow
def test_a_store_made_without_init_adopts_the_default_owner_key_on_first_signing_command(tmp_path):
    root = str(tmp_path / "s")
    events = "\n".join(json.dumps(e) for e in [
        {"v": 1, "type": "run_started", "run": "sess", "subject": "alice", "meta": {"session": True}},
        {"v": 1, "type": "turn", "run": "sess", "role": "user", "content": "hello"},
        {"v": 1, "type": "turn", "run": "sess", "role": "model", "content": "hi"},
    ]) + "\n"
    assert run_cli("ingest", "-", store=root, input=events.encode(), exit_code=0)[0] == 0  # creates the store, no key yet
    rc, out, err = run_cli("journal", "update", "sess", "-", "--reflects-through", "latest", "--json", store=root, input=b'{"n": 1}', exit_code=0)
    assert rc == 0, err
    assert os.path.exists(os.path.join(os.environ["OBJSTORE_KEYS"], "owner.key"))
    rc, out, err = run_cli("compact", "sess", "--keep", "1", "--json", store=root, exit_code=0)
    assert rc == 0 and json.loads(out)["journal_outcome"] == "present", err
    assert run_cli("verify", store=root, exit_code=0)[0] == 0
