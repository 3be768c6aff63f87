"""Deletion is real (issue 17's first acceptance): a secret planted in a deleted run's blob and record body is
found in the store's files before, and in none of them after ``delete`` + ``gc`` — segments decompressed
block by block, indexes, checkpoint, witness, tmp/, state.db and its WAL read as raw pages — nor in a
backup refreshed after the gc; a blob the deleted run shared with a live run stays, and the live run reads
back byte for byte; verify exits 0 and an anchor taken before the deletion still verifies. The same for a
redacted blob, whose reads are the typed Redacted error."""

from __future__ import annotations

import os
import secrets
import zlib

import pytest
import zstandard
from helpers import is_per_run, log_engine_of, run_cli, run_log_root, store_log_root

from objstore import RunLog, Store
from objstore.errors import BodyRemoved, Redacted
from objstore.journal import compaction as C
from objstore.journal import sessions as S
from objstore.journal.compactor import StubCompactor
from objstore.lifecycle import backup as B
from objstore.lifecycle import delete as D
from objstore.lifecycle import gc as G
from objstore.runs.verify import verify_report
from objstore.storage import codec, identity

ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"


def _expanded(data: bytes) -> list[bytes]:
    """The bytes of a file as a reader could see them: raw, and every zstd frame in it decompressed
    (segments' blocks, packed segments' blocks and meta frames; anything else that looks like one)."""
    out = [data]
    d = zstandard.ZstdDecompressor()
    i = data.find(ZSTD_MAGIC)
    while i >= 0:
        try:
            with d.stream_reader(data[i:], read_across_frames=False) as r:
                out.append(r.read(256 << 20))
        except zstandard.ZstdError:
            pass
        i = data.find(ZSTD_MAGIC, i + 1)
    return out


def first_segment(root: str, run: str) -> str:
    """The path (relative to ``root``) of the first segment of the log holding run ``run``'s objects: its own log
    on a store of a log per run (format 6), the store's one log before."""
    return os.path.relpath(os.path.join(run_log_root(root, run), "log", "0000000001.seg"), root)


def found(root: str, needle: bytes) -> list[str]:
    """Every file under ``root`` holding ``needle`` raw or inside a zstd frame (also zlib, for good measure)."""
    hits = []
    for dp, _, files in os.walk(root):
        for fn in files:
            p = os.path.join(dp, fn)
            with open(p, "rb") as f:
                data = f.read()
            views = _expanded(data)
            try:
                views.append(zlib.decompress(data))
            except zlib.error:
                pass
            if any(needle in v for v in views):
                hits.append(os.path.relpath(p, root))
    return hits


@pytest.fixture
def planted(tmp_path):
    root = str(tmp_path / "s")
    log = RunLog(Store.init(root))
    identity.ensure_owner_key(log.store)
    s_blob, s_rec, s_shared = (secrets.token_bytes(32) for _ in range(3))
    shared = log.put_blob(b"shared transcript " + s_shared + b" end")
    log.start_run("gone", subject="customer-7")
    log.start_run("kept", subject="customer-8")
    for i in range(6):
        mine = log.put_blob(b"private " + s_blob + b" step %d" % i)
        log.record_attempt("gone", i, 0, "succeeded", prompt=shared, output=mine, context={"note": s_rec.hex(), "i": i})
        log.record_attempt("kept", i, 0, "succeeded", prompt=shared, context={"i": i})
    run_cli("log", "gone", store=root, exit_code=0)  # the state cache holds the run's rows now
    run_cli("episode", "gone", store=root, exit_code=0)
    return root, log, {"blob": s_blob, "record": s_rec.hex().encode(), "shared": s_shared}


