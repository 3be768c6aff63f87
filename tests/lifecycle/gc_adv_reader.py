"""A reader process for the adversarial gc tests (tests/lifecycle/test_gc_adversarial.py).

    python gc_adv_reader.py STORE STOPFILE DOOMEDFILE SEAL_BYTES [DELETED_RUN]

Loops until STOPFILE exists (and at least twice): opens the store afresh (``RunLog(Store.open(root))``),
reads the log of every run (its records, every body decoded), then every object by id through the
``read`` of the engine of each log holding it (every log of the store: the store log and each run's, or the
one log), checking each one's BLAKE3 is its id. Any exception or wrong bytes is a failure: printed as
``FAIL ...`` and exit 1. ``SnapshotGone``/``BodyRemoved`` are allowed only for an id listed in DOOMEDFILE
for that log (one a line: the run whose log holds it, ``-`` for the store's one log, and the id in hex: the
bodies of a run deleted before gc started); each such is counted, and
``Deleted`` only for DELETED_RUN (listed, then deleted, while this pass read the runs).
Prints ``ready`` after its first pass and ``passes N reads R gone G`` at the end.
"""

import os
import sys
import traceback

import objstore.storage.log.local_write


def main(argv):
    root, stop, doomed_path, seal = argv[1], argv[2], argv[3], int(argv[4])
    deleted_run = argv[5] if len(argv) > 5 else None
    objstore.storage.log.local_write.SEAL_BYTES = seal
    import blake3

    from objstore import RunLog, Store
    from objstore.errors import BodyRemoved, Deleted, SnapshotGone

    with open(doomed_path) as f:
        doomed = {(r, bytes.fromhex(h)) for r, h in (line.split() for line in f if line.strip())}
    passes = reads = gone = 0
    while passes < 2 or not os.path.exists(stop):
        oid = None
        try:
            log = RunLog(Store.open(root))
            for run in log.runs():
                try:
                    for rec in log.records(run, all_branches=True):
                        assert rec.run == run, (rec.run, run)
                except Deleted:
                    if run != deleted_run:
                        raise
            for name, eng in list(log.store.logs.all_logs()):
                for oid in list(eng.iter_ids()):
                    try:
                        data = eng.read(oid)
                    except (SnapshotGone, BodyRemoved) as e:
                        if (name or "-", oid) not in doomed:
                            print(f"FAIL {type(e).__name__} for a live object {oid.hex()} (log {name or '-'}): {e}", flush=True)
                            sys.exit(1)
                        gone += 1
                        continue
                    if blake3.blake3(bytes(data)).digest() != oid:
                        print(f"FAIL wrong bytes for {oid.hex()}", flush=True)
                        sys.exit(1)
                    reads += 1
            log.store.logs.close()
        except SystemExit:
            raise
        except BaseException as e:
            print(f"FAIL {type(e).__name__}: {e} (object {oid.hex() if oid else None})", flush=True)
            traceback.print_exc()
            sys.exit(1)
        passes += 1
        if passes == 1:
            print("ready", flush=True)
    print(f"passes {passes} reads {reads} gone {gone}", flush=True)


if __name__ == "__main__":
    main(sys.argv)
