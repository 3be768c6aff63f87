"""The orders docs/FORMAT.md states for a second implementation (issue 13, item 13; section "Orders a
second implementation must follow") are the code's, pinned by golden vectors (fixtures/make_golden_orders.py):

- a sealed index's chain rows are sorted by key, then LSN / entry number **as a number**, then id (a byte
  sort of the little-endian u64 puts LSN 256 right after LSN 0: fixtures/golden-orders-1.idx has LSNs to 259);
- the label rows the root's ``["L", …]`` element hashes are, per record, its run-scope rows, then (a
  ``run_started``) its store-scope rows, each group by label name;
- after a second gc the root holds one ``["w", …]`` per segment any rewrite entry named, with the newest
  rewrite's digest (segment 2 is rewritten by the first gc only);
- ``deletion`` objects of every scope have ``prevs`` rows, an ``objs`` row's type is the type name, a
  ``recs`` row's refs follow the body's sorted field order, a removed body's index row has its block
  fields 0, the packed meta frame is canonical msgpack.

The fixture store is read here by the documented layout alone (struct, zstd, msgpack, BLAKE3): every
entry's root is recomputed from the documented element set and compared with the one the entry names.
A rebuild of the store must give the committed bytes (the packed segments' only under the zstd version
that wrote them: their frames are zstd's), and the same recomputation must hold on it.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import sys

import blake3
import msgspec
import zstandard

HERE = os.path.dirname(os.path.abspath(__file__))
FIX = os.path.join(HERE, "..", "..", "fixtures")
STORE = os.path.join(FIX, "golden-orders-store")
GOLD = json.load(open(os.path.join(FIX, "golden-orders.json"), encoding="utf-8"))
INDEX_1 = open(os.path.join(FIX, "golden-orders-1.idx"), "rb").read()

_enc = msgspec.msgpack.Encoder(order="sorted")
TYPES = ["blob", "record", "fork", "journal", "segment", "grant", "deletion", "schema"]  # index type codes 0 … 7
UNRESERVED = set(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
ROW = struct.Struct("<16sQ32s")  # a chain or label row


# -- the log, read by the documented layout -------------------------------------------------------

def _checksum(prev: bytes, n: int, m: dict) -> bytes:
    fields = [n, m["t"], [[o[0], o[1], o[2]] for o in m["objs"]], m["moves"], m["cut"], m["recs"], m["prevs"], m["root"],
              m["seal"], m["idx"]]
    if m.get("rw") is not None:
        fields.append(m["rw"])
    return blake3.blake3(prev + _enc.encode(fields)).digest()


def _block(data: bytes, comp: int, raw: int) -> bytes:
    return zstandard.ZstdDecompressor().decompress(data, max_output_size=raw) if comp == 1 else data


def read_log(root: str) -> list[dict]:
    """Every entry of the store's segments in order, each {n, seg, meta fields…, objects: {id: canonical}},
    its chain checksum recomputed from its predecessor's."""
    out: list[dict] = []
    prev, n = bytes(32), 1
    names = sorted(x for x in os.listdir(os.path.join(root, "log")) if x.endswith(".seg"))
    for name in names:
        data = open(os.path.join(root, "log", name), "rb").read()
        seg = int(name[:10])
        if data[:8] == b"OSPK\x03\x00\x00\x00":
            _m, hseg, first, count, hprev, _orig = struct.unpack_from("<8sQQQ32s32s", data, 0)
            moff, mstored, mraw, _flen, last = struct.unpack_from("<QQQQ32s", data, len(data) - 64)
            frame = zstandard.ZstdDecompressor().decompress(data[moff : moff + mstored], max_output_size=mraw)
            meta = msgspec.msgpack.decode(frame)
            assert _enc.encode(meta) == frame, "the packed meta frame is canonical msgpack"
            assert (hseg, first, hprev) == (seg, n, prev)
            offsets, pos = [], 96
            for b in meta["blocks"]:
                offsets.append(pos)
                pos += b[2]
            for t, moves, objs, cut, recs, prevs, root_, seal, idx, rw in meta["entries"]:
                m = {"t": t, "moves": moves, "objs": objs, "cut": cut, "recs": recs, "prevs": prevs, "root": root_, "seal": seal,
                     "idx": idx, "rw": rw}
                objects = {}
                for oid, _t, length, bi, off in objs:
                    if bi == -1:
                        assert off == 0
                        continue
                    comp, raw, stored = meta["blocks"][bi]
                    objects[oid] = _block(data[offsets[bi] : offsets[bi] + stored], comp, raw)[off : off + length]
                prev = _checksum(prev, n, m)
                out.append(dict(m, n=n, seg=seg, checksum=prev, objects=objects))
                n += 1
            assert count == len(meta["entries"]) and prev == last
            continue
        magic, hseg, first, hprev = struct.unpack_from("<8sQQ32s", data, 0)
        assert (magic, hseg, first, hprev) == (b"OSSG\x03\x00\x00\x00", seg, n, prev)
        off = 56
        while off < len(data):
            magic, mlen, dlen = struct.unpack_from("<4sIQ", data, off)
            assert magic == b"OSE3"
            m = msgspec.msgpack.decode(data[off + 16 : off + 16 + mlen])
            assert m["n"] == n
            pos, blocks = off + 16 + mlen, []
            for comp, raw, stored in m["blocks"]:
                blocks.append(_block(data[pos : pos + stored], comp, raw))
                pos += stored
            objects = {oid: blocks[bi][o : o + length] for oid, _t, length, bi, o in m["objs"]}
            length, checksum = struct.unpack_from("<Q32s", data, off + 16 + mlen + dlen)
            prev = _checksum(prev, n, m)
            assert prev == checksum
            out.append(dict(m, seg=seg, checksum=prev, objects=objects))
            n += 1
            off += length
            if m["seal"]:
                break
    return out


