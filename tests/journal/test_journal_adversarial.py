"""An adversarial pass over the T-745 journal / identity / Host surface, as an outside auditor.

Threat model (docs/JOURNAL.md, "Identity"): a caller may use every public API and read every
store file, but holds only its own private key. Every attack here goes through a public API
(the library, ``Store.set_ref`` / ``store.batch()``, the Backend Host's socket, the CLI); the
properties checked are the documented ones: forged or misplaced authority counts for nothing,
forward-only refs never go back, a version written around the Host is never served, malformed
input is a typed refusal (never a crash), concurrency loses cleanly, a kill -9 leaves a store
that verifies, and the bounded projection keeps its budget and its entries whole.

Concurrency and kill tests use separate OS processes (``sys.executable``).
"""

import dataclasses
import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import types

import pytest
from helpers import new_key, run_cli

from objstore import RunLog, Store
from objstore import journal as J
from objstore.errors import (
    Conflict,
    HostUnavailable,
    InvalidInput,
    JobCaller,
    ObjectNotFound,
    Refused,
    ReplayedRequest,
    StaleRequest,
    Unauthenticated,
    WriterRevoked,
    WrongSession,
    WrongSubject,
)
from objstore.journal.backend import MAX_LINE, BackendHost
from objstore.journal.host import omitted_line, project
from objstore.runs.verify import verify
from objstore.storage import codec, identity

READ = {"purpose": "compaction", "budget": 1 << 16, "predecessor": None}
NO_PARAMS = {"reflects_through": None, "checkpoint": None, "enabled": None}


# -- fixtures and helpers ----------------------------------------------------------------------------

@pytest.fixture
def env(tmp_path):
    root = str(tmp_path / "s")
    log = RunLog(Store.init(root))
    owner, _ = identity.ensure_owner_key(log.store)
    host = J.LocalJournalHost(log)
    a = J.start_session(log, "alice", run="A")
    b = J.start_session(log, "alice", run="B")
    c = J.start_session(log, "carol", run="C")
    w1, w1_path = new_key(tmp_path, "w1")
    J.grant(log, owner, a, w1.public, name="w1")
    for run in (a, b, c):
        for i in range(4):
            J.record_turn(log, run, "user" if i % 2 == 0 else "model", f"{run} turn {i}")
    return types.SimpleNamespace(root=root, log=log, owner=owner, host=host, a=a, b=b, c=c, w1=w1, w1_path=w1_path,
                                 tmp=tmp_path)


def read_req(key, run, **kw):
    return identity.sign_request(key, "read", run, params=READ, **kw)


def resign(key, req, **changes):
    """``req`` with some fields changed and signed again by ``key`` (the caller holds its own key)."""
    r = dataclasses.replace(req, **changes)
    return dataclasses.replace(r, sig=key.sign(r.message()))


def update_req(log, key, run, body: dict, *, params=None, head="current"):
    data = J.journal_body_bytes(body)
    if head == "current":
        cur = log.store.read_ref(J.journal_ref(run))
        head = cur if isinstance(cur, bytes) else None
    return identity.sign_request(key, "update", run, params=dict(params or NO_PARAMS), body=data,
                                 expect_head=head.hex() if head else None), data


def around_the_host(log, run, key, body_bytes: bytes, *, req=None, writer=None, **fields):
    """A journal version written through the raw store API (not the Host), signed as ``key``
    over exactly what it holds unless ``req`` is given. Returns the version id."""
    cur = J.current_journal(log, run)
    head, old = (cur[0], cur[1]) if cur else (None, None)
    if req is None:
        req = identity.sign_request(key, "update", run, params=dict(NO_PARAMS), body=body_bytes,
                                    expect_head=head.hex() if head else None)
    with log.store.batch():
        obj = {"v": 2, "run": run, "version": (old["version"] + 1) if old else 1, "body": log.store.put_blob(body_bytes),
               "body_sha256": hashlib.sha256(body_bytes).hexdigest(), "reflects_through": None, "checkpoint": None,
               "enabled": True, "previous": head, "writer": writer or key.public, "request": req.to_json(), "time": time.time()}
        obj.update(fields)
        vid = log.store.put(codec.JOURNAL, obj)
        log.store.set_ref(J.journal_ref(run), head, vid, "around the host")
    return vid


def outcome(env, run):
    return env.host.read(read_req(env.owner, run))


def compaction_outcome(env, run):
    """A real compaction's frozen outcome (the Worker core obeys whatever the Host answered)."""
    res = J.compact(env.log, run, J.StubCompactor(), host=J.LocalJournalHost(env.log), key=env.owner, keep_tail=1)
    return res.snapshot.outcome, res.snapshot.reason or "", res


