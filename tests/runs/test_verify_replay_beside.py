"""verify's replay of every entry's rules and root runs beside the segment workers (issue 17, the verify gate).

When verify checks segments in worker processes, the replay (``LocalLogCheck.replayed_breach``: a fresh engine
taking in every entry from the first, no checkpoint) is begun in a process forked for it before the scan, and its
finding is taken once the scan is done: this process's own time goes to the run-model checks of the objects the
workers send. With one process (``jobs=1``) it runs here, once the scan is done. Proved here, counted not
timed: with workers, this process decodes no entry meta for the replay (``STATS["entries_decoded"]`` falls by at
least the log's entries); a rule breach (a forged run birth) is named in the same line either way; a replay
process that dies is replayed here instead (the same finding). The replay takes each sealed segment's index
digest from the segment worker that built it from the same entries (the scan passes it on), instead of building
that index a second time: counted by ``segindex.build`` calls; a digest it is handed is the one the next
segment's first entry is checked against; a segment with none handed (not judged) is built as before.
"""

from __future__ import annotations

import os

import pytest

from objstore import RunLog, Store
from objstore.runs.verify import verify_report
from objstore.storage.log import fsck, local_write, segindex
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
    monkeypatch.setattr(fsck, "_replay_child", lambda *a: os._exit(9))  # dies before it sends anything
    two = _report(root, 2)
    assert [p.line() for p in two.problems] == [p.line() for p in one.problems]
    assert any(p.code == "corrupt-entry" and oid.hex() in p.line() for p in two.problems)


def _sealed_digests(root: str) -> tuple[dict[int, bytes], object]:
    """{sealed segment: the digest check_segment (a segment worker) builds for its index}, and the log check."""
    log = RunLog(Store.open(root))
    lc = fsck.log_check(log.store.engine, jobs=1)
    lc.start()
    eng = log.store.engine
    out = {}
    for s in sorted(lc.files):
        res = fsck.check_segment(lambda *a: (a[0], a[1], True, (), False, None, None), eng.seg_path(s), eng.seg_path(s + 1),
                                 eng.idx_path(s), s, None, False, lc.idx_seen.get(s))
        if res.built is not None:
            out[s] = res.built
    return out, lc


def _count_builds(monkeypatch) -> list[int]:
    builds = [0]
    real = segindex.build

    def counted(*a):
        builds[0] += 1
        return real(*a)

    monkeypatch.setattr(segindex, "build", counted)
    return builds


def test_the_replay_takes_the_workers_index_digests_instead_of_building_them(tmp_path, monkeypatch):
    root = str(tmp_path / "s")
    _build(root, forged=False)
    digests, lc = _sealed_digests(root)
    assert len(digests) >= 2
    builds = _count_builds(monkeypatch)
    assert lc.replayed_breach() is None
    alone = builds[0]
    builds[0] = 0
    asked: list[int] = []
    assert lc.replayed_breach(lambda s: asked.append(s) or digests.get(s)) is None
    assert alone >= len(digests) and builds[0] == alone - len(digests), (alone, builds[0], len(digests))
    assert sorted(asked) == sorted(digests)  # each sealed segment asked for once
    builds[0] = 0
    assert lc.replayed_breach(lambda s: None) is None  # none handed: built here, as alone
    assert builds[0] == alone


def test_a_digest_handed_to_the_replay_is_the_one_the_next_segment_is_checked_against(tmp_path):
    root = str(tmp_path / "s")
    _build(root, forged=False)
    digests, lc = _sealed_digests(root)
    seg = min(digests)
    breach = lc.replayed_breach(lambda s: b"\x05" * 32 if s == seg else digests.get(s))
    assert breach is not None and breach[0] == seg + 1, breach
    assert f"names an index of segment {seg} that is not the one its entries give" in breach[2], breach


def test_the_scan_hands_the_replay_every_sealed_segments_digest_in_log_order(tmp_path, monkeypatch):
    root = str(tmp_path / "s")
    _build(root, forged=False)
    digests, _lc = _sealed_digests(root)
    handed: list[tuple[int, bytes | None]] = []
    real = fsck.Replay.index_digest
    monkeypatch.setattr(fsck.Replay, "index_digest", lambda self, s, d: handed.append((s, d)) or real(self, s, d))
    r = _report(root, 2)
    assert r.problems == []
    assert [s for s, _d in handed] == sorted(s for s, _d in handed)
    assert {s: d for s, d in handed if d is not None} == digests


def test_with_one_process_each_sealed_index_is_built_once(tmp_path, monkeypatch):
    """The scan builds each sealed segment's index (to judge its file); the replay, here after the scan, takes
    those digests: not a second build per segment (a checkpoint's active rows may be built once more)."""
    root = str(tmp_path / "s")
    _build(root, forged=False)
    digests, _lc = _sealed_digests(root)
    builds = _count_builds(monkeypatch)
    r = _report(root, 1)
    assert r.problems == []
    assert len(digests) <= builds[0] <= len(digests) + 1, (builds[0], len(digests))


def test_no_process_to_be_had_for_the_replay_means_it_runs_here(tmp_path, monkeypatch):
    """A fork that fails (no processes left, or verify called inside a daemonic process, which may have no
    children): the replay runs here when its finding is asked for, the same finding."""
    root = str(tmp_path / "s")
    _build(root, forged=True)
    lc = fsck.log_check(Store.open(root).engine, jobs=2)
    want = lc.replayed_breach()
    assert want is not None

    def no_fork(self):
        raise AssertionError("daemonic processes are not allowed to have children")

    monkeypatch.setattr(fsck.multiprocessing.process.BaseProcess, "start", no_fork)
    r = fsck.Replay.forked(lc)
    assert r.proc is None and r.feed is None
    assert r.result() == want
    r.close()
