"""`objstore view RUN [-o FILE]` (issue 19, pictures): the page's data, escaping, erasure and limits.

The browser half (the page loads with no console error and no request, the DOM shows each branch,
fork and failed attempt, a click shows a body) is tests/runs/test_view_browser.py. The demo run's
page is golden-tested on its structure: ``fixtures/golden-view-demo.json`` holds the embedded data
with every ``time`` left out (in the bodies too) (regenerate with ``OBJSTORE_REGEN_GOLDEN=1 .venv/bin/python -m pytest
tests/runs/test_view.py -k golden`` and review the diff).
"""

from __future__ import annotations

import json
import os
import re

import pytest
from helpers import run_cli

from objstore import RunLog, Store
from objstore.runs import page

AT = 1800000000
GOLDEN = os.path.join(os.path.dirname(__file__), "..", "..", "fixtures", "golden-view-demo.json")
W_EXIT = 12  # a deleted run (errors.Erased)
EVIL = "</script><img src=x onerror=\"document.title='pwned'\"><!-- & </SCRIPT >"


def embedded(text: str) -> dict:
    """The JSON of the page's run-data block."""
    m = re.search(r'<script type="application/json" id="run-data">(.*?)</script>', text, re.S)
    assert m, "no run-data block"
    return json.loads(m.group(1))


def untimed(value, key=None):
    """``value`` without its times: every ``time`` key, in the data and in the embedded bodies' JSON."""
    if key == "body" and isinstance(value, str) and value.startswith("{"):
        return untimed(json.loads(value))
    if isinstance(value, dict):
        return {k: untimed(v, k) for k, v in value.items() if k != "time"}
    if isinstance(value, list):
        return [untimed(v) for v in value]
    return value


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("view") / "s")
    run_cli("demo", "--run", "demo", "--at", str(AT), store=root, exit_code=0)
    return root


def test_page_golden_structure(demo):
    rc, out, err = run_cli("view", "demo", store=demo, exit_code=0)
    got = untimed(embedded(out))
    if os.environ.get("OBJSTORE_REGEN_GOLDEN") == "1":
        with open(GOLDEN, "w", encoding="utf-8") as f:
            f.write(json.dumps(got, indent=1, sort_keys=True, ensure_ascii=False) + "\n")
    with open(GOLDEN, encoding="utf-8") as f:
        assert got == json.load(f)


def test_demo_page_shows_tree_attempts_and_diff(demo):
    log = RunLog(Store.open(demo))
    d = page.data(log, log.view("demo"))
    assert [b["branch"] for b in d["branches"]] == [0, 1] and d["live"] == 1
    fork = [n for n in d["nodes"] if n["kind"] == "fork"]
    assert len(fork) == 1 and fork[0]["reason"].startswith("step 6 failed") and "COMPENSATION REQUIRED: refund-1234" in fork[0]["compensation"]
    failed = [a for a in d["attempts"] if a["state"] == "failed"]
    assert [(a["step"], a["attempt"]) for a in failed] == [(2, 0), (6, 0)] and all(a["error"] for a in failed)
    assert len(d["attempts"]) == 10
    x = d["diff"]
    assert (x["a"], x["b"], x["common"]) == (0, 1, {"branch": 0, "lsn": 3})
    by = {n["id"]: n for n in d["nodes"]}
    assert (by[x["last_shared"]]["branch"], by[x["last_shared"]]["lsn"]) == (0, 3)
    assert (by[x["first_a"]]["branch"], by[x["first_a"]]["lsn"]) == (0, 4)
    assert (by[x["first_b"]]["branch"], by[x["first_b"]]["lsn"]) == (1, 0)
    # every record's body is embedded (the demo is small); blob bodies are not (no --bodies)
    assert all(n["body"] for n in d["nodes"]) and all(b["body"] is None for n in d["nodes"] for b in n["blobs"])


def test_self_contained_no_url_and_csp(demo):
    rc, out, err = run_cli("view", "demo", store=demo, exit_code=0)
    assert not re.search(r"https?:|//[a-z]|\bsrc=|\bhref=|@import|url\(", out, re.I), "a URL or a load in the page"
    assert "default-src &#x27;none&#x27;" in out and out.count("<script") == 2


def test_cli_output_file_equals_stdout_and_bad_branch(demo, tmp_path):
    target = tmp_path / "p.html"
    rc, out, err = run_cli("view", "demo", "-o", str(target), store=demo, exit_code=0)
    assert out == "" and target.read_text(encoding="utf-8") == run_cli("view", "demo", store=demo, exit_code=0)[1]
    rc, out, err = run_cli("view", "demo", "--diff", "0", "9", store=demo, exit_code=5)
    assert "no branch 9" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_hostile_body_cannot_break_out(tmp_path):
    log = RunLog(Store.init(str(tmp_path / "s")))
    log.start_run("R", when=1.0)
    blob = log.put_blob(EVIL.encode())
    log.record_attempt("R", 1, 0, "failed", prompt=blob, error=EVIL, context={"note": EVIL, "line": "\u2028"}, when=2.0)
    text = page.page(log, log.view("R"), bodies=True)
    assert text.count("</script>") == 2 and text.lower().count("<script") == 2, "a body closed or opened a script"
    assert "<img" not in text and "<!--" not in text and "onerror=\"" not in text
    d = embedded(text)
    att = [n for n in d["nodes"] if n["kind"] == "attempt"][0]
    assert att["error"] == EVIL and att["blobs"][0]["body"] == EVIL and EVIL in att["body"].replace('\\"', '"')


