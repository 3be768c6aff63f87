"""Many writer processes, one store (format 2: one log, writers serialize on the flock).

Acceptance: a run is started (LSN 0); 8 real processes append 500 attempts each —
processes 0-3 one record per call, 4-7 in batches of 25 — while ``objstore verify``
runs in a loop and never fails. The branch then holds exactly 4 001 records,
attempts at LSNs 1..4 000, each (process, seq) once and each process's in its
own order; counted from the raw objects of the segment files and from a walk of
the chain through ``engine.read``, not only through queries. Then 4 ``objstore
demo`` processes start together on a store none of them has yet, twice; all
exit 0, verify exits 0 and ``runs`` lists the 8 demo runs.

This file is also the writer child: ``python test_concurrency.py ROOT RUN PROC MODE``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
PROCS = 8
PER_PROC = 500
BATCH = 25


def _writer(root: str, run: str, proc: int, mode: str, out_path: str) -> None:
    """Child: wait for 'go' on stdin, append PER_PROC attempts, write 'ack <id> <seq>' per
    acknowledged record (a batch's records only once the batch has committed)."""
    from objstore import RunLog, Store

    log = RunLog(Store.open(root))  # fsync policy: from OBJSTORE_FSYNC, i.e. full unless the parent says off
    print("ready", flush=True)
    sys.stdin.readline()
    with open(out_path, "w") as out:
        if mode == "single":
            for seq in range(PER_PROC):
                rec = log.record_attempt(run, step=seq, attempt=0, state="succeeded", context={"proc": proc, "seq": seq})
                out.write(f"ack {rec.id.hex()} {seq}\n")
        else:
            for first in range(0, PER_PROC, BATCH):
                recs = []
                with log.store.batch():
                    for seq in range(first, first + BATCH):
                        recs.append(log.record_attempt(run, step=seq, attempt=0, state="succeeded",
                                                       context={"proc": proc, "seq": seq}))
                for seq, rec in zip(range(first, first + BATCH), recs, strict=True):
                    out.write(f"ack {rec.id.hex()} {seq}\n")
        out.write("done\n")


if __name__ == "__main__":
    _writer(sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5])
    sys.exit(0)


# -- the test ---------------------------------------------------------------------------

from helpers import log_engine_of, raw_objects, run_cli  # noqa: E402

from objstore import RunLog, Store  # noqa: E402
from objstore.storage import codec


def _env(extra=None):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([HERE] + sys.path))
    env.pop("OBJSTORE_DIR", None)
    env.pop("OBJSTORE_FSYNC", None)
    if extra:
        env.update(extra)
    return env


