"""Every value the state cache serves is confirmed against the log, or not served (issue 13, item 4;
invariants 9 and 15).

An attacker with write access to ``state.db`` can rewrite any byte of it and recompute anything it
holds (there is no secret): an attempt view's state, a blob ref in a view, a whole attempt (its row
and the record's kind), the summary's status, attempts and failed_attempts, and the inherited
(pre-fork) part of a forked branch. Each forgery here is made on disk with sqlite3, consistent with
itself (the folded state and summary recomputed to match); then a fresh ``objstore episode`` process
must print exactly what ``--source refold`` prints, exit 0, and ``verify`` must name the rows
``state-diverged``.

The forging helpers understand both cache layouts: the older one kept attempt views (canonical
JSON) and record kinds, the current one keeps the records' canonical bytes, hash-confirmed against
the ids the log's chain index holds."""

from __future__ import annotations

import sqlite3

import msgspec
import pytest
import zstandard
from helpers import run_cli, state_db_path

import objstore
from objstore.storage import codec

_enc = msgspec.msgpack.Encoder(order="sorted")
_dec = msgspec.msgpack.Decoder()


def _store(tmp_path):
    """Run r: step 1 fails twice then succeeds, step 2 fails (branch 0, finished); a rewind to LSN 2
    (branch 1, live: it inherits the two failed attempts) with one more attempt."""
    root = str(tmp_path / "s")
    log = objstore.open_store(root)
    run = log.start_run("r", subject="alice")
    p1, p2 = log.put_blob(b"prompt one"), log.put_blob(b"prompt two")
    log.record_attempt(run, 1, 0, "failed", prompt=p1)  # LSN 1
    log.record_attempt(run, 1, 1, "failed", prompt=p1)  # LSN 2
    log.record_attempt(run, 1, 2, "succeeded", prompt=p2)  # LSN 3
    log.record_attempt(run, 2, 0, "failed", prompt=p2)  # LSN 4
    log.finish_run(run, "failed", error="step 2")  # LSN 5
    log.rewind(run, 2, reason="again")
    log.record_attempt(run, 1, 5, "succeeded", prompt=p2)
    for args in ((), ("--all-branches",)):  # fill the cache
        run_cli("episode", run, *args, "--json", store=root, exit_code=0)
    return root, run, p1, p2


def _db(root, run):
    return sqlite3.connect(state_db_path(root, run))


def _edit_state(db, run, branch, fn):
    """Recompute the branch row's folded state and summary as the forger wants them."""
    st, su = db.execute("SELECT state, summary FROM branch WHERE run=? AND branch=?", (run, branch)).fetchone()
    st, su = _dec.decode(st), _dec.decode(su)
    fn(st)
    for k in su:
        su[k] = st[k]
    db.execute("UPDATE branch SET state=?, summary=? WHERE run=? AND branch=?", (_enc.encode(st), _enc.encode(su), run, branch))


def _forge_record(db, run, branch, lsn, body_fn, drop=False):
    """Rewrite (or, ``drop``, remove) the cached canonical bytes of the record at ``lsn``."""
    zd, zc = zstandard.ZstdDecompressor(), zstandard.ZstdCompressor(level=3)
    rows = db.execute("SELECT lsn, n, data FROM recs WHERE run=? AND branch=?", (run, branch)).fetchall()
    for l0, n, data in rows:
        if not l0 <= lsn < l0 + n:
            continue
        objs = _dec.decode(zd.decompress(data, max_output_size=1 << 28))  # the records' canonical bytes, in LSN order
        for i, o in enumerate(objs):
            otype, p = codec.decode(o)
            if otype == "record" and p["lsn"] == lsn:
                if drop:
                    del objs[i]
                else:
                    p["body"] = body_fn(p["body"])
                    objs[i] = codec.encode("record", p)
                db.execute("UPDATE recs SET data=? WHERE run=? AND branch=? AND lsn=?", (zc.compress(_enc.encode(objs)), run, branch, l0))
                return
    raise AssertionError(f"no cached record at LSN {lsn}")


