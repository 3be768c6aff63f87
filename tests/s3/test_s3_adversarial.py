"""An S3 store under attack and misuse: bytes damaged in the bucket by someone with write access (a raw
PUT, recomputing every checksum an attacker can recompute), local cache files edited, a server that
lies (the in-memory bucket, where a real one cannot be made to), bad input at the command line, two
creators of one store at once, and many threads of one process appending to one run.

What is asserted is the exact verify problem line or CorruptLog message a user sees, and that
nothing a damaged key says is believed. The store's layout is docs/FORMAT.md's "Format 7": each run's log
(HEAD, ``chunk/``, ``entry/``) under ``runs/<xx>/<run>/`` (storage.runlogs.bucketlogs), which is where the damage
is done; the engine is storage/s3/.

The filled store every damage test starts from: a run started (entry 1 of the run's log) and 21 appends
(entries 2..22); entries 1..16 sit in one chunk, 17..22 in the run HEAD's inline tail, and entry 22 (a body
above the inline limit) under its own ``entry/`` key.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import uuid
from collections import Counter

import msgspec
import pytest
from helpers import run_cli, s3_log

import objstore
from objstore.errors import CorruptLog
from objstore.runs.anchors import anchor_info
from objstore.runs.api import RunLog
from objstore.storage.log.format import ENTRY_HEAD, ENTRY_MAGIC, ENTRY_TRAILER, _dec, _enc, logical_checksum
from objstore.storage.runlogs.bucketlogs import run_prefix
from objstore.storage.s3 import layout as s3layout
from objstore.storage.s3.bucket import MemoryBucket, SubBucket
from objstore.storage.s3.client import open_bucket
from objstore.storage.s3.layout import HEAD_KEY, Chunk, Head, chunk_key


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    """The writer's local cache in the test's directory (never ~/.cache)."""
    monkeypatch.setenv("OBJSTORE_CACHE_DIR", str(tmp_path / "cache-writer"))


@pytest.fixture
def fresh(tmp_path, monkeypatch):
    """``fresh(url)``: the store opened as a new process would, with an empty local cache of its own
    (``cache=``: a given cache directory instead)."""
    def open_(url: str, cache: str | None = None) -> RunLog:
        monkeypatch.setenv("OBJSTORE_CACHE_DIR", cache or str(tmp_path / f"cache-{uuid.uuid4().hex[:8]}"))
        return objstore.open_store(url, create=False)
    return open_


def _fill(url: str) -> tuple[str, list[str]]:
    """The filled store (module docstring); the run and the tasks of its records in LSN order."""
    log = objstore.open_store(url)
    run = log.start_run(subject="s")
    tasks = [f"t{i}" for i in range(20)] + ["big"]
    for t in tasks[:-1]:
        log.append(run, "task_opened", {"task": t})
    log.append(run, "task_opened", {"task": "big", "title": os.urandom(100_000).hex()})  # > INLINE_BYTES after zstd
    return run, tasks


def _run_bucket(url: str, run: str) -> SubBucket:
    """Run ``run``'s log's keys as a bucket of their own (its url: the prefix a line names them under)."""
    return SubBucket(open_bucket(url), run_prefix(run))


def _anchor(log: RunLog) -> str:
    """What ``objstore anchor`` prints: a manifest of every log's head committed to the store log, named by its token."""
    return anchor_info(log.store)["token"]


def _head(bucket) -> Head:
    return msgspec.msgpack.decode(bucket.get(HEAD_KEY).data, type=Head)


def _chunk(bucket) -> tuple[str, Chunk]:
    key = chunk_key(*_head(bucket).chunk)
    return key, msgspec.msgpack.decode(bucket.get(key).data, type=Chunk)


def _lines(log: RunLog) -> list[str]:
    return [p.line() for p in objstore.verify(log)]


def _meta(raw: bytes) -> dict:
    mlen = ENTRY_HEAD.unpack_from(raw, 0)[1]
    return _dec.decode(raw[ENTRY_HEAD.size : ENTRY_HEAD.size + mlen])


