"""What a sweep of every command against a store on a real SeaweedFS (``--store s3://…`` and ``OBJSTORE_DIR=s3://…``,
with and without ``--json``, beside the same commands on a local store) found answering differently from a store on
disk: concurrent CLI writers of one session losing with exit 7, a clone that believes a local cache written before gc
rewrote a chunk, and an operating-system error naming ``--store`` as the command."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from helpers import run_cli

import objstore


def _env(tmp_path, cache: str = "cache") -> dict:
    return {"OBJSTORE_KEYS": str(tmp_path / "keys"), "OBJSTORE_CACHE_DIR": str(tmp_path / cache)}


def test_concurrent_cli_task_opens_on_one_session_all_land(s3_url, tmp_path):
    """Three processes opening tasks in one session at once: on disk the writer lock orders them; on S3 each is one
    optimistic commit, and one that another process's append made stale must be run again, not end as a Conflict
    (exit 7 'the log moved under this batch', seen 7 times in 24 before sessions.open_task used Store.atomically)."""
    env = _env(tmp_path)
    run_cli("init", store=s3_url, env_extra=env, exit_code=0)
    run_cli("session", "start", "--subject", "alice", "--run", "s1", store=s3_url, env_extra=env, exit_code=0)
    script = ("import subprocess, sys\n"
              "for i in range(5):\n"
              "    p = subprocess.run([sys.executable, '-m', 'objstore', '--store', sys.argv[1], 'task', 'open', 's1', f'{sys.argv[2]}{i}'],"
              " capture_output=True)\n"
              "    print(p.returncode, p.stderr.decode().strip())\n")
    procs = []
    for w in "abc":
        penv = dict(os.environ, **_env(tmp_path, f"cache-{w}"))
        penv.pop("OBJSTORE_DIR", None)
        procs.append(subprocess.Popen([sys.executable, "-c", script, s3_url, w], stdout=subprocess.PIPE, env=penv))
    lines = [line for p in procs for line in p.communicate(timeout=120)[0].decode().splitlines()]
    assert [x for x in lines if not x.startswith("0 ")] == []
    listed = json.loads(run_cli("task", "list", "s1", "--json", store=s3_url, env_extra=env, exit_code=0)[1])
    assert sorted(t["task"] for t in listed) == sorted(f"{w}{i}" for w in "abc" for i in range(5))


def test_a_clone_through_a_cache_from_before_gc_reports_what_gc_removed(s3_url, tmp_path, monkeypatch):
    """gc strips a deleted record's body out of the chunk that holds it, under the same key (the entries keep their
    checksums). A clone on a machine whose cache read that chunk before gc must answer as one with a fresh cache:
    exit 12 naming the removed body — not exit 0, the removed body read from the stale copy and sent."""
    env = _env(tmp_path)
    monkeypatch.setenv("OBJSTORE_CACHE_DIR", str(tmp_path / "cache-writer"))
    log = objstore.open_store(s3_url)
    run = log.start_run(subject="s")
    secret = os.urandom(16).hex()
    recs = [log.record_attempt(run, i, 0, "succeeded", output=log.put_blob(f"{secret} step {i}".encode()) if i == 2 else None)
            for i in range(24)]  # past one inline tail (16 entries): the early records sit in a chunk, the late in HEAD
    log.store.engine.close()
    run_cli("clone", s3_url, str(tmp_path / "before"), env_extra=env, exit_code=0)  # the machine's cache reads every chunk
    other = _env(tmp_path, "cache-other")  # another machine deletes and collects (gc drops only its own cached copies)
    run_cli("delete", run, "--record", recs[2].id.hex(), "--record", recs[3].id.hex(), "--reason", "leaked", store=s3_url,
            env_extra=other, exit_code=0)
    run_cli("gc", store=s3_url, env_extra=other, exit_code=0)
    fresh = json.loads(run_cli("clone", s3_url, str(tmp_path / "fresh"), "--json", env_extra=_env(tmp_path, "cache-new"),
                               exit_code=12)[1])
    assert fresh["erased"] and fresh["landed"] == []
    stale = run_cli("clone", s3_url, str(tmp_path / "stale"), "--json", env_extra=env, exit_code=12)[1]
    assert json.loads(stale)["erased"] == fresh["erased"]


def test_an_operating_system_error_names_the_command_not_the_store_option(s3_url, tmp_path):
    env = _env(tmp_path)
    run_cli("init", store=s3_url, env_extra=env, exit_code=0)
    for how in ({"store": s3_url}, {"env_extra": dict(env, OBJSTORE_DIR=s3_url)}):
        kw = dict(how)
        kw.setdefault("env_extra", env)
        _, _, err = run_cli("journal-serve", "--socket", str(tmp_path / "no" / "such" / "dir" / "sock"), exit_code=10, **kw)
        assert err.count("\n") == 1 and "run objstore journal-serve:" in err, err


def test_an_edited_cached_marker_does_not_make_the_store_unreadable(s3_url, tmp_path):
    """A warm open believes the cache's copy of the bucket's OBJSTORE marker when HEAD answers 304 (store.py
    _open_remote): edited to another version, it makes this machine's every command fail ('newer format', exit 5;
    'unsupported store format', exit 3) while the bucket is fine. Everything in the cache is to be checked on use."""
    env = _env(tmp_path)
    run_cli("init", store=s3_url, env_extra=env, exit_code=0)
    run_cli("demo", store=s3_url, env_extra=env, exit_code=0)
    want = run_cli("runs", "--json", store=s3_url, env_extra=env, exit_code=0)[1]  # a warm cache: HEAD and the marker
    (marker,) = [os.path.join(d, "marker") for d in (tmp_path / "cache").iterdir() if (d / "marker").exists()]
    for version in (99, 1):
        with open(marker, "w") as f:
            f.write(json.dumps({"format": "objstore", "version": version, "engine": "s3"}) + "\n")
        assert run_cli("runs", "--json", store=s3_url, env_extra=env, exit_code=0)[1] == want