def _with(**kw):
    def fn(x):
        x = dict(x)
        x.update(kw)
        return x
    return fn


def _succeeded(st):
    st["failed_attempts"] -= 1


def _status(st):
    st["status"], st["error"] = "succeeded", None


def _more(st):
    st["attempts"] += 3


def _fewer_failed(st):
    st["failed_attempts"] = 0


def _one_less(st):
    st["attempts"] -= 1
    st["failed_attempts"] -= 1
    st["steps"]["2"]["attempts"] -= 1


def forge(root, run, p1, p2, case):
    p1, p2 = bytes(p1), bytes(p2)  # put_blob hands out codec.Id; the forger encodes plain bytes
    db = _db(root, run)
    if case == "an attempt's state":  # LSN 4, branch 0: step 2 failed -> succeeded
        _forge_record(db, run, 0, 4, _with(state="succeeded"))
        _edit_state(db, run, 0, lambda st: (_succeeded(st), st["steps"]["2"].update(state="succeeded")))
    elif case == "a blob ref in a view":  # LSN 3's prompt names the other blob
        _forge_record(db, run, 0, 3, lambda b: _with(prompt=p1 if isinstance(b.get("prompt"), bytes) else p1.hex())(b))
    elif case == "an attempt deleted with its kind":
        _forge_record(db, run, 0, 4, None, drop=True)
        _edit_state(db, run, 0, lambda st: (_one_less(st), st["steps"].pop("2")) if st["steps"]["2"]["attempts"] == 0 else _one_less(st))
    elif case == "the summary's status":
        _edit_state(db, run, 0, _status)
    elif case == "the summary's attempts":
        _edit_state(db, run, 1, _more)
    elif case == "the summary's failed_attempts":
        _edit_state(db, run, 1, _fewer_failed)
    elif case == "a forked branch's inherited part":  # LSN 1 of branch 0 is inherited by branch 1 (live)
        _forge_record(db, run, 0, 1, _with(state="succeeded"))
        for b in (0, 1):
            _edit_state(db, run, b, _succeeded)
    else:
        raise AssertionError(case)
    db.commit()
    db.close()


# case -> the branches whose rows verify must name (the inherited part: the parent's rows, and the forked
# branch's summary the forger recomputed from them)
CASES = {"an attempt's state": [0], "a blob ref in a view": [0], "an attempt deleted with its kind": [0], "the summary's status": [0],
         "the summary's attempts": [1], "the summary's failed_attempts": [1], "a forked branch's inherited part": [0, 1]}


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES)
def test_a_forged_cache_row_changes_no_episode_answer_and_verify_names_it(tmp_path, case):
    root, run, p1, p2 = _store(tmp_path)
    want = {args: run_cli("episode", run, *args, "--json", "--source", "refold", store=root, exit_code=0)[1]
            for args in ((), ("--all-branches",))}
    assert all(run_cli("episode", run, *args, "--json", store=root, exit_code=0)[1] == out for args, out in want.items())
    forge(root, run, p1, p2, case)
    for args, out in want.items():  # a fresh process each time, from the forged cache
        assert run_cli("episode", run, *args, "--json", store=root, exit_code=0)[1] == out, args
        assert run_cli("episode", run, *args, "--json", "--source", "refold", store=root, exit_code=0)[1] == out
    log = objstore.open_store(root)
    view = log.view(run)
    for b in view.heads:  # the library's cached state and summary too
        cold = log.refold(view, b)
        assert log.state.state(log, view, b) == cold
        assert log.state.summary(log, view, b) == {k: cold[k] for k in log.state.summary(log, view, b)}
    for args in ((), (run,)):
        _, out, _ = run_cli("verify", *args, store=root, exit_code=1)
        lines = out.splitlines()
        assert all(line.startswith(f"state-diverged {run}/") for line in lines), out
        assert sorted(int(line.split()[1].split("/")[1].rstrip(":")) for line in lines) == CASES[case], out
    run_cli("rebuild", store=root, exit_code=0)
    run_cli("verify", store=root, exit_code=0)
