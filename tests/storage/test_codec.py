"""Canonical encoding and ids: golden vectors, round-trips, canonical form (invariant 1)."""

import json
import os

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from objstore.errors import IntegrityError, InvalidId, InvalidInput, UnknownObjectType
from objstore.storage import codec

GOLDEN = os.path.join(os.path.dirname(__file__), "..", "..", "fixtures", "golden.json")


def from_json(v):
    if isinstance(v, dict):
        if set(v) == {"$bytes"}:
            return bytes.fromhex(v["$bytes"])
        return {k: from_json(x) for k, x in v.items()}
    if isinstance(v, list):
        return [from_json(x) for x in v]
    return v


def load_golden():
    with open(GOLDEN) as f:
        return json.load(f)["vectors"]


@pytest.mark.parametrize("vec", load_golden(), ids=lambda v: v["name"])
def test_golden_vectors(vec):
    value = from_json(vec["value"])
    data = codec.encode(vec["type"], value)
    assert data.hex() == vec["canonical_hex"], "canonical bytes changed: a format change must be deliberate and versioned"
    assert codec.object_id(data).hex() == vec["id"]
    otype, back = codec.decode(bytes.fromhex(vec["canonical_hex"]), bytes.fromhex(vec["id"]))
    assert otype == vec["type"]
    assert back == value


def test_golden_covers_every_core_type():
    assert {v["type"] for v in load_golden()} >= {"blob", "record", "fork"}


json_leaf = st.one_of(st.none(), st.booleans(), st.integers(min_value=-(2**63), max_value=2**64 - 1),
                      st.floats(allow_nan=False), st.text(max_size=20), st.binary(max_size=40))
json_value = st.recursive(json_leaf, lambda c: st.one_of(st.lists(c, max_size=4), st.dictionaries(st.text(max_size=8), c, max_size=4)), max_leaves=20)
payloads = st.dictionaries(st.text(max_size=10), json_value, max_size=8)


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(payloads, st.sampled_from(["record", "fork", "journal", "segment"]))
def test_roundtrip_structured(value, otype):
    data = codec.encode(otype, value)
    t, back = codec.decode(data, codec.object_id(data))
    assert t == otype
    assert back == value
    assert codec.encode(t, back) == data


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=2000))
def test_roundtrip_blob(data):
    enc = codec.encode("blob", data)
    assert codec.decode(enc) == ("blob", data)


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(payloads, st.randoms(use_true_random=False))
def test_key_order_does_not_change_bytes(value, rnd):
    def shuffled(v):
        if isinstance(v, dict):
            items = list(v.items())
            rnd.shuffle(items)
            return {k: shuffled(x) for k, x in items}
        if isinstance(v, list):
            return [shuffled(x) for x in v]
        return v

    a = codec.encode("record", value)
    b = codec.encode("record", shuffled(value))
    assert a == b
    assert codec.object_id(a) == codec.object_id(b)


def test_non_canonical_payload_rejected():
    # A map with keys out of order is valid msgpack but not our canonical form.
    payload = b"\x82" + msgspec.msgpack.encode("b") + b"\x01" + msgspec.msgpack.encode("a") + b"\x02"
    data = codec.header("record", len(payload)) + payload
    with pytest.raises(IntegrityError, match="non-canonical payload encoding"):
        codec.decode(data)
    # An integer in a longer form than needed.
    payload = b"\x81" + msgspec.msgpack.encode("a") + b"\xcd\x00\x01"
    with pytest.raises(IntegrityError, match="non-canonical"):
        codec.decode(codec.header("record", len(payload)) + payload)


@pytest.mark.parametrize(
    "data,exc,msg",
    [
        (b"tree 2\x00\x80\x80"[:8], UnknownObjectType, "unknown object type 'tree'"),
        (b"record 5\x00\x80", IntegrityError, r"truncated object \(1 of 5 payload bytes\)"),
        (b"blob 1\x00ab", IntegrityError, r"garbage after object \(1 extra bytes\)"),
        (b"blob 01\x00a", IntegrityError, "bad header length"),
        (b"blob\x00", IntegrityError, "bad header"),
        (b"x" * 100, IntegrityError, "no terminator"),
        (b"record 1\x00\xc1", IntegrityError, "undecodable payload"),
        (b"record 1\x00\x01", IntegrityError, "payload is not a map"),
    ],
)
def test_bad_headers_and_payloads(data, exc, msg):
    with pytest.raises(exc, match=msg):
        codec.decode(data)


def test_unknown_type_is_an_error_not_a_crash():
    with pytest.raises(InvalidInput) as ei:
        codec.encode("tree", {})
    assert str(ei.value) == "invalid input: unknown object type 'tree'"
    with pytest.raises(InvalidInput) as ei:
        codec.encode("record", [1])
    assert str(ei.value) == "invalid input: a record's payload is a map, not list"
    with pytest.raises(InvalidInput) as ei:
        codec.encode("blob", "text")
    assert str(ei.value) == "invalid input: a blob's payload is bytes, not str"


def test_parse_id():
    oid = bytes(range(32))
    assert codec.parse_id(oid.hex()) == oid
    for bad in ("", "abc", "zz" * 32, oid.hex() + "00"):
        with pytest.raises(InvalidId):
            codec.parse_id(bad)


def test_golden_segments_pin_the_log_format(tmp_path, monkeypatch):
    """The stored format is pinned too: the uncompressed format-3 golden segment is written again
    and must be byte-identical; the zstd one (whose bytes depend on the zstd version) must decode to
    the same objects, refs, entry checksums and tables' roots; both open and verify as format-3
    stores."""
    # The golden segments are of the one-log format (3 to 5): a store of one log takes them (format 6's own vectors
    # are docs/FORMAT.md's), whatever format new stores get.
    monkeypatch.setenv("OBJSTORE_NEW_FORMAT", "3")
    import shutil
    import sys

    sys.path.insert(0, os.path.dirname(GOLDEN))
    from make_golden import golden_segment3

    from objstore.runs.api import RunLog
    from objstore.runs.verify import verify
    from objstore.storage.store import Store

    fixtures = os.path.dirname(GOLDEN)
    raw = open(os.path.join(fixtures, "golden3-raw.seg"), "rb").read()
    assert golden_segment3(False) == raw, "log layout changed: a format change must be deliberate and versioned"
    seen = []
    for name in ("golden3-raw.seg", "golden3-zstd.seg"):
        root = str(tmp_path / name)
        Store.init(root)
        shutil.copy(os.path.join(fixtures, name), os.path.join(root, "log", "0000000001.seg"))
        s = Store.open(root)
        items = list(s.engine.scan(s.engine.refresh().entry))
        assert [type(i).__name__ for i in items] == ["ScanEntry"] * 3, items
        assert all(codec.object_id(data) == oid for i in items for oid, _, data in i.objects)
        objs = {oid: s.get_raw(oid) for oid in s.engine.iter_ids()}
        roots = [i.entry.root for i in items]
        seen.append((objs, dict(s.list_refs()), s.engine.position(), roots))
        assert [p.line() for p in verify(RunLog(s))] == []
    assert seen[0] == seen[1]
    assert len(set(seen[0][3])) == 3 and bytes(32) not in seen[0][3]