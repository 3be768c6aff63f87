"""``objstore delete`` at the command line (issue 17): a deleted run is gone from every listing and query
of a fresh process, naming it is exit 12 with the deletion's id and reason, header-only records show as
deleted, refusals and bad input are one line with their documented code and leave the log's bytes as
they were, and the help says plainly what deletion cannot hide.
"""

from __future__ import annotations

import json
import os
import shutil

import pytest
from helpers import new_key, run_cli, snapshot_tree


@pytest.fixture(scope="module")
def template(tmp_path_factory):
    """A store with two demo runs (the newer is 'latest') and its owner key, made once per module."""
    tmp = tmp_path_factory.mktemp("delete-cli")
    root = str(tmp / "s")
    env = {"OBJSTORE_KEYS": str(tmp / "keys")}
    run_cli("init", store=root, env_extra=env, exit_code=0)
    run_cli("demo", store=root, env_extra=env, exit_code=0)
    run_cli("demo", store=root, env_extra=env, exit_code=0)
    runs = [r["run"] for r in json.loads(run_cli("runs", "--json", store=root, env_extra=env, exit_code=0)[1])]
    return root, env, runs


@pytest.fixture
def demo(template, tmp_path):
    """A copy of the template store for one test (the owner key shared: it is read, never written)."""
    src, env, runs = template
    root = str(tmp_path / "s")
    shutil.copytree(src, root)
    return root, env, runs


def cli(root, env, *args, exit_code=0):
    return run_cli(*args, store=root, env_extra=env, exit_code=exit_code)


def log_bytes(root):
    return snapshot_tree(os.path.join(root, "log"))


@pytest.mark.slow
def test_a_deleted_run_is_gone_from_every_command_of_a_fresh_process(demo):
    root, env, (old, new) = demo
    _, out, _ = cli(root, env, "delete", "latest", "--reason", "customer asked", "--json")
    got = json.loads(out)
    assert got["scope"] == "run" and got["runs"] == [new] and got["written"] is True and got["records"] == 0
    did = got["deletions"][0]
    assert [r["run"] for r in json.loads(cli(root, env, "runs", "--json")[1])] == [old]
    assert new not in cli(root, env, "runs")[1]
    assert json.loads(cli(root, env, "log", "latest", "--json")[1])[0]["run"] == old  # latest is the other run now
    line = f"objstore: error: run {new} was deleted ({did}): customer asked\n"
    for args in (("log", new), ("episode", new), ("branches", new), ("diff", new, "0", "1"), ("export", new),
                 ("log", new, "--graph"), ("rewind", new, "--to-lsn", "1")):
        _, _, err = cli(root, env, *args, exit_code=12)
        assert err == line, args
    _, _, err = cli(root, env, "log", new, "--json", exit_code=12)
    assert json.loads(err) == {"error": "deleted", "message": line[len("objstore: error: "):-1], "exit": 12}
    cli(root, env, "verify")
    cli(root, env, "episode", old)
    # completion offers only the live runs
    e = dict(env, _OBJSTORE_COMPLETE="bash_complete", COMP_WORDS=f"objstore --store {root} log ", COMP_CWORD="4")
    _, out, _ = run_cli(env_extra=e, exit_code=0)
    assert old in out and new not in out


@pytest.mark.slow
def test_show_and_cat_of_a_record_of_a_deleted_run_are_refused(demo):
    root, env, (old, new) = demo
    rid = json.loads(cli(root, env, "log", new, "--json")[1])[0]["id"]
    cli(root, env, "delete", new, "--reason", "gone")
    for args in (("show", rid), ("cat", rid), ("cat", "--raw", rid)):
        _, out, err = cli(root, env, *args, exit_code=12)
        assert out == "" and f"run {new} was deleted (" in err and err.rstrip().endswith("gone"), args
    _, out, err = cli(root, env, "show", rid, "--json", exit_code=12)
    assert out == "" and json.loads(err)["error"] == "deleted"


@pytest.mark.slow
def test_deleted_records_show_as_deleted_in_log_and_json(demo):
    root, env, (old, _new) = demo
    entries = json.loads(cli(root, env, "log", old, "--branch", "0", "--json")[1])
    mid = next(e for e in entries if e["kind"] == "attempt" and e["lsn"] == 2)
    _, out, _ = cli(root, env, "delete", old, "--record", mid["id"][:16], "--reason", "wrong upload", "--json")
    got = json.loads(out)
    assert (got["scope"], got["records"], got["written"]) == ("records", 1, True)
    did = got["deletions"][0]
    after = {e["id"]: e for e in json.loads(cli(root, env, "log", old, "--branch", "0", "--json")[1])}
    assert after[mid["id"]] == dict(mid, time=None, body={"deleted": did})
    assert f"deleted ({did[:12]})" in cli(root, env, "log", old, "--branch", "0")[1]
    _, _, err = cli(root, env, "show", mid["id"], exit_code=12)
    assert err == f"objstore: error: record {mid['id']} was deleted ({did}): wrong upload\n"
    _, out, _ = cli(root, env, "delete", old, "--record", mid["id"], "--reason", "again")
    assert out.startswith("nothing to delete")
    _, out, _ = cli(root, env, "delete", old, "--branch", "1", "--from-lsn", "1", "--reason", "leaked key")
    assert "records of run" in out and "objstore gc" in out
    cli(root, env, "verify")


