"""`objstore view` and `objstore export --format otlp-json` of a realistic LangGraph thread (issue 19's acceptance:
the page and the OTLP export of the graph are golden-tested, and `view` shows the time-travel fork).

The thread is ``lg_pictures.build``'s: ``lg_graphs.agent_graph`` run as the acceptance test runs it (a stub LLM,
a tool failing once under RetryPolicy, an interrupt and its resume, a subgraph, ``update_state`` on the step-1
checkpoint). Its root namespace's run (``view thread_id=T``) and its subgraph namespace's run are each kept,
normalised by ``lg_pictures.normal`` (ids and times out, structure in), in ``fixtures/golden-view-langgraph.json``
(the page's embedded data) and ``fixtures/golden-otlp-langgraph.json`` (the export with ``--all-branches``).
The browser's DOM of the same pages is tests/integrations/test_langgraph_pictures_browser.py's. Regenerate all
three goldens with one command, then review the diff:

    OBJSTORE_REGEN_GOLDEN=1 CI=true .venv/bin/python -m pytest -q tests/integrations/test_langgraph_pictures.py \\
        tests/integrations/test_langgraph_pictures_browser.py

The fork is also checked with the real ids: the page's branch 1 is forked at the step-1 checkpoint's record with
the saver's reason, and the live export's fork span links to that record's span. The receiver test posts the
export to a loopback OTLP/HTTP receiver, which decodes it with opentelemetry-proto.
"""

from __future__ import annotations

import json
import os
import re

import lg_pictures as P
import pytest
from helpers import run_cli
from otlp_receiver import decode_json, receiving

from objstore import RunLog, Store
from objstore.integrations.langgraph import ObjstoreSaver  # noqa: F401 - a LangGraph module (conftest leaves it out without LangGraph)

FIX = os.path.join(os.path.dirname(__file__), "..", "..", "fixtures")
GOLDEN_VIEW = os.path.join(FIX, "golden-view-langgraph.json")
GOLDEN_OTLP = os.path.join(FIX, "golden-otlp-langgraph.json")
REGEN = os.environ.get("OBJSTORE_REGEN_GOLDEN") == "1"


@pytest.fixture(scope="module")
def thread(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("lgpic") / "s")
    return root, P.build(root)


def embedded(text: str) -> dict:
    m = re.search(r'<script type="application/json" id="run-data">(.*?)</script>', text, re.S)
    assert m, "no run-data block"
    return json.loads(m.group(1))


def golden(path: str, got: dict) -> None:
    if REGEN:
        with open(path, "w", encoding="utf-8") as f:
            f.write(json.dumps(got, indent=1, sort_keys=True, ensure_ascii=False) + "\n")
    with open(path, encoding="utf-8") as f:
        assert got == json.load(f)


def step1_record(root: str, t: P.Thread):
    log = RunLog(Store.open(root))
    [rec] = [r for r in log.find_records(t.main, checkpoint_id=t.step1) if r.kind == "x.langgraph.checkpoint"]
    return rec


def test_view_golden_structure(thread):
    root, t = thread
    _, page, _ = run_cli("view", f"thread_id={P.THREAD}", store=root, exit_code=0)
    _, sub, _ = run_cli("view", t.sub, store=root, exit_code=0)
    assert embedded(page)["run"] == t.main, "thread_id=T is the root namespace's run"
    golden(GOLDEN_VIEW, {"root namespace": P.normal(embedded(page)), "subgraph namespace": P.normal(embedded(sub))})


