"""``gc --prune-unreferenced-older-than AGE`` on both engines: committed blobs nothing names are kept by default
(``stats`` counts them) and removed only when asked — recorded as redactions, so verify finds each removed body
covered; blobs a record, a ref or a journal object names stay."""

from __future__ import annotations

import os

import pytest
from helpers import run_cli, s3_log

from objstore.errors import Erased
from objstore.lifecycle import gc as G
from objstore.runs.api import RunLog
from objstore.runs.verify import verify
from objstore.storage.s3.bucket import MemoryBucket
from objstore.storage.store import Store


@pytest.fixture(params=["local", "s3-fake"])
def log(request, tmp_path):
    if request.param == "local":
        return RunLog(Store.init(str(tmp_path / "s")))
    return s3_log(MemoryBucket(), tmp_path / "cache")


def _raw_holds(log, data: bytes) -> bool:
    from helpers import raw_objects

    return any(isinstance(d, bytes) and data in d for _o, _t, d in raw_objects(log.store))


def test_unreferenced_blobs_go_only_when_asked_and_verify_stays_clean(log):
    run = log.start_run(subject="s")
    lonely_bytes = b"nobody names me " + os.urandom(8).hex().encode()
    if log.store.logs.per_run:  # a blob put outside a run's batch is only held by the process: commit it with one
        with log.store.batch():
            lonely = log.put_blob(lonely_bytes)
            named = log.put_blob(b"a record names me")
            log.record_attempt(run, 0, 0, "succeeded", output=named)
    else:
        lonely = log.put_blob(lonely_bytes)
        named = log.put_blob(b"a record names me")
        log.record_attempt(run, 0, 0, "succeeded", output=named)
    assert G.gc(log.store).removed_blobs == 0
    assert log.get_blob(lonely) == lonely_bytes
    assert G.gc(log.store, prune_unreferenced_older_than=3600).removed_blobs == 0  # younger than an hour: kept
    res = G.gc(log.store, prune_unreferenced_older_than=0)
    assert res.removed_blobs == 1
    assert not _raw_holds(log, lonely_bytes)
    with pytest.raises(Erased):
        log.get_blob(lonely)
    assert log.get_blob(named) == b"a record names me"
    assert verify(log) == []


def test_the_command_line_flag(tmp_path):
    store = str(tmp_path / "s")
    log = RunLog(Store.init(store))
    if log.store.logs.per_run:  # committed with a run's entry (a put outside a batch is only held by the process)
        run = log.start_run(subject="s")
        with log.store.batch():
            lonely = log.put_blob(b"nobody names me either")
            log.record_attempt(run, 0, 0, "succeeded")
    else:
        lonely = log.put_blob(b"nobody names me either")
    out = run_cli("gc", "--prune-unreferenced-older-than", "0s", "--json", store=store, exit_code=0)[1]
    assert '"removed_blobs":1' in out.replace(" ", "")
    run_cli("gc", "--prune-unreferenced-older-than", "soon", store=store, exit_code=5)
    with pytest.raises(Erased):
        RunLog(Store.open(store)).get_blob(lonely)
