"""Large blobs (> 8 MiB) stream in and out: read once, hashed from the bytes stored, never held whole.

The bodies here are 12 MiB of seeded bytes; memory is checked in a child process (peak RSS well
below what holding the body twice would take), corruption by flipping a byte inside the stored block.
"""

import hashlib
import io
import os
import random
import subprocess
import sys

import pytest
from helpers import run_cli

from objstore import RunLog, Store
from objstore.errors import IntegrityError
from objstore.runs.verify import verify
from objstore.storage import codec
from objstore.storage.log.format import LARGE_BLOB

SIZE = 12 << 20


class Source:
    """A stream that can be read once (like a pipe), of seeded bytes half random, half text."""

    def __init__(self, size, seed=7):
        self.left, self.rnd, self.sha = size, random.Random(seed), hashlib.sha256()

    def read(self, n=-1):
        n = self.left if n < 0 else min(n, self.left)
        self.left -= n
        b = self.rnd.randbytes(n // 2) + b"objstore " * ((n - n // 2) // 9) + b"." * ((n - n // 2) % 9)
        self.sha.update(b)
        return b


class Sink:
    def __init__(self):
        self.sha, self.n = hashlib.sha256(), 0

    def write(self, b):
        self.sha.update(b)
        self.n += len(b)


def _stored(log, put):
    """``put()`` a blob where it is written: on one log, as it is; on format 6 (a blob no record names is held by its
    process, not written) in a batch with a record of a run naming it, so it lands in that run's log."""
    if not log.store.logs.per_run:
        return put()
    run = log.start_run()
    with log.batch():
        oid = put()
        log.record_attempt(run, 1, 0, "succeeded", output=oid)
    return oid


def _positions(store):
    """Every log's position: the store's one log, or (format 6) the store log's and each run's."""
    return [(run, engine.position()) for run, engine in store.logs.all_logs()]


def test_stream_in_and_out_with_the_id_of_the_bytes_stored(tmp_path):
    log = RunLog(Store.init(str(tmp_path / "s"), fsync="off"))
    src = Source(SIZE)
    oid = _stored(log, lambda: log.store.put_blob_stream(src))
    assert SIZE > LARGE_BLOB
    log2 = RunLog(Store.open(log.store.root))
    out = Sink()
    assert log2.store.copy_blob_to(oid, out) == SIZE
    assert out.sha.digest() == src.sha.digest()
    # the id is BLAKE3 of exactly those canonical bytes
    assert codec.object_id(codec.header("blob", SIZE) + log2.get_blob(oid)) == oid
    assert os.listdir(os.path.join(log.store.root, "tmp")) == [], "spill files are removed"
    assert verify(log2) == []
    # stored once: a second put of the same bytes adds no entry
    before = _positions(log2.store)
    assert log2.store.put_blob_stream(Source(SIZE)) == oid
    assert _positions(log2.store) == before


def test_a_large_blob_in_a_failed_batch_lands_nowhere(tmp_path):
    log = RunLog(Store.init(str(tmp_path / "s"), fsync="off"))
    with pytest.raises(RuntimeError):
        with log.store.batch():
            oid = log.store.put_blob_stream(Source(SIZE))
            raise RuntimeError("abandon the batch")
    assert not log.store.has(oid)
    assert os.listdir(os.path.join(log.store.root, "tmp")) == []


def test_flipped_byte_in_a_large_blob_is_named(tmp_path):
    root = str(tmp_path / "s")
    log = RunLog(Store.init(root, fsync="off"))
    oid = _stored(log, lambda: log.store.put_blob_stream(Source(SIZE)))
    engine = log.store.logs.locate(oid)  # the log holding it (a run's on format 6)
    loc = engine.loc(oid)
    seg = engine.seg_path(loc.seg)
    with open(seg, "r+b") as f:
        f.seek(loc.block_off + loc.stored_len // 2)
        b = f.read(1)
        f.seek(loc.block_off + loc.stored_len // 2)
        f.write(bytes([b[0] ^ 0x40]))
    log2 = RunLog(Store.open(root))
    why = "zstd data corrupt: zstd decompress error: Data corruption detected"  # zstd's own words
    with pytest.raises(IntegrityError) as ei:
        log2.store.copy_blob_to(oid, Sink())
    assert str(ei.value) == f"integrity error: object {oid.hex()} ({seg}): {why}"
    assert [p.line() for p in verify(log2)] == [f"corrupt-object {oid.hex()}: {why} [{seg}]"]


def test_cli_put_blob_from_a_pipe_and_cat_body_in_bounded_memory(tmp_path):
    root = str(tmp_path / "s")
    Store.init(root, fsync="off")
    data = Source(SIZE).read()
    code, out, err = run_cli("put-blob", "-", store=root, input=data, exit_code=0)
    assert code == 0, err
    oid = out.strip()
    assert oid == codec.object_id(codec.header("blob", len(data)) + data).hex()
    # cat --body streams: its peak RSS stays within half the body of a command that reads no blob
    base, _ = _peak_rss_kb(["--store", root, "runs"])
    peak, digest = _peak_rss_kb(["--store", root, "cat", "--body", oid])
    assert digest == hashlib.sha256(data).hexdigest()
    assert (peak - base) * 1024 < SIZE // 2, f"cat --body held the body: peak RSS {peak} KiB vs {base} KiB for runs"
    assert verify(RunLog(Store.open(root))) == []


def _peak_rss_kb(args):
    """(peak RSS in KiB of an ``objstore`` command, sha256 of its stdout). VmHWM belongs to the
    process's own address space, so unlike ru_maxrss it owes nothing to the (large) test process
    the command was forked from."""
    code = ("import atexit, sys\n"
            "def hwm():\n"
            "    for line in open('/proc/self/status'):\n"
            "        if line.startswith('VmHWM:'):\n"
            "            sys.stderr.write('HWM ' + line.split()[1] + '\\n')\n"
            "atexit.register(hwm)\n"
            "from objstore_cli.main import main\n"
            "sys.argv = ['objstore'] + sys.argv[1:]\n"
            "main()\n")
    p = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, timeout=120)
    assert p.returncode == 0, p.stderr
    hwm = [int(line.split()[1]) for line in p.stderr.decode().splitlines() if line.startswith("HWM ")]
    return hwm[-1], hashlib.sha256(p.stdout).hexdigest()


def test_small_stream_is_stored_like_put_blob(tmp_path):
    log = RunLog(Store.init(str(tmp_path / "s"), fsync="off"))
    assert log.store.put_blob_stream(io.BytesIO(b"hello")) == log.put_blob(b"hello")


# Found by typing objstore for mypy (issue #10): each was a traceback before.
def test_a_large_blob_reads_back_inside_the_batch_that_stored_it(tmp_path):
    """Store.get_raw handed out the batch's LargeBlob spill object instead of bytes (AttributeError)."""
    store = Store.init(str(tmp_path / "s"), fsync="off")
    data = b"x" * (LARGE_BLOB + 1)
    with store.batch():
        oid = store.put_blob_stream(io.BytesIO(data))
        assert store.get_blob(oid) == data
        out = io.BytesIO()
        assert store.copy_blob_to(oid, out) == len(data)
        assert out.getvalue() == data
    assert store.get_blob(oid) == data
