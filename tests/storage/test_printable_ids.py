"""Ids that print: what ``put_blob`` and ``Record.id`` hand out is still ``bytes`` but prints as its hex.

``log.put_blob(...)`` and ``record.id`` were raw 32-byte ``bytes`` that printed as ``b'\\xf3…'``, which no
command accepts. They are now ``codec.Id``: a ``bytes`` subclass (equal to, hashing and slicing as the
plain bytes) whose ``str``, ``format`` and ``repr`` are the 64 hex digits. An Id is accepted wherever an
id is taken, and wherever one enters the store it is stored as the plain bytes it is: put into a record
body (a core kind and a declared x. kind), the index facts name it (verify re-derives them and finds no
problem), and a fresh process reads back plain ``bytes``.
"""

from __future__ import annotations

import io
import pickle
import subprocess
import sys
from contextlib import redirect_stdout

import pytest
from helpers import is_per_run, run_cli
from hypothesis import given, settings
from hypothesis import strategies as st

import objstore
from objstore.lifecycle import delete
from objstore.storage import codec
from objstore.storage.log.craft import encode_entry


def _log(tmp_path):
    return objstore.open_store(str(tmp_path / "s"))


def test_put_blob_and_record_ids_print_as_hex(tmp_path):
    log = _log(tmp_path)
    bid = log.put_blob(b"hello")
    plain = codec.hash_bytes(codec.header(codec.BLOB, 5) + b"hello")
    assert isinstance(bid, bytes) and bid == plain and hash(bid) == hash(plain) and bid in {plain}
    assert str(bid) == repr(bid) == f"{bid}" == format(bid) == plain.hex()
    assert f"{bid:.12}" == plain.hex()[:12] and bid[:4] == plain[:4] and type(bid[:4]) is bytes
    out = io.StringIO()
    with redirect_stdout(out):
        print(bid)
    assert out.getvalue() == plain.hex() + "\n"
    run = log.start_run("r1")
    rec = log.record_attempt(run, 1, 0, "succeeded", prompt=bid)
    assert str(rec.id) == rec.id.hex() and repr(rec.id) == rec.id.hex() and isinstance(rec.id, bytes)
    assert str(rec.parent) == rec.parent.hex()
    again = log.record(rec.id)
    assert str(again.id) == rec.id.hex() and again == rec
    assert [str(r.id) for r in log.records(run)][-1] == rec.id.hex()
    assert codec.parse_id(str(bid)) == bid and pickle.loads(pickle.dumps(bid)) == bid


def test_an_id_in_a_record_body_is_stored_as_plain_bytes(tmp_path):
    root = str(tmp_path / "s")
    log = objstore.open_store(root)
    bid = log.put_blob(b"prompt")
    out = log.put_blob(b"output")
    run = log.start_run("r1")
    with log.batch():
        rec = log.record_attempt(run, 1, 0, "succeeded", prompt=bid, output=out, context={"k": "v"})
    assert type(rec.body["prompt"]) is bytes and type(rec.body["output"]) is bytes
    log.register_kind("x.test.doc", [["first", "id", False, True], ["parts", "list", True, True]])
    ext = log.append(run, "x.test.doc", {"first": bid, "parts": [out, bid]})
    stored = log.record(ext.id).body  # what the store keeps: plain bytes (the caller's map is left as given)
    assert type(stored["first"]) is bytes and all(type(x) is bytes for x in stored["parts"]) and stored == ext.body
    # the index facts name the ids (verify re-derives every entry's rows from the bodies)
    assert objstore.verify(log) == []
    # the bytes on disk are the plain ones: a fresh process reads plain bytes back, equal to the Ids
    code = ("import objstore,sys; log=objstore.open_store(sys.argv[1]); "
            "rs=[r for r in log.records(sys.argv[2]) if r.kind in ('attempt','x.test.doc')]; "
            "print(rs[0].body['prompt'].hex(), type(rs[0].body['prompt']).__name__, rs[1].body['parts'][1].hex())")
    got = subprocess.run([sys.executable, "-c", code, root, run], capture_output=True, text=True, check=True).stdout.split()
    assert got == [bid.hex(), "bytes", bid.hex()]
    # gc keeps the blobs a live record names: the index knows them
    from objstore.lifecycle import gc

    gc.gc(log.store)
    assert log.get_blob(bid) == b"prompt" and log.get_blob(out) == b"output"
    assert objstore.verify(objstore.open_store(root)) == []


