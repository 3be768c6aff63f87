"""Journal compaction (T-745): what a compaction, a restore and a signed Host read cost.

No peer: the issue names none, and nothing else does this job. Prints min / median / max over
REPS repetitions of each operation on a session of N turns (200-byte turns, a 300-entry journal),
through the in-process Host and through the Backend Host on a Unix socket, and the peak RSS.

    .venv/bin/python benchmarks/bench_journal.py [N ...]      (default: 1000 10000)

BENCH_DIR picks the scratch directory.
"""

from __future__ import annotations

import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

REPS = 5


def _stats(xs):
    return f"min {min(xs) * 1000:7.1f} ms  median {statistics.median(xs) * 1000:7.1f} ms  max {max(xs) * 1000:7.1f} ms"


def run(n: int) -> None:
    d = tempfile.mkdtemp(dir=os.environ.get("BENCH_DIR"))
    os.environ["OBJSTORE_KEYS"] = os.path.join(d, "keys")
    from objstore import RunLog, Store
    from objstore import journal as J
    from objstore.journal.backend import BackendHost
    from objstore.storage import identity

    log = RunLog(Store.init(os.path.join(d, "s")))
    owner, _ = identity.ensure_owner_key(log.store)
    local = J.LocalJournalHost(log)
    sock = os.path.join(d, "h.sock")
    server = subprocess.Popen([sys.executable, "-c", "import sys; from objstore.journal.backend import main_serve; main_serve(sys.argv[1], sys.argv[2])",
                               log.store.root, sock], stderr=subprocess.DEVNULL)
    while not os.path.exists(sock):
        time.sleep(0.02)
    backend = BackendHost(sock)
    try:
        times: dict[str, list[float]] = {}
        for rep in range(REPS):
            run_id = J.start_session(log, "alice", run=f"s{rep}", host=local, key=owner)
            with log.store.batch():
                for i in range(n):
                    J.record_turn(log, run_id, "user" if i % 2 == 0 else "model", f"turn {i} " + "x" * 200)
            J.update_journal(log, run_id, owner, {"entries": [{"id": f"e{i}", "status": "open" if i % 5 == 0 else "done",
                                                               "text": "y" * 200} for i in range(300)]}, reflects_through="latest")
            comp = J.StubCompactor(max_input_bytes=1 << 30)
            for name, host, budget in (("compact, full journal, local Host", local, 1 << 20),
                                       ("compact, bounded projection (8 KiB), local Host", local, 8192),
                                       ("compact, full journal, Backend Host", backend, 1 << 20)):
                t = time.perf_counter()
                J.compact(log, run_id, comp, host=host, key=owner, keep_tail=4, budget_bytes=budget)
                times.setdefault(name, []).append(time.perf_counter() - t)
            t = time.perf_counter()
            J.context(log, run_id)
            times.setdefault("context (restore)", []).append(time.perf_counter() - t)
            for name, host in (("signed read, local Host", local), ("signed read, Backend Host", backend)):
                req = identity.sign_request(owner, "read", run_id, params={"purpose": "compaction", "budget": 8192, "predecessor": None})
                t = time.perf_counter()
                host.read(req)
                times.setdefault(name, []).append(time.perf_counter() - t)
        print(f"N = {n} turns, {REPS} repetitions")
        for name, xs in times.items():
            print(f"  {name:<50} {_stats(xs)}")
    finally:
        server.terminate()
        server.wait()


def main(argv):
    for n in [int(a) for a in argv[1:]] or [1000, 10000]:
        run(n)
    print(f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB")


if __name__ == "__main__":
    main(sys.argv)
