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

import json
import os
import shutil

import lg_pictures as P
import pytest
from helpers import run_cli

from objstore import RunLog, Store
from objstore.integrations.langgraph import ObjstoreSaver  # noqa: F401 - a LangGraph module (conftest leaves it out without LangGraph)

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
DRIVER = shutil.which("chromedriver")
GOLDEN_DOM = os.path.join(os.path.dirname(__file__), "..", "..", "fixtures", "golden-view-langgraph-dom.txt")

try:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
except ImportError:
    webdriver = None

_missing = [w for w, ok in (("pip selenium", webdriver is not None), ("chromium", CHROMIUM), ("chromium-driver", DRIVER)) if not ok]
if _missing:
    if os.environ.get("CI") == "true":
        raise RuntimeError(f"browser tests need {', '.join(_missing)} (CI=true runs them: .ci/run installs them)")
    pytest.skip(f"browser tests skipped: {', '.join(_missing)} missing (apt-get install -y chromium chromium-driver; "
                "pip install -e '.[test-all]')", allow_module_level=True)


@pytest.fixture(scope="module")
def browser():
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1280,1500"):
        opts.add_argument(a)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
    drv = webdriver.Chrome(options=opts, service=Service(DRIVER))
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


def open_page(drv, path) -> None:
    drv.get_log("browser")
    drv.get_log("performance")  # drain what earlier pages left
    drv.get("file://" + str(path))
    drv.find_element(By.CSS_SELECTOR, "#attempts table, #attempts p")  # the script has run


def requests_made(drv) -> list[str]:
    urls = []
    for entry in drv.get_log("performance"):
        msg = json.loads(entry["message"])["message"]
        if msg.get("method") == "Network.requestWillBeSent":
            urls.append(msg["params"]["request"]["url"])
    return urls


def test_pages_load_clean_and_offline(browser, pages):
    for path in pages[2].values():
        open_page(browser, path)
        noisy = [e for e in browser.get_log("browser") if e["level"] in ("SEVERE", "WARNING")]
        assert noisy == [], (path, noisy)
        assert [u for u in requests_made(browser) if not u.startswith(("file:", "data:", "about:"))] == []
        assert browser.execute_script("return performance.getEntriesByType('resource').length") == 0


def test_dom_shows_the_update_state_branch_forked_at_the_step1_checkpoint(browser, pages):
    root, t, files = pages
    [rec] = [r for r in RunLog(Store.open(root)).find_records(t.main, checkpoint_id=t.step1) if r.kind == "x.langgraph.checkpoint"]
    open_page(browser, files["root namespace"])
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


OUTLINE = r"""
var out = [];
(function walk(e, depth) {
  Array.prototype.forEach.call(e.children, function (c) {
    if (c.tagName === "SCRIPT") { return; }  // the data (golden-tested in test_langgraph_pictures.py) and the script
    var name = c.tagName.toLowerCase() + (c.className ? "." + c.className.trim().split(/\s+/).join(".") : "");
    var attrs = ["data-branch", "data-kind"].filter(function (a) { return c.hasAttribute(a); })
      .map(function (a) { return "[" + a + "=" + c.getAttribute(a) + "]"; }).join("");
    var own = c.children.length ? "" : " " + JSON.stringify(c.textContent);
    out.push(Array(depth + 1).join("  ") + name + attrs + own);
    walk(c, depth + 1);
  });
})(document.body, 0);
return out.join("\n") + "\n";
"""  # tests/runs/test_view_browser.py's outline of the demo page


def test_dom_golden_structure(browser, pages):
    """Both pages' DOM outlines, normalised, in fixtures/golden-view-langgraph-dom.txt (OBJSTORE_REGEN_GOLDEN=1
    rewrites it; review the diff)."""
    got = ""
    for name, path in pages[2].items():
        open_page(browser, path)
        got += f"== {name} ==\n" + P.normal(browser.execute_script(OUTLINE))
    if os.environ.get("OBJSTORE_REGEN_GOLDEN") == "1":
        with open(GOLDEN_DOM, "w", encoding="utf-8") as f:
            f.write(got)
    with open(GOLDEN_DOM, encoding="utf-8") as f:
        assert got == f.read()
