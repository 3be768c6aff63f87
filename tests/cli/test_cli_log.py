"""`objstore log` like `git log`: -n reads only what it prints, local human times, --since/--until,
--format oneline|full|json, a pager on a terminal only, and --graph (golden file).

The golden file ``fixtures/golden-log-graph.txt`` is the ``log --graph`` output of the demo run
recorded with a fixed id and clock (``objstore demo --run demo --at 1800000000``), so every
object id in it is reproducible. Regenerate it after an intended change with
``OBJSTORE_REGEN_GOLDEN=1 .venv/bin/python -m pytest tests/cli/test_cli_log.py -k golden`` and
review the diff.
"""

import datetime
import json
import os
import re

import pytest
from click.testing import CliRunner
from helpers import run_cli, run_on_terminal

from objstore import RunLog, Store
from objstore.errors import InvalidInput
from objstore.runs import history as H
from objstore.runs import views
from objstore.storage import codec

GOLDEN = os.path.join(os.path.dirname(__file__), "..", "..", "fixtures", "golden-log-graph.txt")
AT = 1800000000  # the demo's fixed clock: 2027-01-15 08:00:00 UTC, one second per record
UTC = {"TZ": "UTC"}


@pytest.fixture
def demo(tmp_path):
    root = str(tmp_path / "s")
    run_cli("demo", "--run", "demo", "--at", str(AT), store=root, exit_code=0)
    return root


# -- -n reads only what it prints ---------------------------------------------------------
def test_log_n_reads_only_what_it_prints(tmp_path, monkeypatch):
    """A 2 000-record run written in big batches (so blocks hold hundreds of records): log -n 3
    decodes O(3) objects at the lowest layer (codec.decode and the block decoder both count in
    codec.STATS), not 2 000; the full log decodes them all."""
    from objstore_cli.main import cli

    root = str(tmp_path / "s")
    log = RunLog(Store.init(root, fsync="off"))
    run = log.start_run("long")
    for start in range(0, 2000, 500):
        with log.store.batch():
            for i in range(start, start + 500):
                log.record_attempt(run, i, 0, "succeeded")
    log.store.logs.close()

    def decoded(*args):
        before = codec.STATS["objects_decoded"]
        r = CliRunner().invoke(cli, ["--store", root, "log", *args])
        assert r.exit_code == 0, r.output
        return codec.STATS["objects_decoded"] - before, r.output

    n, out = decoded("long", "-n", "3", "--format", "oneline")
    assert len(out.splitlines()) == 3
    assert n <= 6, f"log -n 3 decoded {n} objects"
    n, out = decoded("latest", "-n", "3", "--format", "json")
    assert len(out.splitlines()) == 3 and n <= 6
    n, out = decoded("long", "--format", "oneline")
    assert len(out.splitlines()) == 2001 and n >= 2001


# -- text ---------------------------------------------------------------------------------
def test_default_text_has_local_human_times(demo):
    rc, out, err = run_cli("log", "demo", "-n", "2", store=demo, env_extra=UTC, exit_code=0)
    lines = out.splitlines()
    assert lines[0] == "== run demo branch 1 (live)"
    assert re.match(r"^lsn 3    run_finished     [0-9a-f]{12}  2027-01-15 08:00:15  succeeded$", lines[1]), lines[1]
    rc, out2, err = run_cli("log", "demo", "-n", "2", store=demo, env_extra={"TZ": "Asia/Tokyo"}, exit_code=0)
    assert "2027-01-15 17:00:15" in out2, "times are local"


