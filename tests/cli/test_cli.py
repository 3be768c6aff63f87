"""The CLI on bad input: typed error → one line, documented exit code, no traceback, nothing written."""

import json
import os

import pytest
from helpers import is_state_file, run_cli, snapshot_tree


@pytest.fixture
def demo_store(tmp_path):
    root = str(tmp_path / "s")
    code, out, err = run_cli("demo", store=root, exit_code=0)
    assert code == 0, err
    code, out, err = run_cli("runs", "--json", store=root, exit_code=0)
    run = json.loads(out)[0]["run"]
    return root, run


def check_error(result, code, fragment):
    rc, out, err = result
    assert rc == code, (rc, out, err)
    assert "Traceback" not in err and "Traceback" not in out
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("objstore: error: "), err
    assert fragment in lines[0], lines[0]


def test_not_a_store(tmp_path):
    d = tmp_path / "plain"
    d.mkdir()
    (d / "file.txt").write_text("keep me")
    before = snapshot_tree(str(d))
    for args in (["refs"], ["verify"], ["runs"], ["log", "r1"], ["cat", "ab" * 32]):
        check_error(run_cli(*args, store=str(d), exit_code=3), 3, "not an objstore store")
    check_error(run_cli("init", store=str(d), exit_code=5), 5, "non-empty directory that is not a store")
    assert snapshot_tree(str(d)) == before


def test_default_store_from_env_and_cwd(tmp_path):
    rc, out, err = run_cli("init", cwd=str(tmp_path), exit_code=0)
    assert rc == 0 and os.path.isfile(tmp_path / ".objstore" / "OBJSTORE")
    rc, out, err = run_cli("refs", env_extra={"OBJSTORE_DIR": str(tmp_path / ".objstore")}, exit_code=0)
    assert rc == 0


def test_unknown_and_bad_ids(demo_store):
    root, run = demo_store
    before = snapshot_tree(root)
    check_error(run_cli("cat", "ab" * 32, store=root, exit_code=4), 4, "object not found: " + "ab" * 32)
    check_error(run_cli("show", "zz" * 32, store=root, exit_code=5), 5, "invalid object id")
    check_error(run_cli("show", "xyz", store=root, exit_code=5), 5, "is not an object id")
    check_error(run_cli("show", "ffff0000", store=root, exit_code=4), 4, "object not found")
    assert snapshot_tree(root) == before


@pytest.mark.parametrize("bad_run", ["../../etc/passwd", "a/b", ".hidden", "x y"])
def test_bad_run_ids(demo_store, bad_run):
    root, run = demo_store
    before = snapshot_tree(root)
    for args in (["log", bad_run], ["rewind", bad_run, "--to-lsn", "1"], ["episode", bad_run], ["export", bad_run]):
        check_error(run_cli(*args, store=root, exit_code=5), 5, "run id")
    assert snapshot_tree(root) == before


def test_unknown_run_branch_and_lsn(demo_store):
    root, run = demo_store
    before = snapshot_tree(root)
    check_error(run_cli("log", "nope", store=root, exit_code=4), 4, "run not found: nope")
    check_error(run_cli("log", run, "--branch", "9", store=root, exit_code=4), 4, f"branch 9 of run {run} not found")
    check_error(run_cli("rewind", run, "--to-lsn", "99", store=root, exit_code=5), 5, "cannot fork at 99")
    check_error(run_cli("fork", run, "--from-branch", "7", "--at-lsn", "1", store=root, exit_code=4), 4, "branch 7")
    check_error(run_cli("rewind", run, "--to-lsn", "-1", store=root, exit_code=2), 2, "0..9223372036854775807, got -1")  # a bad command-line value
    check_error(run_cli("diff", run, "0", "5", store=root, exit_code=4), 4, "branch 5")
    # state.db is a cache: the failed commands may have refreshed it, nothing else changes
    after = snapshot_tree(root)
    assert {k: v for k, v in after.items() if not is_state_file(k)} == {k: v for k, v in before.items() if not is_state_file(k)}


def test_usage_error_is_exit_2(demo_store):
    root, run = demo_store
    rc, out, err = run_cli("rewind", run, store=root, exit_code=2)
    assert rc == 2 and "Missing option '--to-lsn'" in err and "Traceback" not in err


@pytest.mark.slow
def test_help_for_every_command():
    rc, out, err = run_cli("--help", exit_code=0)
    assert rc == 0 and "Exit codes" in out
    section = out.split("Commands:")[1].split("\n\n")[0]
    commands = [l.split()[0] for l in section.splitlines() if l.strip()]
    assert {"init", "cat", "show", "refs", "verify", "demo", "runs", "log", "branches", "rewind", "fork",
            "diff", "export", "rebuild", "ingest", "episode"} <= set(commands)
    for c in commands:
        rc, out, err = run_cli(c, "--help", exit_code=0)
        assert rc == 0 and "Usage: objstore" in out, c


def test_demo_output_and_rerun(tmp_path):
    root = str(tmp_path / "s")
    rc1, out1, _ = run_cli("demo", store=root, exit_code=0)
    rc2, out2, _ = run_cli("demo", store=root, exit_code=0)
    assert rc1 == rc2 == 0
    for out in (out1, out2):
        assert "branch 1 forked from branch 0 at lsn 3" in out
        assert "COMPENSATION REQUIRED" in out
        assert "step 2 attempt 0 failed" in out and "step 6 attempt 0 failed" in out
        assert out.rstrip().endswith("verify: ok")
    rc, out, _ = run_cli("runs", store=root, exit_code=0)
    assert len(out.strip().splitlines()) == 2, "each demo run records a new run"


