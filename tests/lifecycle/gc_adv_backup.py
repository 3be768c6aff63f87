"""A backup loop for the adversarial gc tests (tests/lifecycle/test_gc_adversarial.py): backups while gc runs.

    python gc_adv_backup.py SRC DEST STOPFILE SEAL_BYTES

Until STOPFILE exists (and at least twice): ``backup(Store.open(SRC), DEST)`` (incremental, the same
DEST each time), then checks that backup at once, before the next one overwrites it: DEST opens, its
(store) log's position is the snapshot the anchor names, ``verify_report(..., anchor=TOKEN, check_state=False)``
has no problems, and in each log of DEST (the store log and each run's, or the one log) the refs are exactly
the refs of SRC's same log at DEST's position, whose entry SRC has with the same checksum (each DEST log is a
prefix of SRC's). A failure prints ``FAIL ...``,
exit 1. Prints ``ready`` after the first backup, ``backups N`` at the end.
"""

import os
import sys
import traceback

import objstore.storage.log.local_write


def main(argv):
    src, dest, stop, seal = argv[1], argv[2], argv[3], int(argv[4])
    objstore.storage.log.local_write.SEAL_BYTES = seal
    from objstore import RunLog, Store
    from objstore.lifecycle.backup import backup
    from objstore.runs.anchor_manifest import entry_checksum
    from objstore.runs.verify import verify_report
    from objstore.storage.log.format import Position

    n = 0
    while n < 2 or not os.path.exists(stop):
        try:
            s = Store.open(src)
            r = backup(s, dest)
            _, _, entry, hexsum = r.anchor.split(":")
            pos = Position(int(entry), bytes.fromhex(hexsum))
            d = Store.open(dest)
            if d.engine.position() != pos:
                print(f"FAIL backup {n}: DEST is at {d.engine.position()}, its anchor names {pos}", flush=True)
                sys.exit(1)
            for name, de in list(d.logs.all_logs()):
                se = s.logs.store_log if name is None else s.logs.run_log(name)
                at = de.position()
                if at.entry and entry_checksum(se, at.entry) != at.checksum:
                    print(f"FAIL backup {n}: DEST's log {name or '-'} at {at} is no prefix of SRC's", flush=True)
                    sys.exit(1)
                mine, theirs = de.refs_at(""), se.refs_at("", at)
                if mine != theirs:
                    diff = sorted(set(mine.items()) ^ set(theirs.items()))[:5]
                    print(f"FAIL backup {n}: refs of log {name or '-'} differ from SRC's at the snapshot: {diff}", flush=True)
                    sys.exit(1)
            rep = verify_report(RunLog(d), anchor=r.anchor, check_state=False)
            if rep.problems:
                print(f"FAIL backup {n}: verify: {rep.problems[:3]}", flush=True)
                sys.exit(1)
            d.logs.close()
            s.logs.close()
        except SystemExit:
            raise
        except BaseException as e:
            print(f"FAIL backup {n}: {type(e).__name__}: {e}", flush=True)
            traceback.print_exc()
            sys.exit(1)
        n += 1
        if n == 1:
            print("ready", flush=True)
    print(f"backups {n}", flush=True)


if __name__ == "__main__":
    main(sys.argv)
