"""The commit path's shortcuts decide exactly what the long way decides.

* where a sealed segment holds a body is remembered (a prompt every commit names is not searched for in every
  sealed index per commit), and forgotten when gc replaces a segment: a body gc removed is not "held" after;
* a batch's named bodies are found from its records' index rows, not a second walk of each body;
* which ref moves make a run's entry cite the store log is one pass over the names, the same answer as the
  ``runrefs.is_*_ref`` tests it stands for.
"""

from __future__ import annotations

import itertools

from helpers import log_engine_of

from objstore import RunLog, Store
from objstore.lifecycle import delete as D
from objstore.lifecycle import gc as G
from objstore.storage import runrefs
from objstore.storage.log import segindex
from objstore.storage.runlogs.citation import _judged_by_store


def test_a_body_a_sealed_segment_held_is_not_held_once_gc_removed_it(tmp_path):
    log = RunLog(Store.init(str(tmp_path / "s"), fsync="off"))
    log.start_run("old")
    log.start_run("live")
    data = b"a transcript the deleted run named " * 20
    x = log.put_blob(data)
    log.record_attempt("old", 1, 0, "succeeded", prompt=x)
    engine = log_engine_of(log.store, "old")
    engine.seal_now()
    assert engine.has_body(x)
    assert x in engine._sealed_locs  # found through the sealed index: remembered
    D.delete_run(log, "old", reason="deleted")
    G.gc(log.store)
    assert not engine.has_body(x)  # the same engine, after gc packed the segment without the body
    assert log.put_blob(data) == x
    log.record_attempt("live", 1, 0, "succeeded", prompt=x)
    assert Store.open(str(tmp_path / "s")).get_blob(x) == data


def test_a_body_named_by_every_commit_is_searched_for_once(tmp_path, monkeypatch):
    log = RunLog(Store.init(str(tmp_path / "s"), fsync="off"))
    log.start_run("r")
    prompt = log.put_blob(b"the prompt every step names " * 10)
    log.record_attempt("r", 0, 0, "succeeded", prompt=prompt)
    log_engine_of(log.store, "r").seal_now()
    finds = []
    real = segindex.SegmentIndex.find

    def counting(self, oid):
        finds.append(oid)
        return real(self, oid)

    monkeypatch.setattr(segindex.SegmentIndex, "find", counting)
    for step in range(1, 51):
        log.record_attempt("r", step, 0, "succeeded", prompt=prompt)
    assert finds.count(prompt) == 1
    assert log.get_blob(prompt) == b"the prompt every step names " * 10


def test_the_cite_test_is_the_ref_kinds_it_stands_for():
    parts = ["run/", "subjects/", "keys/", "schema/", ""]
    mids = ["r1", "r1/grant/k", "s/grant/k", "r1/branch/0", "grant/x", "a/b"]
    ends = ["", "/" + runrefs.DELETIONS, "/" + runrefs.DELETED, "/" + runrefs.JOURNAL, "/" + runrefs.SEGMENTS, "/live",
            "/cite", "/deletionsx", "/grant/"]
    names = {"".join(p) for p in itertools.product(parts, mids, ends)}
    for name in names:
        want = (runrefs.is_deletions_ref(name) or runrefs.is_deleted_ref(name) or runrefs.is_grant_ref(name)
                or runrefs.is_journal_ref(name) or runrefs.is_segments_ref(name))
        assert _judged_by_store(name) == want, name
