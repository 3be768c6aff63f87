"""The command line on a store on a real SeaweedFS: ``--store s3://bucket/prefix`` and ``OBJSTORE_DIR=s3://…`` reach
every command an auditor and an agent platform use; a file of several runs is refused as one commit (exit 15) and
lands run by run with ``ingest --per-run``; gc removes a deleted secret from the bucket; the commands that only a
store on disk has say so in one line (exit 5)."""

from __future__ import annotations

import json
import os

from helpers import keys_holding, run_cli

from objstore.storage.s3.client import open_bucket


def _events(run: str, n: int, secret: str = "") -> str:
    lines = [json.dumps({"v": 1, "type": "run_started", "run": run, "subject": "s"})]
    for i in range(n):
        lines.append(json.dumps({"v": 1, "type": "attempt", "run": run, "step": i, "attempt": 0, "state": "succeeded",
                                 "output": f"{secret} output {i}"}))
    return "\n".join(lines) + "\n"


def test_the_audit_commands_on_s3(s3_url, tmp_path):
    env = {"OBJSTORE_KEYS": str(tmp_path / "keys"), "OBJSTORE_CACHE_DIR": str(tmp_path / "cache")}
    run_cli("init", store=s3_url, env_extra=env, exit_code=0)
    both = _events("r-one", 5) + _events("r-two", 5)
    # run by run by default (issue 16: it was refused, exit 15, without --per-run); the same file again lands nothing
    out = json.loads(run_cli("ingest", "-", "--json", store=s3_url, input=both.encode(), env_extra=env, exit_code=0)[1])
    assert out["landed"] == ["r-one", "r-two"] and out["failed"] == [] and out["records"] == 12
    out = json.loads(run_cli("ingest", "-", "--per-run", "--json", store=s3_url, input=both.encode(), env_extra=env, exit_code=0)[1])
    assert out["landed"] == [] and out["skipped"] == ["r-one", "r-two"] and out["records"] == 0
    log = run_cli("log", "r-one", "-n", "3", "--format", "json", store=s3_url, env_extra=env, exit_code=0)[1]
    assert [json.loads(x)["lsn"] for x in log.splitlines()] == [5, 4, 3]
    # OBJSTORE_DIR names it as well as --store
    runs = json.loads(run_cli("runs", "--json", env_extra=dict(env, OBJSTORE_DIR=s3_url), exit_code=0)[1])
    assert sorted(r["run"] for r in runs) == ["r-one", "r-two"]
    run_cli("rewind", "r-one", "--to-lsn", "2", "--reason", "try again", store=s3_url, env_extra=env, exit_code=0)
    diff = json.loads(run_cli("diff", "r-one", "0", "1", "--json", store=s3_url, env_extra=env, exit_code=0)[1])
    assert diff["forks"] and diff["only_b"] == []
    token = run_cli("anchor", store=s3_url, env_extra=env, exit_code=0)[1].strip()
    run_cli("verify", "--anchor", token, store=s3_url, env_extra=env, exit_code=0)
    run_cli("verify", "r-one", store=s3_url, env_extra=env, exit_code=0)
    # a fresh cache (another machine) reads the same store
    other = dict(env, OBJSTORE_CACHE_DIR=str(tmp_path / "cache2"))
    assert json.loads(run_cli("episode", "r-two", "--json", store=s3_url, env_extra=other, exit_code=0)[1])["run"] == "r-two"
    for args in (["backup", str(tmp_path / "b")], ["repair", "--cut-after", "1", "--reason", "x"]):
        _, _, err = run_cli(*args, store=s3_url, env_extra=env, exit_code=5)
        assert err.count("\n") == 1 and "object storage" in err, err
    # upgrade works on object storage now (issue 18: a one-HEAD bucket to a HEAD per run); this one is format 7 already
    _, out, _ = run_cli("upgrade", store=s3_url, env_extra=env, exit_code=0)
    assert f"status=already-format-7 path={s3_url}" in out, out


def test_gc_on_s3_removes_a_deleted_secret_from_the_bucket(s3_url, tmp_path):
    env = {"OBJSTORE_KEYS": str(tmp_path / "keys"), "OBJSTORE_CACHE_DIR": str(tmp_path / "cache")}
    secret = os.urandom(16).hex()
    run_cli("init", store=s3_url, env_extra=env, exit_code=0)
    run_cli("ingest", "-", "--per-run", store=s3_url, input=(_events("keep", 20) + _events("gone", 20, secret)).encode(),
            env_extra=env, exit_code=0)
    bucket = open_bucket(s3_url)

    def holding() -> list[str]:
        return keys_holding(((x.key, bucket.get(x.key).data) for x in bucket.list("")), secret.encode())

    assert holding()
    run_cli("delete", "gone", "--reason", "user asked", store=s3_url, env_extra=env, exit_code=0)
    assert holding()  # a recorded deletion: the bodies leave at gc
    out = json.loads(run_cli("gc", "--json", store=s3_url, env_extra=env, exit_code=0)[1])
    assert out["removed_records"] == 21 and out["removed_blobs"] == 20
    assert holding() == []
    run_cli("verify", store=s3_url, env_extra=dict(env, OBJSTORE_CACHE_DIR=str(tmp_path / "fresh")), exit_code=0)
    run_cli("log", "gone", store=s3_url, env_extra=env, exit_code=12)
    assert run_cli("log", "keep", "-n", "1", store=s3_url, env_extra=env, exit_code=0)[1]
