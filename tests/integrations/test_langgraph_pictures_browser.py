"""`objstore view` of a realistic LangGraph thread in a real browser (issue 19's acceptance: the page of the graph
passes its browser tests, and shows the time-travel fork): headless Debian chromium through Selenium, as
tests/runs/test_view_browser.py drives it (`apt-get install -y chromium chromium-driver`; .ci/run does).

The thread is ``lg_pictures.build``'s (test_langgraph_pictures.py says what it holds). Its root namespace's page
and its subgraph namespace's page load with no console message and no request; the DOM shows branch 1, the
``update_state`` branch, forked right after the step-1 checkpoint's record with the saver's reason, and the
tool's failed try. The DOM of both pages as the browser built it (tags, classes, hooks, leaf text) is kept,
normalised by ``lg_pictures.normal``, in ``fixtures/golden-view-langgraph-dom.txt``; test_langgraph_pictures.py's
docstring gives the one command that regenerates it with the other goldens. Without chromium and its driver
these tests skip with one line, except under CI=true.
"""

from __future__ import annotations

import os

import browser as web
import lg_pictures as P
import pytest
from helpers import run_cli

from objstore import RunLog, Store
from objstore.integrations.langgraph import ObjstoreSaver  # noqa: F401 - a LangGraph module (conftest leaves it out without LangGraph)

GOLDEN_DOM = os.path.join(os.path.dirname(__file__), "..", "..", "fixtures", "golden-view-langgraph-dom.txt")

web.require()
By = web.By


@pytest.fixture(scope="module")
def browser():
    drv = web.chrome()
    yield drv
    drv.quit()


@pytest.fixture(scope="module")
def pages(tmp_path_factory):
    """(store root, the thread, {namespace: page file}): the root namespace's page by the thread's name."""
    d = tmp_path_factory.mktemp("lgpicb")
    root = str(d / "s")
    t = P.build(root)
    run_cli("view", f"thread_id={P.THREAD}", "-o", str(d / "root.html"), store=root, exit_code=0)
    run_cli("view", t.sub, "-o", str(d / "sub.html"), store=root, exit_code=0)
    return root, t, {"root namespace": d / "root.html", "subgraph namespace": d / "sub.html"}


def test_pages_load_clean_and_offline(browser, pages):
    for path in pages[2].values():
        web.open_page(browser, path)
        noisy = [e for e in browser.get_log("browser") if e["level"] in ("SEVERE", "WARNING")]
        assert noisy == [], (path, noisy)
        assert [u for u in web.requests_made(browser) if not u.startswith(("file:", "data:", "about:"))] == []
        assert browser.execute_script("return performance.getEntriesByType('resource').length") == 0


def test_dom_shows_the_update_state_branch_forked_at_the_step1_checkpoint(browser, pages):
    root, t, files = pages
    [rec] = [r for r in RunLog(Store.open(root)).find_records(t.main, checkpoint_id=t.step1) if r.kind == "x.langgraph.checkpoint"]
    web.open_page(browser, files["root namespace"])
    assert sorted(b.get_attribute("data-branch") for b in browser.find_elements(By.CSS_SELECTOR, "#tree .branch")) == ["0", "1"]
    live = browser.find_element(By.CSS_SELECTOR, '#tree .branch.live[data-branch="1"]')
    reason = f"langgraph: checkpoint {t.forked} resumes checkpoint {t.step1}, which is not its branch's newest"
    title = live.find_element(By.CSS_SELECTOR, ".branch-title").text
    assert title == f"branch 1 (live), forked from branch 0 at lsn {rec.lsn} ({reason})"
    # drawn inside branch 0, right after the record it forked at: the step-1 checkpoint's
    point = browser.execute_script("return arguments[0].previousElementSibling", live)
    assert point.get_attribute("data-id") == rec.id.hex() and point.get_attribute("data-kind") == "x.langgraph.checkpoint"
    shown = [point.find_element(By.CSS_SELECTOR, c).text.strip() for c in (".pos", ".what", ".badge")]
    assert shown == [f"b0/{rec.lsn}", f"step 1 (loop) by llm checkpoint {t.step1}", "last shared record"]
    assert browser.execute_script("return arguments[0].parentElement.getAttribute('data-branch')", live) == "0"
    [fork] = live.find_elements(By.CSS_SELECTOR, ":scope > .node.fork")
    assert fork.text.endswith(f"forked from branch 0 at lsn {rec.lsn} ({reason})")
    [ckpt] = live.find_elements(By.CSS_SELECTOR, ':scope > .node[data-kind="x.langgraph.checkpoint"]')
    shown = [ckpt.find_element(By.CSS_SELECTOR, c).text.strip() for c in (".pos", ".what", ".badge.live")]
    assert shown[0].startswith("b1/") and shown[1:] == [f"step 2 (update) by llm checkpoint {t.forked}", "branch 1 LIVE"]
    [failed] = browser.find_elements(By.CSS_SELECTOR, "#attempts tr.failed")
    assert "ConnectionError: weather backend unreachable" in failed.text
    assert f"shared history: branch 0 up to lsn {rec.lsn}" in browser.find_element(By.ID, "diff").text




def test_dom_golden_structure(browser, pages):
    """Both pages' DOM outlines, normalised, in fixtures/golden-view-langgraph-dom.txt (OBJSTORE_REGEN_GOLDEN=1
    rewrites it; review the diff)."""
    got = ""
    for name, path in pages[2].items():
        web.open_page(browser, path)
        got += f"== {name} ==\n" + P.normal(browser.execute_script(web.OUTLINE))
    if os.environ.get("OBJSTORE_REGEN_GOLDEN") == "1":
        with open(GOLDEN_DOM, "w", encoding="utf-8") as f:
            f.write(got)
    with open(GOLDEN_DOM, encoding="utf-8") as f:
        assert got == f.read()
