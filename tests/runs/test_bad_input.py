"""Bad input gets a clear error and changes nothing (issue #10).

Every malformed input — through the real CLI in a subprocess, or through the library — must give a
typed error with its documented exit code, as one line on stderr, with no traceback, and must write
nothing: the store's files are byte-identical afterwards and the log holds exactly the objects it
held (no orphan blob). Readers of crafted files (format-2 entries and indexes, format-1 packs and
loose objects that declare huge sizes) must fail in bounded memory: they run in a child process
under ``RLIMIT_AS``, so an unbounded allocation fails loudly instead of passing unnoticed.

Limits under test (docs/INGEST.md, docs/FORMAT.md): JSON nested deeper than 64 levels, integers
outside int64/uint64, NaN / Infinity, duplicate keys and lone surrogates are invalid input (5).
"""

from __future__ import annotations

import io
import json
import os
import resource
import shutil
import struct
import subprocess
import sys
import textwrap

import blake3
import msgspec
import pytest
import zstandard
from helpers import raw_objects, run_cli, run_read_only, snapshot_tree, state_db_path
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from objstore import journal as J
from objstore.errors import (
    BranchNotFound,
    Conflict,
    CorruptPack,
    IngestError,
    IntegrityError,
    InvalidInput,
    InvalidRecord,
    LimitExceeded,
    ObjstoreError,
    Refused,
)
from objstore.legacy.format1 import Format1Reader
from objstore.runs.api import RunLog
from objstore.runs.ingest import ingest
from objstore.storage import codec
from objstore.storage.log.format import ENTRY_HEAD, ENTRY_MAGIC, ENTRY_TRAILER, logical_checksum
from objstore.storage.log.root import root_digest
from objstore.storage.runrefs import branch_ref, live_ref, symref
from objstore.storage.store import Store

GOOD = [
    {"v": 1, "type": "run_started", "run": "r1", "subject": "alice", "workflow_version": "w2"},
    {"v": 1, "type": "attempt", "run": "r1", "step": 1, "attempt": 0, "state": "failed", "prompt": "hello", "error": "boom"},
    {"v": 1, "type": "attempt", "run": "r1", "step": 1, "attempt": 1, "state": "succeeded", "prompt": "hello", "output": "hi"},
    {"v": 1, "type": "intent", "run": "r1", "intent": "mail", "step": 2, "effect": "send_mail", "idempotent": False},
    {"v": 1, "type": "intent_committed", "run": "r1", "intent": "mail"},
]
SESSION = "s1"
GHOST = "ab" * 32


def jl(*events) -> bytes:
    return b"".join(json.dumps(e).encode() + b"\n" for e in events)


def attempt(**over) -> dict:
    return {"v": 1, "type": "attempt", "run": "r1", "step": 3, "attempt": 0, "state": "failed", **over}


def nested(levels: int) -> str:
    """JSON text of an object ``levels`` deep (the outer object is level 1)."""
    return '{"a":' * (levels - 1) + "{}" + "}" * (levels - 1)


# -- the base store: made once, copied for every case --------------------------------------------


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    return _base(tmp_path_factory.mktemp("bad-input-base"), {})


@pytest.fixture(scope="module")
def one_log_base(tmp_path_factory):
    """The base store made with one log (formats 3 to 5): the crafted entries below are appended by hand to
    the log that holds run r1 and a run of their own (on a store with a log per run, run zz's entry would be
    its own log's first: tests/runs/test_anchor_runlogs.py damages run logs)."""
    return _base(tmp_path_factory.mktemp("bad-input-one-log"), {"OBJSTORE_NEW_FORMAT": "3"})


@pytest.fixture
def one_log_store(one_log_base, tmp_path):
    root = str(tmp_path / "store")
    shutil.copytree(one_log_base[0], root)
    return root, one_log_base[1]


def _base(d, more):
    root, keys = str(d / "store"), str(d / "keys")
    env = {"OBJSTORE_KEYS": keys, **more}
    run_cli("init", store=root, env_extra=env, exit_code=0)
    run_cli("ingest", "-", store=root, input=jl(*GOOD), env_extra=env, exit_code=0)
    run_cli("session", "start", "--subject", "alice", "--run", SESSION, store=root, env_extra=env, exit_code=0)
    run_cli("episode", "r1", store=root, env_extra=env, exit_code=0)  # the state cache is warm
    return root, keys


@pytest.fixture
def store(base, tmp_path):
    root = str(tmp_path / "store")
    shutil.copytree(base[0], root)
    return root, base[1]


def object_ids(root) -> set:
    return {oid for oid, _, _ in raw_objects(Store.open(root))}


def one_line(err: str) -> str:
    assert "Traceback" not in err, err
    lines = err.splitlines()
    assert len(lines) == 1, f"expected one stderr line, got {len(lines)}:\n{err}"
    return lines[0]


def assert_unchanged(root, before_tree, before_ids):
    after = snapshot_tree(root)
    assert sorted(after) == sorted(before_tree), "files appeared or vanished"
    changed = [p for p in after if after[p] != before_tree[p]]
    assert changed == [], f"files changed: {changed}"
    assert object_ids(root) == before_ids, "objects were written (an orphan blob?)"


# -- the CLI battery ------------------------------------------------------------------------------
# (id, argv, stdin, exit code, expected stderr line: exact, or a prefix ending in '…')

I = "objstore: error: ingest: line 1: "  # noqa: E741
JB = "objstore: error: invalid input: journal body"


def ingest_case(name, line: bytes | str, code: int, expect: str):
    data = line if isinstance(line, bytes) else line.encode()
    return pytest.param(["ingest", "-"], data + b"\n", code, expect, id=f"ingest-{name}")


def journal_case(name, body: bytes | str, code: int, expect: str):
    data = body if isinstance(body, bytes) else body.encode()
    return pytest.param(["journal", "update", SESSION, "-", "--reflects-through", "none"], data, code, expect, id=f"journal-{name}")


def cli_case(name, argv, code, expect, stdin=None):
    return pytest.param(argv, stdin, code, expect, id=name)


def dumps(ev) -> str:
    return json.dumps(ev)


