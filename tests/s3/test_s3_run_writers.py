"""Writer processes on a store of a HEAD per run (format 7), against a real SeaweedFS: 8 writers each on its own run
and 8 on one run through two gateways, and writers killed (SIGKILL) at every request boundary, a lease holder's
included. Each writer is a process of its own (tests/s3/s3_run_writer.py) printing every record it had acknowledged;
what is asserted is read back from the bucket by a fresh process's open: every acknowledged record there exactly
once, each run's LSNs contiguous, verify clean, and no StaleBase or Busy reaching a caller that set no expectation.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid

import pytest

import objstore
from objstore.runs.verify import verify_report

HERE = os.path.dirname(os.path.abspath(__file__))
WRITER = os.path.join(HERE, "s3_run_writer.py")
COMMITS = 6


def _env(base: dict, tmp, name: str, **extra: str) -> dict:
    return dict(os.environ, **base, OBJSTORE_CACHE_DIR=str(tmp / f"cache-{name}"), **extra)


def _start(url, run, writer, count, mode, barrier, env, die_at=None) -> subprocess.Popen:
    args = [sys.executable, WRITER, url, run, str(writer), str(count), mode, barrier] + ([str(die_at)] if die_at else [])
    return subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _lines(out: str) -> list[dict]:
    got = []
    for line in out.splitlines():
        try:
            got.append(json.loads(line))
        except ValueError:
            break  # a line a kill cut: nothing after it was acknowledged either
    return got


def _chain(log, run: str) -> list:
    """(lsn, id hex, task) of the run's live branch, oldest first."""
    return [(r.lsn, r.id.hex(), (r.body or {}).get("task")) for r in reversed(list(log.iter_records(run)))]


def _check(log, run: str, acked: list[dict]) -> None:
    chain = _chain(log, run)
    assert [lsn for lsn, _i, _t in chain] == list(range(len(chain)))  # contiguous, from the run's start
    tasks = [t for _l, _i, t in chain if t is not None]
    assert len(tasks) == len(set(tasks))  # nothing twice
    ids = {i for _l, i, _t in chain}
    assert {a["id"] for a in acked} <= ids  # nothing acknowledged lost
    assert {a["tag"] for a in acked} <= set(tasks)


@pytest.mark.parametrize("shape", ["own-runs", "one-run"])
def test_eight_writers_through_two_gateways_lose_nothing_and_surface_no_conflict(seaweed_cluster, tmp_path, shape, monkeypatch):
    url = f"s3://{seaweed_cluster.bucket}/w-{uuid.uuid4().hex[:8]}"
    envs = []
    for g in (0, 1):
        e = seaweed_cluster.env()
        e["AWS_ENDPOINT_URL"] = seaweed_cluster.gateways[g]
        envs.append(e)
    for k, v in envs[0].items():  # (this process reads the store through the first gateway)
        monkeypatch.setenv(k, v)
    log = objstore.open_store(url)
    runs = [log.start_run(subject="s") for _ in range(8 if shape == "own-runs" else 1)]
    barrier = str(tmp_path / "go")
    procs = [_start(url, runs[k % len(runs)], k, COMMITS, "append" if k % 2 else "batch", barrier,
                    _env(envs[k % 2], tmp_path, f"w{k}")) for k in range(8)]
    open(barrier, "w").close()
    acked: dict[str, list] = {r: [] for r in runs}
    for k, p in enumerate(procs):
        out, err = p.communicate(timeout=300)
        lines = _lines(out)
        assert p.returncode == 0 and not [x for x in lines if "surfaced" in x], (k, out[-2000:], err[-2000:])
        acked[runs[k % len(runs)]] += [x for x in lines if "id" in x]
    reader = objstore.open_store(url)
    for run in runs:
        _check(reader, run, acked[run])
    want = sum(len(v) for v in acked.values())
    assert want == 8 * COMMITS * 3 // 2  # 4 append writers (1 record a commit) and 4 batch writers (2 a commit)
    assert sum(len(_chain(reader, r)) - 1 for r in runs) == want  # every record on the chains is one acknowledged
    assert verify_report(reader).problems == []


def test_writers_killed_at_every_request_lose_no_acknowledged_commit_and_wedge_no_run(seaweed, tmp_path):
    url = f"s3://{seaweed.bucket}/k-{uuid.uuid4().hex[:8]}"
    log = objstore.open_store(url)
    run = log.start_run(subject="s")
    env = {"OBJSTORE_S3_LEASE_SECONDS": "0.3"}  # a killed holder's lease lapses fast here; the default is 10 s
    acked: list[dict] = []
    k, finished = 1, False
    while not finished:
        assert k < 60, "a writer of two batches should make fewer requests than this"
        dying = _start(url, run, 100 + k, 2, "batch", "-", _env({}, tmp_path, f"d{k}", **env), die_at=k)
        out, err = dying.communicate(timeout=120)
        lines = _lines(out)
        finished = dying.returncode == 0  # it made all its requests before the k-th: every boundary was killed at
        assert finished or dying.returncode == -9, err[-2000:]
        acked += [x for x in lines if "id" in x]
        after = _start(url, run, 200 + k, 1, "append", "-", _env({}, tmp_path, f"a{k}", **env))
        out2, err2 = after.communicate(timeout=120)  # the run is not wedged: the next writer commits
        assert after.returncode == 0, err2[-2000:]
        acked += [x for x in _lines(out2) if "id" in x]
        k += 1
    print(f"killed at each of {k - 2} request boundaries; {len(acked)} records acknowledged")
    # the marker, the store log's and the run's HEAD read at open, then per batch the lease's swap and the commit's
    assert k - 2 >= 7
    reader = objstore.open_store(url)
    _check(reader, run, acked)
    assert verify_report(reader).problems == []
