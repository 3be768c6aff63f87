"""The last mile of ``--json`` and of the help (issue 16): ``demo``, ``rebuild``, ``upgrade``, ``repair``
and ``put-blob`` say what they did as one JSON object, valid against its schema in docs/CLI.md; the
groups ``key``, ``journal``, ``session`` and ``task`` take ``--json`` before the subcommand; no help
text speaks in ticket numbers; ``segments`` on a terminal is a rich table, without escape codes
under NO_COLOR, and the same lines as before into a pipe.
"""

import json
import os
import re
import shutil
import sys

import click
import pytest
from helpers import run_cli, run_on_pty
from test_cli_json import validator

from objstore import RunLog, Store
from objstore.storage import codec
from objstore_cli.main import cli

FORMAT2_STORE = os.path.join(os.path.dirname(__file__), "..", "..", "fixtures", "format2-store")


def valid(command, out):
    """The one JSON object ``out`` (stdout of ``objstore COMMAND --json``), checked against its schema."""
    value = json.loads(out)
    errors = [f"{list(e.absolute_path)}: {e.message}" for e in validator(command + " --json").iter_errors(value)]
    assert not errors, f"objstore {command} --json: {errors[:5]}"
    return value


@pytest.fixture
def env(tmp_path):
    return {"OBJSTORE_KEYS": str(tmp_path / "keys")}


@pytest.fixture
def store(tmp_path, env):
    root = str(tmp_path / "s")
    run_cli("init", store=root, env_extra=env, exit_code=0)
    return root


# -- 1. --json on demo, rebuild, upgrade, repair, put-blob -----------------------------------------------------
def test_demo_json_names_the_run_its_branches_and_verify(store, env):
    rc, out, err = run_cli("demo", "--at", "1700000000", "--run", "demo-json", "--json", store=store, env_extra=env, exit_code=0)
    got = valid("demo", out)
    assert out.count("\n") == 1 and err == ""  # one object, none of the log/branches/diff text
    assert got["run"] == "demo-json" and got["store"] == os.path.abspath(store)
    rc, branches, _ = run_cli("branches", "demo-json", "--json", store=store, env_extra=env, exit_code=0)
    assert got["branches"] == json.loads(branches)  # the same branch entities `branches --json` prints
    assert [(b["branch"], b["live"]) for b in got["branches"]] == [(0, False), (1, True)]
    assert got["verify"] == {"ok": True, "problems": []}


def test_rebuild_json_lists_the_runs_rebuilt(store, env):
    log = RunLog(Store.open(store))
    runs = [log.start_run(f"r{i}") for i in range(3)]
    log.store.engine.close()
    got = valid("rebuild", run_cli("rebuild", "--json", store=store, env_extra=env, exit_code=0)[1])
    assert sorted(got["runs"]) == sorted(runs) and got["count"] == 3
    got = valid("rebuild", run_cli("rebuild", "r1", "--json", store=store, env_extra=env, exit_code=0)[1])
    assert got == {"runs": ["r1"], "count": 1}


def test_put_blob_json_is_the_id_and_the_size(store, env, tmp_path):
    data = bytes(range(256)) * 3 + b"tail"
    oid = codec.object_id(codec.encode(codec.BLOB, data)).hex()
    got = valid("put-blob", run_cli("put-blob", "-", "--json", store=store, input=data, env_extra=env, exit_code=0)[1])
    assert got == {"id": oid, "size": len(data)}
    f = tmp_path / "body.bin"
    f.write_bytes(data)
    got = valid("put-blob", run_cli("put-blob", str(f), "--json", store=store, env_extra=env, exit_code=0)[1])
    assert got == {"id": oid, "size": len(data)}
    assert Store.open(store).get_blob(bytes.fromhex(oid)) == data
    got = valid("put-blob", run_cli("put-blob", "-", "--json", store=store, input=b"", env_extra=env, exit_code=0)[1])
    assert got["size"] == 0