CASES = [
    # nesting: 64 levels are the limit of every JSON input
    ingest_case("nested-65", dumps(attempt()).replace('"state"', f'"context": {{"x": {nested(63)}}}, "state"'), 5, I + "nests deeper than 64 levels"),
    ingest_case("nested-100000", '{"v": 1, "a": ' + "[" * 100000 + "]" * 100000 + "}", 5, I + "nests deeper than 64 levels"),
    ingest_case("nested-unclosed", "[" * 100000, 5, I + "nests deeper than 64 levels"),
    # integers beyond the MessagePack range (int64 / uint64)
    ingest_case("int-2**64", dumps(attempt(context={"n": 2**64})), 5, I + "integer 18446744073709551616 is outside the int64/uint64 range"),
    ingest_case("int-below-int64", dumps(attempt(context={"n": -(2**63) - 1})), 5, I + "integer -9223372036854775809 is outside the int64/uint64 range"),
    ingest_case("int-10**30-step", dumps(attempt(step=10**30)), 5, I + "integer 100000000000000000000000... is outside the int64/uint64 range"),
    ingest_case("int-huge-to_lsn", dumps({"v": 1, "type": "rewind", "run": "r1", "to_lsn": 10**30}), 5, I + "integer 1000000000000000000000…"),
    ingest_case("int-huge-time", dumps(attempt(time=10**40)), 5, I + "integer 1000000000000000000000…"),
    ingest_case("int-10000-digits", '{"v": 1, "n": ' + "9" * 10000 + "}", 5, I + "integer 999999999999999999999999... is outside the int64/uint64 range"),
    ingest_case("int-2**63-to_lsn", dumps({"v": 1, "type": "rewind", "run": "r1", "to_lsn": 2**63}), 5, I + "to_lsn: expected int <= 9223372036854775807"),
    # lone surrogates: not Unicode text, cannot be UTF-8
    ingest_case("surrogate-prompt", '{"v": 1, "type": "attempt", "run": "r1", "step": 3, "attempt": 0, "state": "failed", "prompt": "\\ud800"}', 5,
                I + "a string holds a lone surrogate (U+D800), which is not Unicode text"),
    ingest_case("surrogate-low-error", dumps(attempt()).replace('"state"', '"error": "x\\udfff", "state"'), 5, I + "a string holds a lone surrogate (U+DFFF)…"),
    ingest_case("surrogate-key", dumps(attempt()).replace('"state"', '"context": {"\\udbff": 1}, "state"'), 5, I + "a string holds a lone surrogate (U+DBFF)…"),
    ingest_case("surrogate-run-id", '{"v": 1, "type": "run_started", "run": "\\ud83d"}', 5, I + "a string holds a lone surrogate (U+D83D)…"),
    # NaN, Infinity and overflowing floats are not JSON numbers
    ingest_case("nan", dumps(attempt()).replace('"state"', '"context": {"x": NaN}, "state"'), 5, I + "NaN is not a JSON number"),
    ingest_case("infinity", dumps(attempt()).replace('"state"', '"usage": {"x": Infinity}, "state"'), 5, I + "Infinity is not a JSON number"),
    ingest_case("-infinity", dumps(attempt()).replace('"state"', '"usage": {"x": -Infinity}, "state"'), 5, I + "-Infinity is not a JSON number"),
    ingest_case("float-overflow", dumps(attempt()).replace('"state"', '"usage": {"x": 1e400}, "state"'), 5, I + "number 1e400 is out of the float64 range"),
    ingest_case("time-nan", dumps(attempt()).replace('"state"', '"time": NaN, "state"'), 5, I + "NaN is not a JSON number"),
    # duplicate keys: last-wins would silently drop data
    ingest_case("dup-key", '{"v": 1, "type": "attempt", "run": "r1", "step": 3, "step": 4, "attempt": 0, "state": "failed"}', 5,
                I + "key 'step' appears twice in one object"),
    ingest_case("dup-key-nested", dumps(attempt()).replace('"state"', '"context": {"a": 1, "a": 2}, "state"'), 5, I + "key 'a' appears twice in one object"),
    ingest_case("dup-type", '{"v": 1, "type": "attempt", "type": "rewind", "run": "r1", "to_lsn": 0}', 5, I + "key 'type' appears twice in one object"),
    # strict types: a bool is not an integer, a string is not a bool
    ingest_case("to_lsn-true", dumps({"v": 1, "type": "rewind", "run": "r1", "to_lsn": True}), 5, I + "to_lsn: expected int, got bool"),
    ingest_case("to_lsn-float", dumps({"v": 1, "type": "rewind", "run": "r1", "to_lsn": 1.0}), 5, I + "to_lsn: expected int, got float"),
    ingest_case("to_lsn-negative", dumps({"v": 1, "type": "rewind", "run": "r1", "to_lsn": -1}), 5, I + "to_lsn: expected int >= 0"),
    ingest_case("to_lsn-string", dumps({"v": 1, "type": "rewind", "run": "r1", "to_lsn": "3"}), 5, I + "to_lsn: expected int, got str"),
    ingest_case("to_lsn-missing", dumps({"v": 1, "type": "rewind", "run": "r1"}), 5, I + "rewind needs to_lsn"),
    ingest_case("at_lsn-false", dumps({"v": 1, "type": "fork", "run": "r1", "from_branch": 0, "at_lsn": False}), 5, I + "at_lsn: expected int, got bool"),
    ingest_case("from_branch-true", dumps({"v": 1, "type": "fork", "run": "r1", "from_branch": True, "at_lsn": 0}), 5, I + "from_branch: expected int, got bool"),
    ingest_case("live-no", dumps({"v": 1, "type": "fork", "run": "r1", "from_branch": 0, "at_lsn": 0, "live": "no"}), 5, I + "live: expected bool, got str"),
    ingest_case("live-0", dumps({"v": 1, "type": "fork", "run": "r1", "from_branch": 0, "at_lsn": 0, "live": 0}), 5, I + "live: expected bool, got int"),
    ingest_case("live-null", dumps({"v": 1, "type": "fork", "run": "r1", "from_branch": 0, "at_lsn": 0, "live": None}), 5, I + "live: expected bool, got null"),
    ingest_case("branch-true", dumps(attempt(branch=True)), 5, I + "branch: expected int | null, got bool"),
    ingest_case("step-true", dumps(attempt(step=True)), 5, I + "step: expected int, got bool"),
    ingest_case("attempt-negative", dumps(attempt(attempt=-1)), 5, I + "attempt: expected int >= 0"),
    ingest_case("idempotent-yes", dumps({"v": 1, "type": "intent", "run": "r1", "intent": "i", "step": 1, "effect": "e", "idempotent": "yes"}), 5,
                I + "idempotent: expected bool, got str"),
    ingest_case("time-string", dumps(attempt(time="now")), 5, I + "time: expected float | null, got str"),
    ingest_case("time-bool", dumps(attempt(time=True)), 5, I + "time: expected float | null, got bool"),
    ingest_case("time-1e300", dumps(attempt(time=1e300)), 5, I + "time: expected float <= 253402214399.0"),
    ingest_case("v-true", dumps(attempt(v=True)), 5, I + "schema version must be 1, got True"),
    ingest_case("v-float", dumps(attempt(v=1.0)), 5, I + "schema version must be 1, got 1.0"),
    ingest_case("v-missing", '{"type": "attempt", "run": "r1"}', 5, I + "schema version must be 1, got None"),
    ingest_case("unknown-type", dumps({"v": 1, "type": "teleport", "run": "r1"}), 5, I + "unknown event type 'teleport'…"),
    ingest_case("unknown-field", dumps(attempt(colour=1)), 5, I + "unknown field(s) for attempt: colour"),
    ingest_case("state-unknown", dumps(attempt(state="exploded")), 5, I + "state must be one of running, succeeded, failed, got 'exploded'"),
    ingest_case("context-list", dumps(attempt(context=[1, 2])), 5, I + "context: expected object | null, got array"),
    ingest_case("meta-string", dumps({"v": 1, "type": "run_started", "run": "r9", "meta": "m"}), 5, I + "meta: expected object | null, got str"),
    ingest_case("run-id-dotdot", dumps(attempt(run="../x")), 5, I + "run id '../x' must be…"),
    ingest_case("run-id-long", dumps(attempt(run="w" * 5000)), 5, I + "run id 'wwwwwwwwwww…"),
    ingest_case("blob-ref-not-hex", dumps(attempt(prompt={"blob": "zz"})), 5, I + "prompt: invalid object id 'zz': expected 64 hex digits"),
    ingest_case("blob-ref-ghost", dumps(attempt(output={"blob": GHOST})), 5, I + f"output: blob {GHOST} is not in the store"),
    ingest_case("blob-ref-extra", dumps(attempt(prompt={"blob": GHOST, "x": 1})), 5, I + "prompt: unknown field(s): x"),
    ingest_case("not-utf8", b'{"v": 1, "x": "\xff\xfe"}', 5, I + "not UTF-8: invalid start byte at byte 15"),
    ingest_case("bom", "\ufeff" + dumps(attempt()), 5, I + "not JSON: Expecting value: line 1 column 1 (char 0)"),
    ingest_case("trailing-garbage", "{} x", 5, I + "not JSON: Extra data: line 1 column 4 (char 3)"),
    ingest_case("nul-byte", b'{"v": 1\x00}', 5, I + "not JSON: Expecting ',' delimiter: line 1 column 8 (char 7)"),
    ingest_case("array", "[1, 2]", 5, I + "an event must be a JSON object"),
    ingest_case("empty-object", "{}", 5, I + "schema version must be 1, got None"),
    ingest_case("rewind-past-end", dumps({"v": 1, "type": "rewind", "run": "r1", "to_lsn": 99}), 5, I + "invalid input: branch 0 of run r1 has LSNs 0..4; cannot fork at 99"),
    ingest_case("unknown-run", dumps(attempt(run="ghost")), 5, I + "run not found: ghost"),
    # issue 16: a run the file starts that the store holds with other events is named, exit 7 (was exit 5, "already exists")
    ingest_case("run-exists", dumps(GOOD[0]), 7, I + "run r1 is in the store already, with other events than this file's (skipped: a run is ingested once)"),
    ingest_case("retained-branch-missing", dumps(attempt(branch=7)), 5, I + "branch 7 of run r1 not found"),
    pytest.param(["ingest", "-"], jl(attempt(prompt="a new prompt, never stored"), {"v": 1, "type": "run_started", "run": "r2"}, attempt(step=True)), 5,
                 "objstore: error: ingest: line 3: step: expected int, got bool", id="ingest-bad-line-3-nothing-before-lands"),
    pytest.param(["ingest", "-"], jl(attempt(prompt="orphan?")) + b'{"v": 1, "type": "rewind", "run": "r1", "to_lsn": 99}\n', 5,
                 "objstore: error: ingest: line 2: invalid input: branch 0 of run r1 has LSNs 0..5; cannot fork at 99",
                 id="ingest-refused-when-applied-no-orphan-blob"),
    # journal bodies go through the same parser
    journal_case("nested-65", nested(65), 5, JB + " nests deeper than 64 levels"),
    journal_case("nested-100000", "[" * 100000 + "]" * 100000, 5, JB + " nests deeper than 64 levels"),
    journal_case("int-10**30", '{"n": 1000000000000000000000000000000}', 5, JB + ": integer 100000000000000000000000... is outside the int64/uint64 range"),
    journal_case("int-2**64", '{"n": 18446744073709551616}', 5, JB + ": integer 18446744073709551616 is outside the int64/uint64 range"),
    journal_case("surrogate", '{"x": "\\ud800"}', 5, JB + ": a string holds a lone surrogate (U+D800), which is not Unicode text"),
    journal_case("surrogate-entry-id", '{"entries": [{"id": "\\udc00"}]}', 5, JB + ": a string holds a lone surrogate (U+DC00)…"),
    journal_case("nan", '{"x": NaN}', 5, JB + ": NaN is not a JSON number"),
    journal_case("float-overflow", '{"x": -1e999}', 5, JB + ": number -1e999 is out of the float64 range"),
    journal_case("dup-key", '{"a": 1, "a": 2}', 5, JB + ": key 'a' appears twice in one object"),
    journal_case("not-an-object", "[1, 2]", 5, "objstore: error: invalid input: a journal body is a JSON object"),
    journal_case("not-utf8", b"\xff\xfe", 5, JB + " is not UTF-8: invalid start byte at byte 0"),
    journal_case("dup-entry-id", '{"entries": [{"id": "a"}, {"id": "a"}]}', 5, JB + ": entry id 'a' appears twice"),
    pytest.param(["journal", "update", SESSION, "-", "--reflects-through", GHOST], b'{"a": "a body never stored"}', 4,
                 f"objstore: error: object not found: {GHOST}", id="journal-ghost-record-no-orphan-blob"),
    pytest.param(["journal", "update", SESSION, "-", "--reflects-through", "none", "--checkpoint", "nonsense"], b'{"b": 1}', 5,
                 "objstore: error: invalid input: 'nonsense' is not an object id (64 hex digits, or a unique prefix of 4 or more)",
                 id="journal-bad-checkpoint-no-orphan-blob"),
    pytest.param(["journal", "update", "ghost-run", "-", "--reflects-through", "none"], b'{"c": "never stored"}', 4,
                 "objstore: error: run not found: ghost-run", id="journal-ghost-run-no-orphan-blob"),
    # other commands
    cli_case("cat-not-an-id", ["cat", "xyz"], 5, "objstore: error: invalid input: 'xyz' is not an object id…"),
    cli_case("cat-body-ghost", ["cat", "--body", GHOST], 4, f"objstore: error: object not found: {GHOST}"),
    cli_case("show-ghost", ["show", GHOST], 4, f"objstore: error: object not found: {GHOST}"),
    cli_case("rewind-huge-lsn", ["rewind", "r1", "--to-lsn", str(10**30)], 2, "objstore: error: Invalid value for '--to-lsn': …"),
    cli_case("fork-negative-lsn", ["fork", "r1", "--from-branch", "0", "--at-lsn", "-1"], 2, "objstore: error: Invalid value for '--at-lsn': must be an integer in 0..9223372036854775807, got -1 (see 'objstore fork --help')"),
    cli_case("init-non-store-dir", ["--store", "{tmp}/notastore", "init"], 5, "objstore: error: invalid input: {tmp}/notastore is a non-empty directory that is not a store; refusing to initialise it"),
    cli_case("init-file", ["--store", "{tmp}/afile", "init"], 5, "objstore: error: invalid input: {tmp}/afile exists and is not a directory"),
    # a key path longer than the system allows is no key at all (unauthenticated, 8), not an OS error (10)
    cli_case("journal-key-path-too-long", ["journal", "update", SESSION, "-", "--reflects-through", "none", "--key", "/tmp/" + "k" * 5000], 8,
             "objstore: error: refused: unauthenticated caller: no private key at /tmp/kkkk…", stdin=b"{}"),
    cli_case("init-path-too-long", ["--store", "{tmp}/" + "w" * 300, "init"], 5, "objstore: error: invalid input: cannot create a store at {tmp}/www…"),
    cli_case("key-new-path-too-long", ["key", "new", "{tmp}/" + "w" * 300], 5, "objstore: error: invalid input: cannot write a key at {tmp}/www…"),
    cli_case("grant-pubkey-too-long", ["journal", "grant", SESSION, "--pubkey", "p" * 5000], 5, "objstore: error: invalid input: cannot read public key pppp…"),
    cli_case("session-run-too-long", ["session", "start", "--subject", "alice", "--run", "r" * 5000], 5, "objstore: error: invalid record: run id 'rrrr…"),
]


