"""A stale reader process for the adversarial gc tests (tests/lifecycle/test_gc_adversarial.py).

    python gc_adv_stale.py STORE GO1 GO2 PRE PHASES IDSFILE

Opens the store before any gc and pins its position; PRE ``all``: reads every object by id (so its
segment files are open and their indexes loaded) and every run's records; PRE ``none``: reads nothing
(the ids come from IDSFILE, one a line: the run whose log holds it (``-``: the store log) and the id in hex).
Each log is read through its own engine, opened and pinned at the start (a store of one log: the one engine). Prints ``ready``; then, once GO1 exists (the parent ran
gc) and again once GO2 exists (the parent deleted a run and ran gc again, which re-packs a packed
segment), in each phase PHASES names (``12``, ``2``), reads every object it knew through the same engine, by ``engine.read`` and by
``engine.read_at(id, pinned)``, and every run's records through the same RunLog. Right bytes, or
``SnapshotGone``/``BodyRemoved`` (printed as ``gone <id> <error> <run of the log, or ->``), or ``Deleted`` for a run's log (``deleted
<run>``); anything else (``IntegrityError`` above all) or wrong bytes: ``FAIL ...``, exit 1. Prints
``phase N read R`` after each phase.
"""

import os
import sys
import time

import blake3


def main(argv):
    root, go1, go2, pre, phases, idsfile = argv[1], argv[2], argv[3], argv[4], argv[5], argv[6]
    from objstore import RunLog, Store
    from objstore.errors import BodyRemoved, Deleted, SnapshotGone

    log = RunLog(Store.open(root))
    engines = dict(log.store.logs.all_logs())  # {run (None: the store log): its engine}
    pinned = {run: eng.snapshot() for run, eng in engines.items()}
    if pre == "all":
        ids = [(run, oid) for run, eng in engines.items() for oid in list(eng.iter_ids())]
        for run, oid in ids:
            assert blake3.blake3(bytes(engines[run].read(oid))).digest() == oid
        runs = {run: [r.id for r in log.records(run, all_branches=True)] for run in log.runs()}
    else:
        with open(idsfile) as f:
            ids = [(None if r == "-" else r, bytes.fromhex(h)) for r, h in (ln.split() for ln in f if ln.strip())]
        runs = {}
    print("ready", flush=True)
    for phase, go in enumerate((go1, go2), 1):
        while not os.path.exists(go):
            time.sleep(0.01)
        if str(phase) not in phases:
            continue
        n = 0
        for run, oid in ids:
            eng = engines[run]
            for how in ("read", "read_at"):
                try:
                    data = eng.read(oid) if how == "read" else eng.read_at(oid, pinned[run])
                except (SnapshotGone, BodyRemoved) as e:
                    print(f"gone {oid.hex()} {type(e).__name__} {run or '-'}", flush=True)  # (the log it is gone from)
                    continue
                except Exception as e:
                    print(f"FAIL phase {phase} {how} {oid.hex()}: {type(e).__name__}: {e}", flush=True)
                    sys.exit(1)
                if blake3.blake3(bytes(data)).digest() != oid:
                    print(f"FAIL phase {phase} {how} {oid.hex()}: wrong bytes", flush=True)
                    sys.exit(1)
                n += 1
        for run, want in runs.items():
            try:
                got = [r.id for r in log.records(run, all_branches=True)]
            except Deleted:
                print(f"deleted {run}", flush=True)
                continue
            except Exception as e:
                print(f"FAIL phase {phase} records of {run}: {type(e).__name__}: {e}", flush=True)
                sys.exit(1)
            if got[: len(want)] != want:
                print(f"FAIL phase {phase} records of {run} differ", flush=True)
                sys.exit(1)
        print(f"phase {phase} read {n}", flush=True)


if __name__ == "__main__":
    main(sys.argv)