def test_delete_then_gc_leaves_no_trace_of_the_deleted_run(planted, tmp_path):
    root, log, secret = planted
    dest = str(tmp_path / "backup")
    B.backup(log.store, dest)
    for what, needle in secret.items():
        assert found(root, needle), what  # the search can fail: each secret is there before
        assert found(dest, needle), what
    token = run_cli("anchor", store=root, exit_code=0)[1].strip()
    kept_before = run_cli("export", "kept", store=root, exit_code=0)[1]
    D.delete_run(log, "gone", reason="erasure request 7")
    G.gc(Store.open(root))
    B.backup(Store.open(root), dest)
    for where in (root, dest):
        assert found(where, secret["blob"]) == [], where
        assert found(where, secret["record"]) == [], where
        assert found(where, secret["shared"]), where  # the live run still names the shared blob
    kept_after = run_cli("export", "kept", store=root, exit_code=0)[1]
    assert kept_after == kept_before
    run_cli("verify", "--anchor", token, store=root, exit_code=0)
    run_cli("--store", dest, "verify", "--anchor", token, exit_code=0)
    _, out, _ = run_cli("runs", store=root, exit_code=0)
    assert "gone" not in out and "kept" in out


def test_redact_then_gc_removes_the_body_and_every_read_is_typed(planted):
    root, log, secret = planted
    blob = log.put_blob(b"api key sk-" + secret["blob"] + b" leaked")
    log.record_attempt("kept", 99, 0, "succeeded", output=blob)
    assert found(root, secret["blob"])
    D.redact(log, blob, reason="leaked API key")
    s = Store.open(root)
    with pytest.raises(Redacted):
        s.get_raw(blob)
    _, _, err = run_cli("cat", blob.hex(), "--body", store=root, exit_code=12)
    assert "redacted" in err and "leaked API key" in err
    D.delete_run(log, "gone", reason="so the other secret's copies go too")
    G.gc(Store.open(root))
    assert found(root, b"api key sk-") == []
    _, _, err = run_cli("show", blob.hex(), store=root, exit_code=12)
    assert "leaked API key" in err
    _, out, err = run_cli("verify", store=root, exit_code=0)
    where = f" [{os.path.join(store_log_root(root), 'log')}]" if is_per_run(root) else ""  # the log holding the redaction
    assert f"note: redacted {blob.hex()}: leaked API key{where}\n" in out + err
    # the record naming the redacted blob still verifies and reads (its header and body; not the blob)
    run_cli("log", "kept", store=root, exit_code=0)


def test_a_guessable_redacted_body_is_confirmable_from_its_id(tmp_path):
    """What deletion cannot hide, stated: the id commits to the content, so a 6-digit code is found by
    hashing the million candidates' canonical bytes. The body is gone; the id is not."""
    log = RunLog(Store.init(str(tmp_path / "s")))
    code = b"%06d" % (secrets.randbelow(10**6))
    blob = log.put_blob(code)
    log.start_run("r")
    log.record_attempt("r", 0, 0, "succeeded", output=blob)
    D.redact(log, blob, reason="one-time code")
    G.gc(Store.open(str(tmp_path / "s")))
    hit = next(c for c in (b"%06d" % i for i in range(10**6)) if codec.hash_bytes(codec.encode("blob", c)) == blob)
    assert hit == code


@pytest.mark.parametrize("fmt", [3, 6])
def test_a_backup_of_a_packed_store_is_format_4_too(tmp_path, fmt):
    """A backup has its source's format: on a store of one log, gc's packed segments raise it from 3 to 4 (the
    one-log format's own step, so that store is made in format 3); a store of a log per run is format 6 before
    and after gc (packed segments are part of it)."""
    from objstore.storage.storedir import read_marker

    root = str(tmp_path / "s")
    log = RunLog(Store.init(root, format=fmt))
    log.start_run("gone")
    log.start_run("kept")
    for i in range(3):
        log.record_attempt("gone", i, 0, "succeeded", output=log.put_blob(b"private %d" % i))
        log.record_attempt("kept", i, 0, "succeeded")
    D.delete_run(log, "gone", reason="so gc packs a segment")
    dest = str(tmp_path / "b")
    B.backup(log.store, dest)
    assert read_marker(root) == read_marker(dest) == fmt
    assert G.gc(Store.open(root)).rewritten  # it packed a segment
    B.backup(Store.open(root), dest)
    assert read_marker(root) == read_marker(dest) == (4 if fmt == 3 else 6)