def test_show_and_cat(demo_store):
    root, run = demo_store
    rc, out, err = run_cli("refs", "--json", store=root, exit_code=0)
    import json

    refs = json.loads(out)
    head = next(r["value"] for r in refs if r["name"] == f"run/{run}/branch/0")
    rc, out, err = run_cli("show", head[:10], store=root, exit_code=0)
    assert rc == 0 and out.startswith(f"record {head}")
    p = __import__("subprocess").run([__import__("sys").executable, "-m", "objstore", "--store", root, "cat", head], capture_output=True)
    from objstore.storage import codec

    assert p.returncode == 0 and codec.object_id(p.stdout).hex() == head


def test_cat_body_streams_blob_and_refuses_records(demo_store, tmp_path):
    import json as _json
    import subprocess as sp
    import sys as _sys

    root, run = demo_store
    rc, out, err = run_cli("episode", run, "--json", store=root, exit_code=0)
    prompt = _json.loads(out)["branches"][0]["attempts"][0]["prompt"]
    p = sp.run([_sys.executable, "-m", "objstore", "--store", root, "cat", "--body", prompt], capture_output=True)
    assert p.returncode == 0 and p.stdout.startswith(b"B: step 3:")
    rc, out, err = run_cli("refs", "--json", store=root, exit_code=0)
    head = next(r["value"] for r in _json.loads(out) if r["name"] == f"run/{run}/branch/0")
    check_error(run_cli("cat", "--body", head, store=root, exit_code=5), 5, "is a record, not a blob")


def test_runlog_commands_json(demo_store):
    import json as _json

    root, run = demo_store
    rc, out, err = run_cli("log", run, "--json", store=root, exit_code=0)
    entries = _json.loads(out)
    # live branch newest first, then its fork object, then branch 0 up to the fork LSN
    assert [(e["branch"], e.get("lsn"), e["kind"]) for e in entries[:5]] == [
        (1, 3, "run_finished"), (1, 2, "attempt"), (1, 1, "attempt"), (1, 0, "attempt"), (1, None, "fork")]
    assert [e["lsn"] for e in entries[5:]] == [3, 2, 1, 0] and {e["branch"] for e in entries[5:]} == {0}
    rc, out, err = run_cli("log", run, "--all-branches", "--json", store=root, exit_code=0)
    assert sum(1 for e in _json.loads(out) if e["kind"] != "fork") == 11 + 4
    rc, out, err = run_cli("branches", run, "--json", store=root, exit_code=0)
    br = _json.loads(out)
    assert [(b["branch"], b["live"]) for b in br] == [(0, False), (1, True)]
    assert (br[1]["fork"]["parent_branch"], br[1]["fork"]["parent_lsn"]) == (0, 3)
    rc, out, err = run_cli("diff", run, "0", "1", "--json", store=root, exit_code=0)
    d = _json.loads(out)
    assert d["common"] == {"branch": 0, "lsn": 3}
    assert [r["lsn"] for r in d["only_a"]] == [4, 5, 6, 7, 8, 9, 10] and [r["lsn"] for r in d["only_b"]] == [0, 1, 2, 3]
    assert {"path": "status", "a": "failed", "b": "succeeded"} in d["state"]
    rc, out, err = run_cli("export", run, store=root, exit_code=0)
    lines = [_json.loads(l) for l in out.splitlines()]
    assert {l["branch"] for l in lines} == {1} and lines[0]["kind"] == "fork"
    rc, out, err = run_cli("fork", run, "--from-branch", "0", "--at-lsn", "4", "--no-live", "--json", store=root, exit_code=0)
    f = _json.loads(out)
    assert (f["branch"], f["parent_lsn"], f["compensation_required"]) == (2, 4, True)
    rc, out, err = run_cli("runs", "--json", store=root, exit_code=0)
    [row] = _json.loads(out)
    assert {k: row[k] for k in ("run", "live_branch", "branch_count", "subject")} == {"run": run, "live_branch": 1, "branch_count": 3,
                                                                                     "subject": "demo"}
    assert row["short_id"] in run and isinstance(row["started"], float)
    rc, out, err = run_cli("rebuild", store=root, exit_code=0)
    assert rc == 0 and out.strip() == "rebuilt state for 1 run(s)"
    assert run_cli("verify", store=root, exit_code=0)[0] == 0


def test_log_max_count(demo_store):
    import json as _json

    root, run = demo_store
    rc, out, err = run_cli("log", run, "-n", "2", "--json", store=root, exit_code=0)
    assert [(e["branch"], e["lsn"]) for e in _json.loads(out)] == [(1, 3), (1, 2)]
    rc, out, err = run_cli("log", run, "-n", "6", store=root, exit_code=0)
    lines = out.splitlines()
    assert lines[0].startswith("== run ") and "branch 1 (live)" in lines[0]
    assert lines[5].startswith("fork ") and lines[6] == f"== run {run} branch 0 up to lsn 3"
