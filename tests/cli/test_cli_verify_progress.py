"""verify's progress bar: on a terminal it shows objects and bytes done of the total and a rate;
piped, never (not even escape codes)."""

import re

from helpers import run_cli
from test_cli_log import _run_in_pty

from objstore import RunLog, Store
from objstore.runs.verify import progress_totals, verify_report


def _store(tmp_path):
    root = str(tmp_path / "s")
    log = RunLog(Store.init(root, fsync="off"))
    run = log.start_run("r")
    for i in range(200):
        log.record_attempt(run, i, 0, "succeeded", prompt=log.put_blob(b"p" * 100))
    log.store.logs.close()
    return root


def test_progress_hook_counts_objects_and_bytes(tmp_path):
    root = _store(tmp_path)
    log = RunLog(Store.open(root))
    objects, size = progress_totals(log.store)
    calls = []
    report = verify_report(log, progress=lambda n, b: calls.append((n, b)))
    assert not report.problems
    assert calls == sorted(calls) and calls[-1][0] == report.objects == objects
    assert 0 < calls[-1][1] <= size


def test_bar_on_a_terminal_with_objects_bytes_and_rate(tmp_path):
    import os

    root = _store(tmp_path)
    env = dict(os.environ)
    env.pop("OBJSTORE_DIR", None)
    rc, out = _run_in_pty(["--store", root, "verify"], env)
    assert rc == 0, out
    assert re.search(r"objects [\d,]+/[\d,]+", out) and re.search(r"bytes [\d.]+ (k?B|bytes)/[\d.]+ (k?B|bytes)", out), out
    assert "verify: ok" in out


def test_never_piped(tmp_path):
    root = _store(tmp_path)
    rc, out, err = run_cli("verify", store=root, exit_code=0)
    assert "bytes" not in err and "\x1b" not in err and "\x1b" not in out
    assert err.strip().startswith("verify: ok (") and len(err.strip().splitlines()) == 1
    rc, out, err = run_cli("verify", "--json", store=root, exit_code=0)
    assert out.strip() == "[]" and "\x1b" not in err