def forge(raw: bytes, prev: bytes, change) -> bytes:
    """An entry re-encoded with ``change(meta)`` applied and its trailer's chain checksum recomputed
    over ``prev`` with the engine's own ``logical_checksum``: what anyone with write access can do."""
    mlen = ENTRY_HEAD.unpack_from(raw, 0)[1]
    m = _meta(raw)
    change(m)
    checksum = logical_checksum(prev, m["n"], m["t"], m["objs"], m["moves"], m["cut"], m["recs"], m["prevs"], m["root"],
                                    m["seal"], m["idx"], m.get("rw"))
    meta = _enc.encode(m)
    data = raw[ENTRY_HEAD.size + mlen : len(raw) - ENTRY_TRAILER.size]
    length = ENTRY_HEAD.size + len(meta) + len(data) + ENTRY_TRAILER.size
    return ENTRY_HEAD.pack(ENTRY_MAGIC, len(meta), len(data)) + meta + data + ENTRY_TRAILER.pack(length, checksum)


def _later(m: dict) -> None:
    m["t"] = m["t"] + 1.0  # the entry's time: in the chain checksum, not in the tables' root


def _put_chunk(bucket, key: str, ch: Chunk, slots: list) -> None:
    bucket.put(key, s3layout.encoder.encode(Chunk(ch.fmt, ch.prev, ch.first, slots)))


def _read_error(log: RunLog, run: str) -> str:
    with pytest.raises(CorruptLog) as got:
        log.records(run)
    assert got.value.exit_code == 6
    return str(got.value)


# -- damage in the bucket ------------------------------------------------------------------------


@pytest.mark.parametrize("what,data,detail", [
    ("garbage", b"\x00garbage", "HEAD does not parse: Expected `array`, got `int`"),
    ("truncated", None, "HEAD does not parse: Input data was truncated"),
    ("another format", s3layout.encoder.encode(Head("objstore-s3-head-0", 22, b"\x01" * 32, None, [])), "HEAD is not an objstore S3 head"),
])
def test_a_damaged_head_is_one_verify_line_and_every_read_raises(s3_url, fresh, what, data, detail):
    run, _ = _fill(s3_url)
    bucket = _run_bucket(s3_url, run)
    at = bucket.url  # s3://bucket/prefix/runs/<xx>/<run>
    if data is None:
        data = bucket.get(HEAD_KEY).data[:-40]
    bucket.put(HEAD_KEY, data)
    assert _lines(fresh(s3_url)) == [f"corrupt-entry {at}/HEAD: {detail} [{at}]"]
    assert _read_error(fresh(s3_url), run) == f"integrity error: log {at}/HEAD: {detail}"
    err = run_cli("log", run, store=s3_url, exit_code=6)[2]
    assert err == f"objstore: error: integrity error: log {at}/HEAD: {detail}\n"


def test_a_damaged_chunk_is_named_by_verify_and_by_every_read(s3_url, fresh):
    run, _ = _fill(s3_url)
    bucket = _run_bucket(s3_url, run)
    at = bucket.url
    key, ch = _chunk(bucket)
    slots = list(ch.slots)
    bad = bytearray(slots[6])
    bad[-1] ^= 0x01  # entry 7's trailer checksum, one bit
    slots[6] = bytes(bad)
    _put_chunk(bucket, key, ch, slots)
    assert _lines(fresh(s3_url)) == [f"corrupt-log {at}/{key}: entry 7: checksum mismatch [{at}]"]
    assert _read_error(fresh(s3_url), run) == f"integrity error: log {at}/{key}: entry 7: checksum mismatch"
    bucket.put(key, b"\x07not a chunk")
    assert _lines(fresh(s3_url)) == [f"corrupt-log {at}/{key}: chunk does not parse: Expected `array`, got `int` [{at}]"]


def test_a_forged_entry_in_a_chunk_breaks_the_chain_at_the_next_entry(s3_url, fresh):
    """Entry 6 changed and its own checksum recomputed: entry 7 was chained to the old one."""
    run, _ = _fill(s3_url)
    bucket = _run_bucket(s3_url, run)
    at = bucket.url
    key, ch = _chunk(bucket)
    slots = list(ch.slots)
    slots[5] = forge(slots[5], slots[4][-32:], _later)
    assert slots[5] != ch.slots[5] and _meta(slots[5])["t"] == _meta(ch.slots[5])["t"] + 1.0
    _put_chunk(bucket, key, ch, slots)
    assert _lines(fresh(s3_url)) == [f"corrupt-log {at}/{key}: entry 7: checksum mismatch [{at}]"]
    assert _read_error(fresh(s3_url), run) == f"integrity error: log {at}/{key}: entry 7: checksum mismatch"


