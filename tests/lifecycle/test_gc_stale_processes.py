"""A process that opened the store before another process ran gc (issue 17).

1. A writer whose engine had loaded a sealed segment's index before gc removed a deleted run's blob
   from it puts the same bytes again (content addressing: the same id) in a live record after gc.
   Its engine still believes the body is stored (the rewrite entry it took in does not drop the
   index it holds), so the blob is deduplicated away: the acknowledged record names a body that is gone.
2. A reader that had the segment open while it was the active one streams a large blob
   (``Store.copy_blob_to``) after gc packed that segment: it reads the new index's offsets in the old
   file and raises IntegrityError, where ``read`` of the same blob retries and succeeds.
"""

from __future__ import annotations

import io
import os

from helpers import run_cli

from objstore import RunLog, Store
from objstore.lifecycle import delete as D
from objstore.runs.verify import verify_report
from objstore.storage.log import local_write


def test_a_writer_opened_before_gc_stores_again_a_blob_gc_removed(tmp_path):
    root = str(tmp_path / "s")
    log = RunLog(Store.init(root, fsync="off"))
    log.start_run("old")
    log.start_run("live")
    data = b"the same transcript, written again later by a live run " * 20
    x = log.put_blob(data)
    log.record_attempt("old", 1, 0, "succeeded", prompt=x)
    log.store.engine.seal_now()  # x now lives in sealed segment 1
    stale = RunLog(Store.open(root))
    assert stale.store.get_blob(x) == data  # this process has segment 1's index loaded
    D.delete_run(log, "old", reason="deleted")
    run_cli("gc", store=root, exit_code=0)  # another process removes x's body
    assert stale.put_blob(data) == x
    stale.record_attempt("live", 1, 0, "succeeded", prompt=x)  # acknowledged
    fresh = Store.open(root)
    assert verify_report(RunLog(fresh), check_state=False).problems == []
    assert fresh.get_blob(x) == data


def test_streaming_a_large_blob_after_gc_packed_the_segment_the_reader_had_open(tmp_path, monkeypatch):
    monkeypatch.setattr(local_write, "SEAL_BYTES", 64 << 20)  # the large blob stays in the active segment
    root = str(tmp_path / "s")
    log = RunLog(Store.init(root, fsync="off"))
    log.start_run("live")
    data = os.urandom(9 << 19).hex().encode()  # 9 MiB > engine.LARGE_BLOB, zstd-compressible
    big = log.put_blob(data)
    log.record_attempt("live", 1, 0, "succeeded", output=big)
    reader = Store.open(root)
    reader.engine.refresh()  # segment 1 is open here as the active segment
    run_cli("gc", store=root, exit_code=0)  # seals segment 1 and packs it (the large blob moves)
    reader.engine.refresh()
    out = io.BytesIO()
    assert reader.copy_blob_to(big, out) == len(data)  # IntegrityError: zstd data corrupt
    assert out.getvalue() == data