@pytest.mark.parametrize("argv,stdin,code,expect", CASES)
def test_cli_bad_input(store, tmp_path, argv, stdin, code, expect):
    root, keys = store
    os.makedirs(tmp_path / "notastore")
    (tmp_path / "notastore" / "mine.txt").write_text("not a store")
    (tmp_path / "afile").write_text("a file")
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    expect = expect.replace("{tmp}", str(tmp_path))
    before, ids = snapshot_tree(root), object_ids(root)
    rc, out, err = run_cli(*argv, store=None if "--store" in argv else root, input=stdin, env_extra={"OBJSTORE_KEYS": keys}, exit_code=code)
    assert rc == code, f"exit {rc}, expected {code}: {err}"
    line = one_line(err)
    if expect.endswith("…"):
        assert line.startswith(expect[:-1]), line
    else:
        assert line == expect
    assert out == ""
    assert_unchanged(root, before, ids)
    assert snapshot_tree(str(tmp_path / "notastore")) == {"mine.txt": b"not a store"}


# -- the library: the same inputs, the typed error class -----------------------------------------


def deep(levels: int) -> dict:
    d: dict = {}
    for _ in range(levels - 1):
        d = {"a": d}
    return d


def owner_key(keys):
    from objstore.storage import identity

    return identity.load_key(os.path.join(keys, "owner.key"))


