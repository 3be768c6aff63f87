"""Crash safety (invariant 12): kill -9 a real writer at random instants, 50 times.

The writer (crash_writer.py) mixes single appends, batches, new runs, rewinds, and
batches holding a rewind plus appends. After each kill: verify finds no problems
(a torn tail is only a note), every record the child acknowledged is present and on
the chain of the branch it was acknowledged on, every acknowledged run is there with
its acknowledged head, every acknowledged fork's branch exists with that fork object
at its root, and no fork object is without its branch (no half-made rewind).
"""

import os
import random
import signal
import subprocess
import sys
import time

import pytest
from helpers import is_per_run, raw_objects

from objstore import RunLog, Store
from objstore.runs.verify import verify_report
from objstore.storage import codec

HERE = os.path.dirname(__file__)
RUN = "crash"


@pytest.mark.slow
def test_kill9_writer_50_times(tmp_path):
    root = str(tmp_path / "s")
    Store.init(root)
    rnd = random.Random(1234)
    acked: dict[bytes, int] = {}  # record id -> branch it was acknowledged on
    started: list[tuple[str, bytes]] = []
    forks: dict[bytes, int] = {}  # fork id -> new branch
    torn_rounds = 0
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([HERE] + sys.path))
    env.pop("OBJSTORE_FSYNC", None)  # the durability path (fsync=full) is the one under test
    # Format 6: a run's creation makes its catalog entry and its log's directory durable before its first entry, about
    # 4x a commit (38 ms vs 9 ms measured under load); the kill window is widened so some rounds still start runs.
    window = 0.2 if is_per_run(root) else 0.08
    t0 = time.monotonic()
    for round_ in range(50):
        p = subprocess.Popen([sys.executable, os.path.join(HERE, "crash_writer.py"), root, RUN, str(round_)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
        assert p.stdout.readline().strip() == b"ready"
        time.sleep(rnd.uniform(0.0, window))
        p.send_signal(signal.SIGKILL)
        out, err = p.communicate(timeout=30)
        assert p.returncode == -signal.SIGKILL, err.decode()
        for line in out.decode().splitlines():
            parts = line.split()
            if len(parts) != 4 or parts[0] != "ack":  # a line cut by the kill acknowledges nothing
                continue
            if parts[1] == "start":
                started.append((parts[3], bytes.fromhex(parts[2])))
            elif parts[1] == "rewind":
                forks[bytes.fromhex(parts[2])] = int(parts[3])
            else:
                acked[bytes.fromhex(parts[2])] = int(parts[3])

        log = RunLog(Store.open(root))
        report = verify_report(log)
        assert report.problems == [], f"round {round_}: " + "; ".join(x.line() for x in report.problems)
        torn_rounds += bool(report.notes)
        view = log.view(RUN)
        chains = {b: {r.id for r in log.own_records(view, b)} for b in view.heads}
        lost = [(a.hex(), b) for a, b in acked.items() if a not in chains.get(b, ())]
        assert not lost, f"round {round_}: acknowledged records lost or off their branch's chain: {lost[:3]}"
        runs = set(log.runs())
        lost_runs = [name for name, head in started if name not in runs or log.view(name).heads[0] != head]
        assert not lost_runs, f"round {round_}: acknowledged runs lost: {lost_runs[:3]}"
        for name in runs:  # no listing shows a half run (format 6: a catalog entry whose log a kill left unwritten)
            assert log.view(name).heads[0] is not None, f"round {round_}: run {name} is listed but has no head"
        for fid, branch in forks.items():
            assert branch in view.heads, f"round {round_}: acknowledged fork's branch {branch} is missing"
            fk = log.fork_object(view, branch)
            assert fk is not None and fk["id"] == fid, f"round {round_}: branch {branch} is not rooted at its fork {fid.hex()}"
        # No half-made rewind: every fork object the log holds is the root of its branch.
        fork_ids = [oid for oid, otype, _ in raw_objects(log.store) if otype == codec.FORK]
        for fid in fork_ids:
            _, payload = log.store.get(fid)
            assert payload["run"] == RUN
            assert payload["branch"] in view.heads, f"round {round_}: fork object {fid.hex()} without its branch ref"
            assert log.fork_object(view, payload["branch"])["id"] == fid
        assert len(fork_ids) == len(view.heads) - 1
        log.store.logs.close()
    elapsed = time.monotonic() - t0
    print(f"{len(acked)} records, {len(started)} runs, {len(forks)} rewinds acknowledged; "
          f"{torn_rounds} rounds left a torn tail; {elapsed:.1f}s")
    assert len(acked) > 50, "the writer should have acknowledged writes in most rounds"
    assert started, "some rounds should have started new runs"
    assert len(forks) >= 5, f"only {len(forks)} rewinds were acknowledged"
    assert elapsed < 90, f"50 rounds took {elapsed:.0f}s"
