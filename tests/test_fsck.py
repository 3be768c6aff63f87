"""Corruption suite in the style of git's t/t1450-fsck.sh (invariant 11).

Each test damages real bytes on disk, runs verify, and asserts the exact line
naming the object and its path. The CLI is exercised in a subprocess for the
exit code and the one-line-per-problem output.
"""

import json
import os
import struct

import pytest

from objstore import RunLog, Store, codec
from objstore.objects import LOOSE_MAGIC, PackFile
from objstore.verify import verify

from helpers import run_cli


@pytest.fixture
def built(tmp_path):
    """A store with loose objects (single appends) and a pack (a batch)."""
    root = str(tmp_path / "s")
    log = RunLog(Store.init(root))
    run = log.start_run("r1")
    blob = log.put_blob(b"the prompt " * 30)
    rec = log.record_attempt(run, step=1, attempt=0, state="failed", prompt=blob)
    with log.store.batch():
        packed = [log.record_attempt(run, step=2, attempt=i, state="failed") for i in range(5)]
    assert verify(log) == []
    return log, run, blob, rec, packed


def lines(log):
    return [p.line() for p in verify(log)]


def loose(log, oid):
    return log.store.backend.loose_path(oid)


def rewrite(path, data):
    with open(path, "wb") as f:
        f.write(data)


def the_pack(log):
    d = os.path.join(log.store.root, "packs")
    (name,) = os.listdir(d)
    return os.path.join(d, name)


def test_clean_store_verifies_clean_cli(built):
    log = built[0]
    code, out, err = run_cli("verify", store=log.store.root)
    assert (code, out) == (0, "")
    assert "verify: ok" in err


def test_flipped_byte_in_loose_object(built):
    log, run, blob, rec, _ = built
    p = loose(log, rec.id)
    data = bytearray(open(p, "rb").read())
    assert data[4] == 0  # stored raw
    data[-5] ^= 0x20
    rewrite(p, bytes(data))
    # The packed records after it name it as parent: it is damaged, not missing, so one line says it all.
    assert lines(log) == [f"corrupt-object {rec.id.hex()}: hash mismatch (content does not match id) [{p}]"]


def test_flipped_byte_in_compressed_object(built):
    log, run, blob, rec, _ = built
    p = loose(log, blob)
    data = bytearray(open(p, "rb").read())
    assert data[4] == 1  # zstd
    data[-5] ^= 0x20
    rewrite(p, bytes(data))
    assert lines(log) == [f"corrupt-object {blob.hex()}: zstd data corrupt: zstd decompressor error: Data corruption detected [{p}]"]


def test_truncated_loose_object(built):
    log, run, blob, rec, _ = built
    p = loose(log, rec.id)
    data = open(p, "rb").read()
    assert data[4] == 0  # stored raw, so the canonical header can tell the truncation
    rewrite(p, data[:-7])
    payload_len = len(data) - 5 - data[5:].index(b"\x00") - 1
    assert lines(log) == [
        f"corrupt-object {rec.id.hex()}: truncated object ({payload_len - 7} of {payload_len} payload bytes) [{p}]",
    ]


def test_truncated_compressed_object(built):
    log, run, blob, rec, _ = built
    p = loose(log, blob)
    data = open(p, "rb").read()
    assert data[4] == 1
    rewrite(p, data[:-3])
    assert lines(log) == [f"corrupt-object {blob.hex()}: truncated zstd frame [{p}]"]


def test_garbage_after_object(built):
    log, run, blob, rec, _ = built
    p = loose(log, rec.id)
    rewrite(p, open(p, "rb").read() + b"JUNK")
    assert lines(log) == [f"corrupt-object {rec.id.hex()}: garbage after object (4 extra bytes) [{p}]"]


def test_garbage_after_compressed_object(built):
    log, run, blob, rec, _ = built
    p = loose(log, blob)
    rewrite(p, open(p, "rb").read() + b"JUNK")
    assert lines(log) == [f"corrupt-object {blob.hex()}: garbage after object (4 extra bytes) [{p}]"]


def _plant(log, canonical):
    oid = codec.object_id(canonical)
    p = loose(log, oid)
    os.makedirs(os.path.dirname(p), exist_ok=True)
    rewrite(p, LOOSE_MAGIC + b"\x00" + canonical)
    return oid, p


def test_unknown_type(built):
    log = built[0]
    oid, p = _plant(log, b"tree 3\x00abc")
    assert lines(log) == [f"unknown-type {oid.hex()}: unknown object type 'tree' [{p}]"]


def test_bad_object_header(built):
    log = built[0]
    oid, p = _plant(log, b"blob\x00abc")
    assert lines(log) == [f"corrupt-object {oid.hex()}: bad header [{p}]"]


def test_bad_stored_header(built):
    log, run, blob, rec, _ = built
    p = loose(log, blob)
    data = open(p, "rb").read()
    rewrite(p, b"XXXX" + data[4:])
    assert lines(log) == [f"corrupt-object {blob.hex()}: bad stored header (magic/format version) [{p}]"]


def test_non_canonical_object(built):
    log = built[0]
    payload = b"\x82\xa1b\x01\xa1a\x02"  # keys out of order
    oid, p = _plant(log, codec.header("record", len(payload)) + payload)
    assert lines(log) == [f"corrupt-object {oid.hex()}: non-canonical payload encoding [{p}]"]