LIB_CASES = [
    ("attempt-nan", lambda log, k: log.record_attempt("r1", 3, 0, "failed", context={"x": float("nan")}), InvalidRecord, "not a JSON number"),
    ("attempt-inf", lambda log, k: log.record_attempt("r1", 3, 0, "failed", usage={"x": float("-inf")}), InvalidRecord, "not a JSON number"),
    ("attempt-2**64", lambda log, k: log.record_attempt("r1", 3, 0, "failed", context={"n": 2**64}), InvalidRecord, "int64/uint64"),
    ("attempt-below-int64", lambda log, k: log.record_attempt("r1", 3, 0, "failed", tools={"n": [-(2**63) - 1]}), InvalidRecord, "int64/uint64"),
    ("attempt-deep-65", lambda log, k: log.record_attempt("r1", 3, 0, "failed", context=deep(65)), InvalidRecord, "deeper than 64"),
    ("attempt-deep-100000", lambda log, k: log.record_attempt("r1", 3, 0, "failed", context=deep(100000)), InvalidRecord, "deeper than 64"),
    ("attempt-surrogate-value", lambda log, k: log.record_attempt("r1", 3, 0, "failed", context={"x": "\ud800"}), InvalidRecord, "lone surrogate"),
    ("attempt-surrogate-key", lambda log, k: log.record_attempt("r1", 3, 0, "failed", context={"\udc00": 1}), InvalidRecord, "lone surrogate"),
    ("attempt-surrogate-error", lambda log, k: log.record_attempt("r1", 3, 0, "failed", error="x\udfff"), InvalidRecord, "lone surrogate"),
    ("attempt-bytes-in-context", lambda log, k: log.record_attempt("r1", 3, 0, "failed", context={"x": b"raw"}), InvalidRecord, "bytes is not JSON-like"),
    ("attempt-int-key", lambda log, k: log.record_attempt("r1", 3, 0, "failed", context={1: "x"}), InvalidRecord, "keys must be strings"),
    ("attempt-set", lambda log, k: log.record_attempt("r1", 3, 0, "failed", context={"x": {1, 2}}), InvalidRecord, "set is not JSON-like"),
    ("attempt-step-bool", lambda log, k: log.record_attempt("r1", True, 0, "failed"), InvalidRecord, "step must be an integer"),
    ("attempt-step-2**70", lambda log, k: log.record_attempt("r1", 2**70, 0, "failed"), InvalidRecord, "uint64"),
    ("start-meta-nan", lambda log, k: log.start_run("r9", meta={"x": float("nan")}), InvalidRecord, "not a JSON number"),
    ("start-subject-surrogate", lambda log, k: log.start_run("r9", subject="\ud800"), InvalidRecord, "lone surrogate"),
    ("turn-generation-deep", lambda log, k: log.append("r1", "turn", {"role": "user", "generation": deep(70)}), InvalidRecord, "deeper than 64"),
    ("task-title-surrogate", lambda log, k: log.append("r1", "task_opened", {"task": "t", "title": "\ud800"}), InvalidRecord, "lone surrogate"),
    ("fork-lsn-true", lambda log, k: log.fork("r1", 0, True), InvalidInput, "fork LSN must be a non-negative integer, got True"),
    ("fork-lsn-2**70", lambda log, k: log.fork("r1", 0, 2**70), InvalidInput, "cannot fork at"),
    ("fork-branch-true", lambda log, k: log.fork("r1", True, 0), InvalidInput, "branch must be a non-negative integer"),
    ("rewind-lsn-false", lambda log, k: log.rewind("r1", False), InvalidInput, "fork LSN must be a non-negative integer, got False"),
    ("store-put-overflow", lambda log, k: log.store.put("fork", {"x": 2**70}), InvalidInput, "cannot store this value"),
    ("store-put-surrogate", lambda log, k: log.store.put("fork", {"x": "\ud800"}), InvalidInput, "cannot store this value"),
    ("store-put-deep", lambda log, k: log.store.put("grant", deep(100000)), InvalidInput, "cannot store this value"),
    ("journal-nan", lambda log, k: J.update_journal(log, SESSION, k, {"x": float("nan")}), InvalidInput, "not a JSON number"),
    ("journal-2**64", lambda log, k: J.update_journal(log, SESSION, k, {"x": 2**64}), InvalidInput, "int64/uint64"),
    ("journal-deep", lambda log, k: J.update_journal(log, SESSION, k, deep(65)), InvalidInput, "deeper than 64"),
    ("journal-surrogate", lambda log, k: J.update_journal(log, SESSION, k, {"x": "\ud800"}), InvalidInput, "lone surrogate"),
    ("journal-parse-dup", lambda log, k: J.parse_body(b'{"a": 1, "a": 2}'), InvalidInput, "appears twice"),
    ("journal-parse-str-surrogate", lambda log, k: J.parse_body('{"a": "\ud800"}'), InvalidInput, "lone surrogate"),
    ("ingest-to_lsn-true", lambda log, k: ingest(log, io.StringIO(dumps({"v": 1, "type": "rewind", "run": "r1", "to_lsn": True}))), IngestError, "to_lsn: expected int"),
    ("ingest-live-no", lambda log, k: ingest(log, io.BytesIO(jl({"v": 1, "type": "fork", "run": "r1", "from_branch": 0, "at_lsn": 0, "live": "no"}))),
     IngestError, "live: expected bool"),
    # all or nothing per run (issue 16): the line refused is of the same run (a line of another run no longer undoes this one's)
    ("ingest-orphan-blob", lambda log, k: ingest(log, io.BytesIO(jl(attempt(prompt="fresh text"), {"v": 1, "type": "rewind", "run": "r1", "to_lsn": 99}))),
     IngestError, "line 2: invalid input: branch 0 of run r1 has LSNs 0..5; cannot fork at 99"),
    ("ingest-line-too-long", lambda log, k: ingest(log, io.BytesIO(b'{"v": 1, "x": "' + b"x" * (64 << 20) + b'"}\n')), IngestError, "longer than"),
    ("codec-parse-1e400", lambda log, k: codec.parse_json("[1e400]"), InvalidInput, "out of the float64 range"),
    ("codec-check-tuple-deep", lambda log, k: codec.check_json_value(deep(65)), InvalidInput, "deeper than 64"),
]


@pytest.mark.parametrize("name,call,cls,text", LIB_CASES, ids=[c[0] for c in LIB_CASES])
def test_library_bad_input(store, name, call, cls, text):
    root, keys = store
    before, ids = snapshot_tree(root), object_ids(root)
    log = RunLog(Store.open(root))
    with pytest.raises(cls) as ei:
        call(log, owner_key(keys))
    assert text in str(ei.value)
    assert ei.value.exit_code == cls.exit_code == 5
    assert "\n" not in str(ei.value)
    assert_unchanged(root, before, ids)


def test_conflict_inside_ingest_keeps_exit_7(store, monkeypatch):
    """A conflict met while applying a line is a conflict (7), named with its line, not invalid input (5)."""
    root, _ = store
    before, ids = snapshot_tree(root), object_ids(root)
    log = RunLog(Store.open(root))

    def conflicting(*a, **kw):
        raise Conflict("run/r1/live", "ref: run/r1/branch/0", "ref: run/r1/branch/1")

    monkeypatch.setattr(log, "fork", conflicting)
    lines = jl(attempt(prompt="text that must not land"), {"v": 1, "type": "fork", "run": "r1", "from_branch": 0, "at_lsn": 0})
    with pytest.raises(Conflict) as ei:
        ingest(log, io.BytesIO(lines))
    assert ei.value.exit_code == 7 and not isinstance(ei.value, InvalidInput)
    assert str(ei.value) == "ingest: line 2: conflict: ref run/r1/live moved (expected ref: run/r1/branch/0, found ref: run/r1/branch/1)"
    assert_unchanged(root, before, ids)


def test_put_blob_stream_stops_at_its_limit_and_keeps_nothing(store):
    root, _ = store
    before, ids = snapshot_tree(root), object_ids(root)
    s = Store.open(root)

    class Endless:
        read_bytes = 0

        def read(self, n=-1):
            self.read_bytes += n
            return b"\x01" * n

    src = Endless()
    with pytest.raises(LimitExceeded):
        s.put_blob_stream(src, limit=10 << 20)
    assert src.read_bytes <= (10 << 20) + (2 << 20), "the input was read past its limit"
    assert os.listdir(os.path.join(root, "tmp")) == []
    assert_unchanged(root, before, ids)


