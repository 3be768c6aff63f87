"""Races between writers of one store, with real OS processes where the race is concurrent.

Acceptance:
* a batch whose second expectation fails changes nothing (``Conflict``, exit 7, writes
  nothing: the log files compared byte for byte before and after);
* ``rewind --expect-branch`` against a concurrent live move creates nothing;
* a plain append racing a rewind lands on the branch live at its commit; with
  ``expect_branch`` it raises ``Conflict`` instead (and writes nothing);
* a rewind that meets a concurrent live move raises ``Conflict`` only with
  ``expect_live``, and never leaves a half-made branch (no fork object without its ref).

This file is also the child process: ``python test_races.py ROLE ARGS...`` (see ``_child``).
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def _child(role: str, args: list[str]) -> int:
    from objstore import RunLog, Store
    from objstore.errors import Conflict, InvalidInput, ObjstoreError

    if role == "two-expectations":
        # One batch, two expectations: run X's head (true) then run Y's head (stale). Exits with
        # the error's exit code, as the CLI does.
        root, run_x, head_x, run_y, head_y = args
        log = RunLog(Store.open(root))
        try:
            with log.store.batch():
                log.record_attempt(run_x, step=1, attempt=0, state="succeeded", output=log.put_blob(b"never stored"),
                                   expect_head=bytes.fromhex(head_x))
                log.record_attempt(run_y, step=1, attempt=0, state="succeeded", expect_head=bytes.fromhex(head_y))
        except ObjstoreError as e:
            print(f"{type(e).__name__}: {e}", file=sys.stderr)
            return e.exit_code
        return 0

    root, run, out_path, n = args[0], args[1], args[2], int(args[3])
    log = RunLog(Store.open(root))
    print("ready", flush=True)
    sys.stdin.readline()
    stop = os.path.join(os.path.dirname(out_path), "stop")  # appenders go on past n until it exists

    def more(i):
        return i < n or not os.path.exists(stop)

    with open(out_path, "w", buffering=1) as out:
        if role == "plain":  # appends with no expectation: never conflicts
            i = -1
            while more(i + 1):
                i += 1
                rec = log.record_attempt(run, step=i, attempt=0, state="succeeded", context={"role": "plain", "i": i})
                out.write(f"ack {rec.id.hex()} {rec.branch}\n")
        elif role == "expect":  # appends expecting the branch it last saw live
            believed = log.live_branch(run)
            i = -1
            while more(i + 1):
                i += 1
                try:
                    rec = log.record_attempt(run, step=i, attempt=0, state="succeeded", context={"role": "expect", "i": i},
                                             expect_branch=believed)
                except Conflict:
                    out.write(f"conflict {believed}\n")
                    believed = log.live_branch(run)
                    continue
                assert rec.branch == believed
                out.write(f"ack {rec.id.hex()} {rec.branch}\n")
        elif role in ("rewind", "rewind-expect"):  # rewinds of the live branch to its LSN 0
            rnd = random.Random(os.getpid())
            for i in range(n):
                time.sleep(rnd.uniform(0.005, 0.03))
                believed = log.live_branch(run) if role == "rewind-expect" else None
                time.sleep(rnd.uniform(0.0, 0.01))  # others may move meanwhile
                try:
                    fr = log.rewind(run, 0, reason=f"{role} {os.getpid()} {i}", expect_live=believed)
                except Conflict:
                    out.write(f"conflict {believed}\n")
                    continue
                except InvalidInput:  # the live branch is a fresh fork with no record yet
                    out.write("empty\n")
                    continue
                out.write(f"fork {fr.branch} {fr.fork_id.hex()} {fr.parent_branch}\n")
        out.write("done\n")
    return 0


if __name__ == "__main__":
    sys.exit(_child(sys.argv[1], sys.argv[2:]))


# -- the tests ---------------------------------------------------------------------------

from helpers import is_state_file, log_engine_of, raw_objects, run_cli, snapshot_tree  # noqa: E402

from objstore import RunLog, Store  # noqa: E402
from objstore.errors import Conflict  # noqa: E402
from objstore.runs.export import export  # noqa: E402
from objstore.runs.verify import verify  # noqa: E402
from objstore.storage import codec


def _env():
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([HERE] + sys.path))
    env.pop("OBJSTORE_DIR", None)
    return env


def _positions(store):
    """Every log's position: the store's one log, or (format 6) the store log's and each run's."""
    return [(run, engine.position()) for run, engine in store.logs.all_logs()]


def _log_files(root):
    """Every file of the store but the state cache (a cache, rebuilt from the log)."""
    return {p: b for p, b in snapshot_tree(root).items() if not is_state_file(p)}


def _spawn(role, root, run, out_path, n):
    return subprocess.Popen([sys.executable, os.path.abspath(__file__), role, root, run, out_path, str(n)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_env())


def _go(procs, first=(), stop=None, timeout=120):
    """Start the children together; wait for ``first`` ones, then create ``stop``, then the rest."""
    for p in procs:
        assert p.stdout.readline().strip() == b"ready", p.stderr.read().decode()
    for p in procs:
        p.stdin.write(b"go\n")
        p.stdin.close()
    rest = [p for p in procs if p not in first]
    try:
        for group in (list(first), rest):
            for p in group:
                assert p.wait(timeout=timeout) == 0, p.stderr.read().decode()[-3000:]
            if stop is not None:
                open(stop, "w").close()
    finally:
        if stop is not None:
            open(stop, "w").close()
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
            p.stdout.close()
            p.stderr.close()


def _lines(path):
    lines = open(path).read().splitlines()
    assert lines and lines[-1] == "done", f"{path}: child did not finish"
    return [line.split() for line in lines[:-1]]


def _fork_objects(store, run):
    """{fork id: payload} of every fork object of ``run`` in the log files."""
    out = {}
    for oid, otype, data in raw_objects(store):
        if otype == codec.FORK:
            p = codec.decode(data, oid)[1]
            if p["run"] == run:
                out[oid] = p
    return out


def _assert_no_half_made_branch(log, run):
    """Every fork object of the run is the root of the chain of the branch it names, and that
    branch's ref exists: no fork object without its ref, no ref without its fork object."""
    view = log.view(run)
    forks = _fork_objects(log.store, run)
    for fid, p in forks.items():
        assert p["branch"] in view.heads, f"fork object {fid.hex()} of branch {p['branch']} has no branch ref"
        fk = log.fork_object(view, p["branch"])
        assert fk is not None and fk["id"] == fid, f"branch {p['branch']} is not rooted at fork object {fid.hex()}"
    assert sorted(p["branch"] for p in forks.values()) == sorted(b for b in view.heads if b != 0)
    return forks