def payload(canonical: bytes) -> dict:
    return msgspec.msgpack.decode(canonical[canonical.index(b"\x00") + 1 :])


# -- the documented rules --------------------------------------------------------------------------

def esc(s: str) -> str:
    return "".join(chr(b) if b in UNRESERVED else f"%{b:02X}" for b in s.encode())


def label_key(scope: str, name: str, value: str) -> bytes:
    return blake3.blake3(("L\x00" + scope + "\x00" + esc(name) + "=" + esc(value)).encode()).digest()[:16]


def chain_key(run: str, branch: int) -> bytes:
    return blake3.blake3(run.encode() + b"\x00" + str(branch).encode("ascii")).digest()[:16]


def label_rows(e: dict) -> bytes:
    """An entry's label rows: record by record in objs order; each record's run-scope rows (labels by
    name), then for a run_started at LSN 0 of branch 0 its store-scope rows (labels by name)."""
    out = b""
    for r in e["recs"]:
        if len(r) < 9:
            continue
        oid, run, branch, lsn, kind, labels = e["objs"][r[0]][0], r[1], r[2], r[3], r[5], r[8]
        assert labels == sorted(labels)
        scopes = [run] + ([""] if kind == "run_started" and branch == 0 and lsn == 0 else [])
        for scope in scopes:
            for name, value in labels:
                out += ROW.pack(label_key(scope, name, value), e["n"], oid)
    return out


def body_refs(body: dict) -> list:
    """The 32-byte ids at a body's top level or one level down, in the order the canonical bytes hold them."""
    found = []
    for v in body.values():  # decoded from canonical bytes: map keys are in sorted order
        for x in (v.values() if type(v) is dict else v if type(v) is list else [v]):
            if type(x) is bytes and len(x) == 32:
                found.append(x)
    return found


def _elt(e: list) -> int:
    return int.from_bytes(blake3.blake3(_enc.encode(e)).digest(2048), "little")