def test_upgrade_json_says_from_to_and_where_the_old_copy_is(tmp_path, env):
    root = str(tmp_path / "f2")
    shutil.copytree(FORMAT2_STORE, root)
    got = valid("upgrade", run_cli("upgrade", "--json", store=root, env_extra=env, exit_code=0)[1])
    assert (got["status"], got["from"], got["to"], got["backup"], got["path"]) == ("upgraded", 2, 3, root + ".format2", root)
    assert os.path.isdir(got["backup"]) and got["counts"]["objects"] > 0
    again = valid("upgrade", run_cli("upgrade", "--json", store=root, env_extra=env, exit_code=0)[1])
    assert again == {"status": "already-format-3", "path": root, "from": 3, "to": 3, "backup": None, "counts": {}}


def test_repair_json_is_the_cut(store, env):
    log = RunLog(Store.open(store))
    run = log.start_run("r1")
    log.record_attempt(run, 1, 0, "failed")
    last_good = log.store.engine.position()
    seg = log.store.engine.seg_path(log.store.engine._seg)
    before = os.path.getsize(seg)
    log.record_attempt(run, 1, 1, "succeeded", error="x" * 40)
    log.store.engine.close()
    data = bytearray(open(seg, "rb").read())
    data[len(data) - 5] ^= 0x04  # a flipped bit in the last entry's chain checksum
    open(seg, "wb").write(bytes(data))
    rc, out, err = run_cli("repair", "--cut-after", str(last_good.entry), "--reason", "bit rot", "--json",
                           store=store, env_extra=env, exit_code=0)
    got = valid("repair", out)
    assert got["cut_after"] == last_good.entry and got["entry"] == last_good.entry + 1 and got["signed"] is True
    assert [(r["offset"], r["length"]) for r in got["removed"]] == [(before, len(data) - before)]
    assert Store.open(store).read_ref("log/repairs").hex() == got["note"]


def test_an_error_of_a_new_json_command_is_one_json_object_on_stderr(tmp_path, env):
    rc, out, err = run_cli("rebuild", "--json", store=str(tmp_path / "none"), env_extra=env, exit_code=3)
    assert out == "" and json.loads(err)["exit"] == 3 and err.count("\n") == 1


# -- 2. --json before the subcommand -------------------------------------------------------------------------
@pytest.fixture
def session(store, env):
    run = json.loads(run_cli("session", "start", "--subject", "alice", "--json", store=store, env_extra=env, exit_code=0)[1])["run"]
    turns = "".join(json.dumps({"v": 1, "type": "turn", "run": run, "role": r, "content": f"turn {i}"}) + "\n"
                    for i, r in enumerate(["user", "model", "user", "model"]))
    run_cli("ingest", "-", input=turns.encode(), store=store, env_extra=env, exit_code=0)
    run_cli("journal", "update", run, "-", "--reflects-through", "latest", input=b'{"entries": []}', store=store, env_extra=env, exit_code=0)
    return run


def test_group_json_before_the_subcommand_is_the_subcommands_json(store, env, session, tmp_path):
    def same(group_form, sub_form):
        a = run_cli(*group_form, store=store, env_extra=env, exit_code=0)[1]
        b = run_cli(*sub_form, store=store, env_extra=env, exit_code=0)[1]
        assert a == b and json.loads(a) is not None, (group_form, a, b)

    same(["journal", "--json", "show", session], ["journal", "show", session, "--json"])
    same(["task", "--json", "list", session], ["task", "list", session, "--json"])
    got = json.loads(run_cli("key", "--json", "new", str(tmp_path / "w.key"), store=store, env_extra=env, exit_code=0)[1])
    assert got["private_key"] == str(tmp_path / "w.key")
    same(["key", "--json", "show", str(tmp_path / "w.key")], ["key", "show", str(tmp_path / "w.key"), "--json"])
    got = json.loads(run_cli("session", "--json", "start", "--subject", "bob", store=store, env_extra=env, exit_code=0)[1])
    assert got["subject"] == "bob"
    got = json.loads(run_cli("task", "--json", "open", session, "t1", store=store, env_extra=env, exit_code=0)[1])
    assert got["task"] == "t1"
    # the subcommand's own arguments still parse after it, '--' included
    got = json.loads(run_cli("task", "--json", "open", session, "--", "-t2", store=store, env_extra=env, exit_code=0)[1])
    assert got["task"] == "-t2"
    # an error under the group's --json is one JSON object on stderr too
    rc, out, err = run_cli("journal", "--json", "show", "nope", store=store, env_extra=env, exit_code=4)
    assert out == "" and json.loads(err)["exit"] == 4


