"""The warm-up probe of issue 19's race: 16 OS processes make one conditional write to one key
through the two gateways of a real SeaweedFS cluster (master, 2 volume servers, 1 filer, 2 S3
gateways), alternating, released together. Create-once (``If-None-Match: *``) and compare-and-swap
(``If-Match`` from one common ETag) must each have exactly one winner, and every gateway must then
serve the winner's bytes; otherwise the test fails naming the server, the gateways and the winners."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

from objstore.storage.s3.client import open_bucket

RACERS = 16
HERE = os.path.dirname(os.path.abspath(__file__))


def _race(cluster, tmp_path, url: str, key: str, mode: str, etag: str) -> list[dict]:
    start = tmp_path / f"start-{mode}"
    procs, ready = [], []
    for i in range(RACERS):
        gw = cluster.gateways[i % len(cluster.gateways)]
        ready.append(tmp_path / f"ready-{mode}-{i}")
        procs.append(subprocess.Popen([sys.executable, os.path.join(HERE, "s3_race_child.py"), gw, url, key, mode, etag,
                                       str(ready[-1]), str(start), str(i)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      env={**os.environ, **cluster.env()}))
    try:
        deadline = time.monotonic() + 120
        while not all(r.exists() for r in ready):
            bad = [p for p in procs if p.poll() is not None]
            assert not bad, f"a racer died before the start: {bad[0].stderr.read().decode()[-800:]}"
            assert time.monotonic() < deadline, "racers not ready after 120 s"
            time.sleep(0.01)
        start.touch()
        out = []
        for p in procs:
            stdout, stderr = p.communicate(timeout=120)
            assert p.returncode == 0, f"racer failed (exit {p.returncode}): {stderr.decode()[-800:]}"
            out.append(json.loads(stdout))
        return out
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()


def _one_winner(cluster, results: list[dict], url: str, key: str, what: str) -> dict:
    winners = [r for r in results if r["won"]]
    where = f"SeaweedFS 4.48 cluster (gateways {', '.join(cluster.gateways)}; logs in {cluster.tmp})"
    assert len(winners) == 1, (f"{what}: {len(winners)} winners of {RACERS} on {where}: "
                               + "; ".join(f"racer {w['racer']} via {w['endpoint']}" for w in winners))
    win = winners[0]
    for gw in cluster.gateways:  # both gateways serve the winner's bytes under the winner's ETag
        os.environ["AWS_ENDPOINT_URL"] = gw
        got = open_bucket(url).get(key)
        assert got is not None and got.data == win["data"].encode() and got.etag == win["etag"], \
            f"{what}: gateway {gw} of {where} serves {got!r}, the winner was racer {win['racer']} via {win['endpoint']}"
    return win


def test_sixteen_processes_two_gateways_one_winner(seaweed_cluster, tmp_path, monkeypatch):
    for k, v in seaweed_cluster.env().items():
        monkeypatch.setenv(k, v)
    url = f"s3://{seaweed_cluster.bucket}/probe-{os.getpid()}"
    created = _race(seaweed_cluster, tmp_path, url, "HEAD", "absent", "-")
    _one_winner(seaweed_cluster, created, url, "HEAD", "put_if_absent")

    monkeypatch.setenv("AWS_ENDPOINT_URL", seaweed_cluster.gateways[0])
    base = open_bucket(url).put("HEAD2", b"the common base")
    swapped = _race(seaweed_cluster, tmp_path, url, "HEAD2", "match", base)
    win = _one_winner(seaweed_cluster, swapped, url, "HEAD2", "put_if_match")
    assert win["etag"] != base