def replay(entries: list[dict]) -> dict:
    """Apply every entry as docs/FORMAT.md says and recompute the root after each from the element set
    ("The root"); it must be the root the entry names. Also checks the row rules of each entry."""
    refs: dict = {}
    tips: dict = {}
    starts: dict = {}
    idx: dict = {}
    packs: dict = {}
    label_rows_packed = b""
    seen_scopes = set()
    for e in entries:
        n = e["n"]
        for _oid, otype, _length, _b, _o in e["objs"]:
            assert otype in TYPES, f"an objs row's type is the type name, not {otype!r}"
        with_prevs = {e["objs"][r[0]][0] for r in e["prevs"]}
        for oid, otype, *_ in e["objs"]:
            canon = e["objects"].get(oid)
            if otype in ("journal", "segment", "grant", "deletion", "schema") and canon is not None and "previous" in payload(canon):
                assert oid in with_prevs, f"entry {n}: the {otype} {oid.hex()} has no prevs row"
                if otype == "deletion":
                    seen_scopes.add(payload(canon)["scope"])
        for r in e["recs"]:
            oid = e["objs"][r[0]][0]
            if oid in e["objects"]:
                assert r[6] == body_refs(payload(e["objects"][oid])["body"]), f"entry {n}: refs out of the body's order"
            run, branch, lsn, kind = r[1], r[2], r[3], r[5]
            tips[(run, branch)] = (lsn, oid)
            if kind == "run_started" and branch == 0 and lsn == 0 and run not in starts:
                starts[run] = n
            assert kind not in ("intent", "intent_committed")  # no ["i", …] element in these vectors
        for name, _old, new, _why in e["moves"]:
            if new is None:
                refs.pop(name, None)
            else:
                refs[name] = new
        if e["idx"] is not None:
            idx[e["idx"][0]] = e["idx"][1]
            label_rows_packed = b""  # the sealed segment's label rows are in its index now
        for seg, file_digest, idx_digest in e.get("rw") or []:
            idx[seg] = idx_digest
            packs[seg] = file_digest  # per segment, the newest rewrite's file
        label_rows_packed += label_rows(e)
        elements: list = []
        by_run: dict = {}
        for name, value in refs.items():
            parts = name.split("/")
            if name.startswith("run/") and len(parts) > 2 and parts[1]:
                by_run.setdefault(parts[1], {})[name] = value
            else:
                elements.append(["r", name, value])
        for run in set(by_run) | {r for r, _b in tips} | set(starts):
            rr = sorted([k, v] for k, v in by_run.get(run, {}).items())
            rt = sorted([b, lsn, oid] for (r, b), (lsn, oid) in tips.items() if r == run)
            elements.append(["R", run, blake3.blake3(_enc.encode([rr, rt, starts.get(run)])).digest()])
        elements += [["x", s, d] for s, d in idx.items()] + [["w", s, d] for s, d in packs.items()]
        if label_rows_packed:
            elements.append(["L", blake3.blake3(label_rows_packed).digest()])
        root_sum = sum(_elt(x) for x in elements) % (1 << 16384)
        root = blake3.blake3(root_sum.to_bytes(2048, "little")).digest()
        assert root == e["root"], f"entry {n}: the root recomputed from the documented elements is not the one the entry names"
        e["label_rows_after"] = label_rows_packed
    return {"packs": packs, "idx": idx, "scopes": seen_scopes}


def index_rows(data: bytes) -> tuple[list, list]:
    """(object rows, chain rows) of an index file, by the documented layout; header and trailer checked."""
    magic, _seg, _first, _last, _ck, nobj, nchain = struct.unpack_from("<8sQQQ32sII", data, 0)
    assert magic == b"OSIX\x01\x00\x00\x00"
    assert blake3.blake3(data[:-32]).digest() == data[-32:]
    base = 72 + 1024
    objs = [struct.unpack_from("<32sQQIIIIBB", data, base + i * 66) for i in range(nobj)]
    base += nobj * 66
    chain = [ROW.unpack_from(data, base + i * 56) for i in range(nchain)]
    assert base + nchain * 56 + 32 == len(data)
    return objs, chain


def expected_chain_rows(entries: list[dict], seg: int) -> list:
    rows = []
    for e in entries:
        if e["seg"] != seg:
            continue
        for r in e["recs"]:
            rows.append((chain_key(r[1], r[2]), r[3], e["objs"][r[0]][0]))
        rows += list(ROW.iter_unpack(label_rows(e)))
    return sorted(rows, key=lambda r: (r[0], r[1], r[2]))  # u64 as a number


def check_orders(root: str, index_1: bytes) -> dict:
    entries = read_log(root)
    got = replay(entries)
    # a sealed index's chain rows: by key, then the u64 as a number, then the id; LSNs past 255 in it
    objs, chain = index_rows(index_1)
    assert chain == expected_chain_rows(entries, 1)
    assert max(r[1] for r in chain) > 255 and any(0 < r[1] < 256 for r in chain)
    l1 = next(r[1] for e in entries for r in e["recs"] if r[5] == "run_started" and len(r) > 8)
    assert any(r[0] == chain_key(l1, 12) for r in chain)  # branch 12: its key hashes the two bytes "12"
    assert chain != sorted(chain, key=lambda r: (r[0], struct.pack("<Q", r[1]), r[2])), "a byte sort would give the same rows"
    assert [o[0] for o in objs] == sorted(o[0] for o in objs)
    types = {o[0]: o[1] for e in entries if e["seg"] == 1 for o in e["objs"]}
    assert {o[0]: TYPES[o[8]] for o in objs} == types
    return {"entries": entries, **got}