def test_formats(demo):
    rc, out, err = run_cli("log", "demo", "--json", store=demo, exit_code=0)
    as_list = json.loads(out)
    rc, out, err = run_cli("log", "demo", "--format", "json", store=demo, exit_code=0)
    lines = [json.loads(line) for line in out.splitlines()]
    assert lines == as_list and len(lines) == 9  # branch 1's 4 records, its fork, branch 0 up to lsn 3
    assert lines[4]["kind"] == "fork" and lines[4]["compensation_required"] is True
    log = RunLog(Store.open(demo))
    entries = list(H.entries(log, log.view("demo")))
    assert lines == [views.log_entry(e.record, e.fork) for e in entries], "the shapes are views'"
    rc, out, err = run_cli("log", "demo", "--format", "oneline", store=demo, exit_code=0)
    one = out.splitlines()
    assert len(one) == 9 and all(re.match(r"^[0-9a-f]{12} b\d", line) for line in one)
    assert one[4].endswith("fork branch 1 forked from branch 0 at lsn 3 (step 6 failed: try the ledger-first path)  "
                           "[COMPENSATION REQUIRED: refund-1234 (issue_refund, step 3, committed at lsn 5)]")
    rc, out, err = run_cli("log", "demo", "--format", "full", "-n", "1", store=demo, env_extra=UTC, exit_code=0)
    assert out.splitlines()[:6] == [f"record {lines[0]['id']}", "Run:     demo", "Branch:  1 (live)   LSN: 3",
                                    "Kind:    run_finished", f"Parent:  {lines[1]['id']}", "Date:    2027-01-15 08:00:15"]
    rc, out, err = run_cli("log", "demo", "--format", "xml", store=demo, exit_code=2)


def test_since_until(demo):
    def lsns(*args, env=UTC):
        rc, out, err = run_cli("log", "demo", "--all-branches", "--format", "json", *args, store=demo, env_extra=env, exit_code=0)
        return [(e["branch"], e.get("lsn")) for e in map(json.loads, out.splitlines())]

    # times: branch 0 lsn k at AT+k (0..10), the fork at AT+11, branch 1 lsn k at AT+12+k
    assert lsns("--since", f"@{AT + 9}", "--until", f"@{AT + 12}") == [(1, 0), (1, None), (0, 10), (0, 9)]
    assert lsns("--since", "2027-01-15 08:00:09", "--until", "2027-01-15T08:00:12") == [(1, 0), (1, None), (0, 10), (0, 9)]
    assert lsns("--since", "2027-01-15T08:00:09Z", "--until", "2027-01-15 17:00:12+09:00", env={"TZ": "America/New_York"}) \
        == [(1, 0), (1, None), (0, 10), (0, 9)]
    assert lsns("--until", "2027-01-15 08:00:01") == [(0, 1), (0, 0)]
    assert len(lsns("--since", "2h")) == 16 and lsns("--until", "3d") == [], "the demo's clock is in 2027"
    assert lsns("--since", "2027-01-16") == []
    for bad in ("bogus", "3 fortnights", "2027-13-01", "@x"):
        rc, out, err = run_cli("log", "demo", "--since", bad, store=demo, exit_code=2)  # a bad command-line value: click usage error (#16)
        assert len(err.strip().splitlines()) == 1 and "cannot read time" in err


def test_parse_time_forms():
    now = 1_800_000_000.0
    assert H.parse_time("2h", now) == now - 7200
    assert H.parse_time("3d", now) == now - 3 * 86400
    assert H.parse_time("2 hours ago", now) == now - 7200
    assert H.parse_time("90s", now) == now - 90
    assert H.parse_time("1w", now) == now - 604800
    assert H.parse_time("now", now) == now
    assert H.parse_time("@123.5", now) == 123.5
    today = datetime.datetime.fromtimestamp(now).replace(hour=0, minute=0, second=0, microsecond=0)
    assert H.parse_time("today", now) == today.timestamp()
    assert H.parse_time("yesterday", now) == (today - datetime.timedelta(days=1)).timestamp()  # local midnight, DST or not
    assert H.parse_time("today", now) <= now < H.parse_time("today", now) + 86400 + 3600
    assert H.parse_time("2027-01-15T08:00:00+00:00") == 1800000000.0
    with pytest.raises(InvalidInput):
        H.parse_time("sometime")


# -- pager --------------------------------------------------------------------------------
def _run_in_pty(args, env):
    return run_on_terminal(args, env)


