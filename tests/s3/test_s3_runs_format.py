"""The layout of a store of format 7 on object storage, pinned (docs/FORMAT.md, "Format 7: a HEAD per run on object
storage"): fixtures/golden-s3-runs.json holds every key of a small store with its bytes. Read here by the documented
layout alone (JSON, msgpack, BLAKE3 of the run id for its shard, the order key from the catalog entry's time), then by
the engine, and built again byte for byte by fixtures/make_golden_s3_runs.py."""

from __future__ import annotations

import json
import os
import sys
import tempfile

import blake3
import msgspec

HERE = os.path.dirname(os.path.abspath(__file__))
FIX = os.path.join(HERE, "..", "..", "fixtures")
sys.path.insert(0, FIX)
import make_golden_s3_runs as make  # noqa: E402

GOLDEN = json.load(open(os.path.join(FIX, "golden-s3-runs.json")))
KEYS = {k: bytes.fromhex(v) for k, v in GOLDEN["keys"].items()}


def test_the_keys_read_by_the_documented_layout():
    assert json.loads(KEYS["OBJSTORE"]) == {"format": "objstore", "version": 7, "engine": "s3"} and KEYS["OBJSTORE"].endswith(b"\n")
    expected: set[str] = {"OBJSTORE"}
    subjects = {"r-golden-a": "golden", "r-golden-b": "golden-b"}
    for run, n in (("r-golden-a", 5), ("r-golden-b", 2)):
        fmt, rid, time_us, subject, labels, copy_of = msgspec.msgpack.decode(KEYS[f"catalog/ids/{run}"])
        assert (fmt, rid, subject, labels, copy_of) == ("objstore-catalog-1", run, subjects[run], None, None)
        key = f"{time_us:014x}"
        inverse = f"{0xffffffffffffff - time_us:014x}"
        skey = blake3.blake3(b"S\0" + subject.encode()).hexdigest()[:32]
        head_key = f"runs/{blake3.blake3(run.encode()).hexdigest()[:2]}/{run}/HEAD"
        expected |= {f"catalog/ids/{run}", f"catalog/order/{key}-{run}", f"catalog/newest/{inverse}-{run}",
                     f"catalog/subjects/{skey}/{key}-{run}", head_key}
        for k in (f"catalog/order/{key}-{run}", f"catalog/newest/{inverse}-{run}", f"catalog/subjects/{skey}/{key}-{run}"):
            assert KEYS[k] == b""
        head = msgspec.msgpack.decode(KEYS[head_key])
        hfmt, hn, checksum, chunk, tail, gc, lease = head  # seven elements: a lease was taken
        assert (hfmt, hn, chunk, gc, len(tail)) == ("objstore-s3-head-1", n, None, 0, n)
        assert lease == [n, b""]  # each commit a batch: the epoch counts the leases taken, each given back
        assert all(isinstance(s, bytes) and s[:4] == b"OSE3" for s in tail) and tail[-1][-32:] == checksum
    assert set(KEYS) == expected  # the store log holds no entry: no store/ key


def test_the_engine_reads_them_and_they_are_built_again_byte_for_byte():
    from objstore.runs.api import RunLog
    from objstore.storage.s3.bucket import MemoryBucket
    from objstore.storage.store import Store

    b = MemoryBucket("s3://golden/store")
    for k, v in KEYS.items():
        b.poke(k, v)
    with tempfile.TemporaryDirectory() as cache:
        log = RunLog(Store.on_bucket(b, cache=cache, create=False))
        assert log.store.logs.run_ids() == list(make.RUNS)
        assert [(r.kind, r.lsn) for r in log.iter_records("r-golden-a")] == [("attempt", 5), ("attempt", 4), ("attempt", 3),
                                                                             ("attempt", 2), ("attempt", 1), ("run_started", 0)]
        log.store.logs.close()
    assert make.build().raw() == KEYS
