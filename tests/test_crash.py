"""Crash safety (invariant 12): kill -9 a real writer at random instants, 50 times.

After each kill: verify is clean (no ref names a missing or partial object, no
torn file is visible), and every write the child acknowledged is present and
on the branch's chain.
"""

import os
import random
import signal
import subprocess
import sys
import time

from objstore import RunLog, Store
from objstore.verify import verify

HERE = os.path.dirname(__file__)


def test_kill9_writer_50_times(tmp_path):
    root = str(tmp_path / "s")
    Store.init(root)
    rnd = random.Random(1234)
    acked: list[bytes] = []
    started: list[tuple[str, bytes]] = []
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([HERE] + sys.path))
    for round_ in range(50):
        p = subprocess.Popen([sys.executable, os.path.join(HERE, "crash_writer.py"), root, "crash", str(round_)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
        assert p.stdout.readline().strip() == b"ready"
        time.sleep(rnd.uniform(0.0, 0.08))
        p.send_signal(signal.SIGKILL)
        out, err = p.communicate(timeout=30)
        assert p.returncode == -signal.SIGKILL, err.decode()
        for line in out.decode().splitlines():
            parts = line.split()
            if len(parts) == 4 and parts[0] == "ack":
                if parts[1] == "start":
                    started.append((parts[3], bytes.fromhex(parts[2])))
                else:
                    acked.append(bytes.fromhex(parts[2]))
        log = RunLog(Store.open(root))
        problems = verify(log)
        assert problems == [], f"round {round_}: " + "; ".join(x.line() for x in problems)
        chain = {r.id for r in log.records("crash")}
        missing = [a.hex() for a in acked if a not in chain]
        assert not missing, f"round {round_}: acknowledged records lost: {missing[:3]}"
        runs = set(log.runs())
        lost = [name for name, head in started if name not in runs or log.view(name).heads[0] != head]
        assert not lost, f"round {round_}: acknowledged runs lost: {lost[:3]}"
    assert len(acked) > 50, "the writer should have acknowledged writes in most rounds"
    assert started, "some rounds should have started new runs"
