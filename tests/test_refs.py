"""Refs: name rules, compare-and-swap, ref log, and a real 8-process race (invariant 13)."""

import multiprocessing as mp
import os

import pytest

from objstore.errors import Conflict, InvalidRefName
from objstore.refs import check_ref_name
from objstore.store import Store

from helpers import snapshot_tree

BAD_NAMES = ["", "/abs", "trail/", "a//b", "../../etc/passwd", "a/../b", ".hidden", "a/.b", "x.lock", "a/b.lock/c",
             "sp ace", "tab\tx", "nl\nx", "del\x7f", "a~b", "a^b", "a:b", "a?b", "a*b", "a[b", "a\\b", "@", "a@{1}", "end.", "a..b"]


@pytest.mark.parametrize("name", BAD_NAMES)
def test_bad_ref_names_rejected_and_nothing_written(tmp_path, name):
    s = Store.init(str(tmp_path / "s"))
    before = snapshot_tree(s.root)
    with pytest.raises(InvalidRefName):
        s.set_ref(name, None, bytes(32), "x")
    with pytest.raises(InvalidRefName):
        s.refs.read(name)
    assert snapshot_tree(s.root) == before
    assert not os.path.exists("/etc/passwd.lock")


@pytest.mark.parametrize("name", ["run/r1/branch/0", "a", "a-b_c.d/e", "run/r1/live"])
def test_good_ref_names(name):
    assert check_ref_name(name) == name


def test_cas_and_log(tmp_path):
    s = Store.init(str(tmp_path / "s"))
    a, b, c = bytes([1]) * 32, bytes([2]) * 32, bytes([3]) * 32
    s.set_ref("x/y", None, a, "create")
    with pytest.raises(Conflict):
        s.set_ref("x/y", None, b, "stale create")
    with pytest.raises(Conflict):
        s.set_ref("x/y", c, b, "wrong old")
    s.set_ref("x/y", a, b, "move")
    assert s.read_ref("x/y") == b
    log = s.refs.log("x/y")
    assert [(e["old"], e["new"], e["reason"]) for e in log] == [(None, a.hex(), "create"), (a.hex(), b.hex(), "move")]
    assert all(isinstance(e["time"], float) for e in log)
    with open(s.refs.path("x/y")) as f:
        assert f.read() == b.hex() + "\n"
    assert not os.path.exists(s.refs.path("x/y") + ".lock")


def test_symbolic_ref(tmp_path):
    s = Store.init(str(tmp_path / "s"))
    s.set_ref("b/0", None, bytes(32), "c")
    s.set_ref("head", None, "ref: b/0", "c")
    assert s.resolve_ref("head") == bytes(32)


def _racer(root, me, rounds, barrier, results):
    s = Store.open(root)
    wins = []
    for r in range(rounds):
        barrier.wait()
        cur = s.read_ref("race")
        barrier.wait()  # everyone has read the same old value before anyone moves
        new = bytes([me]) + r.to_bytes(4, "big") + bytes(27)
        try:
            s.set_ref("race", cur, new, f"p{me} r{r}")
            wins.append(r)
        except Conflict:
            pass
    results.put((me, wins))


def _reader(root, stop, torn):
    s = Store.open(root)
    bad = 0
    while not stop.is_set():
        try:
            v = s.read_ref("race")
            if v is not None and not (isinstance(v, bytes) and len(v) == 32):
                bad += 1
        except Exception:
            bad += 1
    torn.value = bad


def test_eight_process_cas_race(tmp_path):
    root = str(tmp_path / "s")
    s = Store.init(root)
    s.set_ref("race", None, bytes(32), "start")
    rounds, n = 200, 8
    ctx = mp.get_context("fork")
    barrier = ctx.Barrier(n)
    results = ctx.Queue()
    stop = ctx.Event()
    torn = ctx.Value("i", -1)
    reader = ctx.Process(target=_reader, args=(root, stop, torn))
    reader.start()
    procs = [ctx.Process(target=_racer, args=(root, i + 1, rounds, barrier, results)) for i in range(n)]
    for p in procs:
        p.start()
    got = dict(results.get(timeout=300) for _ in procs)
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    stop.set()
    reader.join(timeout=60)
    winners_per_round = {r: [me for me, wins in got.items() if r in wins] for r in range(rounds)}
    assert all(len(w) == 1 for w in winners_per_round.values()), {r: w for r, w in winners_per_round.items() if len(w) != 1}
    log = s.refs.log("race")
    assert len(log) == rounds + 1
    for prev, e in zip(log, log[1:]):
        assert e["old"] == prev["new"], "the ref log is a chain of moves with nothing lost"
    final = s.read_ref("race")
    assert final.hex() == log[-1]["new"]
    assert final[0] == winners_per_round[rounds - 1][0] and int.from_bytes(final[1:5], "big") == rounds - 1
    assert torn.value == 0, "a reader saw a torn or unparseable ref file"
    assert not os.path.exists(s.refs.path("race") + ".lock")


def _hold_lock_and_die(root):
    s = Store.open(root)
    s.refs._lock(s.refs.path("held"))
    os._exit(9)  # die holding the lock, as kill -9 would


def test_stale_lock_of_dead_holder_is_broken(tmp_path):
    root = str(tmp_path / "s")
    s = Store.init(root)
    p = mp.get_context("fork").Process(target=_hold_lock_and_die, args=(root,))
    p.start()
    p.join()
    assert os.path.exists(s.refs.path("held") + ".lock")
    s.set_ref("held", None, bytes(32), "after crash")
    assert s.read_ref("held") == bytes(32)