def test_a_forged_last_entry_of_a_chunk_disagrees_with_the_chunk_key(s3_url, fresh):
    """Entry 16 (the chunk's last) changed and re-checksummed: the chunk's key names the old checksum,
    and HEAD's entry 17 is chained to it. The read error names the run's HEAD (where entry 17 is), as a key."""
    run, _ = _fill(s3_url)
    bucket = _run_bucket(s3_url, run)
    at = bucket.url
    key, ch = _chunk(bucket)
    slots = list(ch.slots)
    slots[15] = forge(slots[15], slots[14][-32:], _later)
    _put_chunk(bucket, key, ch, slots)
    now, named = slots[15][-32:].hex()[:16], key.rsplit("-", 1)[1][:16]
    assert _lines(fresh(s3_url)) == [f"corrupt-entry {at}/{key}: its entries chain to {now}, it names {named} [{at}]"]
    assert _read_error(fresh(s3_url), run) == f"integrity error: log {at}/HEAD: entry 17: checksum mismatch"
    err = run_cli("log", run, store=s3_url, exit_code=6)[2]
    assert err == f"objstore: error: integrity error: log {at}/HEAD: entry 17: checksum mismatch\n"


def test_a_damaged_entry_key(s3_url, fresh):
    run, _ = _fill(s3_url)
    bucket = _run_bucket(s3_url, run)
    at = bucket.url
    slot = _head(bucket).tail[-1]
    key = s3layout.entry_key(22, slot[1])
    orig = bucket.get(key).data
    big = fresh(s3_url).records(run)[-1]
    # a flipped byte in the entry's data block: the record no longer hashes to its id
    data = bytearray(orig)
    data[len(data) // 2] ^= 0xFF
    bucket.put(key, bytes(data))
    ref = f"run/{run}/branch/0"
    assert _lines(fresh(s3_url)) == [
        f"corrupt-object {big.id.hex()}: hash mismatch (content does not match id) [{at}/{key}]",
        f"damaged-ref {ref}: points to damaged object {big.id.hex()} [{at}]",
    ]
    # a flipped bit in its trailer checksum: the log is damaged at entry 22
    data = bytearray(orig)
    data[-1] ^= 0x01
    bucket.put(key, bytes(data))
    assert _lines(fresh(s3_url)) == [f"corrupt-log {at}/{key}: entry 22: checksum mismatch [{at}]"]
    assert _read_error(fresh(s3_url), run) == f"integrity error: log {at}/{key}: entry 22: checksum mismatch"
    # the entry forged consistently (its checksum recomputed, and the run HEAD's, which names it): only an anchor tells
    bucket.put(key, orig)
    head = _head(bucket)
    token = _anchor(fresh(s3_url))  # its manifest names the run's log at entry 22, checksum head.checksum
    forged = forge(orig, head.tail[-2][-32:], _later)
    cks = forged[-32:]
    bucket.put(s3layout.entry_key(22, cks), forged)
    bucket.put(HEAD_KEY, s3layout.encoder.encode(Head(head.fmt, 22, cks, head.chunk, [*head.tail[:-1], [22, cks]])))
    assert _lines(fresh(s3_url)) == []  # every checksum holds: the log is what its (new) writer wrote
    lines = [p.line() for p in objstore.verify(fresh(s3_url), anchor=token)]
    assert lines == [f"anchor-rewritten run/{run}: entry 22 has checksum {cks.hex()}, the anchor names {head.checksum.hex()} [{at}]"], lines


def test_a_rolled_back_head(s3_url, fresh):
    """The run's HEAD re-encoded without its last entry: a consistent log one entry shorter. A fresh reader
    cannot know (nothing names entry 22 any more); a reader that read entry 22 and an anchor can."""
    run, tasks = _fill(s3_url)
    bucket = _run_bucket(s3_url, run)
    at = bucket.url
    seen = fresh(s3_url)
    assert len(seen.records(run)) == 22
    h = _head(bucket)
    token = _anchor(fresh(s3_url))  # (another opener's: an anchor commit closes the run logs its store holds open)
    bucket.put(HEAD_KEY, s3layout.encoder.encode(Head(h.fmt, h.n - 1, h.tail[-2][-32:], h.chunk, h.tail[:-1])))
    assert [r.body["task"] for r in fresh(s3_url).records(run)[1:]] == tasks[:-1]
    assert _lines(fresh(s3_url)) == []
    assert [p.line() for p in objstore.verify(fresh(s3_url), anchor=token)] == [
        f"anchor-rolled-back run/{run}: the log ends at entry 21, the anchor names entry 22 ({h.checksum.hex()}) [{at}]"]
    with pytest.raises(CorruptLog) as got:
        seen.store.logs.run_log(run).refresh(force=True)
    assert str(got.value) == f"integrity error: log {at}/HEAD: HEAD went back from entry 22 to entry 21 (a rolled-back log)"
    code, _out, err = run_cli("verify", "--anchor", token, store=s3_url, exit_code=1)
    assert "Traceback" not in err


# -- the local cache ---------------------------------------------------------------------------


def test_edited_cache_files_are_not_believed(s3_url, fresh, tmp_path):
    """Every cached key is checked on use: an edited copy is dropped and the bucket read again, and
    verify reads the bucket itself. Two chunks here (40 appends), so one copy can hold the other's bytes."""
    log = objstore.open_store(s3_url)
    run = log.start_run(subject="s")
    for i in range(40):
        log.append(run, "task_opened", {"task": f"n{i}"})
    cache = str(tmp_path / "edited-cache")
    reader = fresh(s3_url, cache)
    truth = [(r.id, r.body) for r in reader.records(run)]
    assert len(truth) == 41
    keys = os.path.join(reader.store.logs.run_log(run).cache, "keys")  # type: ignore[attr-defined]  (the run log's cache)
    copies = sorted(os.listdir(keys))
    assert len(copies) == 2 and all(c.startswith("g0_chunk_") for c in copies)  # g0: read under gc generation 0
    a, b = (os.path.join(keys, c) for c in copies)
    with open(a, "rb") as f:
        first = f.read()
    with open(b, "rb") as f:
        second = f.read()
    with open(a, "wb") as f:  # the first chunk's copy holds the second chunk
        f.write(second)
    with open(b, "r+b") as f:  # the second's copy has a flipped bit
        f.seek(len(second) - 1)
        f.write(bytes([second[-1] ^ 0x01]))
    again = fresh(s3_url, cache)
    assert [(r.id, r.body) for r in again.records(run)] == truth
    assert _lines(fresh(s3_url, cache)) == []
    with open(a, "rb") as f:
        assert f.read() == first  # dropped and read again from the bucket
    bucket = _run_bucket(s3_url, run)  # the bucket was never written by a reader
    assert sorted(k.key for k in bucket.list() if k.key.startswith("chunk/")) == sorted(c[len("g0_"):].replace("_", "/", 1) for c in copies)
    assert not [k.key for k in open_bucket(s3_url).list() if "chunk/" in k.key and not k.key.startswith(run_prefix(run))]


# -- a server that lies (the in-memory bucket) -----------------------------------------------------


def _mem_log(bucket: MemoryBucket, cache: str) -> RunLog:
    return s3_log(bucket, cache)


def _is_chunk(key: str) -> bool:
    """A chunk of any log of the store (``runs/<xx>/<run>/chunk/…``, ``store/chunk/…``)."""
    return "/chunk/" in key


def _run_key(run: str, key: str) -> str:
    """Where key ``key`` of run ``run``'s log is in the store's bucket."""
    return run_prefix(run) + key


class _DropsChunks(MemoryBucket):
    """Answers a chunk PUT with success and keeps nothing (a lost write)."""

    def put(self, key: str, data: bytes) -> str:
        if _is_chunk(key):
            self.requests["PUT"] += 1
            return self._etag(data).strip('"')
        return super().put(key, data)

    def put_if_absent(self, key: str, data: bytes) -> str | None:  # how a chunk is written
        if _is_chunk(key):
            self.requests["PUT"] += 1
            return self._etag(data).strip('"')
        return super().put_if_absent(key, data)


def test_a_chunk_write_the_server_lost_is_named_never_filled_in(tmp_path):
    b = _DropsChunks()
    log = _mem_log(b, str(tmp_path / "w"))
    run = log.start_run(subject="s")
    for i in range(20):
        log.append(run, "task_opened", {"task": f"n{i}"})
    key = _run_key(run, chunk_key(*msgspec.msgpack.decode(b.raw()[_run_key(run, HEAD_KEY)], type=Head).chunk))
    assert key not in b.raw()
    where = f"{b.url}/{key}"
    with pytest.raises(CorruptLog) as got:
        _mem_log(b, str(tmp_path / "r")).records(run)
    assert str(got.value) == f"integrity error: log {where}: missing (HEAD or a chunk names it)"
    lines = [p.line() for p in objstore.verify(_mem_log(b, str(tmp_path / "v")))]
    assert lines == [f"corrupt-log {where}: missing (HEAD or a chunk names it) [{b.url}/{run_prefix(run).rstrip('/')}]"]


class _ServesTheOtherChunk(MemoryBucket):
    """Answers a GET of one chunk with another chunk's bytes (a confused or malicious server)."""

    swap: dict[str, str] = {}

    def get(self, key: str):
        return super().get(self.swap.get(key, key))


def test_a_server_serving_another_chunk_is_caught(tmp_path):
    b = _ServesTheOtherChunk()
    log = _mem_log(b, str(tmp_path / "w"))
    run = log.start_run(subject="s")
    for i in range(40):
        log.append(run, "task_opened", {"task": f"n{i}"})
    first, second = sorted(k for k in b.raw() if _is_chunk(k))
    assert first.startswith(run_prefix(run)) and second.startswith(run_prefix(run))
    b.swap = {first: second}
    with pytest.raises(CorruptLog) as got:
        _mem_log(b, str(tmp_path / "r")).records(run)
    assert str(got.value) == f"integrity error: log {b.url}/{first}: chunk does not hold the entries its key names"
    lines = [p.line() for p in objstore.verify(_mem_log(b, str(tmp_path / "v")))]
    assert lines == [f"corrupt-log {b.url}/{first}: chunk does not hold the entries its key names [{b.url}/{run_prefix(run).rstrip('/')}]"]


_Z = b"\x00" * 32


def _malformed(h: Head, case: str) -> bytes:
    """HEAD as someone with write access could re-encode it: it parses, and lies."""
    enc = s3layout.encoder.encode
    return {
        "n negative": lambda: enc(Head(h.fmt, -1, h.checksum, h.chunk, h.tail)),
        "short checksum": lambda: enc(Head(h.fmt, h.n, b"x", h.chunk, h.tail)),
        "tail longer than n": lambda: enc(Head(h.fmt, 2, h.checksum, None, h.tail)),
        "a slot that is a number": lambda: enc(Head(h.fmt, h.n, h.checksum, h.chunk, [*h.tail[:-1], 7])),
        "a slot naming another entry": lambda: enc(Head(h.fmt, h.n, h.checksum, h.chunk, [*h.tail[:-1], [h.n + 5, _Z]])),
        "a slot naming a missing key": lambda: enc(Head(h.fmt, h.n, h.checksum, h.chunk, [*h.tail[:-1], [h.n, _Z]])),
        "a malformed chunk ref": lambda: enc(Head(h.fmt, h.n, h.checksum, [1, "x", _Z], h.tail)),
        "a reversed chunk ref": lambda: enc(Head(h.fmt, h.n, h.checksum, [16, 1, h.chunk[2]], h.tail)),
        "a missing chunk": lambda: enc(Head(h.fmt, h.n, h.checksum, [1, 16, _Z], h.tail)),
        "no chunk": lambda: enc(Head(h.fmt, h.n, h.checksum, None, h.tail)),
        "an empty tail": lambda: enc(Head(h.fmt, h.n, h.checksum, h.chunk, [])),
        "another checksum": lambda: enc(Head(h.fmt, h.n, _Z, h.chunk, h.tail)),
        "a huge entry count": lambda: enc(Head(h.fmt, 2**62, h.checksum, h.chunk, h.tail)),
        "a map": lambda: msgspec.msgpack.encode({"fmt": h.fmt}),
    }[case]()


_MISSING_CHUNK = "chunk/000000000001-000000000016-" + "00" * 32


@pytest.mark.parametrize("case,where,detail,verify_line", [
    ("n negative", "HEAD", "HEAD is not an objstore S3 head", "corrupt-entry"),
    ("short checksum", "HEAD", "HEAD is not an objstore S3 head", "corrupt-entry"),
    ("tail longer than n", "HEAD", "HEAD is not an objstore S3 head", "corrupt-entry"),
    ("a slot that is a number", "HEAD", "entry 21: malformed slot", "corrupt-log"),
    ("a slot naming another entry", "HEAD", "entry 21: malformed slot", "corrupt-log"),
    ("a slot naming a missing key", f"entry/000000000021-{'00' * 32}", "missing (HEAD or a chunk names it)", "corrupt-log"),
    ("a malformed chunk ref", "HEAD", "HEAD names a malformed chunk", "corrupt-entry"),
    ("a reversed chunk ref", "HEAD", "HEAD names a malformed chunk", "corrupt-entry"),
    ("a missing chunk", _MISSING_CHUNK, "missing (HEAD or a chunk names it)", "corrupt-log"),
    ("no chunk", "HEAD", "the chunks end before entry 1", "corrupt-log"),
    ("an empty tail", "HEAD", "HEAD names checksum {named} for entry 21, its entries chain to {chained16}", "corrupt-log"),
    ("another checksum", "HEAD", "HEAD names checksum 0000000000000000 for entry 21, its entries chain to {chained21}", None),
    ("a huge entry count", "HEAD", "entry 4611686018427387900: entry number 17 where 4611686018427387900 was expected", "corrupt-log"),
    ("a map", "HEAD", "HEAD does not parse: Expected `array`, got `object`", "corrupt-entry"),
])
def test_a_head_that_parses_and_lies_is_one_typed_error(tmp_path, case, where, detail, verify_line):
    """Each read raises CorruptLog (exit 6) naming the key and what is wrong, the first time and every
    time after (a fresh process never "read another entry"); verify lists it as one line."""
    b = MemoryBucket()
    log = _mem_log(b, str(tmp_path / "w"))
    run = log.start_run(subject="s")
    for i in range(20):
        log.append(run, "task_opened", {"task": f"n{i}"})
    h = msgspec.msgpack.decode(b.raw()[_run_key(run, HEAD_KEY)], type=Head)
    ch = msgspec.msgpack.decode(b.raw()[_run_key(run, chunk_key(*h.chunk))], type=Chunk)
    detail = detail.format(named=h.checksum.hex()[:16], chained16=ch.slots[-1][-32:].hex()[:16], chained21=h.checksum.hex()[:16])
    b.poke(_run_key(run, HEAD_KEY), _malformed(h, case))
    at = f"{b.url}/{run_prefix(run).rstrip('/')}"  # the run log's keys
    reader = _mem_log(b, str(tmp_path / "r"))
    for _ in range(2):
        with pytest.raises(CorruptLog) as got:
            reader.records(run)
        assert str(got.value) == f"integrity error: log {at}/{where}: {detail}"
    lines = [p.line() for p in objstore.verify(_mem_log(b, str(tmp_path / "v")))]
    if verify_line is None:  # verify's own walk names the disagreement from the other side
        assert lines == [f"corrupt-entry {at}/HEAD: its entries chain to {h.checksum.hex()[:16]}, it names 0000000000000000 [{at}]"]
    else:
        assert lines == [f"{verify_line} {at}/{where}: {detail} [{at}]"]


# -- bad input at the command line ------------------------------------------------------------------


@pytest.mark.parametrize("url,says", [
    ("s3://Bad_Bucket/x", "bad bucket name 'Bad_Bucket'"),
    ("s3://", "bad bucket name ''"),
    ("s3://ab/x", "bad bucket name 'ab'"),
    ("s3://objstore-test/a//b", "bad key prefix 'a//b'"),
    ("s3://objstore-test/a/../b", "bad key prefix 'a/../b'"),
    ("s3://objstore-test/a?b", "bad key prefix 'a?b'"),
])
def test_a_malformed_url_is_one_line_exit_5(url, says):
    _code, out, err = run_cli("log", "latest", store=url, exit_code=5)
    assert out == "" and err.count("\n") == 1 and err.startswith(f"objstore: error: invalid input: {says} in {url!r}")
    _code, _out, err = run_cli("log", "latest", "--json", store=url, exit_code=5)
    assert json.loads(err)["error"] == "invalid-input"


def _one_line(err: str) -> str:
    assert err.count("\n") == 1 and "Traceback" not in err, err
    return err


def test_a_missing_store_is_exit_3_and_writes_nothing(s3_url):
    err = _one_line(run_cli("log", "latest", store=s3_url, exit_code=3)[2])
    assert err == f"objstore: error: not an objstore store: {s3_url} (run 'objstore init' or pass --store)\n"
    assert list(open_bucket(s3_url).list()) == []


@pytest.mark.parametrize("case", ["missing bucket", "closed port", "wrong secret"])
def test_an_unreachable_or_refusing_server_is_one_line(s3_url, case):
    """A missing bucket is a store that is not there (exit 3, saying how to make it); a server that cannot be
    reached or refuses the credentials is exit 10; each is one line, and nothing is written."""
    url, env, code = s3_url, {}, 10
    if case == "missing bucket":
        url, code = "s3://no-such-bucket-objstore/p", 3
    elif case == "closed port":
        import socket
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        s.close()  # nothing listens there now
        env = {"AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}"}
    else:
        env = {"AWS_SECRET_ACCESS_KEY": "not-the-secret"}
    for args in (("log", "latest"), ("init",)):
        err = _one_line(run_cli(*args, store=url, env_extra=env, exit_code=code)[2])
        assert err.startswith("objstore: error: object storage: ")
        assert {"missing bucket": "bucket no-such-bucket-objstore does not exist", "closed port": "error sending request",
                "wrong secret": "SignatureDoesNotMatch"}[case] in err
        err = run_cli(*args, "--json", store=url, env_extra=env, exit_code=code)[2]
        assert json.loads(err)["exit"] == code
    assert list(open_bucket(s3_url).list()) == []  # init wrote nothing anywhere it could reach


# -- concurrency ---------------------------------------------------------------------------------------


_INIT = """
import json, sys, time
from objstore.storage.store import Store
from objstore.runs.api import RunLog
while True:
    try:
        open(sys.argv[2]).close()
        break
    except OSError:
        time.sleep(0.002)
st = Store.init(sys.argv[1])
run = RunLog(st).start_run(subject="creator")
print(json.dumps({"created": st.created, "run": run}))
"""


def test_two_processes_creating_one_store_both_succeed_one_created_it(s3_url, tmp_path, fresh):
    for round_ in range(3):
        url = f"{s3_url}-{round_}"
        go = str(tmp_path / f"go{round_}")
        env = dict(os.environ, OBJSTORE_CACHE_DIR=str(tmp_path / f"cache{round_}"))
        procs = [subprocess.Popen([sys.executable, "-c", _INIT, url, go], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
                 for _ in range(2)]
        with open(go, "w"):
            pass
        outs = []
        for p in procs:
            out, err = p.communicate(timeout=120)
            assert p.returncode == 0, err.decode()
            outs.append(json.loads(out))
        assert sorted(o["created"] for o in outs) == [False, True]
        log = fresh(url)
        assert sorted(len(log.records(o["run"])) for o in outs) == [1, 1]
        assert objstore.verify(log) == []
        keys = [k.key for k in open_bucket(url).list()]
        assert keys.count("OBJSTORE") == 1


def test_threads_of_one_process_appending_to_one_run_lose_nothing(s3_url, fresh):
    log = objstore.open_store(s3_url)
    run = log.start_run(subject="threads")
    threads, per = 8, 25
    errors: list[BaseException] = []
    acked: list[tuple[str, int, bytes]] = []
    mu = threading.Lock()

    def work(k: int) -> None:
        try:
            for i in range(per):
                rec = log.append(run, "task_opened", {"task": f"th{k}-{i}"})
                with mu:
                    acked.append((rec.body["task"], rec.lsn, rec.id))
        except BaseException as e:  # reported below: a thread's exception must fail the test
            errors.append(e)

    ts = [threading.Thread(target=work, args=(k,)) for k in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert errors == []
    recs = fresh(s3_url).records(run)
    assert [r.lsn for r in recs] == list(range(1 + threads * per))
    tags = Counter(r.body["task"] for r in recs[1:])
    assert set(tags.values()) == {1} and len(tags) == threads * per
    assert sorted((r.body["task"], r.lsn, r.id) for r in recs[1:]) == sorted(acked)
    assert sorted(lsn for _t, lsn, _i in acked) == list(range(1, 1 + threads * per))
    assert objstore.verify(fresh(s3_url)) == []