def test_view_shows_the_time_travel_fork_at_the_step1_checkpoint(thread):
    root, t = thread
    _, page, _ = run_cli("view", f"thread_id={P.THREAD}", store=root, exit_code=0)
    d = embedded(page)
    rec = step1_record(root, t)
    assert rec.branch == 0  # (its LSN is the golden's: pinned there, read from the record here)
    [fork] = [n for n in d["nodes"] if n["kind"] == "fork"]
    reason = f"langgraph: checkpoint {t.forked} resumes checkpoint {t.step1}, which is not its branch's newest"
    assert fork["parent"] == rec.id.hex() and fork["branch"] == 1 and fork["reason"] == reason
    [b1] = [b for b in d["branches"] if b["branch"] == 1]
    assert (b1["live"], b1["parent_branch"], b1["parent_lsn"], b1["fork"], b1["reason"]) == (True, 0, rec.lsn, fork["id"], reason)
    [ckpt] = [n for n in d["nodes"] if n["branch"] == 1 and n["kind"] == "x.langgraph.checkpoint"]
    assert ckpt["head"] == "LIVE" and ckpt["summary"] == f"step 2 (update) by llm checkpoint {t.forked}"
    by, up = {n["id"]: n for n in d["nodes"]}, ckpt
    while up["kind"] != "fork":  # back along branch 1 to its fork object
        up = by[up["parent"]]
        assert up["branch"] == 1
    assert up is fork
    assert d["diff"]["last_shared"] == rec.id.hex() and d["diff"]["common"] == {"branch": 0, "lsn": rec.lsn}
    assert [(a["step"], a["attempt"], a["state"], a["error"]) for a in d["attempts"]] == [
        (3, 0, "failed", "ConnectionError: weather backend unreachable"), (3, 1, "succeeded", None)]


def test_otlp_golden_structure(thread):
    root, t = thread
    _, main, _ = run_cli("export", f"thread_id={P.THREAD}", "--format", "otlp-json", "--all-branches", store=root, exit_code=0)
    _, sub, _ = run_cli("export", t.sub, "--format", "otlp-json", "--all-branches", store=root, exit_code=0)
    golden(GOLDEN_OTLP, {"root namespace": P.normal(json.loads(main)), "subgraph namespace": P.normal(json.loads(sub))})


def attrs(span) -> dict:
    return {kv.key: getattr(kv.value, kv.value.WhichOneof("value")) for kv in span.attributes}


def test_live_export_links_the_fork_to_the_step1_checkpoint_and_the_receiver_decodes_it(thread):
    root, t = thread
    with receiving() as (url, handler):
        _, out, _ = run_cli("export", f"thread_id={P.THREAD}", "--endpoint", url, store=root, exit_code=0)
    [(path, ctype, req)] = handler.got
    assert (path, ctype) == ("/v1/traces", "application/x-protobuf")
    _, js, _ = run_cli("export", f"thread_id={P.THREAD}", "--format", "otlp-json", store=root, exit_code=0)
    assert req == decode_json(js), "the protobuf posted is the JSON printed"
    spans = list(req.resource_spans[0].scope_spans[0].spans)
    assert out == f"sent {len(spans)} spans of run {t.main} to {url}/v1/traces (HTTP 200)\n"
    rec = step1_record(root, t)
    # the live lineage: branch 0 up to the step-1 checkpoint's record, the fork, then branch 1's checkpoint
    where = [(a.get("objstore.branch"), a.get("objstore.lsn")) for a in map(attrs, spans[1:])]
    assert where[:rec.lsn + 1] == [(0, n) for n in range(1, rec.lsn + 1)] + [(1, None)], where
    assert [lsn for b, lsn in where[rec.lsn + 1:] if b == 1] == list(range(len(where) - rec.lsn - 1)), where
    [fork] = [s for s in spans if s.name == "fork branch 1"]
    [point] = [s for s in spans if attrs(s).get("objstore.record.id") == rec.id.hex()]
    assert point.span_id == rec.id[:8]
    assert [(ln.trace_id, ln.span_id) for ln in fork.links] == [(spans[0].trace_id, point.span_id)]
    assert attrs(fork.links[0]) == {"objstore.link": "fork_point", "objstore.record.id": rec.id.hex()}
    fa = attrs(fork)
    assert fa["objstore.fork.reason"] == f"langgraph: checkpoint {t.forked} resumes checkpoint {t.step1}, which is not its branch's newest"
    assert (fa["objstore.fork.parent_branch"], fa["objstore.fork.parent_lsn"], fa["objstore.compensation_required"]) == (0, rec.lsn, False)
    assert spans[-1].name == "x.langgraph.checkpoint" and attrs(spans[-1])["objstore.branch"] == 1
