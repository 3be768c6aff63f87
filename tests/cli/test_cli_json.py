"""One JSON vocabulary: the real ``--json`` output of every command validates against the JSON Schemas
embedded in docs/CLI.md (strict: no unknown field, every required field), errors under ``--json`` are
one JSON object on stderr, and an entity (fork, record, branch, run) has one shape wherever it appears.

The schemas are read from the page itself, so the documentation and the program cannot drift apart: a
field added to a view without the doc, or a doc change without the code, fails here.
"""

import copy
import json
import os
import re
import shutil
import sys

import click
import jsonschema
import pytest
from helpers import is_per_run, log_engine_of, run_cli, run_on_pty

from objstore import RunLog, Store
from objstore.runs import history, views
from objstore.runs.export import export as lib_export
from objstore.storage import codec
from objstore_cli.main import cli

DOC = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "CLI.md")
_BLOCK = re.compile(r"^### (Entity `(?P<entity>[^`]+)`|`objstore (?P<cmd>[a-z -]+?)(?P<flag> --json)?`)\n(?P<text>.*?)```json\n(?P<schema>.*?)```",
                    re.S | re.M)


def doc_schemas():
    """({entity: schema}, {command path: schema}) from docs/CLI.md."""
    entities, commands = {}, {}
    with open(DOC, encoding="utf-8") as f:
        text = f.read()
    for m in _BLOCK.finditer(text):
        schema = json.loads(m["schema"])
        if m["entity"]:
            entities[m["entity"]] = schema
        else:
            commands[m["cmd"] + (" --json" if m["flag"] else "")] = schema
    return entities, commands


ENTITIES, COMMANDS = doc_schemas()


def validator(name_or_schema):
    """A draft 2020-12 validator of a command's schema (or an entity's), the entities as its $defs."""
    schema = COMMANDS[name_or_schema] if isinstance(name_or_schema, str) else name_or_schema
    schema = dict(schema, **{"$defs": ENTITIES})
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def entity_validator(name):
    return validator({"$ref": f"#/$defs/{name}"})


def walk(group, prefix=()):
    """(path tuple, command) of every command in the click tree, groups included."""
    for name, cmd in sorted(group.commands.items()):
        yield prefix + (name,), cmd
        if isinstance(cmd, click.Group):
            yield from walk(cmd, prefix + (name,))


def json_commands():
    return sorted(" ".join(p) for p, c in walk(cli) if any("--json" in getattr(o, "opts", ()) for o in c.params))