@pytest.mark.slow
def test_eight_processes_append_while_verify_loops_then_concurrent_demos(tmp_path):
    t_start = time.monotonic()
    root = str(tmp_path / "s")
    log = RunLog(Store.init(root, fsync="full"))
    run = log.start_run("conc")
    start_id = log.view(run).heads[0]

    # The 8 writers use fsync=full, as users do: measured on this disk the whole file takes
    # about 7 s that way (writers ~4 s), so OBJSTORE_FSYNC=off is not needed.
    writers = []
    outs = []
    for p in range(PROCS):
        out_path = str(tmp_path / f"w{p}.out")
        outs.append(out_path)
        mode = "single" if p < 4 else "batch"
        w = subprocess.Popen([sys.executable, os.path.abspath(__file__), root, run, str(p), mode, out_path],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_env())
        writers.append(w)
    for w in writers:
        assert w.stdout.readline().strip() == b"ready", w.stderr.read().decode()

    # verify in a loop, in its own processes, for as long as the writers write (and once after).
    writing = threading.Event()
    writing.set()
    verifies: list[tuple[int, str, str, bool]] = []  # (exit code, stdout, stderr, started while writing)

    def verify_loop():
        while True:
            during = writing.is_set()
            try:  # its output is kept and reported once the writers are done
                rc, out, err = run_cli("verify", store=root, exit_code=0)
            except AssertionError as e:
                rc, out, err = -1, "", str(e)
            verifies.append((rc, out, err, during))
            if not during:
                return

    vt = threading.Thread(target=verify_loop)
    vt.start()
    time.sleep(0.3)  # let the first verify start on the bare run
    for w in writers:
        w.stdin.write(b"go\n")
        w.stdin.flush()
    for w in writers:
        w.stdin.close()
    try:
        for p, w in enumerate(writers):
            rc = w.wait(timeout=300)
            assert rc == 0, f"writer {p} exited {rc}: {w.stderr.read().decode()[-2000:]}"
    finally:
        writing.clear()
        vt.join(timeout=300)
        for w in writers:
            if w.poll() is None:
                w.kill()
            w.stdout.close()
            w.stderr.close()
    t_writers = time.monotonic() - t_start

    bad = [v for v in verifies if v[0] != 0]
    assert not bad, f"verify failed while writers wrote: exit {bad[0][0]}: {bad[0][1][-2000:]} {bad[0][2][-2000:]}"
    assert sum(1 for v in verifies if v[3]) >= 2, f"verify should have run during the appends ({len(verifies)} runs)"
    assert any(v[3] and "entries" in v[2] for v in verifies)

    acked: dict[bytes, tuple[int, int]] = {}
    for p, path in enumerate(outs):
        lines = open(path).read().splitlines()
        assert lines[-1] == "done", f"writer {p} did not finish"
        assert len(lines) == PER_PROC + 1
        for line in lines[:-1]:
            _, hexid, seq = line.split()
            acked[bytes.fromhex(hexid)] = (p, int(seq))
    assert len(acked) == PROCS * PER_PROC

    # -- count from the raw objects (segment files re-read, blocks decompressed) ----------
    store = Store.open(root)
    records = {}
    for oid, otype, data in raw_objects(store):
        if otype != codec.RECORD:
            continue
        _, p = codec.decode(data, oid)  # strict: canonical re-encoding checked
        if p["run"] == run:
            assert oid not in records, "an object appears twice in the log"
            records[oid] = p
    assert len(records) == 1 + PROCS * PER_PROC == 4001
    assert all(p["branch"] == 0 for p in records.values())
    by_lsn = {p["lsn"]: (oid, p) for oid, p in records.items()}
    assert sorted(by_lsn) == list(range(4001)), "LSNs must be exactly 0..4000, each once"
    assert by_lsn[0][0] == start_id and by_lsn[0][1]["kind"] == "run_started"
    for lsn in range(1, 4001):
        oid, p = by_lsn[lsn]
        assert p["kind"] == "attempt"
        assert p["parent"] == by_lsn[lsn - 1][0], f"LSN {lsn} does not chain to LSN {lsn - 1}"

    pairs = [(p["body"]["context"]["proc"], p["body"]["context"]["seq"]) for _, p in (by_lsn[i] for i in range(1, 4001))]
    assert len(set(pairs)) == 4000 and set(pairs) == {(a, b) for a in range(PROCS) for b in range(PER_PROC)}
    for proc in range(PROCS):
        seqs = [s for a, s in pairs if a == proc]
        assert seqs == list(range(PER_PROC)), f"process {proc}'s records are out of its own order"
    for oid, (proc, seq) in acked.items():
        p = records.get(oid)
        assert p is not None, f"acknowledged record of ({proc}, {seq}) is not in the log"
        assert (p["body"]["context"]["proc"], p["body"]["context"]["seq"]) == (proc, seq)

    # A batch of 25 is one commit: contiguous LSNs in one entry, nobody else's record between.
    lsn_of = {oid: p["lsn"] for oid, p in records.items()}
    for proc in range(4, PROCS):
        ids = [oid for oid, (a, _) in sorted(acked.items(), key=lambda kv: kv[1]) if a == proc]
        for first in range(0, PER_PROC, BATCH):
            chunk = ids[first:first + BATCH]
            lsns = [lsn_of[i] for i in chunk]
            assert lsns == list(range(lsns[0], lsns[0] + BATCH)), f"batch of process {proc} was interleaved"
            assert len({log_engine_of(store, run).loc_entry(i) for i in chunk}) == 1, "a batch spans more than one entry"

    # The branch ref's chain, walked through the run log's engine.read, is exactly these records.
    head = store.read_ref(f"run/{run}/branch/0")
    walked = []
    oid = head
    while oid is not None:
        _, p = codec.decode(log_engine_of(store, run).read(oid), oid)
        walked.append(oid)
        oid = p["parent"]
    assert len(walked) == 4001 and set(walked) == set(records)
    assert by_lsn[4000][0] == head
    # ... and the queries agree.
    assert [r.id for r in RunLog(store).records(run)] == [by_lsn[i][0] for i in range(4001)]
    rc, out, err = run_cli("verify", store=root, exit_code=0)
    assert rc == 0, out + err

    # -- 4 demos start together on a store none of them has yet; then 4 more -------------
    demo_root = str(tmp_path / "demo")
    for round_ in range(2):
        procs = [subprocess.Popen([sys.executable, "-m", "objstore", "--store", demo_root, "demo"],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_env())
                 for _ in range(4)]
        for p in procs:
            out, err = p.communicate(timeout=120)
            assert p.returncode == 0, f"demo (round {round_}) exited {p.returncode}: {out.decode()[-1500:]} {err.decode()[-1500:]}"
            assert b"verify: ok" in out
    rc, out, err = run_cli("verify", store=demo_root, exit_code=0)
    assert rc == 0, out + err
    rc, out, err = run_cli("runs", "--json", store=demo_root, exit_code=0)
    assert rc == 0, err
    rows = json.loads(out)
    assert len(rows) == 8, rows
    assert all(r["live_branch"] == 1 and r["branch_count"] == 2 for r in rows), rows
    rc, out, err = run_cli("runs", store=demo_root, exit_code=0)
    assert rc == 0 and len(out.splitlines()) == 8
    elapsed = time.monotonic() - t_start
    print(f"writers+verify {t_writers:.1f}s, total {elapsed:.1f}s, {len(verifies)} verify runs")
    assert elapsed < 120, f"took {elapsed:.0f}s"