def test_cli_put_blob_stdin_over_the_memory_store_limit_is_not_buffered_whole(store):
    """put-blob - streams stdin: 12 MiB go through a spill file, never one buffer of the whole input
    (the id is the hash of exactly the bytes stored)."""
    root, keys = store
    data = os.urandom(12 << 20)
    rc, out, err = run_cli("put-blob", "-", store=root, input=data, env_extra={"OBJSTORE_KEYS": keys}, exit_code=0)
    assert out.strip() == codec.object_id(codec.header("blob", len(data)) + data).hex()
    assert os.listdir(os.path.join(root, "tmp")) == []


# -- the state cache: a wrong column type is a cache miss, never a traceback ----------------------


@pytest.mark.parametrize("update", ["branch SET tip_lsn = 'abc'", "branch SET head = 12345", "branch SET state = 'not msgpack'",
                                    "branch SET parent_branch = x'00'", "recs SET data = 5", "recs SET n = 'one'"])
def test_state_cache_wrong_column_type(store, update):
    import sqlite3

    root, keys = store
    env = {"OBJSTORE_KEYS": keys}
    want = run_cli("episode", "r1", "--json", store=root, env_extra=env, exit_code=0)[1]
    db = sqlite3.connect(state_db_path(root, "r1"))
    db.execute(f"UPDATE {update}")
    db.commit()
    db.close()
    for args in (["episode", "r1", "--json"], ["episode", "r1", "--all-branches", "--json"]):
        rc, out, err = run_cli(*args, store=root, env_extra=env, exit_code=0)
        assert "Traceback" not in err
        # the lead's state.py folds a damaged row again (exit 0, the same answer) or says StateCacheError (11)
        assert rc in (0, 11), err
        if rc == 0:
            assert err == ""
            if args == ["episode", "r1", "--json"]:
                assert out == want
        else:
            assert one_line(err).startswith("objstore: error: state cache error while trying to ")


# -- two processes creating one new store at once -----------------------------------------------


@pytest.mark.slow
def test_two_inits_of_one_new_store_at_once(tmp_path):
    for i in range(5):
        root = str(tmp_path / f"race{i}")
        env = dict(os.environ, OBJSTORE_KEYS=str(tmp_path / f"keys{i}"))
        env.pop("OBJSTORE_DIR", None)
        procs = [subprocess.Popen([sys.executable, "-m", "objstore", "--store", root, "init"], stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, env=env) for _ in range(2)]
        outs = [p.communicate(timeout=120) for p in procs]
        for p, (_, err) in zip(procs, outs, strict=True):
            assert p.returncode == 0, err.decode()
            assert err == b""
        firsts = sorted(out.decode().splitlines()[0] for out, _ in outs)
        assert firsts == [f"already initialised objstore store in {root}", f"initialised objstore store in {root}"], firsts
        assert not [n for n in os.listdir(tmp_path) if ".init-" in n], "a staging directory was left behind"
        run_cli("verify", store=root, env_extra={"OBJSTORE_KEYS": str(tmp_path / f"keys{i}")}, exit_code=0)
    # init again on a current-format store: exit 0, 'already initialised', nothing written
    before = snapshot_tree(root)
    rc, out, err = run_cli("init", store=root, env_extra={"OBJSTORE_KEYS": str(tmp_path / "keys4")}, exit_code=0)
    assert out.startswith(f"already initialised objstore store in {root}\n") and err == ""
    assert snapshot_tree(root) == before


# -- a read-only store: commands that only read succeed -------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("drop", [(), ("state.db",), ("state.db", "log/checkpoint")], ids=["as-is", "no-state-cache", "no-cache-no-checkpoint"])
def test_read_only_store_reads(store, drop):
    root, keys = store
    for rel in drop:
        path = state_db_path(root, "r1") if rel == "state.db" else os.path.join(root, rel)
        if os.path.exists(path):
            os.remove(path)
    before = snapshot_tree(root)
    env = {"OBJSTORE_KEYS": keys}
    for args in (["verify"], ["episode", "r1"], ["episode", "r1", "--all-branches", "--json"], ["log", "r1"], ["runs"]):
        rc, out, err = run_read_only(root, *args, env_extra=env)
        assert rc == 0, f"{args}: exit {rc}: {err}"
        assert "Traceback" not in err
    # a command that writes is an operating-system error, one line, exit 10
    rc, out, err = run_read_only(root, "put-blob", "-", env_extra=env)
    assert rc == 10 and one_line(err).startswith("objstore: error: operating-system error while trying to ")
    assert snapshot_tree(root) == before


# -- crafted files: declared sizes are checked before anything is allocated -----------------------
#
# Each reader runs in a child process whose address space is capped a few hundred MiB above what
# it uses at rest: a reader that allocates what a crafted file declares (512 MiB to 4 GiB) dies with
# MemoryError (a traceback, the test fails) instead of passing unnoticed.

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HEADROOM = 256 << 20
HUGE = 512 << 20

CHILD = """
import json, resource, sys
sys.path.insert(0, {repo!r} + "/src")
import objstore, objstore.storage.store, objstore.runs.api, objstore.legacy.format1, objstore.runs.verify, objstore.errors, zstandard, blake3
from objstore.errors import ObjstoreError
with open("/proc/self/status") as f:
    vm = int(f.read().split("VmSize:")[1].split()[0]) * 1024
resource.setrlimit(resource.RLIMIT_AS, (vm + {headroom}, vm + {headroom}))
try:
{code}
    print(json.dumps({{"ok": True}}))
except ObjstoreError as e:
    print(json.dumps({{"error": type(e).__name__, "exit": e.exit_code, "message": str(e)}}))
print(json.dumps({{"maxrss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}}))
"""


def bounded(code: str, **names) -> dict:
    """Run ``code`` (with ``names`` bound) in a child under RLIMIT_AS; its outcome and peak RSS."""
    body = "".join(f"    {k} = {v!r}\n" for k, v in names.items()) + textwrap.indent(textwrap.dedent(code), "    ")
    p = subprocess.run([sys.executable, "-c", CHILD.format(repo=REPO, headroom=HEADROOM, code=body)], capture_output=True, timeout=300, cwd=REPO)
    err = p.stderr.decode()
    assert p.returncode == 0 and "Traceback" not in err, f"the reader crashed (unbounded allocation?):\n{err[-3000:]}"
    lines = [json.loads(x) for x in p.stdout.decode().splitlines()]
    out = lines[-2]
    out["maxrss"] = lines[-1]["maxrss_kb"] * 1024
    assert out["maxrss"] < HEADROOM + (200 << 20), f"peak RSS {out['maxrss']} bytes"
    return out


def run_cli_bounded(*args, store, env_extra=None, limit=400 << 20):
    env = dict(os.environ, **(env_extra or {}))
    env.pop("OBJSTORE_DIR", None)
    p = subprocess.run([sys.executable, "-m", "objstore", "--store", store, *args], capture_output=True, env=env, timeout=300,
                       preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (limit, limit)))
    return p.returncode, p.stdout, p.stderr.decode()


def zeros_frame(header: bytes, n: int, content_size: bool) -> bytes:
    """One zstd frame of ``header`` and ``n`` zero bytes: a few KiB that decompress to ``n``."""
    c = zstandard.ZstdCompressor(level=1, write_content_size=content_size)
    w = c.compressobj(size=len(header) + n) if content_size else c.compressobj()
    parts = [w.compress(header)]
    chunk = bytes(1 << 20)
    for _ in range(n >> 20):
        parts.append(w.compress(chunk))
    parts.append(w.compress(bytes(n & ((1 << 20) - 1))))
    parts.append(w.flush())
    return b"".join(parts)


@pytest.fixture(scope="module")
def huge_blob_frame():
    return zeros_frame(b"blob %d\x00" % HUGE, HUGE, content_size=True)


@pytest.fixture(scope="module")
def huge_frame_without_size():
    return zeros_frame(b"record %d\x00" % HUGE, HUGE, content_size=False)