def test_pager_on_a_terminal_only(demo, tmp_path):
    paged = tmp_path / "paged.txt"
    pager = tmp_path / "pager.sh"  # click runs $PAGER as an argv (no shell)
    pager.write_text(f"#!/bin/sh\ncat > {paged}\n")
    pager.chmod(0o755)
    env = dict(os.environ, PAGER=str(pager))
    env.pop("OBJSTORE_DIR", None)
    rc, out = _run_in_pty(["--store", demo, "log", "demo"], env)
    assert rc == 0 and paged.read_text().startswith("run demo branch 1 (live)")  # its table (tables.log_tables)
    assert "run_finished" not in out, "on a terminal the output went to the pager"
    paged.unlink()
    rc, out = _run_in_pty(["--store", demo, "log", "demo", "--no-pager"], env)
    assert rc == 0 and not paged.exists() and "run_finished" in out
    rc, out, err = run_cli("log", "demo", store=demo, env_extra={"PAGER": str(pager)}, exit_code=0)
    assert not paged.exists() and out.startswith("== run demo branch 1 (live)"), "piped: never paged"


# -- graph ----------------------------------------------------------------------------------
def test_log_graph_golden(demo):
    """`log --graph` of the fixed demo run, byte for byte (OBJSTORE_REGEN_GOLDEN=1 rewrites it)."""
    rc, out, err = run_cli("log", "--graph", "demo", store=demo, exit_code=0)
    if os.environ.get("OBJSTORE_REGEN_GOLDEN"):
        with open(GOLDEN, "w") as f:
            f.write(out)
    with open(GOLDEN) as f:
        assert out == f.read()
    lines = out.splitlines()
    assert lines[0].endswith("succeeded  <- branch 1 (LIVE)") and lines[0].startswith("* ")
    fork = [line for line in lines if " fork " in line]
    assert len(fork) == 1 and "(step 6 failed: try the ledger-first path)" in fork[0] and "COMPENSATION REQUIRED: refund-1234" in fork[0]
    assert "|/" in lines and any("<- branch 0 (retained, not live)" in line for line in lines)
    # the same run recorded again (same id and clock, another store) draws the same bytes
    rc, out2, err = run_cli("log", "--graph", "latest", store=demo, exit_code=0)
    assert out2 == out


def test_graph_of_a_bushy_tree(tmp_path):
    """Forks of forks, two forks at one LSN, a fork with no record yet, a live branch that is not
    the newest: every node once, lanes merge only into their parent's column."""
    log = RunLog(Store.memory())
    run = log.start_run("t", when=1)
    for i in range(4):
        log.record_attempt(run, i, 0, "succeeded", when=2 + i)  # b0: lsn 0..4
    log.fork(run, 0, 2, reason="first")  # b1 at b0@2
    log.record_attempt(run, 9, 0, "failed", branch=1, when=10)
    log.fork(run, 0, 2, reason="second")  # b2 at b0@2 too
    log.record_attempt(run, 9, 1, "succeeded", branch=2, when=11)
    log.fork(run, 2, 0, reason="nested", make_live=False)  # b3 at b2@0
    log.record_attempt(run, 9, 2, "succeeded", branch=3, allow_retained=True, when=12)
    log.fork(run, 0, 1, reason="empty", make_live=False)  # b4 at b0@1, no record
    log.set_live(run, 1)
    lines = list(H.graph(log, log.view(run)))
    text = "\n".join(lines)
    nodes = [line for line in lines if "*" in line]
    assert len(nodes) == 5 + 1 + 2 + 2 + 1 + 1  # b0 records, b1 fork+1, b2 fork+1, b3 fork+1, b4 fork
    assert nodes[0].startswith("* ") and "<- branch 1 (LIVE)" in nodes[0], "the live lineage is the leftmost column"
    for line in lines:
        assert re.match(r"^[|*/ ]+", line)
    assert "empty" in text and "<- branch 4 (retained, not live)" in text
    assert text.count("|/") >= 3
    # the last line is the run's start, alone in the first column
    assert re.match(r"^\* [0-9a-f]{12} b0/0 ", lines[-1])


def test_graph_rejects_other_modes(demo):
    rc, out, err = run_cli("log", "--graph", "demo", "--format", "json", store=demo, exit_code=2)
    rc, out, err = run_cli("log", "--graph", "demo", "-n", "3", store=demo, exit_code=0)
    assert len(out.splitlines()) == 3