def _live_at(store, run):
    """[(entry number, live branch from that entry on)] from the ref log of the live ref."""
    out = []
    for m in store.ref_log(f"run/{run}/live"):
        out.append((m["entry"], int(m["new"].rsplit("/", 1)[1])))
    return out


def _live_before(moves, entry):
    """The live branch as it was just before entry ``entry`` (the state its writer saw under the lock)."""
    live = None
    for n, b in moves:
        if n < entry:
            live = b
        else:
            break
    assert live is not None, f"no live ref before entry {entry}"
    return live


# -- 1. a batch whose second expectation fails changes nothing ---------------------------------


def test_batch_with_failing_second_expectation_writes_nothing(tmp_path):
    root = str(tmp_path / "s")
    log = RunLog(Store.init(root))
    x, y = log.start_run("runx"), log.start_run("runy")
    for r in (x, y):
        log.record_attempt(r, step=0, attempt=0, state="succeeded")
    head_x, stale_y = log.view(x).heads[0], log.view(y).heads[0]
    # Another process moves run Y on (the CLI's ingest: one commit of its own).
    src = tmp_path / "one.jsonl"
    src.write_text(json.dumps({"v": 1, "type": "attempt", "run": y, "step": 1, "attempt": 0, "state": "succeeded"}) + "\n")
    rc, out, err = run_cli("ingest", str(src), store=root, exit_code=0)
    assert rc == 0, err

    before = _log_files(root)
    # In a process of its own: X's expectation holds, Y's (stale) fails -> Conflict, exit 7.
    p = subprocess.run([sys.executable, os.path.abspath(__file__), "two-expectations", root, x, head_x.hex(), y, stale_y.hex()],
                       capture_output=True, env=_env(), timeout=60)
    assert p.returncode == 7, p.stderr.decode()
    assert b"Conflict" in p.stderr
    assert _log_files(root) == before, "a failed batch wrote something"

    # The same in this process, with the store object kept: nothing written, nothing pending,
    # and the next plain append lands right after the true head.
    log = RunLog(Store.open(root))
    stale_x = head_x
    log.record_attempt(x, step=2, attempt=0, state="succeeded")
    before = _log_files(root)
    pos = _positions(log.store)
    heads = (log.view(x).heads, log.view(y).heads)
    for first, second in ((dict(run=y, expect_branch=0), dict(run=x, expect_head=stale_x)),
                          (dict(run=y, expect_head=log.view(y).heads[0]), dict(run=x, expect_branch=1))):
        try:
            with log.store.batch():
                log.record_attempt(first.pop("run"), step=3, attempt=0, state="succeeded", **first)
                log.record_attempt(second.pop("run"), step=3, attempt=0, state="succeeded", **second)
        except Conflict:
            pass
        else:
            raise AssertionError("the second expectation should have failed")
        assert _log_files(root) == before
        assert _positions(log.store) == pos
        assert (log.view(x).heads, log.view(y).heads) == heads
        assert not log.store.in_batch()
    rec = log.record_attempt(y, step=4, attempt=0, state="succeeded")
    assert rec.lsn == 3 and rec.parent == heads[1][0]
    assert verify(log) == []

    # The CLI: rewind with a stale --expect-branch is exit 7 and writes nothing.
    rc, out, err = run_cli("rewind", x, "--to-lsn", "1", store=root, exit_code=0)
    assert rc == 0, err
    before = _log_files(root)
    rc, out, err = run_cli("rewind", x, "--to-lsn", "1", "--expect-branch", "0", store=root, exit_code=7)
    assert rc == 7 and "conflict" in err, (rc, err)
    assert _log_files(root) == before