@pytest.mark.parametrize("args,code,message", [
    (("delete", "no-such-run", "--reason", "x"), 4, "run not found: no-such-run"),
    (("delete", "latest", "--reason", ""), 5, "a deletion needs a reason"),
    (("delete", "latest", "--reason", "  "), 5, "a deletion needs a reason"),
    (("delete", "latest", "--record", "ffff" * 16, "--reason", "x"), 4, "not found"),
    (("delete", "latest", "--record", "zz", "--reason", "x"), 5, "is not an object id"),
    (("delete", "latest", "--branch", "9", "--from-lsn", "0", "--reason", "x"), 4, "branch 9 of run"),
    (("delete", "latest", "--branch", "0", "--from-lsn", "999", "--reason", "x"), 5, "has no record at LSN 999"),
    (("delete", "latest", "--branch", "0", "--from-lsn", "0", "--reason", "x"), 5, "delete the whole run instead"),
    (("delete", "latest", "--branch", "0", "--reason", "x"), 2, "--branch and --from-lsn go together"),
    (("delete", "latest", "latest~1", "--record", "ffff", "--reason", "x"), 2, "one RUN"),
    (("delete", "latest"), 2, "--reason"),
    (("redact", "ffff" * 16, "--reason", "x"), 4, "not found"),
    (("redact", "latest", "--reason", "x"), 5, "is not an object id"),
])
def test_bad_input_is_one_line_with_its_code_and_writes_nothing(demo, args, code, message):
    root, env, _runs = demo
    before = log_bytes(root)
    _, out, err = cli(root, env, *args, exit_code=code)
    assert message in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert log_bytes(root) == before


def test_redacting_a_record_is_invalid_input(demo):
    root, env, (old, _new) = demo
    rid = json.loads(cli(root, env, "log", old, "--json")[1])[0]["id"]
    before = log_bytes(root)
    _, _, err = cli(root, env, "redact", rid, "--reason", "x", exit_code=5)
    assert "not a blob" in err
    assert log_bytes(root) == before


def test_unsigned_and_ungranted_deletions_are_refused_and_write_nothing(demo, tmp_path):
    root, env, (old, new) = demo
    before = log_bytes(root)
    nokeys = dict(env, OBJSTORE_KEYS=str(tmp_path / "elsewhere"))  # the owner key is not to be found: unsigned
    _, _, err = cli(root, nokeys, "delete", new, "--reason", "x", exit_code=8)
    assert "must be signed" in err
    w, wpath = new_key(tmp_path, "w")
    _, _, err = cli(root, env, "delete", new, "--reason", "x", "--key", wpath, exit_code=8)
    assert "holds no live 'delete' grant" in err
    _, _, err = cli(root, env, "redact", "ffff", "--reason", "x", exit_code=4)
    assert log_bytes(root) == before
    assert [r["run"] for r in json.loads(cli(root, env, "runs", "--json")[1])] == [old, new]


def test_help_says_what_deletion_cannot_hide(demo):
    root, env, _runs = demo
    for cmd in ("delete", "redact"):
        _, out, _ = cli(root, env, cmd, "--help")
        flat = " ".join(out.split())
        assert "the id of a deleted object stays in the log and commits to its content" in flat, cmd
        assert "a guessable body (a phone number, a 6-digit code) can be confirmed from its id" in flat, cmd
        assert "until the next 'objstore gc'" in flat, cmd


def test_a_key_granted_delete_at_the_command_line_deletes_until_revoked(demo, tmp_path):
    root, env, (old, new) = demo
    _w, wpath = new_key(tmp_path, "w")
    _, out, _ = cli(root, env, "journal", "grant", new, "--pubkey", wpath + ".pub", "--delete", "--json")
    assert json.loads(out)["rights"] == ["delete", "read", "write"]
    _, out, _ = cli(root, env, "delete", new, "--branch", "1", "--from-lsn", "2", "--reason", "granted", "--key", wpath, "--json")
    assert json.loads(out)["written"] is True
    cli(root, env, "journal", "revoke", new, "--pubkey", wpath + ".pub")
    before = log_bytes(root)
    _, _, err = cli(root, env, "delete", new, "--reason", "revoked", "--key", wpath, exit_code=8)
    assert "holds no live 'delete' grant" in err
    assert log_bytes(root) == before
    cli(root, env, "verify")
