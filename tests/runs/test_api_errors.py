"""No untyped error leaves the public API, and no CLI error is more than one line.

Found by a review of issue #10's change: non-bytes blobs, ids that are not ids, files that
cannot be read, times that are not finite, text that is not Unicode (a non-UTF-8 command-line
argument), a Ctrl-C while the library is still being imported."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest
from helpers import run_cli, snapshot_tree

from objstore import RunLog, Store
from objstore.errors import InvalidId, InvalidInput, StorageOSError
from objstore.runs import history
from objstore.storage import codec

NOT_UTF8 = os.fsdecode(b"\xff")  # what Python makes of the byte 0xff on a command line: '\udcff'


@pytest.fixture
def log(tmp_path):
    return RunLog(Store.open(str(tmp_path / "s"), create=True))


@pytest.mark.parametrize("call,cls,text", [
    (lambda log: log.put_blob(5), InvalidInput, "invalid input: a blob is bytes, not int"),
    (lambda log: log.put_blob(-1), InvalidInput, "invalid input: a blob is bytes, not int"),
    (lambda log: log.put_blob([1, 2]), InvalidInput, "invalid input: a blob is bytes, not list"),
    (lambda log: log.get_blob("zz"), InvalidId,
     "invalid object id 'zz': an object id is 32 bytes (parse hex with codec.parse_id)"),
    (lambda log: log.store.has(b"short"), InvalidId, "invalid object id 'bytes': an object id is 32 bytes (parse hex with codec.parse_id)"),
    (lambda log: log.store.put_blob_file("/nonexistent/x"), StorageOSError,
     "operating-system error while trying to read '/nonexistent/x': [Errno 2] No such file or directory: '/nonexistent/x'"),
    (lambda log: log.store.put_blob_file("/"), StorageOSError,
     "operating-system error while trying to read '/': [Errno 21] Is a directory: '/'"),
    (lambda log: log.store.batch(timeout="x").__enter__(), InvalidInput,
     "invalid input: batch timeout must be a non-negative number of seconds, got 'x'"),
    (lambda log: history.parse_time(5), InvalidInput, "invalid input: a time is text (use an ISO date/time (2026-12-01, "
     "2026-12-01 05:20), @EPOCH, now, today, yesterday, or a span ago (90s, 30m, 1h30m, 3d, 1w, 2.days.ago, 2 hours ago)), got int"),
    (lambda log: codec.canonical_json({"a": NOT_UTF8}), InvalidInput,
     "invalid input: text that is not valid Unicode (a lone surrogate '\\udcff'): objstore stores UTF-8 only"),
    (lambda log: log.fork(log.start_run("r"), 0, 0, reason=NOT_UTF8), InvalidInput,
     "invalid input: fork reason: a string holds a lone surrogate (U+DCFF), which is not Unicode text"),
], ids=["blob-int", "blob-negative", "blob-list", "id-text", "id-short", "file-missing", "file-directory",
        "batch-timeout", "time-int", "json-surrogate", "fork-reason-surrogate"])
def test_library_errors_are_typed(log, call, cls, text):
    before = snapshot_tree(log.store.root)
    with pytest.raises(cls) as ei:
        call(log)
    assert str(ei.value) == text
    if "fork" not in text:
        assert snapshot_tree(log.store.root) == before


@pytest.mark.parametrize("text", ["@nan", "@inf", "@-inf", "@1e400", "9" * 400 + "w"])
def test_times_that_are_not_finite_are_refused(text):
    with pytest.raises(InvalidInput) as ei:
        history.parse_time(text)
    assert str(ei.value).startswith(f"invalid input: cannot read time {text!r}: use an ISO date/time")


@pytest.fixture
def demo(tmp_path):
    root = str(tmp_path / "s")
    run_cli("init", store=root, exit_code=0)
    run_cli("session", "start", "--subject", "alice", "--run", "s1", store=root, exit_code=0)
    run_cli("demo", "--run", "d1", store=root, exit_code=0)
    pub = str(tmp_path / "w.key")
    run_cli("key", "new", pub, store=root, exit_code=0)
    return root, pub + ".pub"


SURROGATE_LINE = "objstore: error: invalid input: text that is not valid Unicode (a lone surrogate '\\udcff'): objstore stores UTF-8 only"


@pytest.mark.parametrize("argv,code,line", [
    (["session", "start", "--subject", NOT_UTF8], 5, SURROGATE_LINE),
    (["journal", "grant", "s1", "--pubkey", "{pub}", "--name", NOT_UTF8], 5, SURROGATE_LINE),
    (["journal", "revoke", "--subject", NOT_UTF8, "--pubkey", "{pub}"], 5, SURROGATE_LINE),
    (["rewind", "d1", "--to-lsn", "1", "--reason", NOT_UTF8], 5,
     "objstore: error: invalid input: fork reason: a string holds a lone surrogate (U+DCFF), which is not Unicode text"),
    (["log", "d1", "--since", "@nan"], 2, "objstore: error: Invalid value for '--since': cannot read time '@nan': use an ISO "
     "date/time (2026-12-01, 2026-12-01 05:20), @EPOCH, now, today, yesterday, or a span ago (90s, 30m, 1h30m, 3d, 1w, "
     "2.days.ago, 2 hours ago) (see 'objstore log --help')"),
    (["log", "d1", "--branch", "0", "--all-branches"], 2, "objstore: error: --branch N shows one branch, --all-branches "
     "every branch: give one of them (see 'objstore log --help')"),
], ids=["session-subject", "grant-name", "revoke-subject", "rewind-reason", "since-nan", "branch-and-all-branches"])
def test_cli_bad_arguments_are_one_line_and_write_nothing(demo, argv, code, line):
    root, pub = demo
    argv = [a.replace("{pub}", pub) for a in argv]
    before = snapshot_tree(root)
    rc, out, err = run_cli(*argv, store=root, exit_code=code)
    assert (out, err) == ("", line + "\n")
    assert snapshot_tree(root) == before
    if code == 5:
        rc, out, err = run_cli(*argv, "--json", store=root, exit_code=code)
        assert json.loads(err) == {"error": "invalid-input", "exit": 5, "message": line.removeprefix("objstore: error: ")}


def test_a_newline_in_a_path_stays_on_one_error_line(tmp_path):
    bad = str(tmp_path / "a\nb")
    rc, out, err = run_cli("--store", bad, "runs", exit_code=3)
    assert err == f"objstore: error: not an objstore store: {str(tmp_path)}/a\\nb (run 'objstore init' or pass --store)\n"


@pytest.mark.parametrize("as_json", [False, True])
def test_ctrl_c_while_the_library_is_imported_is_one_line_and_130(as_json):
    # The console script imports objstore_cli first; its handler covers the library's import time.
    # (argv[0] as the console script has it: a program that merely imports the CLI keeps its Ctrl-C.)
    code = "import sys, time; sys.argv[0] = 'objstore'; import objstore_cli; print('ready', flush=True); time.sleep(60)"
    argv = [sys.executable, "-c", code] + (["--json"] if as_json else [])
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert p.stdout is not None and p.stdout.readline() == b"ready\n"
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=30)
    assert p.returncode == 130
    if as_json:
        assert json.loads(err) == {"error": "interrupted", "exit": 130, "message": "interrupted"}
    else:
        assert err == b"objstore: error: interrupted\n"


def test_a_program_that_imports_the_cli_keeps_its_own_ctrl_c():
    code = "import time; import objstore_cli; print('ready', flush=True); time.sleep(60)"
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert p.stdout is not None and p.stdout.readline() == b"ready\n"
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=30)
    assert p.returncode == -signal.SIGINT and err.endswith(b"KeyboardInterrupt\n")  # Python's own handling
