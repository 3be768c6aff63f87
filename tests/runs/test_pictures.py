"""`objstore log RUN --graph --format mermaid|dot` (issue 19, pictures): golden structure tests.

Mermaid cannot run here, so its output is replayed by a small gitGraph interpreter that enforces the
grammar rules a renderer needs (the init directive, ``gitGraph``, commit ids unique and quoted
without a double quote or line break inside, a branch created once before it is checked out, one
``type`` of NORMAL/REVERSE/HIGHLIGHT, one quoted ``tag``) and yields the commit graph; DOT is parsed
by a line checker (every edge between declared nodes, clusters balanced) and, where Graphviz is
installed, rendered by ``dot``. The structure is then compared with the objects: every branch is
there, each fork hangs off its fork record, failed attempts are marked, compensation flags shown.
The demo run's ids are those of ``fixtures/golden-log-graph.txt`` (the same ``demo --run demo --at``);
its pictures are also kept byte for byte in ``fixtures/golden-log-graph.mmd`` and ``.dot`` (regenerate with
``OBJSTORE_REGEN_GOLDEN=1 .venv/bin/python -m pytest tests/test_pictures.py -k byte`` and review the diff).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess

import pytest
from helpers import run_cli

from objstore import RunLog, Store
from objstore.runs import pictures

GOLDEN = os.path.join(os.path.dirname(__file__), "..", "..", "fixtures", "golden-log-graph.txt")
AT = 1800000000

# Mermaid's gitGraph grammar (langium): STRING is "([^"\\]|\\.)*", a backslash escaping the next character
_STRING = r'"((?:[^"\\\n]|\\[^\n])+)"'
_COMMIT = re.compile(rf"^commit id: {_STRING}(?: type: (NORMAL|REVERSE|HIGHLIGHT))?(?: tag: {_STRING})?$")


def gitgraph(text: str) -> dict:
    """Replay a Mermaid gitGraph: {commit id: (branch, parent id, type, tag)}, branches, order."""
    lines = text.splitlines()
    assert re.fullmatch(r"%%\{init: \{'gitGraph': \{'mainBranchName': '(b\d+)'.*\}\}%%", lines[0]), lines[0]
    main = re.search(r"'mainBranchName': '(b\d+)'", lines[0]).group(1)
    assert lines[1] == "gitGraph"
    heads: dict[str, str | None] = {main: None}
    current = main
    commits: dict[str, tuple[str, str | None, str, str | None]] = {}
    for raw in lines[2:]:
        assert raw.startswith("  ") and raw == raw.rstrip(), repr(raw)
        line = raw.strip()
        if line.startswith("commit"):
            m = _COMMIT.match(line)
            assert m, f"not a gitGraph commit statement: {line!r}"
            cid, ctype, tag = (re.sub(r"\\(.)", r"\1", x) if x else x for x in (m.group(1), m.group(2) or "NORMAL", m.group(3)))
            assert cid not in commits, f"duplicate commit id {cid!r}"
            commits[cid] = (current, heads[current], ctype, tag)
            heads[current] = cid
        elif line.startswith("branch "):
            name = line.split(" ", 1)[1]
            assert re.fullmatch(r"b\d+", name) and name not in heads, f"branch {name!r} created twice or badly named"
            assert heads[current] is not None, "a branch off a branch with no commit"
            heads[name] = heads[current]
            current = name
        elif line.startswith("checkout "):
            name = line.split(" ", 1)[1]
            assert name in heads, f"checkout of {name!r} before it was created"
            current = name
        else:
            raise AssertionError(f"unknown gitGraph statement {line!r}")
    return {"commits": commits, "branches": set(heads), "main": main}


def short(oid) -> str:
    return bytes(oid).hex()[:12]


def by_short(graph: dict) -> dict[str, tuple]:
    return {cid.split(" ")[0]: v for cid, v in graph["commits"].items()}


def check_mermaid(log, run: str) -> dict:
    """The structural rules for any run: one commit per object on its own branch, parent edges
    right, forks as HIGHLIGHT commits off their fork record, failures REVERSE, heads tagged."""
    view = log.view(run)
    g = gitgraph("\n".join(pictures.mermaid(log, view)))
    got = by_short(g)
    assert g["branches"] == {f"b{b}" for b in view.heads}
    n = 0
    for b in view.heads:
        own, fk = log.chain(view.head(b))
        for r in own:
            n += 1
            branch, parent, ctype, tag = got[short(r.id)]
            assert branch == f"b{b}"
            assert (parent or "").split(" ")[0] == (short(r.parent) if r.parent else "")
            assert ctype == ("REVERSE" if pictures.failed(r) else "NORMAL")
            if view.head(b) == r.id:
                assert f"b{b} " + ("LIVE" if b == view.live else "retained") in tag
        if fk is not None:
            n += 1
            branch, parent, ctype, tag = got[short(fk["id"])]
            assert (branch, ctype) == (f"b{b}", "HIGHLIGHT")
            assert parent.split(" ")[0] == short(fk["parent_record"]), "the fork hangs off its fork record"
            assert ("COMPENSATION REQUIRED" in (tag or "")) == bool(fk.get("compensation"))
    assert len(got) == n
    return g


_NODE = re.compile(r'^    "([0-9a-f]+)" \[label="((?:[^"\\]|\\.)*)"((?:, [a-z]+=(?:[a-z]+|"[a-z]+"|\d+))*)\];$')
_EDGE = re.compile(r'^  "([0-9a-f]+)" -> "([0-9a-f]+)"( \[style=dashed, label="fork"\])?;$')


def parse_dot(text: str) -> dict:
    lines = text.splitlines()
    assert re.fullmatch(r'digraph "run [^"]+" \{', lines[0]) and lines[-1] == "}"
    nodes, edges, clusters, cluster = {}, [], {}, None
    for line in lines[1:-1]:
        if line.startswith("  subgraph cluster_b"):
            assert cluster is None
            cluster = int(re.fullmatch(r"  subgraph cluster_b(\d+) \{", line).group(1))
            clusters[cluster] = []
        elif line == "  }":
            cluster = None
        elif line.startswith("    label="):
            assert cluster is not None
        elif (m := _NODE.match(line)) is not None:
            assert cluster is not None and m.group(1) not in nodes
            nodes[m.group(1)] = (cluster, m.group(2), m.group(3))
            clusters[cluster].append(m.group(1))
        elif (m := _EDGE.match(line)) is not None:
            edges.append((m.group(1), m.group(2), bool(m.group(3))))
        else:
            assert line in ("  rankdir=TB;", '  node [shape=box, fontname="monospace", fontsize=10];'), line
    assert cluster is None
    for a, b, _ in edges:
        assert a in nodes and b in nodes, (a, b)
    return {"nodes": nodes, "edges": edges, "clusters": clusters}


def check_dot(log, run: str) -> str:
    view = log.view(run)
    text = "\n".join(pictures.dot(log, view))
    d = parse_dot(text)
    assert set(d["clusters"]) == set(view.heads)
    for b in view.heads:
        own, fk = log.chain(view.head(b))
        for r in own:
            cl, _label, attrs = d["nodes"][short(r.id)]
            assert cl == b and ("color=red" in attrs) == pictures.failed(r)
            if r.parent:
                assert (short(r.parent), short(r.id), False) in d["edges"]
        if fk is not None:
            cl, label, attrs = d["nodes"][short(fk["id"])]
            assert cl == b and "shape=diamond" in attrs
            assert (short(fk["parent_record"]), short(fk["id"]), True) in d["edges"]
            assert ("COMPENSATION REQUIRED" in label) == bool(fk.get("compensation"))
    return text


@pytest.fixture
def demo(tmp_path):
    root = str(tmp_path / "s")
    run_cli("demo", "--run", "demo", "--at", str(AT), store=root, exit_code=0)
    return root


def test_demo_mermaid_golden_structure(demo):
    rc, out, err = run_cli("log", "demo", "--graph", "--format", "mermaid", store=demo, exit_code=0)
    g = gitgraph(out)
    got = by_short(g)
    with open(GOLDEN, encoding="utf-8") as f:
        golden = f.read()
    ids = re.findall(r"\* ([0-9a-f]{12}) ", golden)
    assert sorted(got) == sorted(ids), "one commit per object of `log --graph`"
    assert g["main"] == "b0" and g["branches"] == {"b0", "b1"}
    reverse = {s for s, v in got.items() if v[2] == "REVERSE"}
    assert reverse == set(re.findall(r"\* ([0-9a-f]{12}) b\d+/\d+ +(?:attempt .* failed|run_finished +failed)", golden))
    assert len(reverse) == 3  # step 2's failed try, step 6's failed try, branch 0's failed finish
    fork = next(s for s, v in got.items() if v[2] == "HIGHLIGHT")
    assert got[fork][0] == "b1" and got[fork][1].startswith("8b024d8db784 attempt step 2 attempt 1")  # fork at lsn 3 of b0
    assert got[fork][3] == "b1 COMPENSATION REQUIRED"
    assert got["a487933c244d"][3] == "b1 LIVE" and got["6d6bda718e15"][3] == "b0 retained"
    log = RunLog(Store.open(demo))
    check_mermaid(log, "demo")


def test_demo_dot_golden_structure(demo):
    rc, out, err = run_cli("log", "demo", "--graph", "--format", "dot", store=demo, exit_code=0)
    log = RunLog(Store.open(demo))
    assert out == check_dot(log, "demo") + "\n"
    d = parse_dot(out)
    assert sorted(d["clusters"]) == [0, 1] and len(d["nodes"]) == 16  # 15 records and the fork
    assert [e for e in d["edges"] if e[2]] == [("8b024d8db784", "5190529c1b60", True)]
    assert sum("color=red" in v[2] for v in d["nodes"].values()) == 4  # three failures and the compensation flag


@pytest.fixture
def forked(tmp_path):
    """Four branches: b1 forked off b0 at lsn 2 (past a committed intent: compensation), b2 off b1,
    b3 off b0 at lsn 2 too (two forks off one record); reasons with quotes, a backslash, a line break
    and what Mermaid would read as entity codes."""
    log = RunLog(Store.open(str(tmp_path / "f"), create=True))
    run = log.start_run("forked", subject="t", when=1.0)
    log.record_attempt(run, step=1, attempt=0, state="failed", error='boom "quoted"', when=2.0)
    log.record_attempt(run, step=1, attempt=1, state="succeeded", when=3.0)
    log.record_intent(run, "pay", step=2, effect="charge", idempotent=False, when=4.0)
    log.commit_intent(run, "pay", when=5.0)
    log.fork(run, 0, 2, reason='try "B"\\ then\nC', when=6.0)
    log.record_attempt(run, step=2, attempt=0, state="failed", when=7.0)
    log.fork(run, 1, 0, reason="deeper, see #12; and #quot;", when=8.0)
    log.record_attempt(run, step=3, attempt=0, state="succeeded", when=9.0)
    log.fork(run, 0, 2, reason="again from the same record", make_live=False, when=10.0)
    log.finish_run(run, "succeeded", when=11.0)
    return log, run


def test_forked_run_mermaid_and_dot(forked):
    log, run = forked
    view = log.view(run)
    assert sorted(view.heads) == [0, 1, 2, 3]
    g = check_mermaid(log, run)
    text = "\n".join(pictures.mermaid(log, view))
    assert "\n" not in "".join(g["commits"]) and '"B"' not in text and "'B'" in text  # quotes replaced, line break gone
    assert not re.search(r"#\w+;", text) and "(deeper, see #12, and #quot,)" in text  # no Mermaid entity codes
    assert "(try 'B'\\\\ then C)" in text and any("(try 'B'\\ then C)" in c for c in g["commits"])  # backslash escaped
    highlights = sorted(v[0] for v in g["commits"].values() if v[2] == "HIGHLIGHT")
    assert highlights == ["b1", "b2", "b3"]
    check_dot(log, run)


def test_dot_renders_with_graphviz(demo, tmp_path):
    if shutil.which("dot") is None:
        # an outside binary (graphviz, apt): left out with one line where absent, never under CI=true (.ci/run installs it)
        if os.environ.get("CI") == "true":
            pytest.fail("graphviz 'dot' is not installed, and CI=true leaves nothing out (.ci/run installs it with apt)")
        pytest.skip("graphviz 'dot' is not installed: the DOT output was checked by the line parser only")
    rc, out, err = run_cli("log", "demo", "--graph", "--format", "dot", store=demo, exit_code=0)
    p = subprocess.run(["dot", "-Tsvg"], input=out, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and "<svg" in p.stdout, p.stderr


def test_picture_formats_need_graph(demo):
    rc, out, err = run_cli("log", "demo", "--format", "mermaid", store=demo, exit_code=2)
    assert "--format mermaid is a picture of the branch tree: give it with --graph" in err
    rc, out, err = run_cli("log", "demo", "--graph", "--format", "dot", "-n", "3", store=demo, exit_code=2)
    assert "it takes only --all-branches and --no-pager" in err


GOLDEN_MERMAID = os.path.join(os.path.dirname(__file__), "..", "..", "fixtures", "golden-log-graph.mmd")
GOLDEN_DOT = os.path.join(os.path.dirname(__file__), "..", "..", "fixtures", "golden-log-graph.dot")
CLI_MD = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "CLI.md")


@pytest.mark.parametrize("fmt,golden", [("mermaid", GOLDEN_MERMAID), ("dot", GOLDEN_DOT)])
def test_demo_pictures_byte_for_byte(demo, fmt, golden):
    """The demo run's pictures, byte for byte (OBJSTORE_REGEN_GOLDEN=1 rewrites the files; review the diff).
    docs/CLI.md shows the Mermaid one, which must be this file's text."""
    rc, out, err = run_cli("log", "demo", "--graph", "--format", fmt, store=demo, exit_code=0)
    if os.environ.get("OBJSTORE_REGEN_GOLDEN"):
        with open(golden, "w", encoding="utf-8") as f:
            f.write(out)
    with open(golden, encoding="utf-8") as f:
        assert out == f.read()
    if fmt == "mermaid":
        with open(CLI_MD, encoding="utf-8") as f:
            blocks = re.findall(r"```mermaid\n(.*?)```", f.read(), re.S)
        assert blocks == [out], "docs/CLI.md's gitGraph is fixtures/golden-log-graph.mmd"
