"""verify over a packing that dropped a blob a live record names: ``missing-body`` (issue 17).

verify's ``missing-body`` check marks a removed blob as named by a live record (``live_removed``)
only for records it scans *after* the blob's removed row. In one batch commit the entry stores its
records before its blobs (records' block first), so a live record and a deleted run's record that
name a blob committed in the same entry are both scanned before the blob: the blob is then only in
``dead_refs`` and its removal passes. Here a valid packing of the segment without that blob, put in
place with a rewrite entry naming it (what a wrong gc would write): verify says ok, while the live
run's blob is gone.

Two runs' records share an entry only where one log holds every run (formats 3 to 5): that store is made so
here. With a log per run the same forged packing of the live run's own log is named too (the second test).
"""

from __future__ import annotations

import os

import blake3

from objstore import RunLog, Store
from objstore.errors import BodyRemoved
from objstore.lifecycle import delete as D
from objstore.lifecycle import gc as G
from objstore.runs.verify import verify_report


def test_a_dropped_blob_a_live_record_of_the_same_entry_names_is_missing_body(tmp_path, monkeypatch):
    monkeypatch.setenv("OBJSTORE_NEW_FORMAT", "3")
    root = str(tmp_path / "s")
    log = RunLog(Store.init(root, fsync="off"))
    log.start_run("live")
    log.start_run("gone")
    with log.store.batch():  # one entry: both records, then the blob
        x = log.put_blob(b"shared in one commit " * 10)
        log.record_attempt("live", 0, 0, "succeeded", prompt=x)
        log.record_attempt("gone", 0, 0, "succeeded", prompt=x)
    D.delete_run(log, "gone", reason="erasure")
    G.gc(Store.open(root))  # keeps x: the live record names it
    s = Store.open(root)
    assert s.get_blob(x) == b"shared in one commit " * 10
    out = str(tmp_path / "forged.seg")
    digest, idx, removed = G.pack_segment(s.engine, 1, {x}, out, sync=False)
    assert set(removed) == {x}
    with open(s.engine.idx_path(1) + ".new", "wb") as f:
        f.write(idx)
    os.replace(s.engine.idx_path(1) + ".new", s.engine.idx_path(1))
    os.replace(out, s.engine.seg_path(1))
    s.engine.commit_rewrite([[1, digest, blake3.blake3(idx).digest()]])
    fresh = Store.open(root)
    try:
        fresh.get_blob(x)
        gone = False
    except BodyRemoved:
        gone = True
    assert gone  # the live run's prompt is unreadable ...
    codes = [p.code for p in verify_report(RunLog(fresh), check_state=False).problems]
    assert "missing-body" in codes  # ... and verify says ok


def test_a_blob_dropped_from_a_run_log_its_live_record_names_is_missing_body(tmp_path, monkeypatch):
    monkeypatch.setenv("OBJSTORE_NEW_FORMAT", "6")
    root = str(tmp_path / "s")
    log = RunLog(Store.init(root, fsync="off"))
    log.start_run("live")
    with log.store.batch():  # one entry of the live run's log: its record, then the blob
        x = log.put_blob(b"shared in one commit " * 10)
        log.record_attempt("live", 0, 0, "succeeded", prompt=x)
    s = Store.open(root)
    e = s.logs.run_log("live")
    e.seal_now()  # (what gc does first to the log it packs)
    out = str(tmp_path / "forged.seg")
    digest, idx, removed = G.pack_segment(e, 1, {x}, out, sync=False)
    assert set(removed) == {x}
    with open(e.idx_path(1) + ".new", "wb") as f:
        f.write(idx)
    os.replace(e.idx_path(1) + ".new", e.idx_path(1))
    os.replace(out, e.seg_path(1))
    e.commit_rewrite([[1, digest, blake3.blake3(idx).digest()]])
    problems = verify_report(RunLog(Store.open(root)), check_state=False).problems
    assert [(p.code, p.subject) for p in problems] == [("missing-body", x.hex())]
    assert problems[0].detail.startswith("gc removed the body of this blob, but a live record (")
