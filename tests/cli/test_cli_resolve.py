"""Naming runs like git names commits: exact ids, unique prefixes (of the id or its short id),
'latest' and 'latest~N' in commit order, ambiguity with the exact candidate list; and the
generated ids themselves (unique, time-sortable, random suffix)."""

import calendar
import json
import re
import time

import click
import pytest
from helpers import run_cli
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from objstore import RunLog, Store
from objstore.errors import AmbiguousRun, InvalidInput, RunNotFound
from objstore.runs import records as R
from objstore.runs.api import new_run_id
from objstore.runs.resolve import resolve_run, short_ids, suffix_of

_ID_TIME = re.compile(r"^r(\d{8})-(\d{6})(\d{6})-([0-9a-f]{12})$")


def test_20000_generated_ids_are_unique_valid_and_sorted_by_time():
    t0 = time.time()
    ids = [new_run_id() for _ in range(20000)]
    t1 = time.time()
    assert len(set(ids)) == 20000
    assert ids == sorted(ids), "generation order is string order"
    stamps = []
    for rid in ids:
        R.check_run_id(rid)  # every generated id is a valid run id
        m = _ID_TIME.match(rid)
        assert m, rid
        d, hms, us = m.group(1), m.group(2), int(m.group(3))
        t = calendar.timegm(time.strptime(d + hms, "%Y%m%d%H%M%S")) + us / 1e6  # UTC
        stamps.append(t)
    assert stamps == sorted(stamps) and len(set(stamps)) == len(stamps), "time parts strictly increase"
    assert t0 - 1 <= stamps[0] and stamps[-1] <= t1 + 1, "the time part is the creation time (plus ≤ 1 µs per id made in the same µs)"
    assert len({suffix_of(r) for r in ids}) == 20000


def test_reserved_names_and_old_ids(tmp_path):
    log = RunLog(Store.init(str(tmp_path / "s")))
    with pytest.raises(InvalidInput, match="reserved"):
        log.start_run("latest")
    old = "r20261201-051356123-abcdef123456"  # a millisecond id made before: still valid, still resolvable
    log.start_run(old)
    assert resolve_run(log, "abcdef12") == old == resolve_run(log, "r20261201-0513")
    assert short_ids([old]) == {old: "abcdef12"}


@pytest.fixture
def named(tmp_path):
    """A store whose runs were started in this order: zz-first, beta, alpha-1, alpha-2, ab, abc,
    then a fork of zz-first (a commit after every start, which must not count as one)."""
    root = str(tmp_path / "s")
    log = RunLog(Store.init(root, fsync="off"))
    for r in ("zz-first", "beta", "alpha-1", "alpha-2", "ab", "abc"):
        log.start_run(r)
        log.record_attempt(r, 1, 0, "succeeded")
    log.fork("zz-first", 0, 0, reason="later fork")
    log.store.logs.close()
    return root


def test_prefix_exact_and_not_found(named):
    rc, out, err = run_cli("log", "bet", "--format", "oneline", store=named, exit_code=0)
    assert "b0/0 run_started" in out
    rc, out, err = run_cli("log", "ab", "--json", store=named, exit_code=0)  # exact beats the prefix of "abc"
    assert {e["run"] for e in json.loads(out)} == {"ab"}
    rc, out, err = run_cli("log", "abc", "--json", store=named, exit_code=0)
    assert {e["run"] for e in json.loads(out)} == {"abc"}
    rc, out, err = run_cli("log", "nope", store=named, exit_code=4)
    assert err.strip() == "objstore: error: run not found: nope"


def test_ambiguous_prefix_lists_the_exact_candidates(named):
    rc, out, err = run_cli("log", "alpha", store=named, exit_code=5)
    assert err.strip() == "objstore: error: ambiguous run 'alpha': it matches 2 runs: alpha-1, alpha-2"
    rc, out, err = run_cli("branches", "a", store=named, exit_code=5)
    assert err.strip() == "objstore: error: ambiguous run 'a': it matches 4 runs: ab, abc, alpha-1, alpha-2"


def test_more_than_ten_candidates_are_cut(tmp_path):
    root = str(tmp_path / "s")
    log = RunLog(Store.init(root, fsync="off"))
    names = [f"many-{i:02d}" for i in range(13)]
    for r in names:
        log.start_run(r)
    log.store.logs.close()
    rc, out, err = run_cli("export", "many", store=root, exit_code=5)
    assert err.strip() == f"objstore: error: ambiguous run 'many': it matches 13 runs: {', '.join(names[:10])} and 3 more"