# -- one store holding every kind of thing ------------------------------------------------------------------
@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """Run every --json command once (some twice, for their variants) on a real store; keep what they print."""
    tmp = tmp_path_factory.mktemp("json")
    root = str(tmp / "s")
    env = {"OBJSTORE_KEYS": str(tmp / "keys")}
    outs: dict = {}

    def cli_json(path, *args, input=None, exit_code=0):
        rc, out, err = run_cli(*path.split(), *args, "--json", store=root, input=input, env_extra=env, exit_code=exit_code)
        outs.setdefault(path, []).append(json.loads(out))
        return outs[path][-1]

    cli_json("init")
    run_cli("demo", store=root, env_extra=env, exit_code=0)
    run = cli_json("runs")[0]["run"]
    cli_json("log", run)
    cli_json("log", run, "--all-branches")
    cli_json("branches", run)
    cli_json("diff", run, "0", "1")
    cli_json("episode", run)
    cli_json("episode", run, "--all-branches", "--source", "refold")
    cli_json("fork", run, "--from-branch", "0", "--at-lsn", "5", "--no-live")
    cli_json("rewind", run, "--to-lsn", "1")
    cli_json("refs")
    cli_json("refs", "run/", "--log")
    cli_json("anchor")
    cli_json("verify")
    branches = outs["branches"][0]
    rc, out, err = run_cli("put-blob", "-", store=root, input=b"hello\n", env_extra=env, exit_code=0)
    text_blob = out.strip()
    rc, out, err = run_cli("put-blob", "-", store=root, input=bytes(range(256)), env_extra=env, exit_code=0)
    binary_blob = out.strip()
    for oid in (branches[0]["head"], branches[1]["fork"]["id"], text_blob, binary_blob):
        cli_json("show", oid)
    # sessions, journals, grants, tasks, compaction
    s = cli_json("session start", "--subject", "alice")["run"]
    turns = "".join(json.dumps({"v": 1, "type": "turn", "run": s, "role": r, "content": f"turn {i}"}) + "\n"
                    for i, r in enumerate(["user", "model", "user", "model"]))
    fork_line = json.dumps({"v": 1, "type": "rewind", "run": s, "to_lsn": 2, "reason": "ingested rewind"}) + "\n"
    cli_json("ingest", "-", input=(turns + fork_line + turns).encode())
    cli_json("ingest", "-", "--per-run", input=(turns + fork_line + turns).encode())
    cli_json("journal update", s, "-", "--reflects-through", "latest", input=b'{"entries": [{"id": "e1", "text": "x"}]}')
    cli_json("journal show", s)
    cli_json("journal disable", s)
    cli_json("journal enable", s)
    for name in ("w1", "w2"):
        cli_json("key new", str(tmp / f"{name}.key"))
    cli_json("key show", str(tmp / "w1.key"))
    cli_json("journal grant", s, "--pubkey", str(tmp / "w1.key.pub"), "--name", "w1")
    cli_json("journal grant", s, "--pubkey", str(tmp / "w2.key.pub"), "--supersedes", str(tmp / "w1.key.pub"))
    cli_json("journal revoke", s, "--pubkey", str(tmp / "w2.key.pub"))
    cli_json("journal grants", s)
    cli_json("task open", s, "t1", "--title", "write the report")
    cli_json("task open", s, "t2")
    cli_json("task close", s, "t2")
    cli_json("task list", s)
    cli_json("compact", s, "--keep", "1")
    cli_json("segments", s)
    cli_json("show", outs["segments"][0][0]["id"])  # a type with its stored fields
    cli_json("show", outs["journal show"][0]["id"])
    rc, out, err = run_cli("export", run, store=root, env_extra=env, exit_code=0)
    outs["export"] = [[json.loads(line) for line in out.splitlines()]]
    rc, out, err = run_cli("log", run, "--all-branches", "--format", "json", "--no-pager", store=root, env_extra=env, exit_code=0)
    outs["log --format json"] = [[json.loads(line) for line in out.splitlines()]]
    # the administration commands' --json (issue 16), last: demo adds a run, repair an entry
    cli_json("put-blob", "-", input=b"hello\n")
    cli_json("rebuild")
    cli_json("rebuild", run)
    cli_json("upgrade")
    cli_json("demo", "--at", "1700000000")
    cli_json("repair", "--cut-after", str(cli_json("anchor")["entry"]), "--reason", "nothing to cut")
    cli_json("delete", "latest", "--branch", "0", "--from-lsn", "5", "--reason", "records of the newest demo run")
    cli_json("delete", "latest", "--reason", "the newest demo run")
    cli_json("redact", text_blob, "--reason", "a redacted blob")
    cli_json("backup", str(tmp / "backup"))
    cli_json("stats")
    cli_json("gc", "--delete-runs-older-than", "3650d", "--reason", "retention", "--dry-run")
    cli_json("gc")
    cli_json("index")
    cli_json("stats")
    cli_json("push", str(tmp / "mirror"))  # everything above, deletions and redaction included, to another store
    cli_json("clone", str(tmp / "mirror"), str(tmp / "clone"))
    return {"root": root, "env": env, "run": run, "session": s, "outs": outs, "binary_blob": binary_blob}


# -- the doc covers every command, and the tests exercise every command ---------------------------------------
def test_every_json_command_is_documented_and_exercised(world):
    documented = {c[: -len(" --json")] for c in COMMANDS if c.endswith(" --json")}
    have = set(json_commands())
    assert have, "the click walk found no --json command"
    assert have == documented, f"--json commands without a schema in docs/CLI.md: {sorted(have - documented)}; " \
                               f"schemas for commands without --json: {sorted(documented - have)}"
    assert have <= set(world["outs"]), f"--json commands this test never ran: {sorted(have - set(world['outs']))}"
    assert "export" in COMMANDS and "log --format json" in COMMANDS, "the JSON Lines outputs are documented"


