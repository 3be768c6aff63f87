"""verify's replay of every entry's rules and root runs beside the segment workers (issue 17, the verify gate).

When verify checks segments in worker processes, the replay (``LocalLogCheck.replayed_breach``: a fresh engine
taking in every entry from the first, no checkpoint) is begun in a process forked for it before the scan, and its
finding is taken once the scan is done: this process's own time goes to the run-model checks of the objects the
workers send. With one process (``jobs=1``) it runs here, before the scan, as always. Proved here, counted not
timed: with workers, this process decodes no entry meta for the replay (``STATS["entries_decoded"]`` falls by at
least the log's entries); a rule breach (a forged run birth) is named in the same line either way; a replay
process that dies is replayed here instead (the same finding).
"""

from __future__ import annotations

import os

import pytest

from objstore import RunLog, Store
from objstore.runs.verify import verify_report
from objstore.storage.log import fsck, local_write
from objstore.storage.log.format import STATS
from objstore.storage.log.tables import LogState


@pytest.fixture(scope="module", autouse=True)
def one_log():
    """One log holding every run (format 3), so that the forged entry is appended to the log verify replays."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("OBJSTORE_NEW_FORMAT", "3")
        yield


def _build(root: str, forged: bool) -> tuple[int, bytes | None]:
    """A log of several segments (sealed at 4 KiB); with ``forged``, then an entry whose run_started record's
    labels do not give its run id (written with the rule patched out: readers stop before it). Returns (entries
    before the forged one, the forged record's id)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(local_write, "SEAL_BYTES", 4096)
        log = RunLog(Store.init(root))
        r1 = log.start_run("r1")
        for i in range(40):
            log.record_attempt(r1, 1, i, "failed", prompt=log.put_blob(b"prompt %d " % i * 40))
        n = log.store.engine.refresh().entry
        oid = None
        if forged:
            mp.setattr(LogState, "_birth_rule", lambda *a: None, raising=False)
            st = log.store
            with st.batch():
                oid = st.put("record", {"run": "plain", "branch": 0, "lsn": 0, "parent": None, "kind": "run_started", "time": 1.0,
                                        "body": {"subject": "default", "workflow_version": "1", "meta": None},
                                        "labels": {"thread_id": "S"}})
                st.set_ref("run/plain/branch/0", None, oid, "forged")
                st.set_ref("run/plain/live", None, "ref: run/plain/branch/0", "forged")
            log.record_attempt(r1, 2, 0, "failed")  # and a sound entry after it
        log.store.engine.close()
    assert len([f for f in os.listdir(os.path.join(root, "log")) if f.endswith(".seg")]) >= 3
    return n, oid


def _report(root: str, jobs: int):
    return verify_report(RunLog(Store.open(root)), check_state=False, jobs=jobs)


def test_with_workers_this_process_decodes_no_entry_for_the_replay(tmp_path, monkeypatch):
    root = str(tmp_path / "s")
    n, _ = _build(root, forged=False)
    decoded = []  # entry metas this process decoded while beginning the replay and taking its finding
    start, result = fsck.LocalLogCheck.start_replay, fsck.Replay.result

    def counted(fn):
        def wrapped(*a):
            before = STATS["entries_decoded"]
            try:
                return fn(*a)
            finally:
                decoded.append(STATS["entries_decoded"] - before)
        return wrapped

    monkeypatch.setattr(fsck.LocalLogCheck, "start_replay", counted(start))
    monkeypatch.setattr(fsck.Replay, "result", counted(result))
    one = _report(root, 1)
    here_one, decoded[:] = sum(decoded), []
    two = _report(root, 2)
    assert one.problems == two.problems == [] and one.entries == two.entries == n
    assert len(decoded) == 2  # begun once, its finding taken once
    assert here_one >= n and sum(decoded) == 0, (here_one, decoded, n)


def test_a_rule_breach_is_named_the_same_by_the_replay_beside_the_workers(tmp_path):
    root = str(tmp_path / "s")
    _n, oid = _build(root, forged=True)
    assert oid is not None
    one = _report(root, 1)
    two = _report(root, 2)
    lines = [p.line() for p in one.problems]
    assert any(line.startswith("corrupt-entry ") and oid.hex() in line for line in lines), lines
    assert [p.line() for p in two.problems] == lines
    assert (two.notes, two.entries, two.objects) == (one.notes, one.entries, one.objects)


def test_a_replay_process_that_dies_is_replayed_here(tmp_path, monkeypatch):
    root = str(tmp_path / "s")
    _n, oid = _build(root, forged=True)
    one = _report(root, 1)
    monkeypatch.setattr(fsck, "_replay_child", lambda lc, conn: os._exit(9))  # dies before it sends anything
    two = _report(root, 2)
    assert [p.line() for p in two.problems] == [p.line() for p in one.problems]
    assert any(p.code == "corrupt-entry" and oid.hex() in p.line() for p in two.problems)
