"""verify's ref-move check costs no index look-up for an object of the moving entry itself (issue 17, the verify gate).

Every entry that appends records moves its branch ref to its own last record; verify checks that each move names
an object stored in or before its entry (``dangling-ref``). That object was just read and hashed in the entry: the
check takes it from there, and only a move to an object of an earlier entry is looked up through the log's tables
and sealed segments' index files. Counted, not timed: ``SegmentIndex.find`` calls over a pass of a log of many
sealed segments stay a handful, not one or more per entry. A move to an object stored nowhere is still named.
"""

from __future__ import annotations

import pytest

from objstore import RunLog, Store
from objstore.runs.verify import verify_report
from objstore.storage.log import local_write, segindex


@pytest.fixture(scope="module", autouse=True)
def one_log():
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("OBJSTORE_NEW_FORMAT", "3")
        yield


def test_a_move_to_the_entrys_own_record_is_not_looked_up(tmp_path, monkeypatch):
    root = str(tmp_path / "s")
    with monkeypatch.context() as mp:
        mp.setattr(local_write, "SEAL_BYTES", 4096)
        log = RunLog(Store.init(root))
        r1 = log.start_run("r1")
        for i in range(60):
            log.record_attempt(r1, 1, i, "failed", usage={"input_tokens": i, "note": "x" * 200})
        n = log.store.engine.refresh().entry
        log.store.engine.close()
    finds = [0]
    real = segindex.SegmentIndex.find

    def counted(self, oid):
        finds[0] += 1
        return real(self, oid)

    monkeypatch.setattr(segindex.SegmentIndex, "find", counted)
    r = verify_report(RunLog(Store.open(root)), check_state=False, jobs=1)
    assert r.problems == [] and r.entries == n and n > 40
    assert finds[0] < n // 4, (finds[0], n)


def test_a_move_to_an_object_stored_nowhere_is_still_named(tmp_path):
    root = str(tmp_path / "s")
    log = RunLog(Store.init(root))
    r1 = log.start_run("r1")
    log.record_attempt(r1, 1, 0, "failed")
    st = log.store
    st.set_ref("x/forged", None, b"\x07" * 32, "forged")
    st.engine.close()
    r = verify_report(RunLog(Store.open(root)), check_state=False, jobs=1)
    assert [p.code for p in r.problems if p.subject == "x/forged"][:1] == ["dangling-ref"], r.problems