def serve(root, sock):
    """`objstore journal-serve` as its own process; returns the Popen once the socket exists."""
    p = subprocess.Popen([sys.executable, "-m", "objstore", "--store", root, "journal-serve", "--socket", sock],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 10
    while True:
        if p.poll() is not None:
            raise RuntimeError(f"journal-serve exited: {p.stderr.read().decode()}")
        if os.path.exists(sock):
            try:
                BackendHost(sock, timeout=2).stats()
                return p
            except HostUnavailable:  # listening, not yet accepting
                pass
        assert time.monotonic() < deadline, "journal-serve did not come up"
        time.sleep(0.02)


@pytest.fixture
def backend(env):
    sock = os.path.join(str(env.tmp), "j.sock")
    p = serve(env.root, sock)
    yield types.SimpleNamespace(sock=sock, proc=p, host=BackendHost(sock, timeout=10))
    if p.poll() is None:  # (a test may have killed it)
        p.terminate()
        assert p.wait(10) == 0, "journal-serve stops cleanly on SIGTERM"


def raw_call(sock, data: bytes, timeout=10.0) -> dict:
    """Send raw bytes to the Backend and read its one-line answer."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout)
    s.connect(sock)
    try:
        try:
            s.sendall(data)
            s.shutdown(socket.SHUT_WR)
        except OSError:  # the server may answer and close before it has read everything
            pass
        buf = b""
        while not buf.endswith(b"\n"):
            chunk = s.recv(1 << 16)
            if not chunk:
                break
            buf += chunk
    finally:
        s.close()
    return json.loads(buf)


# =====================================================================================================
# 1. Forged and misplaced authority
# =====================================================================================================

def test_only_the_owner_key_signs_grants_and_a_self_signed_grant_grants_nothing(env):
    log, a = env.log, env.a
    stranger = identity.generate()
    with pytest.raises(Refused, match="only the store's owner key signs grants"):
        J.grant(log, env.w1, a, stranger.public)
    with pytest.raises(Refused, match="only the store's owner key signs grants"):
        J.revoke(log, stranger, a, env.w1.public)
    # a grant object signed by the stranger itself, appended through a raw transaction
    ref = J.grant_ref(a, stranger.public)
    forged = identity.sign_object(stranger, {"v": 2, "run": a, "subject": "alice", "grantee": stranger.public, "name": "me",
                                             "action": "grant", "role": "worker", "rights": ["read", "write"],
                                             "supersedes": None, "previous": None, "seq": 1, "reason": "", "time": time.time()})
    with log.store.batch() as txn:
        gid = log.store.put(codec.GRANT, forged)
        txn.set_ref(ref, None, gid, "forged grant")
    # a copy of the owner's signature over another object does not verify either
    real = log.store.get_typed(log.store.read_ref(J.grant_ref(a, env.w1.public)), codec.GRANT)
    stolen_sig = dict(forged, signer=real["signer"], sig=real["sig"], previous=gid, seq=2)
    with log.store.batch() as txn:
        sid = log.store.put(codec.GRANT, stolen_sig)
        txn.set_ref(ref, gid, sid, "owner's signature pasted on")
    with pytest.raises(WriterRevoked, match="never granted"):
        env.host.read(read_req(stranger, a))
    with pytest.raises(WriterRevoked, match="never granted"):
        J.update_journal(log, a, stranger, {"x": 1})
    # and a version the stranger writes around the Host is not served
    around_the_host(log, a, stranger, b'{"x":"stranger"}')
    got = outcome(env, a)
    assert got["outcome"] == "unavailable" and "without a write grant" in got["reason"]
    assert verify(log) == []


@pytest.mark.parametrize("via", ["set_ref", "txn"])
def test_an_owner_signed_grant_behind_another_run_key_or_subject_ref_grants_nothing(env, via):
    log, owner, a, b, c = env.log, env.owner, env.a, env.b, env.c
    w2 = identity.generate()
    g_a_w1 = log.store.read_ref(J.grant_ref(a, env.w1.public))
    g_sub = J.grant(log, owner, None, w2.public, subject="carol", name="carol-wide")  # w2: every session of carol

    def place(ref, gid):
        # refused where entries are applied (engine format 3): a grant ref moves only to a grant
        # stored by the same commit, and storing a genuine grant's bytes again stores nothing
        with pytest.raises(Refused):
            if via == "set_ref":
                log.store.set_ref(ref, None, gid, "copied")
            else:
                with log.store.batch() as txn:
                    txn.set_ref(ref, None, gid, "copied")

    place(J.grant_ref(b, env.w1.public), g_a_w1)                     # w1's run-A grant behind run B's ref
    place(J.grant_ref(a, w2.public), g_a_w1)                         # w1's grant behind w2's ref on A
    place(J.subject_grant_ref("alice", env.w1.public), g_a_w1)       # a run grant behind a subject ref
    place(J.subject_grant_ref("alice", w2.public), g_sub)            # carol's subject grant behind alice's
    place(J.grant_ref(b, w2.public), g_sub)                          # a subject grant behind a run ref
    with pytest.raises(WrongSession):
        env.host.read(read_req(env.w1, b))
    with pytest.raises(WrongSession):
        J.update_journal(log, b, env.w1, {"stolen": 1})
    for run in (a, b):
        with pytest.raises(WrongSubject):
            env.host.read(read_req(w2, run))
        with pytest.raises(WrongSubject):
            J.update_journal(log, run, w2, {"stolen": 2})
    # the genuine grants still work where they were given
    J.update_journal(log, a, env.w1, {"fine": 1})
    J.update_journal(log, c, w2, {"fine": 2})
    # a version w2 signs for B and writes around the Host is not trusted either
    around_the_host(log, b, w2, b'{"stolen":3}')
    got = outcome(env, b)  # B's version is refused; the Host falls back to A's, of the same subject
    assert got["session"] == a and got["selection"]["tried"][0] == {
        "session": b, "rule": "current", "outcome": "unavailable", "reason": got["selection"]["tried"][0]["reason"]}
    assert "without a write grant" in got["selection"]["tried"][0]["reason"]
    assert verify(log) == []


@pytest.mark.parametrize("via", ["set_ref", "txn"])
def test_forward_only_refs_are_never_rolled_back_deleted_or_made_symbolic(env, via):
    log, owner, a = env.log, env.owner, env.a
    v1, _ = J.update_journal(log, a, env.w1, {"n": 1})
    v2, _ = J.update_journal(log, a, env.w1, {"n": 2})
    s1 = J.compact(log, a, J.StubCompactor(), host=env.host, key=owner, keep_tail=1).segment_id
    J.record_turn(log, a, "user", "more")
    s2 = J.compact(log, a, J.StubCompactor(), host=env.host, key=owner, keep_tail=1).segment_id
    J.revoke(log, owner, a, env.w1.public)
    g1, g2 = [gid for gid, _ in J.grant_chain(log, J.grant_ref(a, env.w1.public))]
    sg1 = J.grant(log, owner, None, env.w1.public, subject="alice")
    sg2 = J.revoke(log, owner, None, env.w1.public, subject="alice")
    okey = log.store.read_ref(identity.OWNER_REF)
    cases = {  # ref: (current value, an older value of the chain — for keys/owner another key)
        "journal": (J.journal_ref(a), v2, v1), "segments": (J.segments_ref(a), s2, s1),
        "grant": (J.grant_ref(a, env.w1.public), g2, g1), "subject_grant": (J.subject_grant_ref("alice", env.w1.public), sg2, sg1),
        "owner": (identity.OWNER_REF, okey, log.store.put_blob(identity.generate().public.encode())),
    }

    def move(name, old, new):
        if via == "set_ref":
            log.store.set_ref(name, old, new, "attack")
        else:
            with log.store.batch() as txn:
                txn.set_ref(name, old, new, "attack")

    before = dict(log.store.list_refs())
    for name, cur, older in cases.values():
        for new in (older, None, "ref: run/A/branch/0"):
            with pytest.raises(Refused):
                move(name, cur, new)
    assert dict(log.store.list_refs()) == before
    assert verify(log) == []


def test_chain_refs_only_take_objects_of_their_own_type(env):
    """Without the type check, any object whose ``previous`` names the head (a grant behind a
    journal ref, a journal version behind a grant ref) passed ``check_move`` — and wedged the
    chain for good: every later update or read died on 'object … is a grant, not a journal',
    and ``verify`` reported the ref. (refs.check_move / engine.Txn: the new object's type.)"""
    log, owner, a, c = env.log, env.owner, env.a, env.c
    jid, _ = J.update_journal(log, a, env.w1, {"n": 1})
    gref = J.grant_ref(a, env.w1.public)
    ghead = log.store.read_ref(gref)
    with log.store.batch():
        wrong = {  # each an otherwise well-formed link: its previous is the ref's head
            J.journal_ref(a): log.store.put(codec.GRANT, dict(log.store.get_typed(ghead, codec.GRANT), previous=jid)),
            gref: log.store.put(codec.JOURNAL, dict(J.current_journal(log, a)[1], previous=ghead)),
            J.segments_ref(c): log.store.put(codec.GRANT, dict(log.store.get_typed(ghead, codec.GRANT), previous=None)),
            J.journal_ref(c): log.store.put_blob(b"not a journal"),
        }
    heads = {name: log.store.read_ref(name) for name in wrong}
    for name, oid in wrong.items():
        with pytest.raises(Refused):
            log.store.set_ref(name, heads[name], oid, "type confusion")
    assert J.update_journal(log, a, env.w1, {"n": 2})[1] == 2
    assert J.update_journal(log, c, owner, {"n": 1})[1] == 1
    # verify names the junk objects themselves (unreferenced), and no ref
    assert {(p.code, p.subject) for p in verify(log)} <= {("malformed-object", oid.hex()) for oid in wrong.values()}


def test_a_version_written_around_the_host_is_never_served(env):
    log, a, b, w1 = env.log, env.a, env.b, env.w1
    J.grant(log, env.owner, b, w1.public, name="w1-on-b")
    v1, _ = J.update_journal(log, a, w1, {"n": 1})
    j1 = log.store.get_typed(v1, codec.JOURNAL)
    old_req = identity.Request.from_json(j1["request"])
    body1 = log.store.get_blob(j1["body"])
    attacks = {
        # v1's genuine signed request copied onto a new version (its expected head is not v1)
        "copied request": lambda: around_the_host(log, a, w1, body1, req=old_req),
        # the same request with new content
        "copied request, new body": lambda: around_the_host(log, a, w1, b'{"n":"evil"}', req=old_req),
        # a request signed for run B stored in run A
        "request of another run": lambda: around_the_host(log, a, w1, b'{"n":3}', req=update_req(log, w1, b, {"n": 3}, head=J.current_journal(log, a)[0])[0]),
        # the params changed after signing (reflects_through)
        "params changed": lambda: around_the_host(log, a, w1, b'{"n":4}', reflects_through=log.view(a).heads[0]),
        # the body changed after signing
        "body changed": lambda: around_the_host(log, a, w1, b'{"n":5}', req=update_req(log, w1, a, {"n": 6})[0]),
        # someone else named as the writer
        "writer swapped": lambda: around_the_host(log, a, w1, b'{"n":7}', writer=env.owner.public),
        # a signature that does not verify
        "bad signature": lambda: around_the_host(log, a, w1, b'{"n":8}', req=dataclasses.replace(update_req(log, w1, a, {"n": 8})[0], sig="00" * 64)),
    }
    for name, attack in attacks.items():
        attack()
        got = outcome(env, a)
        assert got["outcome"] == "unavailable" and "untrusted" in got["reason"], (name, got["reason"])
        res_outcome, reason, res = compaction_outcome(env, a)
        assert res_outcome == "unavailable" and b"evil" not in res.request_bytes, name
    # the writer's next genuine update through the Host is served again
    J.update_journal(log, a, w1, {"n": "genuine"})
    assert outcome(env, a)["outcome"] == "present"
    assert verify(log) == []


def test_a_revoked_writer_cannot_publish_a_version_it_prepared_while_granted(env):
    """The Host dates a version by its object's log position. Without the same-commit rule a
    granted worker could store a signed version object (no ref move), get revoked, then move
    the journal ref to it: the object predates the revocation, so it was served as 'present'.
    (engine.Txn.set_ref: a journal ref moves only to a version stored in the same commit.)"""
    log, a, w1 = env.log, env.a, env.w1
    v1, _ = J.update_journal(log, a, w1, {"n": 1})
    body = J.journal_body_bytes({"n": "prepared while granted"})
    req, _ = update_req(log, w1, a, {"n": "prepared while granted"})
    staged = {"v": 2, "run": a, "version": 2, "body": log.store.put_blob(body), "body_sha256": hashlib.sha256(body).hexdigest(),
              "reflects_through": None, "checkpoint": None, "enabled": True, "previous": v1, "writer": w1.public,
              "request": req.to_json(), "time": time.time()}
    vid = log.store.put(codec.JOURNAL, staged)  # stored, not published
    J.revoke(log, env.owner, a, w1.public, reason="fired")
    with pytest.raises(Refused, match="same commit"):
        log.store.set_ref(J.journal_ref(a), v1, vid, "publish late")
    with pytest.raises(Refused, match="same commit"):
        with log.store.batch() as txn:
            log.store.put(codec.JOURNAL, staged)  # already stored: not new in this commit
            txn.set_ref(J.journal_ref(a), v1, vid, "publish late")
    assert J.current_journal(log, a)[0] == v1 and outcome(env, a)["outcome"] == "present"
    # a fresh copy (new object, so stored now) is dated now: after the revocation, not served
    around_the_host(log, a, w1, body, req=req)
    got = outcome(env, a)
    assert got["outcome"] == "unavailable" and "without a write grant at the time" in got["reason"]
    assert verify(log) == []


def test_signed_requests_cannot_be_redirected_altered_replayed_or_dated(env):
    log, a, b, w1, host = env.log, env.a, env.b, env.w1, env.host
    J.grant(log, env.owner, b, w1.public, name="w1-on-b")
    # a read signed for A, sent for B
    with pytest.raises(Unauthenticated):
        host.read(dataclasses.replace(read_req(w1, a), run=b))
    # params changed after signing
    with pytest.raises(Unauthenticated):
        host.read(dataclasses.replace(read_req(w1, a), params=dict(READ, budget=1)))
    # an update signed for A, sent for B
    req, data = update_req(log, w1, a, {"x": 1})
    with pytest.raises(Unauthenticated):
        host.update(dataclasses.replace(req, run=b), data)
    # an update whose body differs from the signed hash; its params changed
    req, data = update_req(log, w1, a, {"x": 1})
    with pytest.raises(Unauthenticated):
        host.update(req, J.journal_body_bytes({"x": 2}))
    with pytest.raises(Unauthenticated):
        host.update(dataclasses.replace(req, params=dict(NO_PARAMS, enabled=False)), data)
    # replayed: the same Host refuses the nonce; another Host's compare-and-swap refuses the head
    req, data = update_req(log, w1, a, {"x": 1})
    assert host.update(req, data)["version"] == 1
    with pytest.raises(ReplayedRequest):
        host.update(req, data)
    with pytest.raises(Conflict):
        J.LocalJournalHost(log).update(req, data)
    assert J.current_journal(log, a)[1]["version"] == 1
    # times: stale, future, within the window, and values that are not a time
    now = time.time()
    for when, ok in ((now - 301, False), (now + 301, False), (now - 290, True), (now + 290, True)):
        r = identity.sign_request(w1, "read", a, params=READ, when=when)
        if ok:
            assert host.read(r)["outcome"] == "present"
        else:
            with pytest.raises(StaleRequest):
                host.read(r)
    base = read_req(w1, a)
    for bad in (float("nan"), float("inf"), -float("inf"), 10 ** 400, "now", None, True, [now]):
        with pytest.raises(Refused):
            host.read(resign(w1, base, time=bad, nonce=os.urandom(16).hex()))
    # a nonce that is missing or not a string
    for bad in (None, 7, ["x" * 16], {"n": 1}, ""):
        with pytest.raises(Unauthenticated):
            host.read(resign(w1, base, nonce=bad))
    with pytest.raises(Unauthenticated):
        identity.Request.from_json({k: v for k, v in read_req(w1, a).to_json().items() if k != "nonce"})
    # claiming the owner's key, and an unsigned request
    with pytest.raises(Unauthenticated):
        host.read(dataclasses.replace(read_req(w1, a), key=env.owner.public))
    with pytest.raises(Unauthenticated):
        host.read(identity.unsigned_request("read", a, params=READ))
    assert J.current_journal(log, a)[1]["version"] == 1


def test_update_parameters_are_exactly_typed(env):
    """``enabled`` 1 or 0 compared equal to True / False and was stored as 1: a version the Host
    wrote that verify then called malformed. (host.update: enabled is None, True or False.)"""
    log, a, w1, host = env.log, env.a, env.w1, env.host
    for params in (dict(NO_PARAMS, enabled=1), dict(NO_PARAMS, enabled=0), dict(NO_PARAMS, enabled="yes"),
                   dict(NO_PARAMS, reflects_through=5), dict(NO_PARAMS, checkpoint=["x"]),
                   dict(NO_PARAMS, reflects_through=log.view(env.b).heads[0].hex()),
                   {"reflects_through": None, "checkpoint": None}, dict(NO_PARAMS, extra=1)):
        req, data = update_req(log, w1, a, {"x": 1}, params=params)
        with pytest.raises(InvalidInput):
            host.update(req, data)
    assert J.current_journal(log, a) is None
    assert verify(log) == []


def test_job_and_read_only_keys(env):
    log, owner, a, host = env.log, env.owner, env.a, env.host
    job, _ = new_key(env.tmp, "job")
    ro, _ = new_key(env.tmp, "ro")
    J.grant(log, owner, a, job.public, role="job", name="nightly")
    J.grant(log, owner, a, ro.public, rights=("read",), name="reader")
    J.update_journal(log, a, env.w1, {"n": 1})
    with pytest.raises(JobCaller):
        host.read(read_req(job, a))
    with pytest.raises(JobCaller):
        J.update_journal(log, a, job, {"n": "job"})
    with pytest.raises(JobCaller):
        J.compact(log, a, J.StubCompactor(), host=host, key=job)
    assert host.read(read_req(ro, a))["outcome"] == "present"
    with pytest.raises(WriterRevoked, match="does not include write"):
        J.update_journal(log, a, ro, {"n": "ro"})
    # their own signed versions, written around the Host, are not served
    for key in (job, ro):
        around_the_host(log, a, key, b'{"n":"around"}')
        got = outcome(env, a)
        assert got["outcome"] == "unavailable" and "without a write grant" in got["reason"]
    assert not J.segments(log, a)
    assert verify(log) == []


def test_revoked_then_regranted_by_the_owner_works_again(env):
    log, owner, a, w1, host = env.log, env.owner, env.a, env.w1, env.host
    J.update_journal(log, a, w1, {"n": 1})
    J.revoke(log, owner, a, w1.public, reason="paused")
    with pytest.raises(WriterRevoked, match="paused"):
        J.update_journal(log, a, w1, {"n": 2})
    with pytest.raises(WriterRevoked):
        host.read(read_req(w1, a))
    around_the_host(log, a, w1, b'{"n":"while revoked"}')  # written while revoked: never served
    assert outcome(env, a)["outcome"] == "unavailable"
    J.grant(log, owner, a, w1.public, name="w1 again")
    assert host.read(read_req(w1, a))["outcome"] == "unavailable"  # re-granting does not bless the old one
    _, ver = J.update_journal(log, a, w1, {"n": 3})
    assert ver == 3 and outcome(env, a)["outcome"] == "present"
    assert [g["action"] for g in J.grant_history(log, a, w1.public)] == ["grant", "revoke", "grant"]
    # and the same for a subject-wide grant
    J.grant(log, owner, None, w1.public, subject="alice")
    J.revoke(log, owner, None, w1.public, subject="alice")
    with pytest.raises(WriterRevoked):
        J.update_journal(log, env.b, w1, {"n": 1})
    J.grant(log, owner, None, w1.public, subject="alice")
    assert J.update_journal(log, env.b, w1, {"n": 1})[1] == 1
    assert verify(log) == []


def test_a_granted_worker_cannot_plant_an_unreadable_body_around_the_host(env):
    """A granted worker signs a request over bytes the Host would never have written (not JSON,
    not UTF-8, not canonical, not an object) and stores the version itself: the Host used to
    trust it and crash projecting it (JSONDecodeError / AttributeError out of every read).
    (host.trusted: the body must be a canonical journal body.)"""
    log, a, w1 = env.log, env.a, env.w1
    for body in (b"not json" * 100, b"\xff\xfe" * 50, b'{"b": 1,  "a": 2}', b"[1,2,3]" * 100, b'{"x":NaN}',
                 b'{"a":' * 2000 + b"1" + b"}" * 2000):
        around_the_host(log, a, w1, body)
        for budget in (1 << 20, 10):
            got = env.host.read(identity.sign_request(w1, "read", a, params=dict(READ, budget=budget)))
            assert got["outcome"] == "unavailable" and "untrusted" in got["reason"], body
        assert compaction_outcome(env, a)[0] == "unavailable"
    # canonical JSON objects the Host would refuse today (odd entries) are still read, without a crash
    for body in (b'{"entries":[{"id":"x"},{"id":"x"}]}', b'{"entries":"nope"}', b'{"entries":[1,{"id":"a\\nb"},null]}'):
        around_the_host(log, a, w1, body)
        for budget in (1 << 20, 10):
            got = env.host.read(identity.sign_request(w1, "read", a, params=dict(READ, budget=budget)))
            assert got["outcome"] in ("present", "over_budget"), (body, got["reason"])
    assert verify(log) == []


def nested(levels):
    d = {"leaf": 1}
    for _ in range(levels - 1):
        d = {"a": d}
    return d


def test_library_journal_bodies_are_validated(env):
    log, a, w1 = env.log, env.a, env.w1
    deep = {}
    x = deep
    for _ in range(600):
        x["a"] = {}
        x = x["a"]
    bad = [[1, 2], "text", None, {"x": float("nan")}, {"x": float("inf")}, {"x": [-float("inf")]}, deep,
           {"entries": [{"id": "a"}, {"id": "a"}]}, {"entries": [{"id": 1}]}, {"entries": [{"id": ""}]},
           {"entries": [{"id": "a\nb"}]}, {"entries": [{"id": "tab\there"}]}, {"entries": {"id": "a"}},
           {"entries": [{"id": "a", "status": 3}]}, {1: "int key"}, {"x": b"bytes"}, {"x": {1, 2}}]
    for body in bad:
        with pytest.raises(InvalidInput):
            J.update_journal(log, a, w1, body)
    assert J.current_journal(log, a) is None
    # the nesting limit of every JSON input (codec.MAX_JSON_DEPTH), exactly: 64 levels (the body
    # itself is level 1) go through, 65 do not
    with pytest.raises(InvalidInput, match="deeper than 64"):
        J.update_journal(log, a, w1, nested(65))
    J.update_journal(log, a, w1, nested(64))
    assert J.journal_body(log, J.current_journal(log, a)[1]) == nested(64)
    assert outcome(env, a)["outcome"] == "present"
    # integers outside int64/uint64 are refused like everywhere else
    for big in (10 ** 40, -(10 ** 30), 2 ** 64, -(2 ** 63) - 1):
        with pytest.raises(InvalidInput, match="int64/uint64"):
            J.update_journal(log, a, w1, {"big": big})
    # integers at the edges of the range and unicode go through exactly
    body = {"big": 2 ** 64 - 1, "neg": -(2 ** 63), "text": "café ✓ 続き \U0001F600", "entries": [{"id": "ü-1", "status": "open"}]}
    jid, _ = J.update_journal(log, a, w1, body)
    assert J.journal_body(log, J.current_journal(log, a)[1]) == body
    assert verify(log) == []


def test_reflects_through_must_be_a_record_of_this_run(env):
    log, a, b, w1 = env.log, env.a, env.b, env.w1
    log.rewind(a, 1, reason="try again")
    fork_id = log.view(a).head(log.view(a).live)
    assert log.store.get(fork_id)[0] == codec.FORK
    other = log.view(b).heads[0]
    for rt, exc in ((other, InvalidInput), (other.hex(), InvalidInput), (fork_id, InvalidInput), (b"\x01" * 32, ObjectNotFound),
                    ("f" * 64, ObjectNotFound), (10 ** 6, InvalidInput), ("nonsense", InvalidInput)):
        with pytest.raises(exc):
            J.update_journal(log, a, w1, {"n": 1}, reflects_through=rt)
    assert J.current_journal(log, a) is None
    assert verify(log) == []


# =====================================================================================================
# 2. The Backend Host process
# =====================================================================================================

def test_backend_answers_malformed_input_with_a_typed_error_and_stays_up(env, backend):
    sock, w1, a = backend.sock, env.w1, env.a
    good = read_req(w1, a).to_json()
    deep = b'{"op":"read","request":' + b"[" * 50000 + b"]" * 50000 + b"}\n"
    cases = [
        (b"not json\n", 400), (b"\n", 400), (b"\xff\xfe\n", 400), (b"[1,2]\n", 400), (b'"read"\n', 400), (b"null\n", 400),
        (deep, 400), (b'{"op":"frobnicate"}\n', 400), (b'{"op":null}\n', 400), (b'{"op":["read"]}\n', 400),
        (b'{"op":"read"}\n', 401), (b'{"op":"read","request":[]}\n', 401), (b'{"op":"read","request":"x"}\n', 401),
        (json.dumps({"op": "read", "request": dict(good, time="now")}).encode() + b"\n", 401),
        (json.dumps({"op": "read", "request": dict(good, params=[1])}).encode() + b"\n", 401),
        (json.dumps({"op": "read", "request": {k: v for k, v in good.items() if k != "nonce"}}).encode() + b"\n", 401),
        (json.dumps({"op": "read", "request": dict(good, nonce=None)}).encode() + b"\n", 401),
        (json.dumps({"op": "read", "request": dict(good, sig=None)}).encode() + b"\n", 401),
        (json.dumps({"op": "read", "request": dict(good, unknown_field=1)}).encode().replace(b'"time":', b'"time":NaN,"x":') + b"\n", 400),
        (json.dumps({"op": "read", "request": dict(good, unknown_field=1)}).encode().replace(b'"time":', b'"time":1e999,"x":') + b"\n", 400),
        (b'{"op": "read", "op": "stats"}\n', 400), (b'{"op": "read", "request": {"nonce": "\\ud800"}}\n', 400),
        (b'{"op": "read", "request": {"time": 100000000000000000000000}}\n', 400),
        (json.dumps({"op": "update", "request": good, "body": "!!not base64"}).encode() + b"\n", 400),
        (json.dumps({"op": "update", "request": good, "body": 12}).encode() + b"\n", 400),
        (json.dumps({"op": "update", "request": good, "body": ["x"]}).encode() + b"\n", 400),
        (json.dumps({"op": "update", "request": good}).encode() + b"\n", 400),
    ]
    for data, status in cases:
        out = raw_call(sock, data)
        assert out["ok"] is False and out["status"] == status, (data[:80], out)
        assert "Traceback" not in out["message"]
    # a line without its newline, then EOF
    assert raw_call(sock, json.dumps({"op": "stats"}).encode())["ok"] is True
    # still serving, and nothing was written
    assert json.loads(backend.host.read(read_req(w1, a)))["outcome"] == "absent"
    assert backend.proc.poll() is None and J.current_journal(env.log, a) is None
    # the deepest body allowed goes through the Backend's threads both ways
    assert J.update_journal(env.log, a, w1, nested(64), host=backend.host)[1] == 1
    assert json.loads(json.loads(backend.host.read(read_req(w1, a)))["text"]) == nested(64)
    with pytest.raises(InvalidInput):
        J.update_journal(env.log, a, w1, nested(65), host=backend.host)
    assert verify(env.log) == []


def test_backend_refuses_a_line_over_its_limit_and_an_idle_client_blocks_nobody(env, backend):
    sock = backend.sock
    idle = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    idle.connect(sock)
    idle.sendall(b'{"op": "rea')  # and never finishes
    try:
        out = raw_call(sock, b"x" * (MAX_LINE + 16) + b"\n", timeout=30)
        assert out["ok"] is False and out["status"] == 400 and out["message"] == "invalid input: request too long"
        assert json.loads(backend.host.read(read_req(env.w1, env.a)))["outcome"] == "absent"
        assert backend.host.stats()["reads"] == 1
    finally:
        idle.close()
    assert backend.proc.poll() is None


CHILD_RACE = r"""
import json, os, sys, time
from objstore import RunLog, Store
from objstore.storage import identity
from objstore import journal as J
from objstore.journal.backend import BackendHost
from objstore.errors import Conflict
store, run, keyfile, tag, k, sock, go = sys.argv[1:8]
log = RunLog(Store.open(store))
key = identity.load_key(keyfile)
host = BackendHost(sock) if sock != "-" else None
while not os.path.exists(go):
    time.sleep(0.002)
landed, conflicts = [], 0
while len(landed) < int(k):
    try:
        jid, ver = J.update_journal(log, run, key, {"by": tag, "n": len(landed)}, host=host)
        landed.append([ver, jid.hex()])
    except Conflict:
        conflicts += 1
print(json.dumps({"landed": landed, "conflicts": conflicts}))
"""

CHILD_ONE_SHOT = r"""
import json, os, sys, time
from objstore import RunLog, Store
from objstore.storage import identity
from objstore import journal as J
from objstore.journal.backend import BackendHost
from objstore.errors import Conflict
store, run, keyfile, tag, head, sock, go = sys.argv[1:8]
log = RunLog(Store.open(store))
key = identity.load_key(keyfile)
host = BackendHost(sock) if sock != "-" else J.LocalJournalHost(log)
data = J.journal_body_bytes({"by": tag})
req = identity.sign_request(key, "update", run, params={"reflects_through": None, "checkpoint": None, "enabled": None},
                            body=data, expect_head=None if head == "-" else head)
while not os.path.exists(go):
    time.sleep(0.002)
try:
    print("won", host.update(req, data)["version"])
except Conflict:
    print("conflict")
"""


def _spawn(code, *args):
    return subprocess.Popen([sys.executable, "-c", code, *map(str, args)], stdout=subprocess.PIPE, stderr=subprocess.PIPE)


@pytest.mark.parametrize("via", ["local", "backend"])
def test_concurrent_updates_from_processes_one_winner_per_head_no_lost_versions(env, via, request):
    log, a = env.log, env.a
    sock = request.getfixturevalue("backend").sock if via == "backend" else "-"
    # one shot: everybody signed over the same (absent) head; exactly one wins
    go = str(env.tmp / "go1")
    procs = [_spawn(CHILD_ONE_SHOT, env.root, a, env.w1_path, f"p{i}", "-", sock, go) for i in range(6)]
    time.sleep(0.3)
    open(go, "w").close()
    outs = [p.communicate(timeout=60) for p in procs]
    assert all(p.returncode == 0 for p in procs), [o[1].decode()[-500:] for o in outs]
    results = sorted(o[0].decode().split()[0] for o in outs)
    assert results == ["conflict"] * 5 + ["won"], results
    assert J.current_journal(log, a)[1]["version"] == 1
    # retrying writers: every version lands exactly once, numbered 1..N without gaps
    go = str(env.tmp / "go2")
    n_proc, k = 4, 3
    procs = [_spawn(CHILD_RACE, env.root, a, env.w1_path, f"r{i}", k, sock, go) for i in range(n_proc)]
    time.sleep(0.3)
    open(go, "w").close()
    outs = [p.communicate(timeout=60) for p in procs]
    assert all(p.returncode == 0 for p in procs), [o[1].decode()[-500:] for o in outs]
    landed = [v for o in outs for v in json.loads(o[0])["landed"]]
    chain = []
    cur = log.store.read_ref(J.journal_ref(a))
    while isinstance(cur, bytes):
        j = log.store.get_typed(cur, codec.JOURNAL)
        chain.append((cur, j))
        cur = j["previous"]
    chain.reverse()
    assert [j["version"] for _, j in chain] == list(range(1, 2 + n_proc * k))
    assert sorted(v for v, _ in landed) == list(range(2, 2 + n_proc * k))
    assert {h for _, h in landed} == {jid.hex() for jid, _ in chain[1:]}
    bodies = [J.journal_body(log, j) for _, j in chain[1:]]
    assert sorted((b["by"], b["n"]) for b in bodies) == sorted((f"r{i}", n) for i in range(n_proc) for n in range(k))
    assert outcome(env, a)["outcome"] == "present"
    assert verify(log) == []


def test_kill_9_of_the_backend_mid_request_then_a_new_server_on_the_stale_socket(env, backend):
    log, a, sock, proc = env.log, env.a, backend.sock, backend.proc
    J.update_journal(log, a, env.w1, {"n": 1}, host=backend.host)
    os.kill(proc.pid, signal.SIGSTOP)  # the request reaches the socket; the server never answers it
    box = {}

    def run():
        try:
            box["res"] = J.compact(log, a, J.StubCompactor(), host=BackendHost(sock, timeout=20), key=env.w1, keep_tail=1)
        except BaseException as e:  # noqa: BLE001 - the test reports it
            box["err"] = e

    t = threading.Thread(target=run)
    t.start()
    time.sleep(0.4)
    assert t.is_alive(), box
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(10)
    t.join(20)
    assert not t.is_alive() and "err" not in box, box
    res = box["res"]
    assert res.snapshot.outcome == "unavailable" and res.snapshot.reason.startswith("read_failed:")
    assert J.segments(log, a)[-1][0] == res.segment_id
    # an update cannot be made through a dead Host, and says so
    from objstore.journal.host import HostUnavailable
    with pytest.raises(HostUnavailable):
        J.update_journal(log, a, env.w1, {"n": 2}, host=BackendHost(sock, timeout=5))
    # the socket file of the killed server is still there; a new server takes the path over
    assert os.path.exists(sock)
    p2 = serve(env.root, sock)
    try:
        assert json.loads(BackendHost(sock).read(read_req(env.w1, a)))["outcome"] == "present"
        assert J.update_journal(log, a, env.w1, {"n": 2}, host=BackendHost(sock))[1] == 2
    finally:
        p2.terminate()
        assert p2.wait(10) == 0
    assert not os.path.exists(sock)
    assert verify(log) == []


# =====================================================================================================
# 3. Concurrent compactions, and kill -9 in the middle of compact / update_journal
# =====================================================================================================

CHILD_COMPACT = r"""
import os, sys, time
from objstore import RunLog, Store
from objstore.storage import identity
from objstore import journal as J
from objstore.errors import Conflict
store, run, keyfile, go, tries = sys.argv[1:6]
log = RunLog(Store.open(store))
key = identity.load_key(keyfile)
while not os.path.exists(go):
    time.sleep(0.002)
won = []
for _ in range(int(tries)):
    try:
        res = J.compact(log, run, J.StubCompactor(on_call=lambda r: time.sleep(0.05)), host=J.LocalJournalHost(log), key=key, keep_tail=1)
        won.append(res.segment["seq"])
    except Conflict:
        pass
print(" ".join(map(str, won)))
"""


def test_concurrent_compactions_from_processes_keep_one_segment_per_seq(env):
    log, a = env.log, env.a
    J.update_journal(log, a, env.w1, {"n": 1})
    first = J.compact(log, a, J.StubCompactor(), host=env.host, key=env.w1, keep_tail=1)
    first_raw = log.store.get_raw(first.segment_id)
    for i in range(4):
        J.record_turn(log, a, "user", f"more {i}")
    go = str(env.tmp / "go")
    procs = [_spawn(CHILD_COMPACT, env.root, a, env.w1_path, go, 4) for _ in range(4)]
    time.sleep(0.3)
    open(go, "w").close()
    outs = [p.communicate(timeout=60) for p in procs]
    assert all(p.returncode == 0 for p in procs), [o[1].decode()[-800:] for o in outs]
    won = sorted(int(s) for o in outs for s in o[0].split())
    segs = J.segments(log, a)
    assert [s["seq"] for _, s in segs] == list(range(1, len(segs) + 1))
    assert won == list(range(2, len(segs) + 1)) and len(won) >= 1
    assert [s["previous"] for _, s in segs] == [None] + [sid for sid, _ in segs[:-1]]
    assert log.store.get_raw(first.segment_id) == first_raw
    assert verify(log) == []


CHILD_KILLED = r"""
import sys, time
from objstore import RunLog, Store
from objstore.storage import identity
from objstore import journal as J
from objstore.journal import host as H
store, run, keyfile, marker, what = sys.argv[1:6]
log = RunLog(Store.open(store))
key = identity.load_key(keyfile)

def hang(*a):
    open(marker, "w").close()
    time.sleep(60)

if what == "compact":
    J.compact(log, run, J.StubCompactor(on_call=hang), host=J.LocalJournalHost(log), key=key, keep_tail=1)
elif what == "compact-commit":
    # inside compact's commit: objects staged, the segments ref not yet moved, the writer lock held
    real = log.store.set_ref
    log.store.set_ref = lambda *a, **k: (hang(), real(*a, **k))
    J.compact(log, run, J.StubCompactor(), host=J.LocalJournalHost(log), key=key, keep_tail=1)
else:
    # inside the Host's update commit: body and version staged, the journal ref not yet moved
    host = J.LocalJournalHost(log)
    real_time = H.time.time
    H.time = type("T", (), {"time": staticmethod(lambda: (hang(), real_time())[1])})
    J.update_journal(log, run, key, {"n": "never"}, host=host)
"""


@pytest.mark.parametrize("what", ["compact", "compact-commit", "update"])
def test_kill_9_in_the_middle_of_compact_or_update_leaves_a_clean_store(env, what):
    log, a = env.log, env.a
    v1, _ = J.update_journal(log, a, env.w1, {"n": 1})
    refs_before = dict(log.store.list_refs())
    marker = str(env.tmp / "in-the-middle")
    p = _spawn(CHILD_KILLED, env.root, a, env.w1_path, marker, what)
    deadline = time.monotonic() + 30
    while not os.path.exists(marker):
        assert p.poll() is None, p.communicate()[1].decode()[-800:]
        assert time.monotonic() < deadline
        time.sleep(0.01)
    p.send_signal(signal.SIGKILL)
    p.wait(10)
    fresh = RunLog(Store.open(env.root))
    assert verify(fresh) == []
    assert dict(fresh.store.list_refs()) == refs_before, "nothing half-written is visible"
    assert J.segments(fresh, a) == [] and J.current_journal(fresh, a)[0] == v1
    # the writer lock died with the process: both paths work right away
    assert J.update_journal(fresh, a, env.w1, {"n": 2})[1] == 2
    assert J.compact(fresh, a, J.StubCompactor(), host=J.LocalJournalHost(fresh), key=env.w1, keep_tail=1).segment["seq"] == 1
    assert verify(fresh) == []


# =====================================================================================================
# 4. The command line: bad input is one line and its documented exit code
# =====================================================================================================

@pytest.fixture
def cli_sess(tmp_path):
    root = str(tmp_path / "cs")
    rc, out, err = run_cli("init", store=root, exit_code=0)
    assert rc == 0, err
    runs = []
    for subject in ("alice", "bob"):
        rc, out, err = run_cli("session", "start", "--subject", subject, "--json", store=root, exit_code=0)
        assert rc == 0, err
        runs.append(json.loads(out)["run"])
    lines = "".join(json.dumps({"v": 1, "type": "turn", "run": r, "role": "user", "content": f"hi {i}"}) + "\n"
                    for r in runs for i in range(3))
    assert run_cli("ingest", "-", store=root, input=lines.encode(), exit_code=0)[0] == 0
    return root, runs[0], runs[1], tmp_path


def one_line_error(result, code):
    rc, out, err = result
    assert rc == code, (rc, out, err)
    assert "Traceback" not in err and "Traceback" not in out, err
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("objstore: error: "), err
    return lines[0]


@pytest.mark.slow
def test_cli_bad_input_is_one_line_with_its_exit_code_and_the_store_verifies(cli_sess):
    root, run, other, tmp = cli_sess

    def update(body: bytes, *extra, rt="latest"):
        return lambda exit_code: run_cli("journal", "update", run, "-", "--reflects-through", rt, *extra, store=root, input=body,
                                         exit_code=exit_code)

    def cli(*args):
        return lambda exit_code: run_cli(*args, store=root, exit_code=exit_code)

    other_head = json.loads(run_cli("log", other, "-n", "1", "--json", store=root, exit_code=0)[1])[0]["id"]
    cases = [
        (update(b"[1, 2]"), 5), (update(b'"a string"'), 5), (update(b"null"), 5), (update(b"{not json"), 5),
        (update(b"\xff\xfe"), 5), (update(b""), 5),
        (update(b'{"a":' * 600 + b"1" + b"}" * 600), 5),  # json.loads takes it; the encoder used to overflow
        (update(b'{"x": NaN}'), 5), (update(b'{"x": Infinity}'), 5), (update(b'{"x": -1e999}'), 5),
        (update(b'{"entries": [{"id": "a"}, {"id": "a"}]}'), 5), (update(b'{"entries": [{"id": 1}]}'), 5),
        (update(b'{"entries": [{"id": null}]}'), 5), (update(b'{"entries": [{"id": "a\\nb"}]}'), 5),
        (update(b'{"entries": {"id": "a"}}'), 5), (update(b'{"entries": ["a"]}'), 5),
        (update(b"{}", rt=other_head), 5),                 # a record of another run
        (update(b"{}", rt="ab" * 32), 4),                  # no such object
        (update(b"{}", rt="nonsense"), 5),
        (update(b"{}", "--checkpoint", other_head), 5),
        (cli("compact", run, "--budget", "-1"), 2),  # a bad command-line value (issue 16)
        (cli("compact", run, "--keep", "-1"), 2),
        (cli("task", "close", run, "never-opened"), 5),
        (cli("task", "close", "no-such-run", "t"), 4),
        (cli("session", "start", "--subject", "alice", "--predecessor", "no-such-run"), 4),  # a RUN spec: run not found
        (cli("session", "start", "--subject", ""), 5),
        (cli("journal", "show", "no-such-run"), 4),
        (cli("journal", "enable", "no-such-run"), 4),
        (cli("compact", "no-such-run"), 4),
    ]
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(8) as pool:  # separate processes; none of them writes anything
        results = list(pool.map(lambda c: c[0](c[1]), cases))
    for result, (_, code) in zip(results, cases, strict=True):
        one_line_error(result, code)
    assert run_cli("journal", "show", run, store=root, exit_code=4)[0] == 4, "no version was written"
    assert run_cli("verify", store=root, exit_code=0)[0] == 0


def test_cli_big_numbers_fork_ids_and_a_predecessor_of_another_subject(cli_sess):
    root, run, other, tmp = cli_sess

    def update(body: bytes, *extra, rt="latest"):
        return lambda exit_code: run_cli("journal", "update", run, "-", "--reflects-through", rt, *extra, store=root, input=body,
                                         exit_code=exit_code)

    # integers outside int64/uint64 are invalid input, as in every JSON input (codec.parse_json);
    # those at the edges of the range are kept exactly
    one_line_error(update(b'{"big": 123456789012345678901234567890, "neg": -98765432109876543210}')(5), 5)
    big = b'{"big": 18446744073709551615, "neg": -9223372036854775808}'
    assert update(big)(0)[0] == 0
    assert json.loads(run_cli("journal", "show", run, "--json", store=root, exit_code=0)[1])["body"] == json.loads(big)
    # a fork object's id is not a record
    rc, out, err = run_cli("rewind", run, "--to-lsn", "1", "--json", store=root, exit_code=0)
    assert rc == 0, err
    fork_id = json.loads(out)["id"]
    one_line_error(update(b"{}", rt=fork_id)(5), 5)
    # a predecessor of another subject: the session starts, and the other subject's journal is never read
    assert update(b'{"secret": "alice only"}', rt="none")(0)[0] == 0
    rc, out, err = run_cli("session", "start", "--subject", "bob", "--predecessor", run, "--json", store=root, exit_code=0)
    assert rc == 0, err
    s = json.loads(out)
    assert s["startup"]["outcome"] == "unavailable" and s["startup"]["session"] is None
    assert "alice only" not in out
    assert run_cli("verify", store=root, exit_code=0)[0] == 0


def test_cli_a_body_nested_beyond_the_recursion_limit_is_invalid_input(cli_sess):
    root, run, _, _ = cli_sess
    one_line_error(run_cli("journal", "update", run, "-", "--reflects-through", "latest", store=root,
                           input=b"[" * 100000 + b"]" * 100000, exit_code=5), 5)


def test_cli_duplicate_keys_and_nonfinite_numbers_are_invalid_input(cli_sess):
    root, run, _, _ = cli_sess
    for body in (b'{"a": 1, "a": 2}', b'{"a": NaN}', b'{"a": Infinity}', b'\xff\xfe'):
        one_line_error(run_cli("journal", "update", run, "-", "--reflects-through", "latest", store=root, input=body, exit_code=5), 5)
    assert run_cli("verify", store=root, exit_code=0)[0] == 0


# =====================================================================================================
# 5. The bounded projection
# =====================================================================================================

def _priority(doc):
    entries = doc.get("entries") or []
    opn = [i for i in reversed(range(len(entries))) if entries[i].get("status", "open") == "open"]
    return opn + [i for i in reversed(range(len(entries))) if entries[i].get("status", "open") != "open"]


def check_projection(body: bytes, budget: int):
    """Every documented property of one projection; returns the ids kept (None: the whole body)."""
    text, om = project(body, budget)
    if len(body) <= budget:
        assert text.encode() == body and om is None
        return None
    doc = json.loads(body)
    full_sha = hashlib.sha256(body).hexdigest()
    assert om is not None and om["body_sha256"] == full_sha
    raw = text.encode("utf-8")
    if "\n" not in text:  # the omitted line alone: only when not even "{}\n" + the line fits
        assert text == omitted_line([e["id"] for e in doc.get("entries") or []] + [f"field:{f}" for f in sorted(k for k in doc if k != "entries")],
                                    len(body), full_sha)
        assert om["bytes"] == len(body)
        kept = []
    else:
        assert len(raw) <= budget, (budget, len(raw), text)
        proj, line = text.split("\n")
        pdoc = json.loads(proj)
        assert codec.canonical_json(pdoc) == proj.encode()
        entries = doc.get("entries") or []
        kept_entries = pdoc.get("entries") or []
        kept = [e["id"] for e in kept_entries]
        # whole entries, in their original order
        by_id = {e["id"]: e for e in entries}
        assert all(by_id[e["id"]] == e for e in kept_entries)
        assert kept == [e["id"] for e in entries if e["id"] in set(kept)]
        # open ones first, then the newest: what is kept is a prefix of that order
        prio = [entries[i]["id"] for i in _priority(doc)]
        assert kept == [e["id"] for e in entries if e["id"] in set(prio[:len(kept)])]
        # the other fields: all kept, or all named as omitted
        fields = {k: v for k, v in doc.items() if k != "entries"}
        pfields = {k: v for k, v in pdoc.items() if k != "entries"}
        assert pfields in (fields, {})
        if fields and not pfields:  # the other fields go only when they alone (and no entry) do not fit
            alone = dict(fields, **({"entries": []} if "entries" in doc else {}))
            alone_text = codec.canonical_json(alone) + b"\n" + omitted_line(
                [e["id"] for e in entries], len(body) - len(codec.canonical_json(alone)), full_sha).encode()
            assert len(alone_text) > budget
        gone = [e["id"] for e in entries if e["id"] not in set(kept)]
        named = gone + ([f"field:{f}" for f in sorted(fields)] if fields and not pfields else [])
        assert line == omitted_line(named, len(body) - len(proj.encode()), full_sha)
        assert om["bytes"] == len(body) - len(proj.encode()) and om["entries"] == gone
        # greedy: the next entry in priority order would not have fit
        if len(kept) < len(prio):
            nxt = set(kept) | {prio[len(kept)]}
            bigger = dict(pdoc, entries=[e for e in entries if e["id"] in nxt])
            longer = codec.canonical_json(bigger) + b"\n" + omitted_line(
                [e["id"] for e in entries if e["id"] not in nxt] + ([f"field:{f}" for f in sorted(fields)] if fields and not pfields else []),
                len(body) - len(codec.canonical_json(bigger)), full_sha).encode()
            assert len(longer) > budget
    return kept


BODIES = {
    "mixed": {"title": "T", "entries": [{"id": f"e{i}", "status": "open" if i in (1, 4) else "done", "text": "x" * (20 + 7 * i)}
                                        for i in range(7)]},
    "unicode": {"note": "ü", "entries": [{"id": f"ü{i}", "status": "done" if i % 3 else "open", "text": "続き✓" * (i + 1)}
                                         for i in range(6)]},
    "no entries": {"big": "y" * 300, "other": [1, 2, 3]},
    "empty entries": {"big": "y" * 300, "entries": []},
    "only entries": {"entries": [{"id": f"n{i}", "text": "z" * 40} for i in range(5)]},
    "big fields small open entry": {"big": "y" * 400, "entries": [{"id": "o", "status": "open"}, {"id": "d", "status": "done", "text": "q" * 30}]},
    "fields then entries": {"title": "x" * 100, "entries": [{"id": f"e{i}", "t": "q" * 10} for i in range(10)]},
}


@pytest.mark.parametrize("name", sorted(BODIES))
def test_projection_properties_at_every_budget(name):
    body = codec.canonical_json(BODIES[name])
    for budget in range(0, len(body) + 3):
        check_projection(body, budget)


@pytest.mark.parametrize("name", ["mixed", "unicode", "fields then entries"])
def test_projection_exact_fit_boundaries(name):
    """Stepping the budget one byte at a time: the projection changes only at a budget its new
    text fits exactly (one byte less and it did not fit), and the whole body at len(body)."""
    body = codec.canonical_json(BODIES[name])
    prev, changes = None, 0
    for budget in range(len(body) + 2):
        text, om = project(body, budget)
        if om is None:
            state = "whole"
        elif "\n" not in text:
            state = "line"
        else:
            pdoc = json.loads(text.split("\n")[0])
            state = (tuple(e["id"] for e in pdoc.get("entries") or []), tuple(sorted(k for k in pdoc if k != "entries")))
        if prev is not None and state != prev:
            changes += 1
            assert len(text.encode()) == budget, (budget, state, prev)
        prev = state
    assert prev == "whole" and changes > 3
    assert project(body, len(body))[0].encode() == body and project(body, len(body) - 1)[1] is not None


def test_projection_budget_zero_and_below_the_omitted_line():
    doc = BODIES["mixed"]
    body = codec.canonical_json(doc)
    line = omitted_line([e["id"] for e in doc["entries"]] + ["field:title"], len(body), hashlib.sha256(body).hexdigest())
    assert project(body, 0)[0] == line  # just that line: the one case over the budget (documented)
    # the line alone fits exactly: the answer fits too
    text, om = project(body, len(line.encode()))
    assert len(text.encode()) <= len(line.encode()) and om["bytes"] <= len(body)
    text, _ = project(body, len(line.encode()) - 1)
    assert text == line


def test_projection_of_fields_too_big_still_keeps_entries_that_fit():
    """Dropping the other fields used to return at once with no entry kept, although the open
    entry fit. (host.project: the greedy pass runs after fields are dropped too.)"""
    doc = BODIES["big fields small open entry"]
    body = codec.canonical_json(doc)
    text, om = project(body, 200)
    proj, line = text.split("\n")
    assert json.loads(proj) == {"entries": [{"id": "o", "status": "open"}]} and om["entries"] == ["d"]
    assert om["fields"] == ["big"] and "field:big" in line and len(text.encode()) <= 200


def test_projection_of_a_legacy_body_that_is_not_an_object(tmp_path):
    """A legacy (pre-owner-key) version may hold any bytes; over budget it is named as omitted,
    never a crash. (host.project: a body that is not a JSON object keeps nothing.)"""
    for body in (b"[1,2,3]" * 30, b"not json at all " * 20, b"\xff" * 200, b'"a string"' * 20):
        text, om = project(body, 100)
        assert "\n" not in text and text.startswith("omitted: ") and om["bytes"] == len(body)
    log = RunLog(Store.init(str(tmp_path / "legacy")))
    run = J.start_session(log, "alice", run="old")
    J.record_turn(log, run, "user", "x")
    with log.store.batch():
        jid = log.store.put(codec.JOURNAL, {"run": run, "version": 1, "body": log.store.put_blob(b"[1,2,3]" * 30), "source_end": 1,
                                            "checkpoint": 1, "enabled": True, "previous": None, "writer": "w", "time": 0.0})
        log.store.set_ref(J.journal_ref(run), None, jid, "legacy")
    owner, _ = identity.ensure_owner_key(log.store)
    res = J.compact(log, run, J.StubCompactor(), host=J.LocalJournalHost(log), key=owner, keep_tail=0, budget_bytes=50)
    assert res.snapshot.outcome == "over_budget" and res.snapshot.text.startswith("omitted: ")


def test_projection_through_the_host_is_what_project_gives(env):
    log, a = env.log, env.a
    doc = BODIES["unicode"]
    J.update_journal(log, a, env.w1, doc)
    body = J.journal_body_bytes(doc)
    for budget in (0, 50, 200, len(body) - 1, len(body)):
        got = env.host.read(identity.sign_request(env.w1, "read", a, params=dict(READ, budget=budget)))
        text, om = project(body, budget)
        assert got["text"] == text and got["omitted"] == om
        assert got["outcome"] == ("present" if budget >= len(body) else "over_budget")
