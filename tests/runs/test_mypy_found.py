"""Bugs that typing objstore/ for mypy found (issue #10): each was a traceback before."""

from __future__ import annotations

import io

import pytest

from objstore import RunLog, Store
from objstore.errors import BranchNotFound, Refused
from objstore.storage.engine import LARGE_BLOB
from objstore.storage.runrefs import branch_ref, live_ref, symref

ATTEMPT = {"step": 0, "attempt": 0, "state": "running"}


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


@pytest.mark.parametrize("value", [b"\x01" * 32, "ref: nonsense", "ref: run/other/branch/x"])
def test_append_with_a_malformed_live_ref_is_invalid_input(value):
    """An id or a symbolic ref naming no branch where the live ref belongs (was TypeError / IndexError
    in view()). Format 3: the rules of the log refuse such a move wherever an entry is applied, its
    writer first, so the store never holds it; view() and append keep working."""
    store = Store.memory()
    log = RunLog(store)
    run = log.start_run()
    before = store.engine.position()
    with pytest.raises(Refused, match="live"):
        store.set_ref(live_ref(run), store.read_ref(live_ref(run)), value, "damage")
    assert store.engine.position() == before
    assert log.view(run).live == 0
    log.append(run, "attempt", ATTEMPT)


def test_append_to_a_branch_ref_that_is_not_an_id_is_branch_not_found():
    """A branch ref holding a symbolic value (was AttributeError on str.hex / a store lookup by str)."""
    store = Store.memory()
    log = RunLog(store)
    run = log.start_run()
    log.fork(run, 0, 0, make_live=False)
    with pytest.raises(Refused, match="branch/1"):  # format 3: refused by the rules where the entry is applied
        store.set_ref(branch_ref(run, 1), store.read_ref(branch_ref(run, 1)), symref(branch_ref(run, 0)), "damage")
    with pytest.raises(BranchNotFound):
        log.append(run, "attempt", ATTEMPT, branch=7, allow_retained=True)
    log.append(run, "attempt", ATTEMPT, branch=1, allow_retained=True)  # branch 1 is untouched
    log.append(run, "attempt", ATTEMPT)  # the live branch too
