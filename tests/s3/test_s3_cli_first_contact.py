"""A new user's first commands against object storage, on a real SeaweedFS: a bucket that does not exist is one
line naming it and ``init --create-bucket`` (exit 3, no store there), and ``init --create-bucket`` makes it; a file
of several runs lands run by run (issue 16: it was refused, naming ``--per-run``); ``stats`` gives what the log and one LIST of the bucket tell."""

from __future__ import annotations

import json
import uuid

from helpers import run_cli
from test_cli_json import validator

import objstore
from objstore.storage.s3.client import open_bucket
from objstore.storage.s3.layout import TAIL_ENTRIES


def _env(tmp_path) -> dict[str, str]:
    return {"OBJSTORE_KEYS": str(tmp_path / "keys"), "OBJSTORE_CACHE_DIR": str(tmp_path / "cache")}


def _events(run: str, n: int) -> str:
    lines = [json.dumps({"v": 1, "type": "run_started", "run": run, "subject": "s"})]
    for i in range(n):
        lines.append(json.dumps({"v": 1, "type": "attempt", "run": run, "step": i, "attempt": 0, "state": "succeeded",
                                 "output": f"output {i}"}))
    return "\n".join(lines) + "\n"


def test_init_on_a_missing_bucket_says_so_in_one_line_and_create_bucket_makes_it(seaweed, tmp_path):
    env = _env(tmp_path)
    url = f"s3://nb-{uuid.uuid4().hex[:12]}/agents"
    _, out, err = run_cli("init", store=url, env_extra=env, exit_code=3)
    assert out == "" and err.count("\n") == 1, err
    bucket = url[len("s3://"):].split("/")[0]
    assert f"bucket {bucket} does not exist" in err and "--create-bucket" in err, err
    assert "<?xml" not in err and "NoSuchBucket" not in err and "Debug" not in err, err
    # any other command on it says the same, and writes nothing
    _, _, err = run_cli("runs", store=url, env_extra=env, exit_code=3)
    assert err.count("\n") == 1 and "does not exist" in err, err

    _, out, _ = run_cli("init", "--create-bucket", store=url, env_extra=env, exit_code=0)
    assert "created bucket" in out and "initialised objstore store in " + url in out, out
    run_cli("ingest", "-", store=url, input=_events("r-1", 3).encode(), env_extra=env, exit_code=0)
    assert json.loads(run_cli("runs", "--json", store=url, env_extra=env, exit_code=0)[1])[0]["run"] == "r-1"
    # again: the bucket and the store are there, both kept
    _, out, _ = run_cli("init", "--create-bucket", store=url, env_extra=env, exit_code=0)
    assert "already initialised" in out and "created bucket" not in out, out
    doc = json.loads(run_cli("init", "--create-bucket", "--json", store=url, env_extra=env, exit_code=0)[1])
    validator("init --json").validate(doc)
    assert doc["bucket_created"] is False and doc["store"] == url
    other = f"s3://nb-{uuid.uuid4().hex[:12]}"  # a store at the bucket's root
    doc = json.loads(run_cli("init", "--create-bucket", "--json", store=other, env_extra=env, exit_code=0)[1])
    validator("init --json").validate(doc)
    assert doc["bucket_created"] is True and doc["store"] == other


def test_create_bucket_is_for_object_storage_only(tmp_path):
    _, _, err = run_cli("init", "--create-bucket", store=str(tmp_path / "s"), env_extra=_env(tmp_path), exit_code=2)
    assert "--create-bucket" in err and "s3://" in err, err


def test_ingest_of_several_runs_on_s3_lands_run_by_run(s3_url, tmp_path):
    """Issue 16 changed its meaning: ingest commits run by run by default (it was refused, exit 15, naming --per-run)."""
    env = _env(tmp_path)
    run_cli("init", store=s3_url, env_extra=env, exit_code=0)
    _, out, err = run_cli("ingest", "-", store=s3_url, input=(_events("a", 2) + _events("b", 2)).encode(), env_extra=env, exit_code=0)
    assert "2 run(s) landed: a, b" in out, (out, err)


def test_stats_on_s3_counts_the_log_and_the_buckets_keys(s3_url, tmp_path, monkeypatch):
    env = _env(tmp_path)
    run_cli("init", store=s3_url, env_extra=env, exit_code=0)
    # one commit per run, each run's log its own HEAD (format 7)
    events = "".join(_events(f"r{i}", 2) for i in range(20))
    run_cli("ingest", "-", "--per-run", store=s3_url, input=events.encode(), env_extra=env, exit_code=0)
    # and one run with more entries than its HEAD holds inline, so some are in a chunk of its log
    monkeypatch.setenv("OBJSTORE_CACHE_DIR", env["OBJSTORE_CACHE_DIR"])
    monkeypatch.setenv("OBJSTORE_KEYS", env["OBJSTORE_KEYS"])
    log = objstore.open_store(s3_url, create=False)
    for i in range(TAIL_ENTRIES + 4):
        log.append("r0", "task_opened", {"task": f"t{i}"})
    st = json.loads(run_cli("stats", "--json", store=s3_url, env_extra=env, exit_code=0)[1])
    validator("stats --json").validate(st)  # the schema docs/CLI.md gives
    assert st["store"] == s3_url and st["runs"] == 20 and st["records"] == 60 + TAIL_ENTRIES + 4 and st["segments"] is None
    listed = list(open_bucket(s3_url).list(""))
    b = st["bucket"]
    assert b["keys"] == len(listed) and b["bytes"] == sum(x.size for x in listed)
    heads = [x for x in listed if x.key == "store/HEAD" or (x.key.startswith("runs/") and x.key.endswith("/HEAD"))]
    assert len(heads) == 21  # the store log's (the owner key) and each run's
    assert b["by_kind"]["head"] == {"keys": 21, "bytes": sum(x.size for x in heads)}
    assert b["by_kind"]["marker"]["keys"] == 1
    chunks = [x for x in listed if x.key.startswith(("store/chunk/", "runs/"))
              and x.key.split("/")[-2:-1] == ["chunk"]]
    assert b["by_kind"]["chunk"]["keys"] == len(chunks) >= 1
    catalog = [x for x in listed if x.key.startswith("catalog/")]
    assert b["by_kind"]["catalog"] == {"keys": len(catalog), "bytes": sum(x.size for x in catalog)} and len(catalog) >= 20 * 4
    assert sum(k["keys"] for k in b["by_kind"].values()) == len(listed)
    assert st["stored_ratio"] == round(b["bytes"] / st["canonical_bytes"], 4)
    _, out, _ = run_cli("stats", store=s3_url, env_extra=env, exit_code=0)
    assert f"store            {s3_url}" in out and "bucket" in out and "chunk" in out, out
