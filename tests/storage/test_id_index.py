"""The id -> run index of a store of a log per run (format 6): a bare id opens the run holding it, and the index
decides nothing (invariant 15): an edited index costs time, never a wrong answer."""

import os

import pytest

from objstore import RunLog, Store
from objstore.errors import ObjectNotFound
from objstore.storage.log import local_state
from objstore.storage.runlogs import idindex


def _opened(monkeypatch):
    """Run-log roots opened by LogEngine in this process (the lowest layer: every log is a LocalBase)."""
    seen = []
    real = local_state.LocalBase.__init__

    def spy(self, root, *a, **kw):
        seen.append(os.path.basename(root))
        real(self, root, *a, **kw)

    monkeypatch.setattr(local_state.LocalBase, "__init__", spy)
    return seen


def _store(tmp_path, n=30):
    root = str(tmp_path / "s")
    log = RunLog(Store.init(root, fsync="off"))
    if not log.store.logs.per_run:
        pytest.skip("a store of one log has no id index (OBJSTORE_NEW_FORMAT=3)")
    recs = {}
    for i in range(n):
        r = log.start_run()
        recs[r] = log.record_attempt(r, i, 0, "succeeded").id
    return root, log, recs


def test_a_bare_id_opens_only_its_run_once_indexed(tmp_path, monkeypatch):
    root, log, recs = _store(tmp_path)
    runs = list(recs)
    old_run, oid = runs[3], recs[runs[3]]
    assert log.store.build_id_index() == {"built": True, "runs": 30, "ids": 60}
    seen = _opened(monkeypatch)
    fresh = Store.open(root)
    assert fresh.get(oid)[1]["run"] == old_run
    assert seen == ["store", old_run], seen  # the store log, then the one run: nothing else
    # without the index every newer run is opened first
    os.unlink(os.path.join(root, "index", "ids"))
    seen.clear()
    fresh = Store.open(root)
    assert fresh.get(oid)[1]["run"] == old_run
    assert len(seen) == 1 + len(runs) - 3, seen


def test_runs_newer_than_the_index_are_searched_first(tmp_path, monkeypatch):
    root, log, recs = _store(tmp_path, 10)
    log.store.build_id_index()
    r = log.start_run()
    oid = log.record_attempt(r, 1, 0, "succeeded").id
    seen = _opened(monkeypatch)
    assert Store.open(root).get(oid)[1]["run"] == r
    assert seen == ["store", r]


def test_an_edited_index_never_gives_a_wrong_answer(tmp_path):
    root, log, recs = _store(tmp_path, 8)
    log.store.build_id_index()
    path = os.path.join(root, "index", "ids")
    data = bytearray(open(path, "rb").read())
    idx = idindex.IdIndex(path)
    start = len(data) - idx._count * idindex.ROW.size
    idx.close()
    # every row now names the first run (its u32), a forger's whole rewrite of the derived file
    for at in range(start, len(data), idindex.ROW.size):
        data[at + 32:at + 36] = (0).to_bytes(4, "big")
    open(path, "wb").write(bytes(data))
    fresh = Store.open(root)
    for run, oid in recs.items():
        assert fresh.get(oid)[1]["run"] == run
    # an id no log holds is not found, whatever the index says
    with pytest.raises(ObjectNotFound):
        Store.open(root).get(b"\x01" * 32)
    # garbage instead of an index: read as no index
    open(path, "wb").write(b"not an index")
    assert Store.open(root).get(recs[next(iter(recs))])[0] == "record"


def test_run_colon_id_opens_that_run_alone(tmp_path, monkeypatch):
    root, log, recs = _store(tmp_path, 12)
    run = list(recs)[4]
    oid = recs[run]
    seen = _opened(monkeypatch)
    fresh = Store.open(root)
    assert fresh.resolve_id(f"{run}:{oid.hex()[:10]}") == oid
    assert fresh.resolve_id(f"{run}:{oid.hex()}") == oid
    assert seen == ["store", run]
    from objstore.errors import RunNotFound
    with pytest.raises(RunNotFound):
        fresh.resolve_id(f"no-such-run:{oid.hex()[:10]}")
    with pytest.raises(ObjectNotFound):
        fresh.resolve_id(f"{list(recs)[0]}:{oid.hex()}")  # another run's log does not hold it
    # the CLI takes it wherever an id is taken
    from helpers import run_cli
    code, out, _err = run_cli("show", f"{run}:{oid.hex()[:12]}", store=root, exit_code=0)
    assert out.startswith(f"record {oid.hex()}")