# -- 2. rewind --expect-branch against a concurrent live move -------------------------------


def test_rewind_expect_branch_against_a_concurrent_live_move_creates_nothing(tmp_path):
    root = str(tmp_path / "s")
    log = RunLog(Store.init(root))
    run = log.start_run("race")
    for i in range(5):
        log.record_attempt(run, step=i, attempt=0, state="succeeded")

    # Process B reads its view (live branch 0) ...
    rc, out, err = run_cli("runs", "--json", store=root, exit_code=0)
    assert rc == 0, err
    old_live = json.loads(out)[0]["live_branch"]
    assert old_live == 0
    # ... process A moves the live branch ...
    rc, out, err = run_cli("rewind", run, "--to-lsn", "2", "--json", store=root, exit_code=0)
    assert rc == 0, err
    assert json.loads(out)["branch"] == 1
    for i in range(3):
        log.record_attempt(run, step=10 + i, attempt=0, state="succeeded")  # plain: lands on branch 1
    assert log.view(run).heads[1] != bytes.fromhex(json.loads(out)["id"])
    forks_before = _fork_objects(Store.open(root), run)
    before = _log_files(root)
    # ... then B rewinds with the view it had: exit 7, and no branch, no fork object, no byte.
    rc, out, err = run_cli("rewind", run, "--to-lsn", "3", "--expect-branch", str(old_live), store=root, exit_code=7)
    assert rc == 7, (rc, out, err)
    assert _log_files(root) == before
    fresh = RunLog(Store.open(root))
    assert sorted(fresh.view(run).heads) == [0, 1] and fresh.view(run).live == 1
    assert _fork_objects(fresh.store, run) == forks_before

    # Six processes race to rewind with the same expectation: exactly one wins.
    procs = [subprocess.Popen([sys.executable, "-m", "objstore", "--store", root, "rewind", run, "--to-lsn", "1",
                               "--expect-branch", "1", "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_env())
             for _ in range(6)]
    results = [(p.wait(timeout=60), p.stdout.read(), p.stderr.read()) for p in procs]
    for p in procs:
        p.stdout.close()
        p.stderr.close()
    wins = [json.loads(o) for rc, o, _ in results if rc == 0]
    assert sorted(rc for rc, _, _ in results) == [0, 7, 7, 7, 7, 7], [(rc, e[-300:]) for rc, _, e in results]
    fresh = RunLog(Store.open(root))
    view = fresh.view(run)
    assert sorted(view.heads) == [0, 1, 2] and view.live == 2 and wins[0]["branch"] == 2
    forks = _assert_no_half_made_branch(fresh, run)
    assert len(forks) == 2 and bytes.fromhex(wins[0]["id"]) in forks
    assert verify(fresh) == []


# -- 3. plain and expecting appends racing rewinds -------------------------------------------


def test_appends_racing_rewinds_land_on_the_branch_live_at_their_commit(tmp_path):
    root = str(tmp_path / "s")
    log = RunLog(Store.init(root))
    run = log.start_run("busy")
    log.record_attempt(run, step=0, attempt=0, state="succeeded")
    procs, outs = [], []
    for i, (role, n) in enumerate([("plain", 300)] * 3 + [("expect", 300)] * 2 + [("rewind", 25), ("rewind-expect", 25)]):
        out = str(tmp_path / f"{role}-{i}.out")
        outs.append((role, out))
        procs.append(_spawn(role, root, run, out, n))
    # The appenders go on until the rewinders are done: some appends follow the last rewind.
    _go(procs, first=procs[-2:], stop=str(tmp_path / "stop"))

    acked: dict[bytes, tuple[str, int]] = {}  # record id -> (role, branch it was acknowledged on)
    conflicts = {"expect": 0, "rewind-expect": 0, "rewind": 0}
    forks: dict[bytes, int] = {}
    for role, path in outs:
        for parts in _lines(path):
            if parts[0] == "ack":
                acked[bytes.fromhex(parts[1])] = (role, int(parts[2]))
            elif parts[0] == "conflict":
                conflicts[role] += 1
            elif parts[0] == "fork":
                forks[bytes.fromhex(parts[2])] = int(parts[1])
    assert conflicts["rewind"] == 0, "a rewind without expect_live must never conflict"
    assert conflicts["expect"] > 0, "with rewinds going on, some expecting appends should have conflicted"
    assert len(forks) >= 10, f"only {len(forks)} rewinds happened"

    store = Store.open(root)
    fresh = RunLog(store)
    moves = _live_at(store, run)
    assert [b for _, b in moves[1:]] == sorted(forks.values()), "every live move after the start is an acknowledged rewind"
    # Every record of the run in the log was acknowledged (conflicts wrote nothing).
    raw_records = {}
    for oid, otype, data in raw_objects(store):
        if otype == codec.RECORD:
            p = codec.decode(data, oid)[1]
            if p["run"] == run and p["kind"] == "attempt" and p["body"]["context"]:
                raw_records[oid] = p
    assert set(raw_records) == set(acked), "the log holds records nobody acknowledged, or lost acknowledged ones"
    # Each acknowledged append is on the branch live just before its own entry, and on that branch's chain.
    view = fresh.view(run)
    chains = {b: {r.id for r in fresh.own_records(view, b)} for b in view.heads}
    for oid, (role, branch) in acked.items():
        entry = log_engine_of(store, run).loc_entry(oid)  # entry numbers of the run's log, as its live ref's moves
        assert raw_records[oid]["branch"] == branch
        assert branch == _live_before(moves, entry), f"{role} append at entry {entry} landed on branch {branch}, not the live one"
        assert oid in chains[branch], f"{role} append {oid.hex()} is not on the chain of branch {branch}"
    # Nothing appended after the last rewind is missing from the live branch's export.
    last_move = moves[-1][0]
    late = {oid for oid in acked if log_engine_of(store, run).loc_entry(oid) > last_move}
    exported = {bytes.fromhex(e["id"]) for e in export(fresh, run) if e["kind"] != "fork"}
    assert late <= exported, f"{len(late - exported)} records appended after the last rewind are not exported"
    assert late, "some appends should have come after the last rewind"
    # Rewinds: each acknowledged fork is the root of its branch, and there are no others.
    found = _assert_no_half_made_branch(fresh, run)
    assert {fid: p["branch"] for fid, p in found.items()} == forks
    assert verify(fresh) == []


def test_rewinds_racing_each_other_conflict_only_with_expect_live(tmp_path):
    root = str(tmp_path / "s")
    log = RunLog(Store.init(root))
    run = log.start_run("rr")
    log.record_attempt(run, step=0, attempt=0, state="succeeded")
    procs, outs = [], []
    # Appenders keep giving fresh branches a record, so rewinds to LSN 0 are possible.
    for i, (role, n) in enumerate([("plain", 400)] * 2 + [("rewind", 20)] * 2 + [("rewind-expect", 20)] * 2):
        out = str(tmp_path / f"{role}-{i}.out")
        outs.append((role, out))
        procs.append(_spawn(role, root, run, out, n))
    _go(procs, first=procs[2:], stop=str(tmp_path / "stop"))
    counts = {"rewind": [0, 0], "rewind-expect": [0, 0]}  # [forks, conflicts]
    forks = {}
    for role, path in outs:
        for parts in _lines(path):
            if parts[0] == "fork":
                counts[role][0] += 1
                forks[bytes.fromhex(parts[2])] = int(parts[1])
            elif parts[0] == "conflict":
                counts[role][1] += 1
    assert counts["rewind"][1] == 0, "a rewind without expect_live conflicted"
    assert counts["rewind"][0] >= 20 and counts["rewind-expect"][0] > 0, counts
    assert counts["rewind-expect"][1] > 0, f"no expecting rewind met a concurrent live move: {counts}"
    fresh = RunLog(Store.open(root))
    found = _assert_no_half_made_branch(fresh, run)
    assert {fid: p["branch"] for fid, p in found.items()} == forks, "fork objects != acknowledged rewinds"
    assert len(set(forks.values())) == len(forks), "two rewinds made the same branch number"
    assert verify(fresh) == []
