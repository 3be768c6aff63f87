"""Review of issue 17: what gc counts as still named.

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