def append_raw_entry(root, objs, blocks, data: bytes, moves=(), recs=()) -> str:
    """Append a commit entry written by hand (correct chain checksum and tables' root, anything in its
    meta) to the active segment, as a foreign writer could; returns the segment's path. ``recs``:
    index rows of its records (format 3), which the root accounts for as a writer's would."""
    eng = Store.open(root).engine
    pos = eng.position()
    n, t = pos.entry + 1, 1700000000.0
    moves = [list(m) for m in moves]
    recs = [list(r) for r in recs]
    if recs or moves:
        facts = {objs[r[0]][0]: r[1:] for r in recs}
        plan = eng.tables.plan(n, [(o[0], o[1]) for o in objs], facts, moves, None)
        assert not isinstance(plan, str), plan
        root_hash = plan.root
    else:
        root_hash = root_digest(eng.tables.root_sum)
    checksum = logical_checksum(pos.checksum, n, t, objs, moves, None, recs, [], root_hash, False, None)
    meta = msgspec.msgpack.Encoder(order="sorted").encode({"n": n, "t": t, "moves": moves, "objs": objs, "blocks": blocks, "cut": None,
                                                           "recs": recs, "prevs": [], "root": root_hash, "seal": False, "idx": None})
    length = ENTRY_HEAD.size + len(meta) + len(data) + ENTRY_TRAILER.size
    path = eng.seg_path(eng._seg)
    with open(path, "ab") as f:
        f.write(ENTRY_HEAD.pack(ENTRY_MAGIC, len(meta), len(data)) + meta + data + ENTRY_TRAILER.pack(length, checksum))
    return path


@pytest.mark.slow
def test_format2_crafted_large_blob_cat_body_writes_nothing(store, huge_blob_frame):
    """A 16 KiB entry whose blob claims 512 MiB: cat --body fails before writing one byte (it used
    to stream the whole claimed size first), in bounded memory; get_blob too; verify names it."""
    root, keys = store
    oid = blake3.blake3(b"not these bytes").digest()
    raw = len(b"blob %d\x00" % HUGE) + HUGE
    seg = append_raw_entry(root, [[oid, "blob", raw, 0, 0]], [[1, raw, len(huge_blob_frame)]], huge_blob_frame)
    assert os.path.getsize(seg) < (1 << 20)
    before, ids = snapshot_tree(root), object_ids(root)
    rc, out, err = run_cli_bounded("cat", "--body", oid.hex(), store=root, env_extra={"OBJSTORE_KEYS": keys})
    assert rc == 6, err
    assert out == b"", f"cat --body wrote {len(out)} bytes of a corrupt blob"
    assert one_line(err).startswith(f"objstore: error: integrity error: object {oid.hex()} ({seg}): hash mismatch")
    got = bounded("objstore.storage.store.Store.open(root).get_blob(bytes.fromhex(oid))", root=root, oid=oid.hex())
    assert got["error"] == "IntegrityError" and got["exit"] == 6
    got = bounded("objstore.storage.store.Store.open(root).copy_blob_to(bytes.fromhex(oid), open('/dev/null', 'wb'))", root=root, oid=oid.hex())
    assert got["error"] == "IntegrityError"
    rc, out, err = run_cli_bounded("verify", store=root, env_extra={"OBJSTORE_KEYS": keys})
    assert rc == 1 and "Traceback" not in err
    assert f"corrupt-object {oid.hex()}" in out.decode()
    assert_unchanged(root, before, ids)


@pytest.mark.slow
def test_format2_crafted_record_block_without_content_size(one_log_store, huge_frame_without_size):
    """A record block declaring 512 MiB in a frame without a content size (zstd would allocate the
    whole declared size up front): opening the store, walking runs and reading the object stay
    within bounds; the object is an integrity error."""
    root, keys = one_log_store
    oid = blake3.blake3(b"a record that is not there").digest()
    raw = len(b"record %d\x00" % HUGE) + HUGE
    # Format 3: every record has an index row and extends a chain its branch ref moves to; the
    # crafted record starts a run of its own (run zz), so r1's readers never touch it.
    append_raw_entry(root, [[oid, "record", raw, 0, 0]], [[1, raw, len(huge_frame_without_size)]], huge_frame_without_size,
                     moves=[("run/zz/branch/0", None, oid, "crafted")], recs=[[0, "zz", 0, 0, None, "run_started", [], None]])
    got = bounded("""
        log = objstore.runs.api.RunLog(objstore.storage.store.Store.open(root))
        assert log.runs()
        log.store.get(bytes.fromhex(oid))
    """, root=root, oid=oid.hex())
    assert got["error"] == "IntegrityError" and got["exit"] == 6
    for args in (["log", "r1"], ["episode", "r1"]):
        rc, out, err = run_cli_bounded(*args, store=root, env_extra={"OBJSTORE_KEYS": keys})
        assert rc == 0 and "Traceback" not in err, err
    rc, out, err = run_cli_bounded("log", "zz", store=root, env_extra={"OBJSTORE_KEYS": keys})
    assert rc == 6 and one_line(err).startswith("objstore: error: integrity error: object"), err
    rc, out, err = run_cli_bounded("show", oid.hex(), store=root, env_extra={"OBJSTORE_KEYS": keys})
    assert rc == 6 and one_line(err).startswith(f"objstore: error: integrity error: object {oid.hex()}")


CANON = b"blob 4\x00quux"  # 11 bytes, stored nowhere else
MALFORMED_ROWS = [
    ("row-too-short", lambda oid: ([[oid, "blob", 11]], [[0, 11, 11]])),
    ("row-block-out-of-range", lambda oid: ([[oid, "blob", 11, 3, 0]], [[0, 11, 11]])),
    ("row-past-its-block", lambda oid: ([[oid, "blob", 11, 0, 5]], [[0, 11, 11]])),
    ("row-length-a-string", lambda oid: ([[oid, "blob", "11", 0, 0]], [[0, 11, 11]])),
    ("row-id-too-short", lambda oid: ([[oid[:5], "blob", 11, 0, 0]], [[0, 11, 11]])),
    ("block-compression-7", lambda oid: ([[oid, "blob", 11, 0, 0]], [[7, 11, 11]])),
    ("raw-block-lengths-differ", lambda oid: ([[oid, "blob", 11, 0, 0]], [[0, 4 << 30, 11]])),
]


@pytest.mark.slow
@pytest.mark.parametrize("name,make", MALFORMED_ROWS, ids=[m[0] for m in MALFORMED_ROWS])
def test_format2_crafted_entry_meta(store, name, make):
    """An entry whose checksum is right but whose meta is malformed is not an entry: as the last
    one it is a torn tail (invisible, verify notes it and exits 0); followed by a good one, the log
    is damaged (writers refuse with exit 6). Never a traceback, never a crafted size allocated."""
    root, keys = store
    env = {"OBJSTORE_KEYS": keys}
    oid = blake3.blake3(CANON).digest()
    objs, blocks = make(oid)
    append_raw_entry(root, objs, blocks, CANON)
    for args in (["runs"], ["log", "r1"], ["verify"]):
        rc, out, err = run_cli_bounded(*args, store=root, env_extra=env)
        assert rc == 0 and "Traceback" not in err, (args, err)
    rc, out, err = run_cli_bounded("cat", oid.hex(), store=root, env_extra=env)
    assert rc == 4 and one_line(err) == f"objstore: error: object not found: {oid.hex()}"


def sealed_store(tmp_path):
    """A store whose segment 1 is sealed (its index file written), holding run r1's records: one log (the
    9 MiB blob put outside a batch is written at once there; with a log per run it waits for a record)."""
    root = str(tmp_path / "sealed")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("OBJSTORE_NEW_FORMAT", "3")
        log = RunLog(Store.init(root, fsync="off"))
    log.start_run("r1")
    rec = log.record_attempt("r1", 1, 0, "failed", context={"k": "v"})
    log.put_blob(os.urandom(9 << 20))
    log.record_attempt("r1", 2, 0, "failed")
    idx = os.path.join(root, "log", "0000000001.idx")
    assert os.path.exists(idx), os.listdir(os.path.join(root, "log"))
    return root, rec.id, idx