@pytest.fixture
def secrets(tmp_path, monkeypatch):
    """A run with a redacted blob and a deleted attempt, and a second run deleted whole."""
    from objstore.lifecycle import delete as D
    from objstore.storage import identity

    monkeypatch.setenv("OBJSTORE_KEYS", str(tmp_path / "keys"))
    root = str(tmp_path / "s")
    log = RunLog(Store.init(root))
    identity.ensure_owner_key(log.store)
    log.start_run("R", when=1.0)
    secret = log.put_blob(b"sk-live-0123: an API key pasted into a prompt")
    gone = log.put_blob(b"a body whose record is deleted")
    plain = log.put_blob(b"an ordinary answer")
    log.record_attempt("R", 1, 0, "succeeded", prompt=secret, output=plain, when=2.0)
    rid = log.record_attempt("R", 2, 0, "failed", prompt=gone, error="the deleted error text", when=3.0).id
    D.redact(log, secret, reason="leaked API key")
    D.delete_records(log, "R", [rid], reason="wrong upload")
    log.start_run("W", when=1.0)
    w = log.put_blob(b"the whole run is deleted")
    log.record_attempt("W", 1, 0, "succeeded", prompt=w, context={"said": "private words of W"}, when=2.0)
    D.delete_run(log, "W", reason="user asked")
    return root, log, rid


def test_erased_bodies_never_on_the_page(secrets):
    root, log, rid = secrets
    rc, out, err = run_cli("view", "R", "--bodies", store=root, exit_code=0)
    assert "sk-live" not in out and "a body whose record is deleted" not in out and "the deleted error text" not in out
    d = embedded(out)
    by = {n["id"]: n for n in d["nodes"]}
    assert by[rid.hex()]["deleted"] and by[rid.hex()]["body"] is None and by[rid.hex()]["blobs"] == []
    first = [n for n in d["nodes"] if n["kind"] == "attempt" and n["lsn"] == 1][0]
    prompt, output = first["blobs"]
    assert prompt["withheld"] == "redacted" and prompt["body"] is None and output["body"] == "an ordinary answer"
    assert [a["lsn"] for a in d["attempts"]] == [1], "a deleted attempt is a header-only node, not an attempt row"
    rc, out, err = run_cli("view", "R", store=root, exit_code=0)
    assert "an ordinary answer" not in out, "blob bodies only with --bodies"
    rc, out, err = run_cli("view", "W", "--bodies", store=root, exit_code=W_EXIT)
    assert "was deleted" in err and "private words of W" not in out + err and "the whole run is deleted" not in out + err


def test_size_limits_give_id_size_and_cat_line(tmp_path):
    log = RunLog(Store.init(str(tmp_path / "s")))
    log.start_run("R", when=1.0)
    big = log.put_blob(b"x" * 5000)
    r = log.record_attempt("R", 1, 0, "succeeded", output=big, context={"pad": "y" * 3000}, when=2.0)
    d = page.data(log, log.view("R"), bodies=True, body_max=2000, total_max=100_000)
    n = [x for x in d["nodes"] if x["id"] == r.id.hex()][0]
    assert n["body"] is None and n["size"] > 3000 and n["cat"] == f"objstore cat {r.id.hex()}"
    b = n["blobs"][0]
    assert b["body"] is None and b["size"] == 5000 and b["cat"] == f"objstore cat --body {big.hex()}"
    d = page.data(log, log.view("R"), bodies=True, body_max=10_000, total_max=4000)
    n = [x for x in d["nodes"] if x["id"] == r.id.hex()][0]
    assert n["body"] is not None and n["blobs"][0]["body"] is None, "the page's total is spent: the blob is left out"


def test_copied_run_roots_at_its_cross_run_fork(tmp_path):
    """A copy (``fork_run``) starts at a fork object naming another run: that fork is the page's root,
    its reason shown; a rewind of the copy is compared with the copy's branch 0."""
    log = RunLog(Store.init(str(tmp_path / "s")))
    log.start_run("S", when=1.0)
    log.record_attempt("S", 1, 0, "succeeded", when=2.0)
    copy = log.fork_run("S", run="C", reason="try again elsewhere", when=3.0)
    log.record_attempt(copy, 2, 0, "failed", error="boom", when=4.0)
    log.record_attempt(copy, 2, 1, "succeeded", when=5.0)
    log.rewind(copy, to_lsn=1, reason="redo step 2", when=6.0)
    d = embedded(page.page(log, log.view(copy)))
    roots = [n for n in d["nodes"] if n["parent"] is None]
    assert len(roots) == 1 and roots[0]["kind"] == "fork" and "copied from run S" in roots[0]["summary"]
    assert roots[0]["reason"] == "try again elsewhere"
    assert (d["diff"]["a"], d["diff"]["b"]) == (0, 1) and [a["error"] for a in d["attempts"] if a["state"] == "failed"] == ["boom"]
