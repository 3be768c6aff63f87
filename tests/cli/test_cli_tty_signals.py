"""Ctrl-C and terminals: SIGINT is exit 130 with one line (or one JSON object) and a store that
verifies clean; ``cat``/``show`` never dump binary bytes on a terminal (a pty here) but give them
as they are to a pipe or with ``--raw``."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from helpers import run_cli, run_on_pty

from objstore import RunLog, Store

BINARY = bytes(range(256)) * 4


def _env(extra=None):
    env = dict(os.environ)
    env.pop("OBJSTORE_DIR", None)
    env.update(extra or {})
    return env


def _blocked_reading_stdin(pid: int) -> bool:
    """The process sits in read(0, ...) (Linux: /proc/PID/syscall is 'NR fd ...', read is 0 on x86-64,
    63 on arm64)."""
    try:
        with open(f"/proc/{pid}/syscall") as f:
            fields = f.read().split()
    except OSError:
        return False
    return len(fields) > 1 and fields[0] in ("0", "63") and int(fields[1], 16) == 0


def _interrupt_ingest(root, *extra):
    """Start 'ingest -' on a pipe that gives some events and then stalls; SIGINT it while it waits."""
    p = subprocess.Popen([sys.executable, "-m", "objstore", "--store", root, "ingest", "-", *extra],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_env())
    events = "".join(json.dumps({"v": 1, "type": "run_started", "run": f"slow{i}", "subject": "s"}) + "\n" for i in range(50))
    p.stdin.write(events.encode())
    p.stdin.flush()
    if os.path.exists("/proc/self/syscall"):
        for _ in range(6000):  # wait (bounded, not timed) until it is blocked on the stalled pipe
            if _blocked_reading_stdin(p.pid) or p.poll() is not None:
                break
            time.sleep(0.01)
    else:  # no way to see the wait: give it ten times the library's import time to get there
        time.sleep(3)
    assert p.poll() is None, p.communicate()
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=60)
    p.stdin.close() if not p.stdin.closed else None
    return p.returncode, out.decode(), err.decode()


def test_ctrl_c_exits_130_with_one_line_and_the_store_verifies(tmp_path):
    root = str(tmp_path / "s")
    log = RunLog(Store.init(root))
    log.start_run("before", subject="s")
    rc, out, err = _interrupt_ingest(root)
    assert rc == 130, (rc, out, err)
    assert err.splitlines() == ["objstore: error: interrupted"], err
    assert "Traceback" not in err and out == ""
    run_cli("verify", store=root, exit_code=0)
    rc, out, err = run_cli("runs", "--json", store=root, exit_code=0)
    assert [r["run"] for r in json.loads(out)] == ["before"], "an interrupted ingest lands nothing"


def test_ctrl_c_under_json_is_one_json_object(tmp_path):
    root = str(tmp_path / "s")
    Store.init(root)
    rc, out, err = _interrupt_ingest(root, "--json")
    assert rc == 130, (rc, out, err)
    lines = err.splitlines()
    assert len(lines) == 1 and json.loads(lines[0]) == {"error": "interrupted", "exit": 130, "message": "interrupted"}
    run_cli("verify", store=root, exit_code=0)


# -- binary bodies on a terminal ----------------------------------------------------------------------------
@pytest.fixture
def blobs(tmp_path):
    root = str(tmp_path / "s")
    log = RunLog(Store.init(root))
    run = log.start_run("r1", subject="s")
    binary, text = log.put_blob(BINARY), log.put_blob(b"plain text\twith a tab\n")
    # the record names both blobs: on format 6 a blob no record names is held by its process, never written
    rec = log.record_attempt(run, step=1, attempt=0, state="succeeded", prompt=binary, output=text)
    return root, binary.hex(), text.hex(), rec.id.hex()


def on_tty(root, *args):
    """Run the CLI with stdout on a pty (raw mode: bytes unchanged); (exit code, what the terminal got, stderr)."""
    return run_on_pty([sys.executable, "-m", "objstore", "--store", root, *args], raw=True, env=_env({"PAGER": "cat"}))


def test_cat_and_show_summarise_binary_on_a_terminal(blobs):
    root, binary, text, record = blobs
    rc, got, err = on_tty(root, "cat", "--body", binary)
    assert rc == 0, err
    assert got.decode().splitlines() == [f"blob {len(BINARY)} bytes, binary (use --raw or a pipe to get the bytes)"]
    rc, got, err = on_tty(root, "cat", record)
    assert rc == 0, err
    lines = got.decode().splitlines()
    assert len(lines) == 1 and lines[0].startswith("record ") and lines[0].endswith("bytes, binary (use --raw or a pipe to get the bytes)")
    rc, got, err = on_tty(root, "show", binary)
    assert rc == 0, err
    assert got.decode().splitlines() == [f"blob {binary}", f"size {len(BINARY)}", "",
                                         f"blob {len(BINARY)} bytes, binary (use --raw or a pipe to get the bytes)"]
    # text is text, on a terminal too
    rc, got, err = on_tty(root, "cat", "--body", text)
    assert rc == 0 and got == b"plain text\twith a tab\n", (got, err)
    rc, got, err = on_tty(root, "show", text)
    assert rc == 0 and got.endswith(b"plain text\twith a tab\n\n"), got
    # --raw: the bytes, even on a terminal
    rc, got, err = on_tty(root, "cat", "--body", "--raw", binary)
    assert rc == 0 and got == BINARY, err
    rc, got, err = on_tty(root, "show", "--raw", binary)
    assert rc == 0 and got.endswith(BINARY + b"\n"), err


def test_binary_goes_to_a_pipe_as_is(blobs):
    root, binary, text, record = blobs
    p = subprocess.run([sys.executable, "-m", "objstore", "--store", root, "cat", "--body", binary], capture_output=True, env=_env())
    assert p.returncode == 0 and p.stdout == BINARY, p.stderr
    p = subprocess.run([sys.executable, "-m", "objstore", "--store", root, "show", binary], capture_output=True, env=_env())
    assert p.returncode == 0 and p.stdout.endswith(BINARY + b"\n"), p.stderr
    p = subprocess.run([sys.executable, "-m", "objstore", "--store", root, "cat", record], capture_output=True, env=_env())
    from objstore.storage import codec

    assert p.returncode == 0 and codec.object_id(p.stdout).hex() == record