def rewrite_index_row(idx: str, oid: bytes, **fields):
    """Change fields of ``oid``'s row in an index file and recompute its trailing BLAKE3 (a crafted
    index is self-consistent: only its claims are false)."""
    from objstore.storage.log import segindex as SI

    data = bytearray(open(idx, "rb").read())
    base = SI.HEAD.size + SI.FANOUT.size
    nobj = SI.HEAD.unpack_from(data, 0)[5]
    names = ("id", "entry", "block_off", "stored", "raw", "off", "length", "comp", "type")
    for i in range(nobj):
        row = list(SI.OBJ.unpack_from(data, base + i * SI.OBJ.size))
        if row[0] == oid:
            for k, v in fields.items():
                row[names.index(k)] = v
            SI.OBJ.pack_into(data, base + i * SI.OBJ.size, *row)
            break
    else:
        raise AssertionError("row not found")
    data[-32:] = blake3.blake3(bytes(data[:-32])).digest()
    with open(idx, "wb") as f:
        f.write(data)


@pytest.mark.slow
@pytest.mark.parametrize("fields", [{"stored": 0xFFFFFFFF, "raw": 0xFFFFFFFF, "comp": 1}, {"raw": 0xFFFFFFFF, "length": 0xFFFFFF00, "comp": 1},
                                    {"stored": 0xFFFFFFF0, "raw": 0xFFFFFFF0, "comp": 0}, {"type": 9}, {"comp": 5}],
                         ids=["stored-4GiB", "raw-4GiB", "raw-block-4GiB", "type-9", "compression-5"])
def test_format2_crafted_index_row(tmp_path, fields):
    """A crafted, self-consistent index (its trailer recomputed) is not the index the log names by
    digest (format 3): verify names it, and every read answers as before from an index rebuilt from
    the segment's entries, in bounded memory."""
    root, rid, idx = sealed_store(tmp_path)
    want = Store.open(root).get(rid)
    rewrite_index_row(idx, rid, **fields)
    rc, out, err = run_cli_bounded("verify", store=root)
    assert rc == 1 and f"damaged-index {idx}" in out.decode() and "Traceback" not in err, (out, err)
    got = bounded("assert objstore.storage.store.Store.open(root).get(bytes.fromhex(oid))[0] == 'record'", root=root, oid=rid.hex())
    assert got == {"ok": True, "maxrss": got["maxrss"]}, got
    rc, out, err = run_cli_bounded("show", rid.hex(), store=root)
    assert rc == 0, err
    assert Store.open(root).get(rid) == want


def test_format2_crafted_index_fanout_is_rebuilt(tmp_path):
    from objstore.storage.log import segindex as SI

    root, rid, idx = sealed_store(tmp_path)
    data = bytearray(open(idx, "rb").read())
    fan = list(SI.FANOUT.unpack_from(data, SI.HEAD.size))
    fan[255] += 1000  # lookups would run past the rows
    fan[3] = 0xFFFFFFFF
    SI.FANOUT.pack_into(data, SI.HEAD.size, *fan)
    data[-32:] = blake3.blake3(bytes(data[:-32])).digest()
    open(idx, "wb").write(data)
    got = bounded("""
        s = objstore.storage.store.Store.open(root)
        assert s.get(bytes.fromhex(oid))[0] == "record"
        for b in range(256):
            s.has(bytes([b]) * 32)
    """, root=root, oid=rid.hex())
    assert got == {"ok": True, "maxrss": got["maxrss"]}
    code, out, err = run_cli("verify", store=root, exit_code=1)  # readers leave the wrong file for verify to name...
    assert f"damaged-index {idx}" in out
    log = RunLog(Store.open(root, fsync="off"))
    assert log.store.get(rid)[0] == "record"  # a process that used the index rebuilt it from the entries...
    log.record_attempt("r1", 3, 0, "failed")  # ...and replaces the file when it next writes
    run_cli("verify", store=root, exit_code=0)


# -- format 1: crafted packs and loose objects (read by upgrade) ----------------------------------


def format1_store(root):
    root = str(root)
    for d in ("objects", "packs", "refs", "logs", "tmp"):
        os.makedirs(os.path.join(root, d), exist_ok=True)
    with open(os.path.join(root, "OBJSTORE"), "wb") as f:
        f.write(b'{"format": "objstore", "version": 1}\n')
    return root


def write_pack(root, blocks, entries, name="0" * 32):
    """A pack of [(compression, raw length, stored bytes)] and index entries (id, block, off, len),
    its checksum right."""
    out, pos, block_pos = [b"OSPK\x01\x00\x00\x00"], 8, []
    for comp, raw_len, stored in blocks:
        block_pos.append(pos)
        chunk = struct.pack("<BII", comp, raw_len, len(stored)) + stored
        out.append(chunk)
        pos += len(chunk)
    out.append(struct.pack("<I", len(block_pos)) + struct.pack(f"<{len(block_pos)}Q", *block_pos) + struct.pack("<I", len(entries)))
    out += [struct.pack("<32sIII", *e) for e in sorted(entries)]
    body = b"".join(out)
    path = os.path.join(root, "packs", f"pack-{name}.pack")
    with open(path, "wb") as f:
        f.write(body + struct.pack("<Q32s4s", pos, blake3.blake3(body).digest(), b"OSPX"))
    return path


def test_format1_crafted_pack_block_of_512_mib(tmp_path, huge_blob_frame):
    """A pack of a few KiB whose one block declares 512 MiB (the frame does decompress to that):
    the reader refuses it in bounded memory; upgrade exits 6 and leaves the store as it was."""
    root = format1_store(tmp_path / "f1")
    oid = blake3.blake3(b"something else").digest()
    raw = len(b"blob %d\x00" % HUGE) + HUGE
    path = write_pack(root, [(1, raw, huge_blob_frame)], [(oid, 0, 0, raw)])
    assert os.path.getsize(path) < (1 << 20)
    os.makedirs(os.path.join(root, "refs", "run", "r1", "branch"))
    with open(os.path.join(root, "refs", "run", "r1", "branch", "0"), "w") as f:
        f.write(oid.hex() + "\n")
    got = bounded("objstore.legacy.format1.Format1Reader(root).read(bytes.fromhex(oid))", root=root, oid=oid.hex())
    assert got["error"] in ("IntegrityError", "CorruptPack") and got["exit"] == 6, got
    got = bounded("list(objstore.legacy.format1.Format1Reader(root).iter_objects())", root=root)
    assert got["exit"] == 6
    before = snapshot_tree(root)
    rc, out, err = run_cli_bounded("upgrade", store=root)
    assert rc == 6 and one_line(err).startswith("objstore: error: integrity error: "), err
    assert snapshot_tree(root) == before
    assert sorted(os.listdir(tmp_path)) == ["f1"], "upgrade left files behind"


@pytest.mark.parametrize("case", ["stored-past-the-end", "raw-4GiB-stored-raw", "entry-past-its-block", "frame-disagrees-with-block"])
def test_format1_crafted_pack_sizes(tmp_path, case):
    root = format1_store(tmp_path / "f1")
    canon = b"blob 5\x00hello"
    oid = blake3.blake3(canon).digest()
    z = zstandard.ZstdCompressor(write_content_size=True).compress(canon)
    if case == "stored-past-the-end":
        path = write_pack(root, [(0, len(canon), canon)], [(oid, 0, 0, len(canon))])
        data = bytearray(open(path, "rb").read())
        struct.pack_into("<I", data, 8 + 5, 0xFFFFFFF0)  # the block's stored length
        body = bytes(data[:-44])
        data[-44:] = struct.pack("<Q32s4s", struct.unpack_from("<Q", data, len(data) - 44)[0], blake3.blake3(body).digest(), b"OSPX")
        open(path, "wb").write(data)
    elif case == "raw-4GiB-stored-raw":
        write_pack(root, [(0, 0xFFFFFFF0, canon)], [(oid, 0, 0, len(canon))])
    elif case == "entry-past-its-block":
        write_pack(root, [(1, len(canon), z)], [(oid, 0, 0, 0xFFFFFF00)])
    else:
        write_pack(root, [(1, 0xFFFFFFF0, z)], [(oid, 0, 0, len(canon))])
    got = bounded("objstore.legacy.format1.Format1Reader(root).read(bytes.fromhex(oid))", root=root, oid=oid.hex())
    assert got["exit"] == 6 and got["error"] in ("IntegrityError", "CorruptPack"), got


