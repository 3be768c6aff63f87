"""Issue 1 benchmark: durable batch write, verify, bytes on disk — objstore vs peers, one run.

    python benchmarks/bench_core.py [N]     (default N = 100000; needs the 'bench' extra: dulwich, and git)

Peers: SQLite WAL (hash-keyed rows, one transaction, synchronous=FULL), dulwich
add_objects (a pack) and dulwich loose objects + `git fsck` for the verify peer.
"""

import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(__file__))
from common import sqlite_peer, dir_bytes, log_like_payloads, row, timed  # noqa: E402

from objstore import RunLog, Store, codec  # noqa: E402
from objstore.verify import verify  # noqa: E402


def main(n):
    tmp = tempfile.mkdtemp(prefix="objbench-", dir=os.environ.get("BENCH_DIR"))
    payloads = log_like_payloads(n)
    canon = [codec.encode("record", p) for p in payloads]
    raw_bytes = sum(len(c) for c in canon)
    print(f"{n} log-like records, mean {raw_bytes / n:.0f} canonical bytes; fsync=full; {tmp}")

    # objstore: encode + hash + group commit (one pack, one fsync), through the public Store API
    store = Store.init(os.path.join(tmp, "objstore"), fsync="full")

    def os_write():
        with store.batch():
            for p in payloads:
                store.put("record", p)

    t_os, _ = timed(os_write)

    # SQLite WAL, same bytes keyed by hash, one transaction
    db = sqlite_peer(os.path.join(tmp, "peer.sqlite"), "CREATE TABLE o(id BLOB PRIMARY KEY, data BLOB) WITHOUT ROWID")

    def sq_write():
        with db:
            db.executemany("INSERT OR IGNORE INTO o VALUES(?,?)", ((codec.object_id(c), c) for c in (codec.encode("record", p) for p in payloads)))

    t_sq, _ = timed(sq_write)

    # dulwich add_objects (writes a pack)
    try:
        from dulwich.objects import Blob
        from dulwich.repo import Repo
    except ImportError:
        Repo = None
    t_du = None
    if Repo:
        repo = Repo.init_bare(os.path.join(tmp, "dulwich.git"), mkdir=True)

        def du_write():
            repo.object_store.add_objects([(Blob.from_string(c), None) for c in canon])

        t_du, _ = timed(du_write)

    print("durable batch write:")
    row("objstore (batch, one pack, one fsync)", n / t_os)
    row("SQLite WAL (one txn, synchronous=FULL)", n / t_sq, extra=f"objstore/SQLite = {t_sq / t_os:.2f}x")
    if t_du:
        row("dulwich add_objects", n / t_du, extra=f"objstore/dulwich = {t_du / t_os:.2f}x")

    on_disk = dir_bytes(os.path.join(store.root, "packs"))
    print(f"bytes on disk: objstore packs {on_disk:,} for {raw_bytes:,} canonical bytes = {on_disk / raw_bytes:.2f}x "
          f"(SQLite file {os.path.getsize(os.path.join(tmp, 'peer.sqlite')) + os.path.getsize(os.path.join(tmp, 'peer.sqlite-wal')) if os.path.exists(os.path.join(tmp, 'peer.sqlite-wal')) else 0:,})")

    # verify vs git fsck on the same number of loose objects
    log = RunLog(Store.open(store.root))
    runs = []
    for _ in range(3):
        t, problems = timed(verify, log, check_state=False)
        assert problems == [], problems[:3]
        runs.append(t)
    t_v = sorted(runs)[1]  # median of 3
    print("verify:")
    row("objstore verify (re-hash + strict decode + refs)", n / t_v)
    if Repo and shutil.which("git"):
        loose = Repo.init_bare(os.path.join(tmp, "loose.git"), mkdir=True)
        t_lw, _ = timed(lambda: [loose.object_store.add_object(Blob.from_string(c)) for c in canon])
        t_g, res = timed(subprocess.run, ["git", "-C", loose.path, "fsck", "--full", "--no-dangling"], capture_output=True)
        row("git fsck --full (loose objects)", n / t_g, extra=f"objstore/git fsck = {t_g / t_v:.2f}x (rc {res.returncode}; dulwich wrote them loose at {n / t_lw:,.0f}/s)")
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 100_000)