def test_missing_object_referenced_by_another(built):
    log, run, blob, rec, _ = built
    os.unlink(loose(log, blob))
    assert lines(log) == [f"missing-object {blob.hex()}: referenced by record {rec.id.hex()} (prompt) but not stored"]


def test_wrong_type_reference(built):
    log, run, blob, rec, _ = built
    # A record whose prompt names a record, not a blob.
    bad = log.append(run, "attempt", {"step": 9, "attempt": 0, "state": "running", "prompt": rec.id})
    assert lines(log) == [f"wrong-type {rec.id.hex()}: prompt of record {bad.id.hex()} should be a blob, is a record [{loose(log, rec.id)}]"]


def test_dangling_ref(built):
    log = built[0]
    ghost = bytes([7]) * 32
    log.store.set_ref("tags/x", None, ghost, "test")
    assert lines(log) == [f"dangling-ref tags/x: points to missing object {ghost.hex()} [{log.store.refs.path('tags/x')}]"]


def test_dangling_symbolic_ref(built):
    log = built[0]
    log.store.set_ref("tags/y", None, "ref: tags/nowhere", "test")
    assert lines(log) == [f"dangling-ref tags/y: symbolic ref to missing ref tags/nowhere [{log.store.refs.path('tags/y')}]"]


def test_corrupt_ref_file(built):
    log, run = built[0], built[1]
    p = log.store.refs.path(f"run/{run}/branch/0")
    rewrite(p, b"not an id\n")
    assert lines(log) == [f"corrupt-ref run/{run}/branch/0: corrupt ref file: 'not an id' [{p}]"]


def test_flipped_byte_in_pack_block(built):
    log, run, blob, rec, packed = built
    p = the_pack(log)
    pack = PackFile(p)
    pos = pack.block_pos[0]
    data = bytearray(open(p, "rb").read())
    comp, raw_len, stored = struct.unpack_from("<BII", data, pos)
    data[pos + 9 + stored // 2] ^= 0x01  # the middle of block 0's stored bytes
    rewrite(p, bytes(data))
    ref = f"run/{run}/branch/0"
    got = lines(log)
    assert got[0] == f"corrupt-pack {p}: checksum mismatch (pack bytes damaged) [{p}]"
    # Which objects of the (compressed) block the flip reaches depends on zstd's layout;
    # every one reported is one of the packed records, named with its pack path and block.
    named = got[1:-1]
    assert named
    ids = {r.id.hex() for r in packed}
    for line in named:
        code, rest = line.split(" ", 1)
        assert code in ("corrupt-object", "unknown-type")
        assert rest.split(":")[0] in ids and line.endswith(f"[{p} block 0]")
    assert got[-1] == f"damaged-ref {ref}: points to damaged object {packed[-1].id.hex()} [{log.store.refs.path(ref)}]" \
        or got[-1].startswith(("corrupt-object", "unknown-type"))


def test_corrupt_pack_index(built):
    log, run, blob, rec, packed = built
    p = the_pack(log)
    data = bytearray(open(p, "rb").read())
    data[-60] ^= 0x01  # inside the index entries, before the 44-byte trailer
    rewrite(p, bytes(data))
    got = lines(log)
    assert got[0] == f"corrupt-pack {p}: checksum mismatch (pack bytes damaged) [{p}]"


def test_truncated_pack(built):
    log, run, blob, rec, packed = built
    p = the_pack(log)
    rewrite(p, open(p, "rb").read()[:-20])
    got = lines(log)
    assert got[0] == f"corrupt-pack {p}: bad or missing trailer (truncated or garbage appended) [{p}]"
    assert got[1] == f"dangling-ref run/{run}/branch/0: points to missing object {packed[-1].id.hex()} [{log.store.refs.path(f'run/{run}/branch/0')}]"


def test_garbage_after_pack(built):
    log = built[0]
    p = the_pack(log)
    rewrite(p, open(p, "rb").read() + b"garbage")
    assert lines(log)[0] == f"corrupt-pack {p}: bad or missing trailer (truncated or garbage appended) [{p}]"


def test_stray_file_in_objects(built):
    log = built[0]
    p = os.path.join(log.store.root, "objects", "zz", "notanid")
    os.makedirs(os.path.dirname(p))
    rewrite(p, b"x")
    assert lines(log) == [f"corrupt-object notanid: stray file in object directory (not an object id) [{p}]"]


def test_cli_reports_and_exits_1(built):
    log, run, blob, rec, _ = built
    p = loose(log, rec.id)
    data = bytearray(open(p, "rb").read())
    data[-5] ^= 0x20
    rewrite(p, bytes(data))
    code, out, err = run_cli("verify", store=log.store.root)
    assert code == 1
    assert out.splitlines() == [f"corrupt-object {rec.id.hex()}: hash mismatch (content does not match id) [{p}]"]
    assert "Traceback" not in err
    code, out, err = run_cli("verify", "--json", store=log.store.root)
    assert code == 1
    assert json.loads(out) == [{"code": "corrupt-object", "subject": rec.id.hex(), "where": p, "detail": "hash mismatch (content does not match id)"}]


def test_run_ref_naming_the_wrong_type(built):
    log, run, blob, rec, packed = built
    log.store.set_ref(f"run/{run}/journal", None, rec.id, "forged")
    assert lines(log) == [f"wrong-type {rec.id.hex()}: run/{run}/journal should name a journal of run {run}, names a record of run {run} [run/{run}/journal]"]