def test_format1_crafted_loose_object_of_512_mib(tmp_path, huge_blob_frame):
    root = format1_store(tmp_path / "f1")
    oid = blake3.blake3(b"not the content").digest()
    h = oid.hex()
    os.makedirs(os.path.join(root, "objects", h[:2]))
    with open(os.path.join(root, "objects", h[:2], h[2:]), "wb") as f:
        f.write(b"OSO\x01\x01" + huge_blob_frame)
    got = bounded("objstore.legacy.format1.Format1Reader(root).read(bytes.fromhex(oid))", root=root, oid=h)
    assert got["error"] == "IntegrityError" and got["exit"] == 6, got
    with pytest.raises(IntegrityError):
        Format1Reader(root).read(bytes.fromhex(h))
    with pytest.raises(CorruptPack):  # a pack whose checksum does not hold is refused before its index is used
        p = write_pack(root, [(0, 5, b"hello")], [(oid, 0, 0, 5)])
        data = bytearray(open(p, "rb").read())
        data[10] ^= 1
        open(p, "wb").write(data)
        Format1Reader(root).index()


# -- a property: arbitrary JSON-ish input ingests, or is invalid input and changes nothing --------

_scalars = st.one_of(st.none(), st.booleans(), st.integers(min_value=-(2**70), max_value=2**70),
                     st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=8))
_json = st.recursive(_scalars, lambda kids: st.one_of(st.lists(kids, max_size=3), st.dictionaries(st.text(max_size=4), kids, max_size=3)),
                     max_leaves=12)
_events = st.fixed_dictionaries(
    {"v": st.one_of(st.just(1), _scalars), "type": st.sampled_from(["attempt", "rewind", "fork", "turn", "intent", "run_finished", "teleport"]),
     "run": st.sampled_from(["r1", "r2", "../x", ""])},
    optional={"step": _json, "attempt": _json, "state": st.sampled_from(["failed", "succeeded", "nope"]), "context": _json,
              "to_lsn": _json, "from_branch": _json, "at_lsn": _json, "live": _json, "time": _json, "branch": _json,
              "prompt": _json, "role": _json, "content": _json, "intent": _json, "effect": _json, "idempotent": _json,
              "status": _json, "generation": _json, "extra": _json})


def _mangle(text: str, how: int) -> str:
    return [text, text.replace("1", "1e999", 1), text.replace('"r', '"\\ud800r', 1), text.replace("{", '{"v": 1, ', 1),
            "[" * 70 + text + "]" * 70][how]


@pytest.mark.slow
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(events=st.lists(_events, min_size=1, max_size=3), how=st.integers(0, 4))
def test_property_ingest_either_lands_or_is_invalid_input_and_changes_nothing(tmp_path_factory, events, how):
    root = getattr(test_property_ingest_either_lands_or_is_invalid_input_and_changes_nothing, "root", None)
    if root is None:
        root = str(tmp_path_factory.mktemp("prop") / "s")
        log = RunLog(Store.init(root, fsync="off"))
        ingest(log, io.BytesIO(jl(*GOOD)))
        test_property_ingest_either_lands_or_is_invalid_input_and_changes_nothing.root = root
    log = RunLog(Store.open(root, fsync="off"))
    lines = "".join(_mangle(json.dumps(e, allow_nan=True), how) + "\n" for e in events)
    before = log.store.engine.position()
    try:
        ingest(log, io.StringIO(lines))
    except ObjstoreError as e:
        assert isinstance(e, InvalidInput) and e.exit_code == 5, repr(e)
        assert str(e).startswith("ingest: line ") and "\n" not in str(e)
        assert log.store.engine.refresh() == before, "a refused ingest wrote something"
    else:
        for e in events:  # what landed was valid by the rules
            assert e["v"] == 1 and type(e["v"]) is int


def test_ingest_of_bad_input_creates_no_store(tmp_path):
    """ingest creates its store when absent, but only for input that is good: a bad line leaves
    no directory behind."""
    root = str(tmp_path / "new")
    rc, out, err = run_cli("ingest", "-", store=root, input=jl(attempt(step=True)), exit_code=5)
    assert rc == 5 and one_line(err) == "objstore: error: ingest: line 1: step: expected int, got bool"
    assert not os.path.exists(root)
    run_cli("ingest", "-", store=root, input=jl(*GOOD), exit_code=0)
    assert os.path.isfile(os.path.join(root, "OBJSTORE"))


@pytest.mark.parametrize("args,opt,lo", [
    (["log", "latest", "-n", str(10**30)], "'-n' / '--max-count'", 1),
    (["log", "latest", "-n", "0"], "'-n' / '--max-count'", 1),
    (["log", "latest", "--branch", str(10**30)], "'--branch'", -(2**63)),
    (["rewind", "latest", "--to-lsn", str(10**30)], "'--to-lsn'", 0),
    (["fork", "latest", "--from-branch", "0", "--at-lsn", str(-(10**30))], "'--at-lsn'", 0),
    (["diff", "latest", "0", str(2**63)], "'B'", -(2**63)),
])
def test_integer_options_beyond_int64_are_usage_errors(tmp_path, args, opt, lo):
    """A bad value on the command line is click's BadParameter, exit 2 (issue 16), naming the option."""
    store = str(tmp_path / "s")
    run_cli("demo", store=store, exit_code=0)
    before = snapshot_tree(store)
    code, out, err = run_cli(*args, store=store, exit_code=2)
    assert (out, err) == ("", f"objstore: error: Invalid value for {opt}: must be an integer in {lo}..{2**63 - 1}, got {args[-1]}"
                              f" (see 'objstore {args[0]} --help')\n")
    assert snapshot_tree(store) == before
    code, out, err = run_cli(*args[:-1], "ten", store=store, exit_code=2)  # not an integer at all: a usage error
    assert out == "" and err.count("\n") == 1 and "'ten' is not an integer" in err


# Found by typing objstore for mypy (issue #10): each was a traceback before.
ATTEMPT = {"step": 0, "attempt": 0, "state": "running"}


@pytest.mark.parametrize("value", [b"\x01" * 32, "ref: nonsense", "ref: run/other/branch/x"])
def test_append_with_a_malformed_live_ref_is_invalid_input(value):
    """An id or a symbolic ref naming no branch where the live ref belongs (was TypeError / IndexError
    in view()). Format 3: the rules of the log refuse such a move wherever an entry is applied, its
    writer first, so the store never holds it; view() and append keep working."""
    store = Store.memory()
    log = RunLog(store)
    run = log.start_run()
    before = store.engine.position()
    with pytest.raises(Refused, match="live"):
        store.set_ref(live_ref(run), store.read_ref(live_ref(run)), value, "damage")
    assert store.engine.position() == before
    assert log.view(run).live == 0
    log.append(run, "attempt", ATTEMPT)


def test_append_to_a_branch_ref_that_is_not_an_id_is_branch_not_found():
    """A branch ref holding a symbolic value (was AttributeError on str.hex / a store lookup by str)."""
    store = Store.memory()
    log = RunLog(store)
    run = log.start_run()
    log.fork(run, 0, 0, make_live=False)
    with pytest.raises(Refused, match="branch/1"):  # format 3: refused by the rules where the entry is applied
        store.set_ref(branch_ref(run, 1), store.read_ref(branch_ref(run, 1)), symref(branch_ref(run, 0)), "damage")
    with pytest.raises(BranchNotFound):
        log.append(run, "attempt", ATTEMPT, branch=7, allow_retained=True)
    log.append(run, "attempt", ATTEMPT, branch=1, allow_retained=True)  # branch 1 is untouched
    log.append(run, "attempt", ATTEMPT)  # the live branch too
