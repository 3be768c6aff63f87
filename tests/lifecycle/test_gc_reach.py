"""What gc counts as still named (issue 17).

``gc.doomed`` keeps a blob a deleted run's record names only when a live record, or a live journal or
segment object, names it too. A ref outside ``run/`` may name a blob directly: ``keys/owner`` (the
write-once owner public key, a blob). A deleted run whose record holds the same bytes (an agent that
logged ``objstore key show``) makes gc remove the owner key's body: the store can never check a
signature again (every ``delete`` exits 12, verify reports its own deletions as bad).
"""

from __future__ import annotations

from objstore import RunLog, Store
from objstore.lifecycle import delete as D
from objstore.lifecycle import gc as G
from objstore.runs.verify import verify_report
from objstore.storage import identity


def test_gc_keeps_the_owner_key_blob_a_deleted_run_also_named(tmp_path):
    root = str(tmp_path / "s")
    log = RunLog(Store.init(root))
    identity.ensure_owner_key(log.store)
    pub = identity.owner_public(log.store)
    log.start_run("setup")
    log.start_run("kept")
    log.record_attempt("setup", 0, 0, "succeeded", output=log.put_blob(pub.encode("ascii")))  # same bytes, same id
    log.record_attempt("kept", 0, 0, "succeeded")
    D.delete_run(log, "setup", reason="done")
    G.gc(Store.open(root))
    fresh = Store.open(root)
    assert identity.owner_public(fresh) == pub  # BodyRemoved: gc removed the keys/owner blob
    assert verify_report(RunLog(fresh)).problems == []


def test_gc_removes_the_fork_objects_of_a_deleted_run_whose_branches_have_records(tmp_path):
    """docs/FORMAT.md "What gc removes": "the fork, journal and segment objects of deleted runs".
    ``gc.doomed`` collects a fork object only while a branch ref names it (a branch with no record
    yet); once the branch has a record its ref names that record, and the fork object (its ``reason``
    is the rewind's free text) keeps its body after delete + gc."""
    from helpers import log_engine_of

    from objstore.errors import BodyRemoved
    from objstore.storage import codec

    root = str(tmp_path / "s")
    log = RunLog(Store.init(root, fsync="off"))
    log.start_run("gone")
    log.start_run("kept")
    log.record_attempt("kept", 0, 0, "succeeded")
    for i in range(3):
        log.record_attempt("gone", i, 0, "succeeded")
    log.rewind("gone", 1, reason="the model pasted the customer's card number")
    log.record_attempt("gone", 9, 0, "succeeded")
    eng = log_engine_of(log.store, "gone" if log.store.logs.per_run else None)  # the run's log, else the one log
    fork = next(o[0] for e in eng.entries() for o in e.objs if o[1] == codec.FORK)
    D.delete_run(log, "gone", reason="erasure")
    res = G.gc(Store.open(root))
    fresh = Store.open(root)
    assert verify_report(RunLog(fresh), check_state=False).problems == []
    try:
        log_engine_of(fresh, "gone" if fresh.logs.per_run else None).read(fork)
        kept = True
    except BodyRemoved:
        kept = False
    assert (kept, res.removed_other) == (False, 1)  # (True, 0): the fork object's body is still there


def test_verify_is_clean_after_gc_of_a_deleted_run_rewound_to_a_branch_with_no_record(tmp_path):
    """The fork objects gc *does* remove (a deleted run's branch whose ref still names its fork object:
    rewound, nothing appended since) make verify fail on an honest store: ``missing-body`` (its
    ``_deletions`` accepts removed records and blobs only, any other type is ``ok = False``) and
    ``broken-chain`` for the branch ref (its head is not read as a fork any more)."""
    from helpers import run_cli

    root = str(tmp_path / "s")
    log = RunLog(Store.init(root, fsync="off"))
    log.start_run("gone")
    log.start_run("kept")
    log.record_attempt("kept", 0, 0, "succeeded")
    for i in range(3):
        log.record_attempt("gone", i, 0, "succeeded")
    log.rewind("gone", 1, reason="try again")  # branch 1: its ref names the fork object
    D.delete_run(log, "gone", reason="erasure")
    assert G.gc(Store.open(root)).removed_other == 1
    assert [p.code for p in verify_report(RunLog(Store.open(root)), check_state=False).problems] == []
    run_cli("verify", store=root, exit_code=0)