@pytest.mark.slow
def test_schemas_are_valid_draft_2020_12_and_strict():
    for name, schema in {**{f"entity {k}": v for k, v in ENTITIES.items()}, **COMMANDS}.items():
        try:
            jsonschema.Draft202012Validator.check_schema(dict(schema, **{"$defs": ENTITIES}))
        except jsonschema.SchemaError as e:
            pytest.fail(f"docs/CLI.md: the schema of {name} is not valid draft 2020-12: {e.message}")
    for name in ("run", "branch", "fork", "record", "attempt", "problem", "error", "blob", "object", "export-entry"):
        assert name in ENTITIES, f"docs/CLI.md has no schema for the entity {name}"

    def objects(s):
        if isinstance(s, dict):
            if s.get("type") == "object" and "properties" in s:
                yield s
            for v in s.values():
                yield from objects(v)
        elif isinstance(s, list):
            for v in s:
                yield from objects(v)

    for s in objects([ENTITIES, COMMANDS]):
        assert s.get("additionalProperties") is False, f"not strict: {sorted(s['properties'])}"
        assert s.get("required"), f"nothing required: {sorted(s['properties'])}"


@pytest.mark.parametrize("path", json_commands() + ["export", "log --format json"])
def test_output_matches_the_documented_schema(world, path):
    if path in ("export", "log --format json"):  # JSON Lines: each line against the schema
        v = validator(path)
        outputs = world["outs"][path][0]
        assert outputs, f"{path} printed nothing"
    else:
        v = validator(path + " --json")
        outputs = world["outs"][path]
    for out in outputs:
        errors = sorted(v.iter_errors(out), key=lambda e: list(e.absolute_path))
        assert not errors, f"objstore {path} --json: " + "; ".join(f"{list(e.absolute_path)}: {e.message}" for e in errors[:5])


def test_a_drift_fails_validation(world):
    """The schemas are strict: one extra field, or one missing, anywhere in an entity is refused."""
    branches = copy.deepcopy(world["outs"]["branches"][0])
    v = validator("branches --json")
    assert v.is_valid(branches)
    branches[1]["fork"]["extra"] = 1
    assert not v.is_valid(branches)
    runs = copy.deepcopy(world["outs"]["runs"][0])
    del runs[0]["live_branch"]
    assert not validator("runs --json").is_valid(runs)
    log = copy.deepcopy(world["outs"]["log"][0])
    log[0]["live"] = 1
    assert not validator("log --json").is_valid(log)