def test_group_json_is_in_the_groups_help():
    for group in ("key", "journal", "session", "task"):
        rc, out, err = run_cli(group, "--help", exit_code=0)
        assert re.search(r"^  --json +Print canonical JSON", out, re.M), f"objstore {group} --help: {out}"


# -- 4. help that speaks to the user ---------------------------------------------------------------------------
TICKET_WORDS = re.compile(r"seed T2\.3|stub compactor|\bstub\b|T-745|\bT\d+\.\d+\b", re.I)


def _walk(cmd, path):
    yield path, cmd
    if isinstance(cmd, click.Group):
        for name, sub in sorted(cmd.commands.items()):
            yield from _walk(sub, (*path, name))


def test_no_help_text_speaks_in_ticket_numbers():
    seen = 0
    for path, cmd in _walk(cli, ("objstore",)):
        text = cmd.get_help(click.Context(cmd, info_name=" ".join(path)))
        assert not TICKET_WORDS.search(text), f"{' '.join(path)} --help: {TICKET_WORDS.search(text)[0]!r}"
        seen += 1
    assert seen >= 40  # every command and group, not only a few


def test_demo_and_compact_help_say_what_they_do():
    demo = run_cli("demo", "--help", exit_code=0)[1]
    assert "six-step run" in demo and "step 2" in demo and "step 6 failing" in demo and "verify" in demo
    compact = " ".join(run_cli("compact", "--help", exit_code=0)[1].split())
    assert "Summarize a session's older turns into one new signed segment" in compact
    assert "deterministic compactor" in compact


# -- 5. segments through rich on a terminal --------------------------------------------------------------------
@pytest.fixture
def segmented(store, env, session):
    run_cli("compact", session, "--keep", "1", store=store, env_extra=env, exit_code=0)
    return store, session


def _segments_on_pty(store, run, env, extra):
    e = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "OBJSTORE_DIR")}
    e.update(env, COLUMNS="120", **extra)
    return run_on_pty([sys.executable, "-m", "objstore", "--store", store, "segments", run], env=e)


def test_segments_on_a_terminal_is_a_rich_table(segmented, env):
    store, run = segmented
    rc, out, err = _segments_on_pty(store, run, env, {"TERM": "xterm-256color"})
    assert rc == 0 and err == ""
    text = out.decode()
    assert "┏" in text and "open tasks" in text and "present v1" in text
    assert "\x1b[" in text  # rich styles its header on a colour terminal
    rc, out, err = _segments_on_pty(store, run, env, {"TERM": "xterm-256color", "NO_COLOR": "1"})
    assert rc == 0 and "┏" in out.decode() and b"\x1b" not in out  # the table, not one escape code


def test_segments_into_a_pipe_is_one_plain_line_per_segment(segmented, env):
    store, run = segmented
    out = run_cli("segments", run, store=store, env_extra=env, exit_code=0)[1]
    lines = out.splitlines()
    assert len(lines) == 1 and lines[0].startswith("segment 1 ") and "journal present v1" in lines[0]
    assert "\x1b" not in out and "┏" not in out