# Deleting a session removes its compaction segments' bodies at gc. docs/FORMAT.md "What gc removes" and the gc
# docstring: "the fork, journal and segment objects of deleted runs". A compaction segment object of a deleted session
# and the blobs only it names (``input``: the compactor's request, every summarized turn's text verbatim; ``summary``;
# ``snapshot``) must lose their bodies, or a secret typed in a turn of the deleted session is still in the store after
# ``delete`` + ``gc``.
def test_delete_and_gc_of_a_compacted_session_leaves_no_turn_text(tmp_path):
    root = str(tmp_path / "s")
    log = RunLog(Store.init(root))
    owner, _ = identity.ensure_owner_key(log.store)
    secret = secrets.token_bytes(16).hex().encode()
    run = S.start_session(log, subject="customer-9")
    log.start_run("kept")
    log.record_attempt("kept", 0, 0, "succeeded")
    for i in range(6):
        S.record_turn(log, run, "user", f"turn {i}: my card is {secret.decode()}")
    res = C.compact(log, run, StubCompactor(), host=None, key=owner, keep_tail=1)
    assert found(root, secret) == [first_segment(root, run)]
    D.delete_run(log, run, reason="erasure request")
    G.gc(Store.open(root))
    fresh = Store.open(root)
    assert verify_report(RunLog(fresh), check_state=False).problems == []
    assert found(root, secret) == []  # still in log/0000000001.seg: the segment's "input" blob
    try:
        log_engine_of(fresh, run).read(res.segment_id)
        kept = True
    except BodyRemoved:
        kept = False
    assert not kept, "the deleted session's compaction segment object keeps its body"


@pytest.mark.slow
def test_delete_and_gc_of_a_session_with_a_journal_leaves_no_journal_text(tmp_path):
    """The same through the CLI for a journal version (``journal update``): its body blob is named by
    the journal object only, which gc never removes for a deleted run."""
    import json

    from helpers import run_cli

    root = str(tmp_path / "s")
    env = {"HOME": str(tmp_path / "home"), "XDG_CONFIG_HOME": str(tmp_path / "home")}
    run_cli("init", store=root, env_extra=env, exit_code=0)
    _, out, _ = run_cli("session", "start", "--subject", "customer-9", "--json", store=root, env_extra=env, exit_code=0)
    run = json.loads(out)["run"]
    secret = secrets.token_bytes(16).hex()
    run_cli("journal", "update", run, "-", "--reflects-through", "latest", store=root, env_extra=env,
            input=json.dumps({"note": secret}).encode(), exit_code=0)
    assert found(root, secret.encode()) == [first_segment(root, run)]
    run_cli("delete", run, "--reason", "erasure request", store=root, env_extra=env, exit_code=0)
    run_cli("gc", store=root, env_extra=env, exit_code=0)
    run_cli("verify", store=root, env_extra=env, exit_code=0)
    assert found(root, secret.encode()) == []  # still in log/0000000001.seg: the journal's body blob


def test_a_redacted_turn_does_not_make_the_whole_session_unreadable(tmp_path):
    """Redaction is for "an API key that leaked into one prompt". A session turn whose content blob is
    redacted: ``context`` and ``compact`` raise Redacted for the whole session (restore._turn_text reads
    every turn's blob unguarded), while a *deleted* turn folds to "" in both
    (tests/lifecycle/test_delete.py::test_a_sessions_deleted_turn_is_header_only_in_compaction_and_context)."""
    from objstore import journal as J

    log = RunLog(Store.init(str(tmp_path / "s")))
    owner, _ = identity.ensure_owner_key(log.store)
    s = J.start_session(log, "alice", run="S")
    turns = [J.record_turn(log, s, "user", f"turn {i} key-{i}") for i in range(4)]
    D.redact(log, turns[1].body["content"], reason="api key in a prompt")
    texts = [i.get("text") for i in J.context(log, s) if i.get("kind") == "turn"]  # Redacted
    assert texts[0] == "turn 0 key-0" and texts[2:] == ["turn 2 key-2", "turn 3 key-3"]
    assert "key-1" not in (texts[1] or "")
    res = J.compact(log, s, J.StubCompactor(), host=J.LocalJournalHost(log), key=owner, keep_tail=1)
    assert b"key-1" not in res.request_bytes
