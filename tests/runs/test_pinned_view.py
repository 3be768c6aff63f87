"""Pinned views (the seed's verifier snapshot barrier): a reader's view of a run
never changes while a real concurrent writer appends and rewinds."""

import os
import subprocess
import sys
import time

from objstore import RunLog, Store
from objstore.runs.export import export
from objstore.runs.query import episode
from objstore.runs.verify import verify

HERE = os.path.dirname(__file__)


def test_pinned_view_unchanged_under_concurrent_appends_and_rewinds(tmp_path):
    root = str(tmp_path / "s")
    log = RunLog(Store.init(root))
    run = log.start_run("pin")
    for i in range(5):
        log.record_attempt(run, step=i, attempt=0, state="succeeded")
    pinned = log.pin(run)

    def read_all():
        return (
            [r.id for r in log.records(run, all_branches=True, view=pinned)],
            log.refold(pinned, pinned.live),
            episode(log, run, all_branches=True, view=pinned, source="state").to_json(),
            episode(log, run, all_branches=True, view=pinned, source="refold").to_json(),
            [e["id"] for e in export(log, run, view=pinned)],
        )

    first = read_all()
    assert first[2] == first[3]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    w = subprocess.Popen([sys.executable, os.path.join(HERE, "pinned_writer.py"), root, run],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
    assert w.stdout.readline().strip() == b"ready"
    reads = 0
    moved = False
    deadline = time.monotonic() + 120  # bounded, however slow the machine
    while (reads < 60 or not moved) and time.monotonic() < deadline:
        assert read_all() == first, f"pinned view changed after {reads} reads"
        reads += 1
        now = log.view(run)
        moved = moved or (now.live != pinned.live and len(now.heads) > 2)
    w.stdin.close()
    w.stdout.read()  # drain: the writer ends once its output is read
    assert w.wait(timeout=60) == 0
    assert moved, "the writer should have rewound at least twice during the reads"
    assert read_all() == first
    now = log.view(run)
    assert now.heads[0] != pinned.heads[0] or now.live != pinned.live
    # The current view is served from the cache again, and the cache is consistent.
    assert episode(log, run, all_branches=True).to_json() == episode(log, run, all_branches=True, source="refold").to_json()
    assert verify(log) == []