# -- the tests ------------------------------------------------------------------------------------

def test_the_fixture_store_follows_every_documented_order():
    got = check_orders(STORE, INDEX_1)
    entries = got["entries"]
    # the root after the second gc: one w element per segment, its newest rewrite's file
    rws = [e["rw"] for e in entries if e.get("rw")]
    assert [[r[0] for r in rw] for rw in rws] == [[1, 2], [1, 3]]
    assert got["packs"] == {1: rws[1][0][1], 2: rws[0][1][1], 3: rws[1][1][1]}
    assert sorted([s, d.hex()] for s, d in got["packs"].items()) == GOLD["after_gc_2"]["packs"]
    assert entries[-1]["root"].hex() == GOLD["after_gc_2"]["root"]
    # deletions of every scope carry prevs rows
    assert got["scopes"] == {"run", "records", "blob"}
    # the L element before the seal: L1's run-scope rows, its store-scope rows, Q/P's record's row, L2's
    before = next(e for e in entries if e["n"] == GOLD["root_with_label_rows"]["entry"])
    assert before["label_rows_after"].hex() == GOLD["active_label_rows"]
    assert before["root"].hex() == GOLD["root_with_label_rows"]["root"]
    keys = [k for k, _n, _id in ROW.iter_unpack(before["label_rows_after"])]
    l1 = GOLD["runs"]["l1"]
    assert keys[:4] == [label_key(l1, "agent", "a"), label_key(l1, "thread_id", "t-1"), label_key("", "agent", "a"),
                        label_key("", "thread_id", "t-1")]
    # a record's refs in the body's order: output before prompt
    rec = next(r for e in entries for r in e["recs"] if (r[1], r[2], r[3]) == (l1, 0, 1))
    assert rec[6] == [bytes.fromhex(GOLD["blob_q"]), bytes.fromhex(GOLD["blob_p"])]


def test_a_removed_body_has_its_block_fields_zero_in_the_index(tmp_path):
    from objstore.storage.store import Store

    root = str(tmp_path / "s")
    shutil.copytree(STORE, root)
    Store.open(root).engine.refresh()  # builds the sealed segments' indexes the log names
    from objstore.runs.api import RunLog
    from objstore.runs.verify import verify

    assert [p.line() for p in verify(RunLog(Store.open(root))) if not p.line().startswith("note:")] == []
    p = bytes.fromhex(GOLD["blob_p"])
    data = open(os.path.join(root, "log", "0000000001.idx"), "rb").read()
    objs, chain = index_rows(data)
    row = next(o for o in objs if o[0] == p)
    entry, length = next((e["n"], o[2]) for e in read_log(root) for o in e["objs"] if o[0] == p)
    # entry number, canonical length and type kept; block file offset, stored and raw length, offset in block 0; compression 2
    assert row[1:] == (entry, 0, 0, 0, 0, length, 2, TYPES.index("blob"))
    assert chain == expected_chain_rows(read_log(root), 1)


def test_a_rebuild_gives_the_golden_bytes(tmp_path, monkeypatch):
    # The golden segments are of the one-log format (3 to 5): a store of one log takes them (format 6's own vectors
    # are docs/FORMAT.md's), whatever format new stores get.
    monkeypatch.setenv("OBJSTORE_NEW_FORMAT", "3")
    sys.path.insert(0, FIX)
    try:
        import make_golden_orders as M
    finally:
        sys.path.remove(FIX)
    root = str(tmp_path / "s")
    got = M.build(root)
    check_orders(root, got["index_1"])  # the documented rules hold on what the code writes now, whatever zstd gives
    assert got["index_1"] == INDEX_1, "segment 1's index changed: the chain rows' order is a format"
    for k in ("segment_1_blake3", "active_label_rows", "root_with_label_rows", "runs", "blob_p", "blob_q"):
        assert got[k] == GOLD[k], k
    if ".".join(map(str, zstandard.ZSTD_VERSION)) == GOLD["zstd_version"]:
        assert got["after_gc_1"] == GOLD["after_gc_1"] and got["after_gc_2"] == GOLD["after_gc_2"]
        for name, digest in GOLD["segments"].items():
            assert blake3.blake3(open(os.path.join(root, "log", name), "rb").read()).hexdigest() == digest, name