def test_latest_is_commit_order_not_id_order_nor_forks(named):
    def run_of(spec):
        rc, out, err = run_cli("log", spec, "--json", "-n", "1", store=named, exit_code=0)
        return json.loads(out)[0]["run"]

    # started last: abc; the fork of zz-first committed after it is not a run start
    assert run_of("latest") == "abc" == run_of("latest~0")
    assert [run_of(f"latest~{n}") for n in range(1, 6)] == ["ab", "alpha-2", "alpha-1", "beta", "zz-first"]
    rc, out, err = run_cli("log", "latest~6", store=named, exit_code=4)
    assert "latest~6" in err and "6 runs" in err
    for bad in ("latest~x", "latest~", "latest~-1", "latest~1.5"):
        rc, out, err = run_cli("log", bad, store=named, exit_code=5)
        assert "malformed run spec" in err and len(err.strip().splitlines()) == 1
    # latest through other commands: a fork, then the run's branches
    rc, out, err = run_cli("fork", "latest~5", "--from-branch", "0", "--at-lsn", "1", "--json", store=named, exit_code=0)
    assert json.loads(out)["run"] == "zz-first" and json.loads(out)["branch"] == 2
    rc, out, err = run_cli("branches", "latest~5", "--json", store=named, exit_code=0)
    assert len(json.loads(out)) == 3
    assert run_of("latest") == "abc", "forking an old run does not make it the latest"


def test_runs_shows_short_ids_that_resolve(tmp_path):
    root = str(tmp_path / "s")
    log = RunLog(Store.init(root, fsync="off"))
    ids = [log.start_run() for _ in range(3)]
    log.store.logs.close()
    rc, out, err = run_cli("runs", store=root, exit_code=0)
    lines = out.strip().splitlines()
    assert len(lines) == 3
    for rid, line in zip(sorted(ids), lines, strict=True):
        short = line.split()[0]
        assert short == suffix_of(rid)[:8] and line.split()[1] == rid
        rc, o, e = run_cli("log", short, "--json", "-n", "1", store=root, exit_code=0)
        assert json.loads(o)[0]["run"] == rid
        rc, o, e = run_cli("log", suffix_of(rid)[:3], "--json", "-n", "1", store=root,
                           exit_code=5 if sum(suffix_of(i)[:3] == suffix_of(rid)[:3] for i in ids) > 1 else 0)
        assert rc in (0, 5)  # 3 hex digits may clash; when unique they resolve


def test_short_ids_grow_until_unique():
    a = "r20261201-052011000001-abcdef123456"
    b = "r20261201-052011000002-abcdef129999"
    c = "abcdef12345"  # a plain id that is a prefix of a's suffix
    s = short_ids([a, b, c])
    assert s == {a: "abcdef123456", b: "abcdef129", c: "abcdef12345"}


def test_every_run_argument_resolves():
    """Every RUN argument and --predecessor of the CLI goes through resolve_run (the RUN type)."""
    from objstore_cli.main import cli
    from objstore_cli.params import RunType

    seen = []

    def walk(cmd, path):
        if isinstance(cmd, click.Group):
            for name, sub in cmd.commands.items():
                walk(sub, path + [name])
            return
        for p in cmd.params:
            if p.name in ("run", "predecessor") or (getattr(p, "metavar", None) == "RUN"):
                seen.append((" ".join(path), p.name))
                assert isinstance(p.type, RunType), f"{' '.join(path)} {p.name} is not resolved"

    walk(cli, [])
    assert len(seen) >= 15 and ("log", "run") in seen and ("session start", "predecessor") in seen


_NAMES = st.lists(st.text(alphabet="ab-", min_size=1, max_size=4).filter(lambda s: s[0] != "-"),
                  min_size=1, max_size=8, unique=True)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(names=_NAMES, spec=st.text(alphabet="ab-", min_size=1, max_size=4).filter(lambda s: s[0] != "-"))
def test_resolution_matches_a_model(names, spec):
    """resolve_run agrees with the rules: exact wins; else exactly one prefix match resolves,
    none is RunNotFound, several AmbiguousRun naming them all (≤ 10)."""
    log = RunLog(Store.memory())
    for r in names:
        log.start_run(r)
    matches = sorted(r for r in names if r.startswith(spec))
    if spec in names:
        assert resolve_run(log, spec) == spec
    elif len(matches) == 1:
        assert resolve_run(log, spec) == matches[0]
    elif not matches:
        with pytest.raises(RunNotFound):
            resolve_run(log, spec)
    else:
        with pytest.raises(AmbiguousRun) as ei:
            resolve_run(log, spec)
        assert str(ei.value).endswith(f"{len(matches)} runs: " + ", ".join(matches))
    assert resolve_run(log, "latest") == names[-1]
    assert resolve_run(log, f"latest~{len(names) - 1}") == names[0]