def test_verify_problems_match_the_schema(tmp_path):
    """A damaged store: verify --json lists problem entities (exit 1)."""
    root = str(tmp_path / "s")
    log = RunLog(Store.init(root))
    run = log.start_run("r1")
    for i in range(20):
        log.record_attempt(run, step=i, attempt=0, state="succeeded")
    log.store.close() if hasattr(log.store, "close") else None
    seg = sorted(os.path.join(dp, f) for dp, _, fs in os.walk(root) for f in fs if f.endswith(".seg"))[0]
    with open(seg, "r+b") as f:
        data = bytearray(f.read())
        data[len(data) // 2] ^= 0xFF
        f.seek(0)
        f.write(data)
    rc, out, err = run_cli("verify", "--json", store=root, exit_code=1)
    problems = json.loads(out)
    assert problems and validator("verify --json").is_valid(problems), problems


# -- one shape everywhere ---------------------------------------------------------------------------------------
def test_one_fork_shape_everywhere(world):
    o = world["outs"]
    from_branches = o["branches"][0][1]["fork"]
    from_log = next(e for e in o["log"][0] if e["kind"] == "fork")
    from_diff = o["diff"][0]["forks"]["1"][0]
    from_show = next(x["value"] for x in o["show"] if x["type"] == "fork")
    from_export = {k: v for k, v in o["export"][0][0].items() if k != "schema"}
    assert from_branches == from_log == from_diff == from_show
    assert from_export == o["rewind"][0], "export starts with the live branch's fork (made by the rewind)"
    assert from_branches["compensation_required"] is True and from_branches["kind"] == "fork"
    assert set(o["rewind"][0]) == set(o["fork"][0]) == set(from_branches)
    assert set(o["ingest"][0]["forks"][0]["fork"]) == set(from_branches)
    # episode references the fork by id (documented)
    ep_b1 = o["episode"][0]["branches"][0]
    assert ep_b1["fork"] == from_branches["id"] and ep_b1["parent_lsn"] == from_branches["parent_lsn"]


def test_one_record_shape_and_live_is_a_bool(world):
    o = world["outs"]
    log_records = {e["id"]: e for e in o["log"][1] if e["kind"] != "fork"}
    for r in o["diff"][0]["only_a"] + o["diff"][0]["only_b"]:
        assert log_records[r["id"]] == r
    shown = next(x["value"] for x in o["show"] if x["type"] == "record")
    assert log_records[shown["id"]] == shown
    for b in o["branches"][0]:
        assert isinstance(b["live"], bool)
    for b in o["episode"][1]["branches"]:
        assert isinstance(b["live"], bool)
    run = o["runs"][0][0]
    assert isinstance(run["live_branch"], int) and not isinstance(run["live_branch"], bool)
    # log --format json streams the entries in log --json's shapes
    assert all(e in o["log --format json"][0] for e in o["log"][1] if e["branch"] in (0, 1))
    # export entries are log's records plus the export schema number
    for e in o["export"][0][1:]:
        assert {k: v for k, v in e.items() if k != "schema"} == log_records[e["id"]]


def test_show_describes_binary_blobs(world):
    blobs = [x["value"] for x in world["outs"]["show"] if x["type"] == "blob"]
    assert {"size": 6, "binary": False, "text": "hello\n"} in blobs
    assert {"size": 256, "binary": True, "text": None} in blobs


def test_library_gives_the_cli_shapes(world):
    """A Python caller gets the same JSON through objstore.runs.views as the CLI prints."""
    log = RunLog(Store.open(world["root"]))
    run = world["run"]
    view = log.view(run)
    rc, out, err = run_cli("log", run, "--json", store=world["root"], env_extra=world["env"], exit_code=0)
    assert [views.log_entry(r, fk) for _, r, fk in history.entries(log, view)] == json.loads(out)
    rc, out, err = run_cli("branches", run, "--json", store=world["root"], env_extra=world["env"], exit_code=0)
    assert [views.branch(b) for b in log.branches(view)] == json.loads(out)
    rc, out, err = run_cli("export", run, store=world["root"], env_extra=world["env"], exit_code=0)
    assert lib_export(log, run) == [json.loads(line) for line in out.splitlines()]
    assert views.runs(log) == json.loads(run_cli("runs", "--json", store=world["root"], env_extra=world["env"], exit_code=0)[1])


# -- errors under --json -------------------------------------------------------------------------------------------
ERROR_CASES = [
    (["log", "nope"], 4, "run-not-found"),
    (["show", "zz" * 32], 5, "invalid-id"),
    (["show", "ab" * 32], 4, "object-not-found"),
    (["rewind", "RUN", "--to-lsn", "99"], 5, None),
    (["diff", "RUN", "0", "9"], 4, "branch-not-found"),
    (["rewind"], 2, "usage-error"),
    (["rewind", "RUN", "--to-lsn", "x"], 2, "usage-error"),
    (["no-such-command"], 2, "usage-error"),
    (["log", "RUN", "--no-such-option"], 2, "usage-error"),
]


@pytest.mark.parametrize("args,code,name", ERROR_CASES)
def test_errors_are_one_json_object_under_json(world, args, code, name):
    args = [world["run"] if a == "RUN" else a for a in args]
    rc, out, err = run_cli(*args, "--json", store=world["root"], env_extra=world["env"], exit_code=code)
    assert out == "" and "Traceback" not in err
    lines = err.splitlines()
    assert len(lines) == 1, err
    e = json.loads(lines[0])
    assert entity_validator("error").is_valid(e), e
    assert e["exit"] == code and (name is None or e["error"] == name), e
    # without --json: exactly one plain line, the same message
    rc, out, err = run_cli(*args, store=world["root"], env_extra=world["env"], exit_code=code)
    assert err.splitlines() == [f"objstore: error: {e['message']}"], err


def test_usage_errors_name_the_help_to_read(world):
    rc, out, err = run_cli("rewind", world["run"], store=world["root"], env_extra=world["env"], exit_code=2)
    assert err.splitlines() == ["objstore: error: Missing option '--to-lsn'. (see 'objstore rewind --help')"]
    rc, out, err = run_cli("journal", "show", store=world["root"], env_extra=world["env"], exit_code=2)
    assert err.splitlines() == ["objstore: error: Missing argument 'RUN'. (see 'objstore journal show --help')"]


def test_json_anywhere_on_the_line(world):
    rc, out, err = run_cli("--json", "log", "nope", store=world["root"], env_extra=world["env"], exit_code=2)
    # '--json' before the command is not an option of the root group: a usage error, still as JSON
    assert json.loads(err)["error"] == "usage-error"
    rc, out, err = run_cli("log", "--json", "nope", store=world["root"], env_extra=world["env"], exit_code=4)
    assert json.loads(err)["error"] == "run-not-found"


def test_export_json_is_the_json_lines_as_one_list(world):
    """export --json (issue 16): one JSON list of exactly the entries plain export prints as JSON Lines."""
    rc, out, err = run_cli("export", world["run"], "--json", store=world["root"], env_extra=world["env"], exit_code=0)
    entries = json.loads(out)
    assert entries and entries == world["outs"]["export"][0]
    errors = list(validator("export --json").iter_errors(entries))
    assert not errors, [e.message for e in errors[:5]]


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


# -- --json on demo, rebuild, upgrade, repair, put-blob (issue 16) -----------------------------------------
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
    log.store.logs.close()
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
    # two steps: 2 -> 3 (the format-2 store kept as .format2), then 3 -> 6 (the format-3 one kept as .format3)
    assert (got["status"], got["from"], got["to"], got["backup"], got["path"]) == ("upgraded", 2, 6, root + ".format2", root)
    assert os.path.isdir(got["backup"]) and os.path.isdir(root + ".format3") and got["counts"]["objects"] > 0
    again = valid("upgrade", run_cli("upgrade", "--json", store=root, env_extra=env, exit_code=0)[1])
    assert again == {"status": "already-format-6", "path": root, "from": 6, "to": 6, "backup": None, "counts": {}}


def test_repair_json_is_the_cut(store, env):
    log = RunLog(Store.open(store))
    run = log.start_run("r1")
    log.record_attempt(run, 1, 0, "failed")
    engine = log_engine_of(log.store, run)  # r1's log (the store's one log before format 6): the one damaged
    last_good = engine.position()
    seg = engine.seg_path(engine._seg)
    before = os.path.getsize(seg)
    log.record_attempt(run, 1, 1, "succeeded", error="x" * 40)
    log.store.logs.close()
    data = bytearray(open(seg, "rb").read())
    data[len(data) - 5] ^= 0x04  # a flipped bit in the last entry's chain checksum
    open(seg, "wb").write(bytes(data))
    which = [run] if is_per_run(store) else []  # format 6: the damaged log is r1's (repair RUN), else the one log
    rc, out, err = run_cli("repair", *which, "--cut-after", str(last_good.entry), "--reason", "bit rot", "--json",
                           store=store, env_extra=env, exit_code=0)
    got = valid("repair", out)
    assert got["cut_after"] == last_good.entry and got["entry"] == last_good.entry + 1 and got["signed"] is True
    assert [(r["offset"], r["length"]) for r in got["removed"]] == [(before, len(data) - before)]
    repaired = log_engine_of(Store.open(store), run)  # the note is in the log it cut (the one log before format 6)
    repaired.refresh()
    assert repaired.tables.refs["log/repairs"].hex() == got["note"]


def test_an_error_of_a_new_json_command_is_one_json_object_on_stderr(tmp_path, env):
    rc, out, err = run_cli("rebuild", "--json", store=str(tmp_path / "none"), env_extra=env, exit_code=3)
    assert out == "" and json.loads(err)["exit"] == 3 and err.count("\n") == 1


# -- --json before the subcommand (issue 16) -------------------------------------------------------------
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


# -- segments through rich on a terminal (issue 16) --------------------------------------------------------
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