def test_an_id_is_accepted_wherever_an_id_is_taken(tmp_path):
    log = _log(tmp_path)
    bid = log.put_blob(b"x")
    run = log.start_run("r1")
    r0 = log.record_attempt(run, 1, 0, "succeeded", prompt=bid)
    r1 = log.record_attempt(run, 2, 0, "succeeded", expect_head=r0.id)
    assert log.get_blob(bid) == b"x" and log.store.get(bid)[0] == codec.BLOB and log.store.has(bid)
    assert [r.id for r in log.iter_records(run, before=r1.id)][0] == r0.id
    fr = log.fork(run, None, at_record=r0.id, reason="try again")
    assert fr.branch == 1
    # a ref naming a record: on a store with a log per run (format 6) it is a ref of that record's run's log
    pin = f"run/{run}/pinned" if is_per_run(tmp_path / "s") else "test/pinned"
    log.store.set_ref(pin, None, r1.id, "pin")
    assert type(log.store.read_ref(pin)) is bytes and log.store.read_ref(pin) == r1.id
    delete.delete_records(log, run, [r1.id], reason="drop it")
    delete.redact(log, bid, reason="secret")
    assert objstore.verify(log) == [] or all(p.severity == "note" for p in objstore.verify(log))
    reopened = objstore.open_store(str(tmp_path / "s"))
    assert reopened.store.read_ref(pin) == r1.id


def test_the_cli_takes_the_printed_id(tmp_path):
    log = _log(tmp_path)
    bid = log.put_blob(b"some text")
    if log.store.logs.per_run:  # format 6: a blob no record names is held by its process, not written
        log.record_attempt(log.start_run("r1"), 1, 0, "succeeded", prompt=bid)
    log.store.logs.close()  # every log this process opened (the one engine before format 6)
    rc, out, err = run_cli("cat", "--body", str(bid), store=str(tmp_path / "s"), exit_code=0)
    assert out == "some text"
    rc, out, err = run_cli("show", f"{bid}", store=str(tmp_path / "s"), exit_code=0)
    assert bid.hex() in out


@settings(max_examples=40, deadline=None)
@given(data=st.binary(max_size=200), body_key=st.sampled_from(["prompt", "output"]))
def test_round_trip(tmp_path_factory, data, body_key):
    log = objstore.open_store(str(tmp_path_factory.mktemp("s") / "s"))
    bid = log.put_blob(data)
    assert bytes(bid) == codec.parse_id(str(bid)) and log.get_blob(codec.parse_id(f"{bid}")) == data
    run = log.start_run("r")
    rec = log.record_attempt(run, 0, 0, "succeeded", **{body_key: bid})
    back = objstore.open_store(log.store.root).record(codec.parse_id(str(rec.id)))
    assert back.body[body_key] == bid and type(back.body[body_key]) is bytes and back.id == rec.id


@pytest.mark.parametrize("value", [b"\x00" * 32, b"\xff" * 32])
def test_id_of_plain_bytes(value):
    i = codec.Id(value)
    assert i == value and str(i) == value.hex() and bytes(i) == value and type(bytes(i)) is bytes


def test_the_canonical_encoders_take_an_id_as_its_plain_bytes(tmp_path):
    """A caller crafting objects or entries from ids the API handed out (codec.encode, engine.encode_entry)
    gets the same canonical bytes as with the plain bytes, never a TypeError."""

    log = objstore.open_store(str(tmp_path / "s"))
    run = log.start_run("r")
    rec = log.record_attempt(run, step=1, attempt=0, state="succeeded", prompt=log.put_blob(b"p"))
    value = {"run": run, "branch": 0, "lsn": 1, "parent": rec.id, "kind": "attempt", "time": 1.0, "body": {}}
    assert codec.encode(codec.RECORD, value) == codec.encode(codec.RECORD, {**value, "parent": bytes(rec.id)})
    moves = [["note/x", None, rec.id, "why"]]
    plain = [["note/x", None, bytes(rec.id), "why"]]
    assert encode_entry(bytes(32), 2, 1.0, [], moves, None)[0] == encode_entry(bytes(32), 2, 1.0, [], plain, None)[0]
